"""Forms of the platform: log in, student sign-up, joining a class, roster import, and the
admin's scenario editor. The forms a student or a visitor posts bound every text input
(:mod:`labs.forms.bounded`)."""

from __future__ import annotations

import json
import re

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm

from labs.forms.bounded import BoundedInputsMixin
from labs.models import Classroom, Scenario
from labs.services.accounts import (
    JoinCodeError,
    RosterError,
    classroom_for_join_code,
    normalize_join_code,
    roster_parse,
)

ROSTER_MAX_BYTES = 1_000_000
#: Characters of pasted roster: 500 rows of 200 characters. A longer roster is uploaded.
ROSTER_MAX_PASTED = 100_000
#: Longer than any passphrase a person types; a megabyte is refused before it is hashed.
PASSWORD_MAX_LENGTH = 256
JOIN_CODE_MAX_LENGTH = 32


def _join_code_field() -> forms.CharField:
    return forms.CharField(
        max_length=JOIN_CODE_MAX_LENGTH,
        label="Class join code",
        help_text="8 letters or digits, from your instructor.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "autocapitalize": "characters"}),
    )


def _bound_passwords(form: forms.Form, *names: str) -> None:
    for name in names:
        form.fields[name].max_length = PASSWORD_MAX_LENGTH


class LoginForm(BoundedInputsMixin, AuthenticationForm):
    """Django's login form, with the username and the password bounded."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _bound_passwords(self, "password")


class SignupForm(BoundedInputsMixin, UserCreationForm):
    """A student account, enrolled in the class its join code names."""

    join_code = _join_code_field()

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "first_name", "last_name", "email")

    field_order = ["join_code", "username", "first_name", "last_name", "email"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _bound_passwords(self, "password1", "password2")

    def clean_join_code(self) -> str:
        code = normalize_join_code(self.cleaned_data["join_code"])
        try:
            self.classroom: Classroom = classroom_for_join_code(code)
        except JoinCodeError as exc:
            raise forms.ValidationError(str(exc), code="join_code") from None
        return code


class JoinClassForm(BoundedInputsMixin, forms.Form):
    """A signed-in student's join code for one more class (the service checks the code)."""

    join_code = _join_code_field()


class RosterImportForm(BoundedInputsMixin, forms.Form):
    """A roster CSV, uploaded or pasted: username, full name, email (one student a line)."""

    csv_file = forms.FileField(
        required=False, label="CSV file", help_text="UTF-8; a header row is optional."
    )
    csv_text = forms.CharField(
        required=False,
        max_length=ROSTER_MAX_PASTED,
        label="…or paste the CSV",
        widget=forms.Textarea(attrs={"rows": 8, "cols": 80, "spellcheck": "false"}),
        help_text="One student a line: username, full name, email (email may be empty).",
    )

    def clean(self):
        cleaned = super().clean()
        upload = cleaned.get("csv_file")
        pasted = (cleaned.get("csv_text") or "").strip()
        if upload and pasted:
            raise forms.ValidationError("Upload a file or paste the CSV, not both.")
        if upload:
            if upload.size > ROSTER_MAX_BYTES:
                raise forms.ValidationError(
                    f"The file is larger than {ROSTER_MAX_BYTES // 1000} kB."
                )
            try:
                text = upload.read().decode("utf-8-sig")
            except UnicodeDecodeError:
                self.add_error("csv_file", "The file is not UTF-8 text. Save it as CSV UTF-8.")
                return cleaned
        elif pasted:
            text = pasted
        else:
            raise forms.ValidationError("Choose a CSV file or paste the roster.")
        try:
            cleaned["rows"] = roster_parse(text)
        except RosterError as exc:
            # Every bad line, by number; nothing is imported.
            for message in exc.errors:
                self.add_error(None, message)
            return cleaned
        cleaned["text"] = text
        return cleaned


# --- Scenario editor ------------------------------------------------------------------------

_TOP_LEVEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)")


class PrettyJSONField(forms.JSONField):
    """A JSON textarea that shows stored values indented, for humans."""

    def prepare_value(self, value):
        if isinstance(value, str):
            return value
        return json.dumps(value, indent=2, ensure_ascii=False)


class ScenarioAdminForm(forms.ModelForm):
    """Edit a scenario script through one field per part, so each problem the engine's
    validator finds is shown beside the part it names (``policy.max_attempts`` under Policy).
    """

    seed = forms.IntegerField(
        required=False,
        help_text="Seeds the random number generator (jitter, error rates): same seed, same run.",
    )
    dependency = PrettyJSONField(
        required=False,
        help_text='The starting dependency, e.g. {"mode": "flaky", "fail_count": 3, "latency_ms": 5}.',
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80, "class": "vLargeTextField"}),
    )
    policy = PrettyJSONField(
        required=False,
        help_text="The client policy: retries, backoff, jitter, nesting, breaker.",
        widget=forms.Textarea(attrs={"rows": 16, "cols": 80, "class": "vLargeTextField"}),
    )
    steps = PrettyJSONField(
        required=False,
        help_text='A list such as [{"burst": 6}, {"set_dependency": {"mode": "down"}}, {"wait_ms": 2000}].',
        widget=forms.Textarea(attrs={"rows": 12, "cols": 80, "class": "vLargeTextField"}),
    )

    SCRIPT_FIELDS = ("seed", "dependency", "policy", "steps")

    class Meta:
        model = Scenario
        fields = ["title", "slug", "description", "instructions", "is_active", "position"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        script = self.instance.script if isinstance(self.instance.script, dict) else {}
        for name in self.SCRIPT_FIELDS:
            if name in script:
                self.initial.setdefault(name, script[name])
        self.initial.setdefault("steps", script.get("steps", []))

    def clean(self):
        cleaned = super().clean()
        if any(name in self.errors for name in self.SCRIPT_FIELDS):
            return cleaned  # malformed JSON already reported beside its field
        # Keep any other keys of the stored script (added to the format later) untouched.
        base = self.instance.script if isinstance(self.instance.script, dict) else {}
        script = dict(base)
        # The script's own name/title/description follow the scenario's.
        script["name"] = cleaned.get("slug") or ""
        script["title"] = cleaned.get("title") or ""
        script["description"] = cleaned.get("description") or ""
        empty = {"dependency": {}, "policy": {}, "steps": []}
        for name, default in empty.items():
            value = cleaned.get(name)
            script[name] = default if value is None else value
        if cleaned.get("seed") is None:
            script.pop("seed", None)
        else:
            script["seed"] = cleaned["seed"]

        from labs.engine import validate_scenario

        problems = validate_scenario(script)
        for problem in problems:
            self.add_error(self._field_for(problem.field), str(problem))
        if not problems:
            self.instance.script = script
        return cleaned

    def _field_for(self, path: str) -> str | None:
        """The form field a problem's field path belongs to (None: the form as a whole)."""
        match = _TOP_LEVEL.match(path or "")
        top = match.group(1) if match else ""
        if top in self.SCRIPT_FIELDS:
            return top
        return {"name": "slug", "title": "title", "description": "description"}.get(top)
