"""Print what ``sitecustomize.py`` (this directory) profiled: the top functions per process.

    .venv/bin/python benchmarks/cpu_profile/report.py DIR [--top 30] [--per N]

Merges the threads of each process; ``--per N`` prints milliseconds of CPU per N (for
example per attempt: the run's attempts over the number of worker processes).
"""

from __future__ import annotations

import argparse
import pstats
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--per", type=float, default=0.0)
    args = parser.parse_args()
    scale, unit = (1000 / args.per, "ms per") if args.per else (1.0, "s")
    by_pid: dict[str, list[str]] = defaultdict(list)
    for path in sorted(Path(args.dir).glob("*.prof")):
        by_pid[path.stem.split("-")[0]].append(str(path))
    for pid, files in by_pid.items():
        stats = pstats.Stats(*files)
        rows = stats.stats  # (file, line, name) -> (cc, nc, tottime, cumtime, callers)
        total = sum(row[2] for row in rows.values())
        print(f"== pid {pid}: {len(files)} thread(s), {total * scale:.3f} {unit} of profiled CPU")
        print(f"   {'tottime':>9} {'share':>6} {'cumtime':>9} {'calls':>9}  function")
        ordered = sorted(rows.items(), key=lambda kv: -kv[1][2])[: args.top]
        for (file, line, name), (_cc, nc, tt, ct, _callers) in ordered:
            short = file
            for marker in ("/site-packages/", "/lib/python3.11/", "/work/"):
                if marker in short:
                    short = short.split(marker, 1)[1]
                    break
            print(f"   {tt * scale:>9.4f} {100 * tt / total:>5.1f}% {ct * scale:>9.4f} "
                  f"{nc:>9}  {short}:{line} {name}")  # fmt: skip
        print()


if __name__ == "__main__":
    main()
