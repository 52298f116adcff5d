"""The Celery application: settings come from Django's settings, namespace ``CELERY_``."""

import os
import sys

from celery import Celery
from celery.signals import worker_init, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")

app = Celery("lab_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
# A web request enqueues a burst while the student waits, so a Redis that is down must fail the
# publish in about a second, not hang it: without socket timeouts a Redis that accepts the
# connection but does not answer (stopped, overloaded, a dropped route) blocks the send forever,
# and the default publish retry policy adds up to three more tries. A refused publish marks the
# burst FAILED and the page says the lab is reconnecting (labs.services.bursts). The worker's
# own reads poll with a 1 s BRPOP, well inside these timeouts.
app.conf.broker_connection_timeout = 2
# kombu's Redis transport, keeping one client per channel (lab_project/broker.py)
app.conf.broker_transport = "lab_project.broker:Transport"
app.conf.broker_transport_options = {
    "socket_connect_timeout": 1,
    "socket_timeout": 2,
    # No acknowledgement emulation: kombu's keeps every delivered message in an "unacked" hash
    # and sorted set until it is acked (two writes on delivery, a client built and two more
    # on the ack, a sweep every few seconds), to deliver it again after an hour
    # (visibility_timeout) if the worker died meanwhile. The database already decides what
    # happens then: a burst or traffic run nobody claimed within
    # LAB_BURST_QUEUE_TIMEOUT_SECONDS is marked FAILED and its session freed, a claimed one is
    # never run twice, and a timed class fault whose restore task was lost is restored by the
    # sweep a dashboard load runs (labs.services). The emulation costs about a seventh of the
    # worker's CPU per event (push_bench --sessions 30).
    "ack_emulation": False,
}
app.conf.task_publish_retry_policy = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
app.autodiscover_tasks()


@worker_init.connect
def _short_gil_switch_interval(**kwargs) -> None:
    """Bursts sleep on purpose and must wake on time: with a hundred bursts and the journal
    writer sharing one interpreter, the default 5 ms GIL switch interval would add up to 5 ms
    to every wake-up. 0.5 ms keeps the timings students see within a fraction of a millisecond
    of the configured sleeps (benchmarks/burst_bench.py measures it)."""
    sys.setswitchinterval(0.0005)


@worker_init.connect
def _no_line_per_task(**kwargs) -> None:
    """Celery logs two INFO lines for every task (received, succeeded): a tenth of the
    worker's CPU per burst (benchmarks/burst_bench.py). The journal has every burst; a failed
    task is still logged (ERROR), and LAB_LOG_LEVEL=DEBUG brings the lines back."""
    import logging

    from django.conf import settings

    if settings.LAB_LOG_LEVEL != "DEBUG":
        for name in ("celery.app.trace", "celery.worker.strategy"):
            logging.getLogger(name).setLevel(logging.WARNING)


@worker_ready.connect
def _freeze_boot_objects(**kwargs) -> None:
    """Move every object the boot created (Django, Celery, the modules: a few hundred
    thousand) out of the collector's reach: a full collection then scans only what the
    runs create, instead of stalling every traffic run and burst of the process for 100 to
    400 ms while it walks the whole boot heap (benchmarks/storm_bench.py: the attempt
    duration error's max and p99)."""
    import gc

    gc.collect()
    gc.freeze()


#: How long a starting worker waits for its journal writer to boot before it takes tasks.
JOURNAL_WRITER_BOOT_TIMEOUT_S = 60.0


@worker_ready.connect
def _start_journal_writer(**kwargs) -> None:
    """Boot the journal writer (a process of its own by default) and wait until it answers,
    before the worker takes its first task (Celery calls this before its consuming loop
    starts, and logs "ready." after it). A burst started while the writer process was still
    booting Django had its rows held back for that long, a second or more, which a page
    catching up on a quiet second then read from the database instead of getting them
    pushed. A writer that does not answer in time is logged; the worker starts anyway and
    the rows follow when it does."""
    import logging

    from labs.live.writers import get_writer

    writer = get_writer()
    writer.start()
    if not writer.flush(JOURNAL_WRITER_BOOT_TIMEOUT_S):
        logging.getLogger("labs").warning(
            "journal writer not answering after %.0f s; taking tasks anyway",
            JOURNAL_WRITER_BOOT_TIMEOUT_S,
        )


@worker_ready.connect
def _start_engine_hub(**kwargs) -> None:
    """Start the engine hub's thread (labs.live.hub), where every burst's and traffic run's
    calls run, and load the engine's Lua scripts into Redis, before the first burst: its
    first calls would otherwise each pay a NOSCRIPT answer and a load
    (benchmarks/burst_bench.py, the first burst after the worker started)."""
    import logging

    from labs.engine.stores.redis_store import load_scripts
    from labs.live import runtime
    from labs.live.hub import get_hub

    hub = get_hub()
    try:
        load_scripts(runtime.engine_redis())
        # One command through the hub opens its own connection and runs its round once,
        # so the first burst's first attempt does not pay for either.
        hub.run(lambda: runtime.hub_redis().ping())
    except Exception as exc:  # Redis not there yet: the first calls load what they use
        logging.getLogger("labs").warning("engine scripts not loaded at start: %r", exc)


@worker_ready.connect
def _start_health_heartbeat(**kwargs) -> None:
    """Record this worker's heartbeat and its journal writer's lag for /healthz."""
    from labs.live import health

    health.start_worker_heartbeat()


@worker_shutdown.connect
def _stop_journal_writer(**kwargs) -> None:
    """After a warm shutdown has let the running bursts finish: write everything they emitted
    and end the journal writer, before the worker exits. Whatever stops the worker may kill
    its whole process group once the worker is gone (``make run`` does, with SIGKILL): the
    writer must not still hold rows then. Bounded, so a database that is down cannot hold
    the stop forever: 10 s for the rows, 10 more for the process to exit (the writer logs
    what it could not write)."""
    from labs.live.writers import get_writer

    get_writer().stop(timeout=10)


@worker_shutdown.connect
def _stop_health_heartbeat(**kwargs) -> None:
    """A worker stopping cleanly withdraws its heartbeat at once."""
    from labs.live import health

    health.stop_worker_heartbeat()
