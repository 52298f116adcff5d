"""The "Instructors" group: the model permissions a teaching staff user needs in the admin.

Which rows an instructor sees is decided by the admin (their own classes only); this group only
grants the model-level permissions. Permissions are normally created after all migrations
(post_migrate), so they are created here explicitly first.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

INSTRUCTORS_GROUP = "Instructors"

PERMISSIONS = [
    ("classroom", ["view", "change", "add"]),
    ("membership", ["view", "change", "add", "delete"]),
    ("scenario", ["view"]),
    ("labsession", ["view", "change"]),
    ("burst", ["view"]),
    ("journalevent", ["view"]),
]


def create_group(apps, schema_editor):
    app_config = apps.get_app_config("labs")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=INSTRUCTORS_GROUP)
    codenames = [f"{action}_{model}" for model, actions in PERMISSIONS for action in actions]
    perms = Permission.objects.filter(content_type__app_label="labs", codename__in=codenames)
    group.permissions.add(*perms)


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=INSTRUCTORS_GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("labs", "0001_initial"),
    ]

    operations = [migrations.RunPython(create_group, remove_group)]
