"""Stale bursts and traffic runs, for the sweepers."""

from __future__ import annotations


def stale_runs(model, *, session_id: int | None = None):
    """(running, queued) querysets of ``model``'s (``Burst`` or ``Traffic``) stale rows: a
    RUNNING one whose heartbeat is older than ``LAB_BURST_STALE_SECONDS``, a QUEUED one no
    worker claimed within ``LAB_BURST_QUEUE_TIMEOUT_SECONDS``; one session's, or every one."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    now = timezone.now()
    running = model.objects.filter(
        status=model.Status.RUNNING,
        heartbeat_at__lt=now - timedelta(seconds=settings.LAB_BURST_STALE_SECONDS),
    )
    queued = model.objects.filter(
        status=model.Status.QUEUED,
        created_at__lt=now - timedelta(seconds=settings.LAB_BURST_QUEUE_TIMEOUT_SECONDS),
    )
    if session_id is not None:
        running = running.filter(session_id=session_id)
        queued = queued.filter(session_id=session_id)
    return running.select_related("session"), queued.select_related("session")
