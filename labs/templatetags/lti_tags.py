"""The LMS part of a class's dashboard: the roster button and the scores not yet in the
course's gradebook (docs/lti.md)."""

from __future__ import annotations

from django import template

from labs import selectors

register = template.Library()


@register.inclusion_tag("labs/lti_dashboard.html")
def lti_class_panel(classroom):
    return {"classroom": classroom, **selectors.lti_class_status(classroom.pk)}
