"""The LMS part of a class's dashboard: the roster button and the scores not yet in the
course's gradebook (docs/lti.md)."""

from __future__ import annotations

from django import template

from labs.selectors.dashboard import lti_class_status

register = template.Library()


@register.inclusion_tag("labs/lti_dashboard.html")
def lti_class_panel(classroom):
    return {"classroom": classroom, **lti_class_status(classroom.pk)}
