"""The burst summary panel rendered alone, through the lab page's own template partial
(``burst-summary``), as the page renders it on load: what the tests compare the panel's data
with."""

from __future__ import annotations

from typing import Any

from django.template.loader import get_template


def render_summary(summary: dict[str, Any] | None) -> str:
    return get_template("labs/session.html#burst-summary").render({"summary": summary}).strip()
