"""Failure Lab's Django project. Importing the Celery app here makes ``shared_task`` use it."""

from lab_project.celery import app as celery_app

__all__ = ("celery_app",)
