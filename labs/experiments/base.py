"""What every experiment shares: parameter specs, parsing, and the shape of a result.

An experiment module declares a frozen parameter dataclass, a ``LIMITS`` table of
:class:`Param`, ``validate(params) -> list[Problem]`` and ``run(params) -> Result``, and ends
with an :class:`Experiment` descriptor the registry in :mod:`labs.experiments` collects. The
web form, the management command and the tests all parse through :meth:`Experiment.parse`,
and problems are the engine's :class:`~labs.engine.Problem`, so messages read alike.
Nothing here imports Django.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Generic, Literal, TypeVar

from labs.engine import Problem

__all__ = [
    "Chart",
    "Column",
    "Experiment",
    "Figure",
    "Param",
    "Problem",
    "Result",
    "Series",
    "check_fields",
    "fmt_number",
    "plain_number",
    "ratio",
    "series",
]

P = TypeVar("P")


def fmt_number(value: float | int, decimals: int = 1) -> str:
    """``50000`` -> ``"50,000"``, ``19.64`` -> ``"19.6"``, ``3.0`` -> ``"3"``."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{decimals}f}"


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, or ``inf`` when the denominator is 0 (and 0/0 = 1)."""
    if denominator == 0:
        return 1.0 if numerator == 0 else math.inf
    return numerator / denominator


@dataclass(frozen=True)
class Param:
    """One parameter: label, default, allowed range (or choices), unit, help text.

    ``kind``: ``int``, ``number`` (float), ``choice`` (one of ``choices``) or ``int_list``
    (1 to ``max_items`` integers, each within ``min``..``max``, written ``10,20,50``).
    """

    name: str
    label: str
    default: Any
    min: float | None = None
    max: float | None = None
    unit: str = ""
    kind: Literal["int", "number", "choice", "int_list"] = "int"
    choices: tuple[str, ...] = ()
    max_items: int = 12
    help: str = ""

    def describe(self) -> str:
        """The allowed values in words: ``between 1 and 6``, ``one of none, full``."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        unit = f" {self.unit}" if self.unit else ""
        span = f"between {plain_number(self.min)} and {plain_number(self.max)}{unit}"
        if self.kind == "int_list":
            return f"1 to {self.max_items} whole numbers separated by commas, each {span}"
        return span

    def format(self, value: Any) -> str:
        """``value`` as it is written in a form field or on a command line."""
        if self.kind == "int_list" and isinstance(value, (list, tuple)):
            return ",".join(str(v) for v in value)
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)

    def _problem(self, got: Any, what: str = "") -> Problem:
        shown = repr(got) if isinstance(got, str) else self.format(got)
        return Problem(self.name, f"must be {what}{self.describe()} (got {shown})")

    def check(self, value: Any) -> Problem | None:
        """The problem with a typed value, or None if it is allowed."""
        if self.kind == "choice":
            return None if value in self.choices else self._problem(value)
        if self.kind == "int_list":
            ok = (
                isinstance(value, (list, tuple))
                and 1 <= len(value) <= self.max_items
                and all(_is_int(v) and self._in_range(v) for v in value)
            )
            return None if ok else self._problem(value)
        if self.kind == "int" and not _is_int(value):
            return self._problem(value, "a whole number ")
        if not _is_number(value):
            return self._problem(value, "a number ")
        return None if self._in_range(value) else self._problem(value)

    def _in_range(self, value: float) -> bool:
        assert self.min is not None and self.max is not None
        return self.min <= value <= self.max

    def parse(self, raw: Any) -> tuple[Any, Problem | None]:
        """A typed value from ``raw`` (a string from a form / command line, or a value).

        Returns ``(value, None)`` when allowed, ``(None, problem)`` otherwise.
        """
        value = raw
        if isinstance(raw, str):
            text = raw.strip()
            if self.kind == "int_list":
                try:
                    value = [
                        int(part) for part in text.replace(";", ",").split(",") if part.strip()
                    ]
                except ValueError:
                    return None, self._problem(raw)
            elif self.kind in ("int", "number"):
                value = _number_from_text(text, self.kind == "int")
                if value is None:
                    what = "a whole number " if self.kind == "int" else "a number "
                    return None, self._problem(raw, what)
            else:
                value = text
        elif self.kind == "number" and _is_int(raw):
            value = float(raw)
        elif self.kind == "int" and isinstance(raw, float) and raw.is_integer():
            value = int(raw)
        problem = self.check(value)
        if problem is not None:
            return None, problem
        if self.kind == "int_list":
            value = tuple(value)
        return value, None


def plain_number(value: float | None) -> str:
    """A bound as the engine writes it: ``2000``, ``0.5`` (no thousands separator)."""
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else str(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number_from_text(text: str, whole: bool) -> int | float | None:
    """``"30"`` -> 30, ``"2.5"`` -> 2.5 (None for ints), ``"1e3"`` -> 1000.0, junk -> None."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    if whole:
        return int(number) if number.is_integer() else None
    return number


def check_fields(params: Any, limits: Mapping[str, Param]) -> list[Problem]:
    """One problem per field of ``params`` outside its :class:`Param`'s range."""
    problems = []
    for name, spec in limits.items():
        problem = spec.check(getattr(params, name))
        if problem is not None:
            problems.append(problem)
    return problems


# --- results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """A headline number, with what seed 004 reported for comparison (``seed``, as text)."""

    key: str
    label: str
    value: float | int | str
    unit: str = ""
    seed: str = ""
    note: str = ""

    @property
    def text(self) -> str:
        """The value formatted for people: ``50,000 ms``, ``27x``, ``97.8 %``."""
        value = self.value if isinstance(self.value, str) else fmt_number(self.value)
        if not self.unit:
            return value
        return f"{value}{self.unit}" if self.unit in ("x", "%") else f"{value} {self.unit}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``text`` included)."""
        return {**asdict(self), "text": self.text}


@dataclass(frozen=True)
class Column:
    """A column of the results table: the row key it shows, its heading and unit."""

    key: str
    label: str
    unit: str = ""


@dataclass(frozen=True)
class Series:
    """One line (or one set of bars) of a chart; ``values[i]`` belongs to ``Chart.x[i]``."""

    name: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class Chart:
    """Chart data: ``kind`` ``line`` (numeric x) or ``bar`` (x are category labels)."""

    key: str
    title: str
    kind: Literal["line", "bar"]
    x: tuple[Any, ...]
    x_label: str
    y_label: str
    series: tuple[Series, ...]

    def checksum(self) -> str:
        """A short digest of the data: changes whenever any plotted number changes."""
        payload = json.dumps(
            [self.key, list(self.x), [[s.name, list(s.values)] for s in self.series]],
            separators=(",", ":"),
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "key": self.key,
            "title": self.title,
            "kind": self.kind,
            "x": list(self.x),
            "x_label": self.x_label,
            "y_label": self.y_label,
            "series": [{"name": s.name, "values": list(s.values)} for s in self.series],
            "checksum": self.checksum(),
        }


@dataclass(frozen=True)
class Result:
    """What ``run`` returns: headline figures, a table, charts, and the raw metrics.

    ``metrics`` holds the numbers the tests pin (plain JSON types); ``rows`` are dicts keyed
    by the ``columns``' keys.
    """

    experiment: str
    params: dict[str, Any]
    figures: tuple[Figure, ...]
    columns: tuple[Column, ...]
    rows: tuple[dict[str, Any], ...]
    charts: tuple[Chart, ...]
    metrics: dict[str, Any]
    notes: tuple[str, ...] = ()

    def figure(self, key: str) -> Figure:
        """The headline figure with this key. Raises KeyError."""
        for fig in self.figures:
            if fig.key == key:
                return fig
        raise KeyError(key)

    def checksum(self) -> str:
        """Digest of every chart's data."""
        return hashlib.sha256("".join(c.checksum() for c in self.charts).encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (the management command's ``--json`` output); infinite
        ratios (a zero denominator) become null."""
        return _jsonable(
            {
                "experiment": self.experiment,
                "params": self.params,
                "figures": [f.to_dict() for f in self.figures],
                "columns": [asdict(c) for c in self.columns],
                "rows": [dict(r) for r in self.rows],
                "charts": [c.to_dict() for c in self.charts],
                "metrics": self.metrics,
                "notes": list(self.notes),
                "checksum": self.checksum(),
            }
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# --- the descriptor the registry collects --------------------------------------------------


@dataclass(frozen=True)
class Experiment(Generic[P]):
    """One experiment: its name, texts, parameter type and table, and its two functions."""

    name: str
    title: str
    summary: str
    params_type: type[P]
    limits: Mapping[str, Param]
    validate: Callable[[P], list[Problem]]
    run: Callable[[P], Result]
    models: str = ""
    seed_text: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def defaults(self) -> P:
        """The parameters with every default (the issue's defaults)."""
        return self.params_type()

    def parse(self, raw: Mapping[str, Any]) -> tuple[P | None, list[Problem]]:
        """Typed parameters from ``raw`` (missing keys take their defaults).

        Returns ``(params, [])`` or ``(None, problems)``: unknown keys, malformed, empty or
        out-of-range values (one problem per field), then the cross-field rules of
        ``validate``. Nothing is half-applied.
        """
        problems: list[Problem] = []
        known = ", ".join(self.limits)
        for key in raw:
            if key not in self.limits:
                problems.append(Problem(key, f"unknown parameter (parameters: {known})"))
        values: dict[str, Any] = {}
        for name, spec in self.limits.items():
            if raw.get(name) is None:  # missing: the default (an empty string is a problem)
                continue
            value, problem = spec.parse(raw[name])
            if problem is not None:
                problems.append(problem)
            else:
                values[name] = value
        if problems:
            return None, problems
        params = replace(self.defaults(), **values)  # type: ignore[type-var]
        problems = self.validate(params)
        return (None, problems) if problems else (params, [])

    def params_dict(self, params: P) -> dict[str, Any]:
        """``params`` as plain JSON values, in the order of the limits table."""
        data = {f.name: getattr(params, f.name) for f in fields(params)}  # type: ignore[arg-type]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    def run_checked(self, params: P) -> Result:
        """Validate then run. Raises :class:`~labs.engine.ValidationError` when invalid."""
        from labs.engine import ValidationError

        problems = self.validate(params)
        if problems:
            raise ValidationError(problems)
        return self.run(params)


def series(name: str, values: Sequence[float]) -> Series:
    """A :class:`Series` with values rounded to 3 decimals (no float noise in the JSON)."""
    return Series(name, tuple(round(float(v), 3) for v in values))
