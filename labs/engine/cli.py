"""``python -m labs.engine run FILE.json [--real] [--json]``: run a scenario script.
``python -m labs.engine compare FILE.json --policy-b B.json [--json]``: run it twice.

``run`` uses virtual time unless ``--real``. It prints a readable table, or the JSON contract
with ``--json``; either way the steps' expectations are checked (a ``checks`` table, or the
``checks`` section) and the exit status is 1 when one of them fails. ``compare`` runs the
scenario in virtual time with its own policy (A) and with the policy in ``B.json`` merged over
it (B), and prints the diff table (succeeded, failed, fast-failed, attempts, dependency hits,
time waiting, total time), or with ``--json`` both outputs and the table's rows. A file that is
not valid JSON, or a scenario or policy with problems, exits with status 2 and one line per
problem (field and allowed range) on stderr; nothing runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from labs.engine.replay import compare_scenario
from labs.engine.scenario import run_scenario
from labs.engine.validate import ValidationError, parse_scenario, validate_scenario

__all__ = ["format_checks", "format_diff", "format_table", "main"]

EXIT_FAILED_CHECK = 1
EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m labs.engine", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario script (JSON, see docs/engine.md)")
    run.add_argument("file", type=Path, help="scenario JSON file")
    run.add_argument("--real", action="store_true", help="real sleeps instead of virtual time")
    run.add_argument("--json", action="store_true", help="print the JSON contract")
    run.add_argument(
        "--pause-before-burst",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="let this many seconds pass before every burst step (a student reading the "
        "step first); every expectation must still hold",
    )
    cmp = sub.add_parser("compare", help="run a scenario under its policy and under another")
    cmp.add_argument("file", type=Path, help="scenario JSON file (policy A is its own)")
    cmp.add_argument(
        "--policy-b", type=Path, required=True, help="policy JSON file, merged over A's"
    )
    cmp.add_argument("--json", action="store_true", help="print both outputs and the diff")
    return parser


def _read_json(path: Path, err: TextIO) -> Any:
    """The parsed file, or None after printing why it cannot be read."""
    try:
        text = path.read_text()
    except OSError as exc:
        print(f"{path}: cannot read: {exc.strerror or exc}", file=err)
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        print(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", file=err
        )
        return None


def _load(path: Path, err: TextIO) -> dict[str, Any] | None:
    data = _read_json(path, err)
    if data is None:
        return None
    problems = validate_scenario(data)
    for problem in problems:
        print(str(problem), file=err)
    return None if problems else data


def _ms(value: float) -> str:
    return f"{value:.1f}"


def format_table(out: dict[str, Any]) -> str:
    """The scenario output as a readable text table."""
    lines = [f"scenario {out['name']} (seed {out['seed']}, {out['clock']} time)", ""]
    head = f"{'call':>4}  {'burst':>5}  {'outcome':<18} {'attempts':>8}  {'backoff ms':>10}  {'start ms':>9}  {'end ms':>9}"
    lines += [head, "-" * len(head)]
    for c in out["calls"]:
        outcome = c["outcome"] + (" (probe)" if c.get("probe") else "")
        lines.append(
            f"{c['call']:>4}  {c['burst']:>5}  {outcome:<18} {c['attempts']:>8}  "
            f"{_ms(c['backoff_ms']):>10}  {_ms(c['start_ms']):>9}  {_ms(c['end_ms']):>9}"
        )
    lines.append("")
    width = max([len("attempts")] + [len(str(b["attempts"])) for b in out["bursts"]])
    head = (
        f"{'burst':>5}  {'calls':>5}  {'ok':>3}  {'failed':>6}  {'fast':>4}  "
        f"{'attempts':<{width}}  {'backoff ms':>10}  {'wall ms':>9}"
    )
    lines += [head, "-" * len(head)]
    for b in out["bursts"]:
        lines.append(
            f"{b['burst']:>5}  {b['calls']:>5}  {b['succeeded']:>3}  {b['failed']:>6}  "
            f"{b['fast_failed']:>4}  {b['attempts']!s:<{width}}  "
            f"{_ms(b['backoff_ms_total']):>10}  {_ms(b['wall_ms']):>9}"
        )
    lines.append("")
    if out["transitions"]:
        lines.append("transitions")
        for t in out["transitions"]:
            call = f"call {t['call']}" if t["call"] is not None else "operator"
            lines.append(
                f"  {_ms(t['at_ms']):>9} ms  {t['from']} -> {t['to']}  ({call}): {t['reason']}"
            )
    else:
        lines.append("no breaker transitions")
    lines.append(f"total {_ms(out['total_ms'])} ms ({out['clock']} time)")
    return "\n".join(lines)


def format_diff(result: dict[str, Any]) -> str:
    """The comparison's diff table as text: one row per measure, A, B and B - A."""
    a = result["a"]
    lines = [f"scenario {a['name']} (seed {a['seed']}, virtual time): policy A vs policy B", ""]
    head = f"{'':<16}  {'A':>10}  {'B':>10}  {'B - A':>10}"
    lines += [head, "-" * len(head)]
    for row in result["diff"]:
        unit = f" ({row['unit']})" if row["unit"] else ""
        fmt = _ms if row["unit"] else str
        delta = ("+" if row["delta"] > 0 else "") + fmt(row["delta"])
        lines.append(
            f"{row['label'] + unit:<16}  {fmt(row['a']):>10}  {fmt(row['b']):>10}  {delta:>10}"
        )
    lines.append("")
    for name in ("a", "b"):
        attempts = [bu["attempts"] for bu in result[name]["bursts"]]
        lines.append(f"attempts per burst, {name.upper()}: {attempts}")
    return "\n".join(lines)


def _compare(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    data = _load(args.file, err)
    policy_b = _read_json(args.policy_b, err)
    if data is None or policy_b is None:
        return EXIT_BAD_INPUT
    try:
        result = compare_scenario(data, policy_b)
    except ValidationError as exc:
        for problem in exc.problems:
            print(str(problem), file=err)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(result, indent=2), file=out)
    else:
        print(format_diff(result), file=out)
    return 0


def _shown(value: Any) -> str:
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return ", ".join(
            f"{t.get('from', '*')}->{t['to']}" + (f"@{t['call']}" if t.get("call") else "")
            for t in value
        )
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def format_checks(checks: list[dict[str, Any]]) -> str:
    """The expectations as a text table: step, burst, measure, expected, observed, result."""
    if not checks:
        return "no expectations"
    rows = [("step", "burst", "measure", "expected", "observed", "result")]
    for c in checks:
        expected = _shown(c["expected"])
        if c["tolerance"]:
            expected += f" ± {c['tolerance']:g}"
        rows.append(
            (
                str(c["step"]),
                str(c["burst"]),
                c["measure"],
                expected,
                _shown(c["observed"]),
                "ok" if c["ok"] else "FAILED",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    failed = sum(1 for c in checks if not c["ok"])
    lines.append(f"{len(checks) - failed} of {len(checks)} expectations met")
    return "\n".join(lines)


def main(
    argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Entry point; returns the exit status (0 ok, 1 an expectation failed, 2 bad input)."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage line
        return int(exc.code or 0)
    if args.command == "compare":
        return _compare(args, out, err)
    data = _load(args.file, err)
    if data is None:
        return EXIT_BAD_INPUT
    if not 0 <= args.pause_before_burst <= 3600:
        print("--pause-before-burst: must be between 0 and 3600 seconds", file=err)
        return EXIT_BAD_INPUT
    result = run_scenario(
        parse_scenario(data), real=args.real, pause_before_burst_ms=args.pause_before_burst * 1000
    )
    if args.json:
        print(json.dumps(result, indent=2), file=out)
    else:
        print(format_table(result), file=out)
        print("", file=out)
        print(format_checks(result["checks"]), file=out)
    return EXIT_FAILED_CHECK if any(not c["ok"] for c in result["checks"]) else 0
