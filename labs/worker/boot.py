"""A worker's boot and stop: every Celery signal handler of the project. They start the
journal writer, the engine hub, the runs' heartbeat and sweeper and the health beat, and
stop them in order. Imported by :mod:`labs.worker.tasks`, so Celery connects them when it
loads the tasks, before ``worker_init`` fires.
"""

from __future__ import annotations

import gc
import logging
import sys

from celery.signals import worker_init, worker_ready, worker_shutdown, worker_shutting_down
from django.conf import settings

from labs.engine.redis.store import load_scripts
from labs.live import runtime
from labs.services import classroom, lti, predictions, shared
from labs.services.bursts import BURSTS
from labs.services.runs import reap_stale
from labs.services.traffic import TRAFFIC
from labs.worker import beat, runs, traffic
from labs.worker.hub import get_hub, hub_redis
from labs.worker.writers import get_writer

logger = logging.getLogger("labs")


@worker_init.connect
def _short_gil_switch_interval(**kwargs) -> None:
    """Bursts sleep on purpose and must wake on time: with a hundred bursts and the journal
    writer sharing one interpreter, the default 5 ms GIL switch interval could add up to 5 ms
    to every wake-up, and 0.5 ms keeps the timings students see close to the configured
    sleeps (docs/scaling.md, "Figures behind the code")."""
    sys.setswitchinterval(0.0005)


@worker_init.connect
def _no_line_per_task(**kwargs) -> None:
    """Celery logs two INFO lines for every task (received, succeeded), a share of the
    worker's CPU per burst worth saving. The journal has every burst; a failed
    task is still logged (ERROR), and LAB_LOG_LEVEL=DEBUG brings the lines back."""
    if settings.LAB_LOG_LEVEL != "DEBUG":
        for name in ("celery.app.trace", "celery.worker.strategy"):
            logging.getLogger(name).setLevel(logging.WARNING)


@worker_ready.connect
def _freeze_boot_objects(**kwargs) -> None:
    """Move every object the boot created (Django, Celery, the modules: a few hundred
    thousand) out of the collector's reach: a full collection then scans only what the
    runs create, instead of stalling every traffic run and burst of the process while it
    walks the whole boot heap."""
    gc.collect()
    gc.freeze()


#: How long a starting worker waits for its journal writer to boot before it takes tasks.
JOURNAL_WRITER_BOOT_TIMEOUT_S = 60.0


@worker_ready.connect
def _start_journal_writer(**kwargs) -> None:
    """Boot the journal writer (a process of its own by default) and wait until it answers,
    before the worker takes its first task (Celery calls this before its consuming loop
    starts, and logs "ready." after it): a burst started while the writer process is still
    booting Django would have its rows held back that long, and a page catching up on a
    quiet second would read them from the database instead of getting them pushed. A writer that does not answer in time is logged; the worker starts anyway and
    the rows follow when it does."""
    writer = get_writer()
    writer.start()
    if not writer.flush(JOURNAL_WRITER_BOOT_TIMEOUT_S):
        logger.warning(
            "journal writer not answering after %.0f s; taking tasks anyway",
            JOURNAL_WRITER_BOOT_TIMEOUT_S,
        )


@worker_ready.connect
def _start_engine_hub(**kwargs) -> None:
    """Start the engine hub's thread (labs.worker.hub), where every burst's and traffic run's
    calls run, and load the engine's Lua scripts into Redis, before the first burst: its
    first calls would otherwise each pay a NOSCRIPT answer and a load."""
    hub = get_hub()
    try:
        load_scripts(runtime.engine_redis())
        # One command through the hub opens its own connection and runs its round once,
        # so the first burst's first attempt does not pay for either.
        hub.run(lambda: hub_redis().ping())
    except Exception as exc:  # Redis not there yet: the first calls load what they use
        logger.warning("engine scripts not loaded at start: %r", exc)


@worker_ready.connect
def _start_health_heartbeat(**kwargs) -> None:
    """Record this worker's heartbeat and its journal writer's lag for /healthz."""
    beat.start_worker_heartbeat()


@worker_shutdown.connect
def _stop_journal_writer(**kwargs) -> None:
    """After a warm shutdown has let the running bursts finish: write everything they emitted
    and end the journal writer, before the worker exits. Whatever stops the worker may kill
    its whole process group once the worker is gone (``make run`` does, with SIGKILL): the
    writer must not still hold rows then. Bounded, so a database that is down cannot hold
    the stop forever: 10 s for the rows, 10 more for the process to exit (the writer logs
    what it could not write)."""
    get_writer().stop(timeout=10)


@worker_shutdown.connect
def _stop_health_heartbeat(**kwargs) -> None:
    """A worker stopping cleanly withdraws its heartbeat at once."""
    beat.stop_worker_heartbeat()


@worker_ready.connect
def _start_sweeper(**kwargs) -> None:
    """Start the sweeper as soon as the worker is ready, so a killed worker's run ends (and
    its page hears of it) without anyone loading a page, even while this worker is idle:
    the reaping of every kind of run, the class faults whose restore task was lost, the
    classes' settings Redis lost, the recovery questions whose trigger's outcome is known."""
    for kind in (BURSTS, TRAFFIC):
        runs.start_sweeper(f"{kind.model.__name__.lower()} reaper",
                           lambda kind=kind: reap_stale(kind))  # fmt: skip
    runs.start_sweeper("fault-sweeper", classroom.sweep_faults)
    runs.start_sweeper("shared-restore", shared.shared_restore_lost)
    runs.start_sweeper("recovery-grades", predictions.recovery_predictions_grade)
    runs.worker_ready()


@worker_shutting_down.connect
def _hand_back_traffic(**kwargs) -> None:
    """A warm shutdown began: traffic runs end within seconds, saying the worker was stopped,
    instead of holding the worker for the rest of their schedule (labs.worker.traffic)."""
    traffic.worker_stopping()


@worker_ready.connect
def _queue_unsent_lti_grades(**kwargs) -> None:
    """Queue every score still waiting for the LMS gradebook when a worker starts: a retry
    queued with a countdown is lost with a worker killed before it ran."""
    lti.lti_grades_send_due()
