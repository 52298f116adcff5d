from django.apps import AppConfig


class LabsConfig(AppConfig):
    name = "labs"
    verbose_name = "Failure Lab"
    default_auto_field = "django.db.models.BigAutoField"
