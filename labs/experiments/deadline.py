"""Deadline propagation: a client that gives up after 100 ms, a server whose work takes
500 ms, and who pays for the work nobody waits for.

A discrete-event simulation on the engine's :class:`~labs.engine.VirtualClock`, run twice:
with per-tier timeouts (the server works the full time on every request it dequeues) and
with a propagated :class:`Deadline` (the server drops a request whose deadline has passed
and works at most the time left; over *at or past* its instant, as in the engine). Wasted
work is server time on requests whose response the client never receives (docs/experiments.md).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from labs.engine import Problem, VirtualClock
from labs.experiments.base import (
    Chart,
    Column,
    Experiment,
    Figure,
    Param,
    Result,
    check_fields,
    ratio,
    series,
)

__all__ = ["LIMITS", "Deadline", "DeadlineParams", "run", "validate"]

_CHART_POINTS = 120
_MODES = (("per_tier", "per-tier timeouts"), ("deadline", "propagated deadline"))


@dataclass(frozen=True, slots=True)
class Deadline:
    """An absolute point in time (seconds on the clock) by which a request must be done.

    Passed down with the request instead of a relative timeout, so every tier measures the
    same instant. Expired *at or past* ``at`` (the engine's edge). The engine has no public
    deadline type yet; this is the one the experiment needs.
    """

    at: float

    @classmethod
    def after(cls, now: float, timeout_ms: float) -> Deadline:
        """The deadline ``timeout_ms`` from ``now``."""
        return cls(now + timeout_ms / 1000)

    def expired(self, now: float) -> bool:
        """Whether the deadline is over at ``now``."""
        return now >= self.at

    def left_ms(self, now: float) -> float:
        """Milliseconds left (0 when expired)."""
        return max(0.0, (self.at - now) * 1000)


@dataclass(frozen=True)
class DeadlineParams:
    """Defaults: the issue's 100 requests, 100 ms client timeout, 500 ms of server work."""

    requests: int = 100
    client_timeout_ms: float = 100.0
    server_work_ms: float = 500.0
    workers: int = 4
    interval_ms: float = 0.0


LIMITS: dict[str, Param] = {
    "requests": Param("requests", "Requests", 100, 1, 1000),
    "client_timeout_ms": Param(
        "client_timeout_ms", "Client timeout", 100.0, 1, 10000, "ms", kind="number"
    ),
    "server_work_ms": Param(
        "server_work_ms", "Server work per request", 500.0, 1, 10000, "ms", kind="number"
    ),
    "workers": Param(
        "workers",
        "Server workers",
        4,
        1,
        100,
        help="requests beyond this wait in the server's queue",
    ),
    "interval_ms": Param(
        "interval_ms",
        "Time between requests",
        0.0,
        0,
        1000,
        "ms",
        kind="number",
        help="0 sends them all at once",
    ),
}


def validate(params: DeadlineParams) -> list[Problem]:
    """Field ranges (every combination in range runs fast)."""
    return check_fields(params, LIMITS)


@dataclass
class _Request:
    number: int
    sent: float
    deadline: Deadline
    started: float | None = None
    worked_ms: float = 0.0
    fate: str = "queued"


class _Server:
    """A worker pool with a FIFO queue, driven by the clock's callbacks."""

    def __init__(self, clock: VirtualClock, params: DeadlineParams, propagate: bool) -> None:
        self.clock = clock
        self.work_s = params.server_work_ms / 1000
        self.propagate = propagate
        self.idle = params.workers
        self.queue: deque[_Request] = deque()
        self.wasted: list[tuple[float, float]] = []  # (when, ms) as the waste is known
        self.busy_until = 0.0

    def receive(self, request: _Request) -> None:
        self.queue.append(request)
        self._dispatch()

    def _dispatch(self) -> None:
        clock = self.clock
        while self.idle and self.queue:
            request = self.queue.popleft()
            now = clock.now()
            if self.propagate and request.deadline.expired(now):
                request.fate = "dropped"  # checked before doing any work
                continue
            work = self.work_s
            if self.propagate:
                work = min(work, request.deadline.left_ms(now) / 1000)
            request.started = now
            self.idle -= 1
            clock.call_later(work, self._finish, request, work)

    def _finish(self, request: _Request, work: float) -> None:
        now = self.clock.now()
        self.idle += 1
        self.busy_until = now
        request.worked_ms = work * 1000
        complete = work >= self.work_s
        late = request.deadline.expired(now)  # the client gives up at its deadline
        if complete and not late:
            request.fate = "answered"
        else:
            request.fate = "unreceived" if complete else "cancelled"
            self.wasted.append((now * 1000, work * 1000))
        self._dispatch()


def _simulate(params: DeadlineParams, propagate: bool) -> tuple[list[_Request], _Server]:
    clock = VirtualClock()
    server = _Server(clock, params, propagate)
    requests = []
    for i in range(params.requests):
        sent = i * params.interval_ms / 1000
        request = _Request(i + 1, sent, Deadline.after(sent, params.client_timeout_ms))
        requests.append(request)
        clock.call_at(sent, server.receive, request)
    clock.run()
    return requests, server


def _metrics(requests: list[_Request], server: _Server) -> dict[str, float]:
    fates = [r.fate for r in requests]
    return {
        "requests": len(requests),
        "client_timeouts": sum(1 for f in fates if f != "answered"),
        "answered": fates.count("answered"),
        "unreceived": fates.count("unreceived"),
        "cancelled": fates.count("cancelled"),
        "dropped": fates.count("dropped"),
        "wasted_ms": round(sum(ms for _, ms in server.wasted), 3),
        "busy_until_ms": round(server.busy_until * 1000, 3),
    }


def run(params: DeadlineParams) -> Result:
    """Run both servers on the same arrivals. Deterministic (no randomness)."""
    raw = {key: _simulate(params, key == "deadline") for key, _ in _MODES}
    stats = {key: _metrics(*raw[key]) for key, _ in _MODES}
    tier, dl = stats["per_tier"], stats["deadline"]
    saved_pct = 100 * (1 - ratio(dl["wasted_ms"], tier["wasted_ms"])) if tier["wasted_ms"] else 0.0
    horizon = max(tier["busy_until_ms"], dl["busy_until_ms"], 1.0)
    xs = [round(horizon * i / _CHART_POINTS, 3) for i in range(_CHART_POINTS + 1)]

    def curve(key: str) -> list[float]:
        events = sorted(raw[key][1].wasted)
        ys, total, i = [], 0.0, 0
        for x in xs:
            while i < len(events) and events[i][0] <= x + 1e-9:
                total += events[i][1]
                i += 1
            ys.append(total)
        return ys

    chart = Chart(
        key="wasted",
        title="Server work wasted on requests nobody waits for (cumulative)",
        kind="line",
        x=tuple(xs),
        x_label="time (ms)",
        y_label="wasted work (ms)",
        series=tuple(series(label, curve(key)) for key, label in _MODES),
    )
    figures = (
        Figure(
            "wasted_per_tier",
            "Wasted server work, per-tier timeouts",
            tier["wasted_ms"],
            "ms",
            seed="50,000 ms",
        ),
        Figure("unreceived", "Complete responses nobody receives", tier["unreceived"], seed="100"),
        Figure("client_timeouts", "Client-side timeouts", tier["client_timeouts"], seed="100"),
        Figure(
            "wasted_deadline",
            "Wasted server work, propagated deadline",
            dl["wasted_ms"],
            "ms",
            seed="not measured (issue: >= 95 % less)",
        ),
        Figure(
            "saved",
            "Less wasted work with the deadline",
            round(saved_pct, 1),
            "%",
            seed="issue: >= 95 %",
        ),
        Figure("dropped", "Requests dropped unstarted (deadline)", dl["dropped"]),
    )
    return Result(
        experiment="deadline",
        params=EXPERIMENT.params_dict(params),
        figures=figures,
        columns=(
            Column("mode", "Server"),
            Column("client_timeouts", "Client timeouts"),
            Column("answered", "Answered in time"),
            Column("unreceived", "Responses nobody receives"),
            Column("cancelled", "Cancelled at the deadline"),
            Column("dropped", "Dropped unstarted"),
            Column("wasted_ms", "Wasted work (ms)"),
            Column("busy_until_ms", "Server busy until (ms)"),
        ),
        rows=tuple({"mode": label, **stats[key]} for key, label in _MODES),
        charts=(chart,),
        metrics={"per_tier": tier, "deadline": dl, "saved_pct": saved_pct},
        notes=(
            "Wasted work: server time spent on requests whose response the client never receives.",
            "With the deadline the server drops a request whose deadline has passed when it "
            "dequeues it, and cancels work when the deadline passes.",
        ),
    )


EXPERIMENT: Experiment[DeadlineParams] = Experiment(
    name="deadline",
    title="Deadline propagation",
    summary="The client gives up after 100 ms but the server works 500 ms on every request; "
    "passing the deadline down lets the server stop.",
    params_type=DeadlineParams,
    limits=LIMITS,
    validate=validate,
    run=run,
    models="A client with a 100 ms timeout sends 100 requests to a server whose work takes "
    "500 ms, with per-tier timeouts and with an absolute deadline passed down.",
    seed_text="100 client-side timeouts; the server still does all 100 requests: 50,000 ms of "
    "work, 100 complete responses nobody receives.",
)
