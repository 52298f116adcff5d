"""The Celery application: settings come from Django's settings, namespace ``CELERY_``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")

app = Celery("lab_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
