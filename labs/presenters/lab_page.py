"""The lab page's live parts: the timeline's events, the breaker badge and the burst
summary panel.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.template.loader import get_template

from labs.journal.kinds import BURST_END_KINDS
from labs.journal.rows import summary_delta
from labs.presenters.text import ms_text

SESSION_TEMPLATE = "labs/session.html"


# --- the timeline ----------------------------------------------------------------------------


def chart_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The part of an event the timeline and the traffic strip need (no message, no actor).

    ``data.burst`` is the burst's number on its ``burst_queued`` and ``burst_end`` rows (the
    timeline's what-if link names it); ``host`` and ``dependency`` place an attempt in its
    lane; ``breakers: host`` on a ``burst_start`` says the burst ran with a breaker per host. Of a shared-dependency attempt's decision it keeps the outcome the client saw (ok,
    error, shed, skipped, timeout), the arrival and the arrival second's offered count
    (``second_offered``: the session's share of the class's load, see docs/engine.md).
    """
    keep = (
        "seq", "kind", "burst", "t_ms", "at", "call", "attempt", "outcome", "error",
        "latency_ms", "backoff_ms", "state_from", "state_to",
    )  # fmt: skip
    data = payload.get("data") or {}
    small = {k: payload.get(k) for k in keep}
    small["data"] = {k: data[k] for k in _CHART_DATA if k in data}
    if "whatif" in payload:  # the burst cannot be replayed (see labs.journal.rows.journal_row)
        small["whatif"] = payload["whatif"]
    return small


_CHART_DATA = (
    "probe", "size", "first_call", "start_ms", "end_ms", "burst", "host", "dependency",
    "outcome", "arrival_us", "second_offered", "breakers",
)  # fmt: skip


# --- the breaker badge -----------------------------------------------------------------------


def badge(breaker: dict[str, Any]) -> dict[str, Any]:
    """The breaker badge's data from the breaker as read now (``breaker_now`` in
    :mod:`labs.selectors.lab`): the breaker's threshold for the failure streak's line."""
    return {**breaker, "threshold": (breaker.get("config") or {}).get("failure_threshold")}


#: Badges already rendered, by their view without the server's clock (most pushes of a class
#: show a closed breaker with the same settings and counts); cleared when it fills.
_BADGES: dict[str, str] = {}
_BADGES_MAX = 512
#: Stands for ``server_now_ms`` in a kept badge; the clock read with the view replaces it.
_NOW = "0.5"


def render_badge(view: dict[str, Any]) -> str:
    """The breaker badge (``view`` as :func:`badge` gives it) through the page's template
    partial (``breaker-badge``): the page's first render and every push use it.

    A view seen before, but for the server's clock, is not rendered again: the template
    runs once per different badge and the clock is put in its one attribute. The badge's and
    the summary panel's renders per push were a tenth of a web process's CPU per event
    (docs/scaling.md, "Before and after the live side's new homes")."""
    key = json.dumps({k: v for k, v in view.items() if k != "server_now_ms"},
                     sort_keys=True, default=str)  # fmt: skip
    html = _BADGES.get(key)
    if html is None:
        html = _partial("breaker-badge").render({"breaker": {**view, "server_now_ms": _NOW}})
        html = html.strip()
        if len(_BADGES) >= _BADGES_MAX:
            _BADGES.clear()
        _BADGES[key] = html
    return html.replace(f'data-server-now-ms="{_NOW}"',
                        f'data-server-now-ms="{view.get("server_now_ms", "")}"')  # fmt: skip


# --- the burst summary panel -----------------------------------------------------------------

#: The counts the summary panel shows; a finished burst's summary (``Burst.summary``, the
#: ``burst_end`` row's data) has them all, a running one's are counted from its rows.
SUMMARY_COUNTS = (
    "calls", "succeeded", "failed", "fast_failed", "attempts_total", "backoff_ms_total",
)  # fmt: skip
BURST_FACTS = ("id", "number", "size", "concurrency", "status", "error")
#: What a finished burst's summary adds when hosts, B, a bulkhead, a fallback or side effects
#: are configured (labs.engine.routes); the panel shows each one present.
SUMMARY_EXTRAS = (
    "degraded", "wait_ms_total", "rejected_bulkhead", "pool_timeout", "by_dependency", "effects",
)  # fmt: skip


def burst_facts(burst: Any) -> dict[str, Any]:
    """The panel's heading facts from a ``Burst`` (or a dict with the same names), and
    ``recorded``: whether its start state was recorded (the what-if link needs it; a dict
    without the key says yes, see :meth:`labs.consumers.lab.LabSessionConsumer._learn_burst`)."""
    if isinstance(burst, dict):
        facts = {name: burst.get(name) for name in BURST_FACTS}
        facts["recorded"] = bool(burst.get("recorded", True))
    else:
        facts = {name: getattr(burst, "pk" if name == "id" else name) for name in BURST_FACTS}
        facts["recorded"] = bool(burst.start_state)
    facts["status"] = str(facts["status"])
    return facts


def burst_panel(burst: Any, rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """What the summary panel shows for ``burst`` (None: no burst yet): a finished burst's
    stored summary, a running one's counts from its ``rows`` so far."""
    if burst is None:
        return None
    facts = burst_facts(burst)
    if str(burst.status) == "done" and burst.summary:
        return summary_panel(facts, burst.summary)
    return summary_panel(facts, counts_from_events(rows))


def summary_panel(
    facts: dict[str, Any], counts: dict[str, Any] | None = None, **changes: Any
) -> dict[str, Any]:
    """The summary panel's data: the burst's ``facts``, its ``counts`` (zeros when missing),
    ``wall_ms`` (None until it ends) and any ``changes`` (``status="done"``)."""
    counts = counts or {}
    panel = dict(facts)
    panel.update({name: counts.get(name, 0) for name in SUMMARY_COUNTS})
    panel["waiting_ms_total"] = waiting_ms(counts)
    panel["wall_ms"] = counts.get("wall_ms")
    panel["extra"] = {name: counts[name] for name in SUMMARY_EXTRAS if name in counts}
    panel.update(changes)
    status = panel["status"]
    panel["status_label"] = STATUS_LABELS.get(status, status)
    panel["wall_text"] = wall_text(panel["wall_ms"], panel.get("concurrency"))
    return panel


#: The panel's words for a burst's status (another status, interrupted or failed, says itself).
STATUS_LABELS = {"done": "done", "running": "running…", "queued": "queued…"}


def wall_text(wall_ms: float | None, concurrency: int | None) -> str:
    """The panel's line on a finished burst's time ("" until it has one)."""
    if not wall_ms:
        return ""
    callers = "caller" if concurrency == 1 else "callers"
    return f"Took {ms_text(wall_ms)} from first call to last answer, {concurrency} {callers}."


def summary_prototype() -> dict[str, Any]:
    """A panel with every part present, rendered once into the page for its script to fill in
    from a push's panel data (``summary`` on a row, see :func:`summary_update`)."""
    dependency = dict.fromkeys(("calls", "succeeded", "failed", "fast_failed", "degraded"), 0)
    extra = dict.fromkeys(("degraded", "wait_ms_total", "rejected_bulkhead", "pool_timeout"), 0)
    extra["effects"] = {"applied": 0, "calls": 0}
    extra["by_dependency"] = {"a": {**dependency, "waited_ms": 0}}
    facts = {"id": "", "number": 0, "size": 0, "concurrency": 2, "status": "queued",
             "error": "error"}  # fmt: skip
    return summary_panel(facts, {"wall_ms": 1, **extra})


def waiting_ms(counts: dict[str, Any]) -> float:
    """The summary's "Time waiting": backoff sleeps and waits for a pool slot together, so it
    is never less than either part the panel shows beside it. A running burst's counts carry
    it (each sleep and each pooled call's wait adds to it, :func:`labs.journal.rows.summary_delta`);
    a finished burst's summary has the two parts (``backoff_ms_total``, ``wait_ms_total``)."""
    if "waiting_ms_total" in counts:
        return counts["waiting_ms_total"] or 0
    return (counts.get("backoff_ms_total") or 0) + (counts.get("wait_ms_total") or 0)


def counts_from_events(payloads: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A running burst's counts so far, from its journal rows (oldest first)."""
    counts: dict[str, Any] = dict.fromkeys(SUMMARY_COUNTS, 0)
    counts["backoff_ms_total"] = 0.0
    counts["waiting_ms_total"] = 0.0
    for payload in payloads:
        for name, value in summary_delta(payload).items():
            counts[name] = counts.get(name, 0) + value
    return counts


#: Journal kinds after which the summary panel changes.
SUMMARY_KINDS = ("burst_queued", "burst_start", *BURST_END_KINDS)


def summary_update(event: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any] | None:
    """The summary panel's data as of ``event`` (not as of now: a replay must add up), which
    a push carries and the page's script fills into the panel (static/js/lab/summary.js);
    None when the event leaves the panel as it is (an interrupted or failed burst keeps its
    counts). Data, not HTML: rendering the panel in each web process was about 6 % of its CPU
    per event (docs/scaling.md, "Before and after the live side's new homes")."""
    kind = event["kind"]
    if kind == "burst_end":
        return summary_panel(facts, event.get("data") or {}, status="done")
    if kind in ("burst_queued", "burst_start"):
        status = "queued" if kind == "burst_queued" else "running"
        return summary_panel(facts, status=status, error="")
    return None


def load_templates() -> None:
    """Parse the lab page's template now, at a web process's boot: the cached loader keeps it,
    and the first page to connect (its badge) would otherwise wait about 0.1 s for the parse."""
    _partial("breaker-badge")


def _partial(name: str):
    # The cached loader keeps parsed templates, so this is a dictionary lookup after the first.
    return get_template(f"{SESSION_TEMPLATE}#{name}")
