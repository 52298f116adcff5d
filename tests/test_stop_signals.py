"""scripts/services.py's stop signals, as make run, make test and the benchmarks use them:
the first one raises once, the next ones are ignored while stopping, and one arriving while
a child is being started waits until that child is on the list to be stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from tests.servers import services


def deliver(sig: signal.Signals) -> None:
    """Send ``sig`` to this process and give Python the moment it needs to run the handler."""
    os.kill(os.getpid(), sig)
    for _ in range(100):
        time.sleep(0.01)


def test_the_first_stop_signal_raises_and_the_next_ones_are_ignored():
    before = signal.getsignal(signal.SIGTERM)
    with services.raise_on_stop_signals():
        with pytest.raises(services.StopRequested) as stop:
            deliver(signal.SIGTERM)
        assert stop.value.exit_code == 128 + signal.SIGTERM
        deliver(signal.SIGTERM)  # make forwarding what timeout sent: nothing happens
        deliver(signal.SIGHUP)
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_signal_while_a_child_starts_is_raised_once_the_child_is_on_the_list():
    finished = []
    with (
        services.raise_on_stop_signals(),
        pytest.raises(services.StopRequested),
        services.signals_held(),  # what Processes.start holds around Popen and the append
    ):
        deliver(signal.SIGTERM)
        finished.append("the block went on")
    assert finished == ["the block went on"]


def test_a_signal_landing_in_an_asyncio_callback_ends_the_event_loop():
    """asyncio drops an exception raised in a callback (a websocket's data arriving, say)
    unless it is a KeyboardInterrupt or SystemExit: the stop must end the loop."""

    async def main():
        loop = asyncio.get_running_loop()

        def busy():  # a callback running when the signal comes
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):
                time.sleep(0.01)

        loop.call_soon(busy)
        await asyncio.sleep(5)
        return "the loop went on"

    started = time.monotonic()
    with services.raise_on_stop_signals(), pytest.raises(services.StopRequested):
        asyncio.run(main())
    assert time.monotonic() - started < 4
