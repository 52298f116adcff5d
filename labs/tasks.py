"""Celery tasks: thin, they take ids and call a service."""

from __future__ import annotations

from celery import shared_task

from labs.services import bursts


@shared_task(name="labs.run_burst", ignore_result=True)
def run_burst(burst_id: int) -> str:
    """Run one queued burst (idempotent: a second delivery finds nothing to claim)."""
    return bursts.burst_run(burst_id=burst_id)
