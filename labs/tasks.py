"""Celery tasks: thin, they take ids and call a service; and the worker's burst thread."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready, worker_shutting_down

from labs.live import queue
from labs.live.hub import bookkeeping
from labs.services import bursts, classroom, lti, predictions, shared, traffic


@shared_task(name=queue.RUN_BURST, ignore_result=True)
def run_burst(burst_id: int) -> str:
    """Run one queued burst (idempotent: a second delivery finds nothing to claim), then grade
    the predictions it ran (a step's question is graded even when no page asks)."""
    status = bursts.burst_run(burst_id=burst_id)
    if status == "done":
        with bookkeeping():
            predictions.burst_predictions_grade(burst_id=burst_id)
            bursts.release_connection()
    return status


@shared_task(name=queue.RUN_TRAFFIC, ignore_result=True)
def run_traffic(traffic_id: int) -> str:
    """Run one queued traffic run (idempotent: a second delivery finds nothing to claim)."""
    return traffic.traffic_run(traffic_id=traffic_id)


@shared_task(name=queue.SEND_LTI_GRADE, ignore_result=True)
def send_lti_grade(post_id: int) -> bool:
    """Send one score to the LMS gradebook (a failure queues its own retry)."""
    return lti.lti_grade_send(post_id=post_id)


@shared_task(name=queue.RESTORE_CLASS_FAULT, ignore_result=True)
def restore_class_fault(fault_id: int) -> int:
    """End a timed class-wide fault (idempotent: the fault row is claimed before restoring)."""
    return len(classroom.classroom_fault_restore(fault_id=fault_id).changed)


@worker_ready.connect
def _start_burst_heartbeat(**kwargs) -> None:
    """Start the thread that vouches for this worker's bursts and reaps dead workers' ones as
    soon as the worker is ready, so a killed worker's burst ends without anyone loading a page;
    likewise traffic runs' reaper and the sweeper of class faults whose restore task was lost.
    (Connected here, not in lab_project.celery, which sits below the services.)"""
    bursts.worker_ready()
    traffic.worker_ready()
    classroom.worker_ready()
    shared.worker_ready()


@worker_shutting_down.connect
def _hand_back_traffic(**kwargs) -> None:
    """A warm shutdown began: traffic runs end within seconds, saying the worker was stopped,
    instead of holding the worker for the rest of their schedule (labs.services.traffic)."""
    traffic.worker_stopping()


@worker_ready.connect
def _queue_unsent_lti_grades(**kwargs) -> None:
    """Queue every score still waiting for the LMS gradebook when a worker starts: a retry
    queued with a countdown is lost with a worker killed before it ran."""
    lti.lti_grades_send_due()
