"""The lab page's shared-dependency message ticks just after each second of the clock ends, so
every page gets a second's figures a fraction of a second after it, whenever it connected."""

from __future__ import annotations

import pytest

from labs.consumers.lab import SHARED_PHASE_S, until_shared_tick


@pytest.mark.parametrize("now", [100.0, 100.05, 100.2, 100.21, 100.5, 100.99, 101.19])
def test_the_next_tick_is_the_phase_after_a_second_of_the_clock(now):
    wait = until_shared_tick(now)
    assert 0 < wait <= 1.0
    tick = now + wait
    assert tick - int(tick) == pytest.approx(SHARED_PHASE_S)


def test_pages_that_connected_apart_tick_together():
    ticks = {round(t + until_shared_tick(t), 6) for t in (500.31, 500.77, 501.02, 501.15)}
    assert ticks == {501.2}
