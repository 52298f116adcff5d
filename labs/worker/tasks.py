"""Celery tasks: thin, they take ids and call the worker's run loop or a service. Their names
(``labs.live.enqueue``) stay fixed: queued messages and the beat schedule refer to them."""

from __future__ import annotations

from celery import shared_task

from labs.live import enqueue
from labs.services import classroom, lti, predictions
from labs.worker import (
    boot,  # noqa: F401  (connects the worker's signal handlers)
    bursts,
    runs,
    traffic,
)
from labs.worker.hub import bookkeeping


@shared_task(name=enqueue.RUN_BURST, ignore_result=True)
def run_burst(burst_id: int) -> str:
    """Run one queued burst (idempotent: a second delivery finds nothing to claim), then grade
    the predictions it ran (a step's question is graded even when no page asks)."""
    status = bursts.burst_run(burst_id=burst_id)
    if status == "done":
        with bookkeeping():
            predictions.burst_predictions_grade(burst_id=burst_id)
            runs.release_connection()
    return status


@shared_task(name=enqueue.RUN_TRAFFIC, ignore_result=True)
def run_traffic(traffic_id: int) -> str:
    """Run one queued traffic run (idempotent: a second delivery finds nothing to claim)."""
    return traffic.traffic_run(traffic_id=traffic_id)


@shared_task(name=enqueue.SEND_LTI_GRADE, ignore_result=True)
def send_lti_grade(post_id: int) -> bool:
    """Send one score to the LMS gradebook (a failure queues its own retry)."""
    return lti.lti_grade_send(post_id=post_id)


@shared_task(name=enqueue.RESTORE_CLASS_FAULT, ignore_result=True)
def restore_class_fault(fault_id: int) -> int:
    """End a timed class-wide fault (idempotent: the fault row is claimed before restoring)."""
    return len(classroom.classroom_fault_restore(fault_id=fault_id).changed)
