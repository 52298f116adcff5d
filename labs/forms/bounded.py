"""Length limits on every text input of a form, checked before anything parses the value.

A value over its field's ``max_length`` (``DEFAULT_MAX_LENGTH`` for a text field without one)
(``CHOICE_MAX_LENGTH`` for a choice) is refused with a message naming the field, the limit and the length, and the field re-renders
empty: a megabyte typed into a form is never echoed back into the page, neither in the
re-rendered field nor in a message quoting it.
"""

from __future__ import annotations

from django import forms

DEFAULT_MAX_LENGTH = 1000
CHOICE_MAX_LENGTH = 100


class BoundedInputsMixin:
    """Mix into a ``forms.Form``: ``too_long`` maps each over-long field to (limit, length)."""

    def full_clean(self) -> None:
        self.too_long: dict[str, tuple[int, int]] = {}
        if self.is_bound:
            data = self.data.copy()
            for name, field in self.fields.items():
                if isinstance(field, forms.CharField):
                    limit = field.max_length or DEFAULT_MAX_LENGTH
                elif isinstance(field, forms.ChoiceField):
                    limit = CHOICE_MAX_LENGTH
                else:
                    continue
                key = self.add_prefix(name)
                values = data.getlist(key) if hasattr(data, "getlist") else [data.get(key)]
                length = max((len(v) for v in values if isinstance(v, str)), default=0)
                if length > limit:
                    self.too_long[name] = (limit, length)
                    data[key] = ""
            if self.too_long:
                self.data = data
        super().full_clean()
        for name, (limit, length) in self.too_long.items():
            # This message replaces whatever the emptied value led to ("This field is required").
            self._errors[name] = self.error_class([self.too_long_message(name, limit, length)])
            self.cleaned_data.pop(name, None)

    def too_long_message(self, name: str, limit: int, length: int) -> str:
        label = self.fields[name].label or name.replace("_", " ").capitalize()
        return f"{label} must be at most {limit} characters (got {length})."
