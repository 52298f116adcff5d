"""A burst run by a real Celery worker on real Redis, then replayed in virtual time from its
recorded start state with the same policy, gives the same attempts per call, outcomes and
transitions (labs.engine.replay), for modes whose answers do not depend on wall time."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labs.engine.replay import replay
from labs.models import Burst, JournalEvent
from labs.services import bursts, lab
from tests.integration.test_bursts_worker import finished, new_session

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

_names = itertools.count()

dependencies = st.one_of(
    st.builds(lambda n: {"mode": "flaky", "fail_count": n}, st.integers(1, 8)),
    st.just({"mode": "down"}),
    st.just({"mode": "healthy"}),
    st.builds(lambda r: {"mode": "error_rate", "rate": r}, st.sampled_from([0.2, 0.5, 0.8])),
    st.builds(
        lambda outcomes: {"mode": "script", "outcomes": outcomes},
        st.lists(st.sampled_from(["ok", "fail", "500", "timeout"]), min_size=1, max_size=12),
    ),
).map(lambda d: dict(d, latency_ms=0, retry_after_ms=0))

policies = st.fixed_dictionaries(
    {
        "max_attempts": st.integers(1, 5),
        "backoff_base_ms": st.integers(0, 3),
        "backoff_cap_ms": st.just(5),
        "jitter": st.sampled_from(["none", "full", "equal", "decorrelated"]),
        "nesting": st.sampled_from(["breaker_outside", "retry_outside"]),
        # A cooldown far longer than any burst here: whether it has ended is never a question
        # of how long Redis round trips took.
        "breaker": st.fixed_dictionaries(
            {"failure_threshold": st.integers(1, 6), "cooldown_ms": st.just(60000)}
        ),
    }
)


def journaled(burst: Burst) -> dict:
    """Attempts per call, outcomes and transitions of one burst, from its journal rows."""
    rows = list(JournalEvent.objects.filter(burst=burst).order_by("seq"))
    calls = sorted(
        (r.call_no, r.data["attempts"], r.outcome) for r in rows if r.kind == "call_result"
    )
    return {
        "attempts": [a for _, a, _ in calls],
        "outcomes": [o for _, _, o in calls],
        "transitions": [
            (r.state_from, r.state_to, r.call_no) for r in rows if r.kind == "transition"
        ],
    }


def replayed(burst: Burst) -> dict:
    out = replay(burst.start_state).output
    return {
        "attempts": [c["attempts"] for c in out["calls"]],
        "outcomes": [c["outcome"] for c in out["calls"]],
        "transitions": [(t["from"], t["to"], t["call"]) for t in out["transitions"]],
    }


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    dependency=dependencies,
    policy=policies,
    sizes=st.lists(st.integers(1, 8), min_size=2, max_size=2),
)
def test_a_worker_burst_replays_identically(celery_worker, dependency, policy, sizes):
    session = new_session(username=f"r{next(_names)}")
    lab.session_set_dependency(session=session, user=session.owner, changes=dependency)
    lab.session_set_policy(session=session, user=session.owner, changes=policy)
    # Two bursts: the second starts from whatever the first left (an open breaker, a spent
    # flaky counter, a script half read), which is what the recorded start state must carry.
    for size in sizes:
        burst = finished(bursts.burst_start(session=session, user=session.owner, size=size))
        assert burst.status == Burst.Status.DONE
        assert burst.start_state["burst"] == burst.number
        assert replayed(burst) == journaled(burst)
