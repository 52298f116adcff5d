"""``python manage.py experiment NAME [--json] [--param value ...]``: run one experiment.

Examples::

    python manage.py experiment amplification
    python manage.py experiment amplification --tiers 4 --json
    python manage.py experiment contention --clients 10,50,100 --trials 2

Parameters out of range exit with status 2 and one line per problem, naming the field and
its allowed range (the same messages as the web form).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from labs.experiments import EXPERIMENTS, get
from labs.experiments.base import Result

#: Every parameter of every experiment, in first-seen order (one --option each).
_ALL_PARAMS: dict[str, list[str]] = {}
for _experiment in EXPERIMENTS.values():
    for _name in _experiment.limits:
        _ALL_PARAMS.setdefault(_name, []).append(_experiment.name)


class Command(BaseCommand):
    help = (
        "Run an experiment in virtual time and print its figures and table "
        "(or JSON with --json). Experiments: " + ", ".join(EXPERIMENTS) + "."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", choices=list(EXPERIMENTS), help="which experiment")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        group = parser.add_argument_group(
            "experiment parameters (each applies to the named experiments)"
        )
        for name, owners in _ALL_PARAMS.items():
            flags = [f"--{name}"]
            if "_" in name:
                flags.append(f"--{name.replace('_', '-')}")
            group.add_argument(
                *flags,
                dest=f"param_{name}",
                metavar="VALUE",
                default=None,
                help=f"({', '.join(owners)})",
            )

    def handle(self, *args: Any, **options: Any) -> None:
        experiment = get(options["name"])
        raw: dict[str, str] = {}
        foreign: list[str] = []
        for name in _ALL_PARAMS:
            value = options.get(f"param_{name}")
            if value is None:
                continue
            if name in experiment.limits:
                raw[name] = str(value)
            else:
                foreign.append(f"--{name}")
        problems = [
            f"{flag[2:]}: not a parameter of {experiment.name} (parameters: "
            f"{', '.join(experiment.limits)})"
            for flag in foreign
        ]
        params, found = experiment.parse(raw)
        problems += [str(p) for p in found]
        if problems:
            raise CommandError(
                f"invalid parameters for {experiment.name}:\n" + "\n".join(problems),
                returncode=2,
            )
        result = experiment.run(params)
        if options["json"]:
            self.stdout.write(json.dumps(result.to_dict(), indent=2))
        else:
            self.stdout.write(format_result(experiment.title, result))


def format_result(title: str, result: Result) -> str:
    """The result as plain text: parameters, headline figures beside the seed's, the table."""
    lines = [title, "=" * len(title), ""]
    lines.append("parameters: " + ", ".join(f"{k}={_cell(v)}" for k, v in result.params.items()))
    lines.append("")
    figure_rows = [[f.label, f.text, f.seed or "-"] for f in result.figures]
    lines += _table(["figure", "value", "seed 004 / study"], figure_rows, align_numbers=False)
    lines.append("")
    headers = [c.label for c in result.columns]
    rows = [[_cell(row.get(c.key, "")) for c in result.columns] for row in result.rows]
    lines += _table(headers, rows)
    for chart in result.charts:
        lines.append("")
        lines.append(
            f"chart {chart.key}: {chart.title} ({len(chart.x)} points, checksum {chart.checksum()})"
        )
    for note in result.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{int(value):,}" if value.is_integer() else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _table(headers: list[str], rows: list[list[str]], *, align_numbers: bool = True) -> list[str]:
    """Columns padded to their widest cell; numbers right-aligned when ``align_numbers``."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.rjust(w) if align_numbers and _numeric(cell) else cell.ljust(w)
            for cell, w in zip(cells, widths, strict=True)
        ).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    return out


def _numeric(cell: str) -> bool:
    return cell.replace(",", "").replace(".", "").replace("-", "").isdigit()
