"""The Celery application and its configuration: settings come from Django's settings,
namespace ``CELERY_``. What a worker runs (its boot, its tasks) is ``labs/worker/``."""

import os

from celery import Celery

from lab_project.env import plain

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
if not plain("kombu"):
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
    # sweep a dashboard load runs (labs.services), so the emulation's CPU is spent for nothing.
    "ack_emulation": False,
}
app.conf.task_publish_retry_policy = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
# The tasks and every worker signal handler: labs/worker/ (tasks.py imports boot.py).
app.autodiscover_tasks(["labs.worker"])
