"""Two data changes that go with 0008:

- The Instructors group may view, add and change a class's shared dependency in the admin,
  as the dashboard lets an instructor do (the admin still shows only their own classes').
- Bot students made by ``simulate_class`` before bots were marked (usernames
  ``bot-c<class id>-NNN`` with no usable password, members of that class) are marked
  simulated, so ``simulate_class --cleanup`` finds them and the counts leave them out.
"""

import re

from django.contrib.auth.management import create_permissions
from django.db import migrations

INSTRUCTORS_GROUP = "Instructors"
CODENAMES = ["view_shareddependencyconfig", "add_shareddependencyconfig",
             "change_shareddependencyconfig"]  # fmt: skip
BOT_NAME = re.compile(r"^bot-c(\d+)-\d{3}$")


def forwards(apps, schema_editor):
    app_config = apps.get_app_config("labs")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=INSTRUCTORS_GROUP)
    group.permissions.add(
        *Permission.objects.filter(content_type__app_label="labs", codename__in=CODENAMES)
    )

    Membership = apps.get_model("labs", "Membership")
    for membership in Membership.objects.filter(
        user__username__startswith="bot-c", role="student"
    ).select_related("user"):
        match = BOT_NAME.match(membership.user.username)
        unusable = membership.user.password.startswith("!")
        if match and unusable and int(match.group(1)) == membership.classroom_id:
            membership.simulated = True
            membership.save(update_fields=["simulated"])


def backwards(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group = Group.objects.filter(name=INSTRUCTORS_GROUP).first()
    if group is not None:
        group.permissions.remove(
            *Permission.objects.filter(content_type__app_label="labs", codename__in=CODENAMES)
        )


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("labs", "0008_accounts_bots_admin_labels"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
