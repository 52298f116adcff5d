"""The Experiments area: an index and one page per experiment (form, figures, chart, table).

Any logged-in user may run an experiment: it runs in virtual time in the request (every
experiment at its default size takes well under half a second) and changes no state, so there
is nothing to queue or to save. The form posts with htmx and swaps the ``results`` partial
(the ``form`` partial comes along out of band, so errors show beside their fields); without
JavaScript the same form does a normal POST and gets the whole page.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.http import require_http_methods
from django_htmx.middleware import HtmxDetails

from labs.experiments import EXPERIMENTS
from labs.experiments.base import Experiment, Problem, Result, fmt_number, plain_number
from labs.experiments.charts import layout
from labs.views import HtmxHttpRequest

TEMPLATE = "labs/experiments/detail.html"


class HtmxHttpRequest(HtmxHttpRequest):
    htmx: HtmxDetails


@login_required
def index(request: HtmxHttpRequest) -> HttpResponse:
    """Every experiment, with what it models and what seed 004 measured."""
    return render(request, "labs/experiments/index.html", {"experiments": EXPERIMENTS.values()})


@login_required
@require_http_methods(["GET", "POST"])
def detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """GET: the page with the defaults already run. POST: run the submitted parameters.

    Out-of-range input runs nothing: the page (status 200) shows each problem beside its
    field, naming the field and its allowed range.
    """
    experiment = EXPERIMENTS.get(name)
    if experiment is None:
        raise Http404(f"No experiment called {name!r}.")
    if request.method == "POST":
        # A field left out takes its default; a field sent empty is a problem.
        raw = {key: request.POST[key] for key in experiment.limits if key in request.POST}
        params, problems = experiment.parse(raw)
        shown = params if params is not None else experiment.defaults()
        raw = {
            key: raw.get(key, spec.format(getattr(shown, key)))
            for key, spec in experiment.limits.items()
        }
    else:
        params, problems = experiment.defaults(), []
        raw = {key: spec.format(getattr(params, key)) for key, spec in experiment.limits.items()}
    result = experiment.run(params) if params is not None else None
    context = _context(experiment, raw, problems, result)
    if request.htmx:
        results = render_to_string(f"{TEMPLATE}#results", context, request)
        form = render_to_string(f"{TEMPLATE}#form", {**context, "oob": True}, request)
        return HttpResponse(results + form)
    return render(request, TEMPLATE, context)


def _context(
    experiment: Experiment, raw: dict[str, str], problems: list[Problem], result: Result | None
) -> dict[str, Any]:
    errors = {p.field: str(p) for p in problems if p.field in experiment.limits}
    fields = []
    for key, spec in experiment.limits.items():
        fields.append(
            {
                "name": key,
                "label": spec.label,
                "value": raw.get(key, ""),
                "kind": spec.kind,
                "choices": spec.choices,
                "min": plain_number(spec.min) if spec.min is not None else "",
                "max": plain_number(spec.max) if spec.max is not None else "",
                "step": "1" if spec.kind == "int" else "any",
                "range": spec.describe(),
                "help": spec.help,
                "error": errors.get(key, ""),
            }
        )
    return {
        "experiment": experiment,
        "fields": fields,
        "problems": [str(p) for p in problems],
        "other_problems": [str(p) for p in problems if p.field not in experiment.limits],
        "result": result,
        "charts": [layout(chart) for chart in result.charts] if result else [],
        "rows": _rows(result) if result else [],
    }


def _rows(result: Result) -> list[list[dict[str, Any]]]:
    """The table's cells as text, numbers formatted and flagged for right alignment."""
    rows = []
    for row in result.rows:
        cells = []
        for column in result.columns:
            value = row.get(column.key, "")
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append({"text": fmt_number(value) if is_number else value, "num": is_number})
        rows.append(cells)
    return rows
