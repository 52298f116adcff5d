"""Forms of the platform: log in, student sign-up, joining a class, roster import, and the
admin's scenario editor. The forms a student or a visitor posts bound every text input
(:mod:`labs.forms.bounded`)."""

from __future__ import annotations

import json
import re

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm, SetPasswordForm, UserCreationForm

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


class ChoosePasswordForm(BoundedInputsMixin, SetPasswordForm):
    """A password of the student's own, twice, checked by the password validators (the view
    saves it through ``labs.services.accounts.account_set_password``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _bound_passwords(self, "new_password1", "new_password2")


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
_STEP_PATH = re.compile(r"^steps\[(\d+)\](?:\.(.+))?$")


class PrettyJSONField(forms.JSONField):
    """A JSON textarea that shows stored values indented, for humans."""

    def prepare_value(self, value):
        if isinstance(value, str):
            return value
        if value is None:
            return ""  # an empty box, not "null"
        return json.dumps(value, indent=2, ensure_ascii=False)


# --- a scenario's steps as rows ----------------------------------------------------------------

#: A step's actions as the row's select offers them (the engine's step keys).
STEP_ACTIONS = (
    ("burst", "burst: run calls"),
    ("wait_ms", "wait (virtual time)"),
    ("set_dependency", "set the dependency"),
    ("set_policy", "set the policy"),
)


def _engine_value(text: str):
    """A row's typed-in value as the script holds it: a number when it reads as one (``6``,
    ``1.5``), else the text itself, so the engine's validator, not the form, says what is
    allowed (``must be an integer 1 to 20 calls (got 'six')``)."""
    text = text.strip()
    if text == "":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float) and not isinstance(value, bool) else text


class EngineValueField(forms.CharField):
    """A short text input whose value goes to the script as a number where it is one; range
    and type are left to the engine's validator (one message, the engine's, per problem)."""

    MAX_CHARS = 32

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault(
            "widget", forms.TextInput(attrs={"size": 8, "maxlength": self.MAX_CHARS})
        )
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return "" if value is None else value

    def to_python(self, value):
        text = super().to_python(value)
        if len(text) > self.MAX_CHARS:
            raise forms.ValidationError(f"at most {self.MAX_CHARS} characters")
        return _engine_value(text)


class StepRowForm(forms.Form):
    """One step of a scenario script as a row of fields: the action and its value, and for a
    burst its ``expect`` and ``situation`` (JSON) and its ``ask`` (question, measure, tolerance,
    seconds to come back for a recovery question, explanation).

    The row checks nothing but JSON syntax itself: :meth:`ScenarioAdminForm.clean` builds the
    whole script and puts each problem the lesson validator finds beside the row field its
    path names (``steps[2].ask.measure`` beside Measure in row 3)."""

    action = forms.CharField(
        required=False, widget=forms.Select(choices=STEP_ACTIONS), initial="burst"
    )
    burst = EngineValueField(label="calls", help_text="burst: how many calls")
    concurrency = EngineValueField(label="callers", help_text="burst: callers at once (blank: 1)")
    wait_ms = EngineValueField(label="wait ms", help_text="wait: milliseconds of virtual time")
    changes = PrettyJSONField(
        required=False,
        label="changes",
        help_text='set the dependency or policy: the fields that change, e.g. {"mode": "down"}',
        widget=forms.Textarea(attrs={"rows": 2, "cols": 40}),
    )
    expect = PrettyJSONField(
        required=False,
        help_text='burst: facts checked after the run, e.g. {"breaker_after": "open"}',
        widget=forms.Textarea(attrs={"rows": 3, "cols": 40}),
    )
    situation = PrettyJSONField(
        required=False,
        help_text='burst: what must happen for the lesson, else the lab grades nothing, e.g. '
        '{"needs": {"throttled": {"min": 1}}, "missed": "The rate limit was over: ..."}',
        widget=forms.Textarea(attrs={"rows": 2, "cols": 40}),
    )
    ask_question = forms.CharField(
        required=False, label="question", widget=forms.Textarea(attrs={"rows": 2, "cols": 40})
    )
    ask_measure = forms.CharField(required=False, label="measure")
    ask_tolerance = EngineValueField(label="tolerance")
    ask_within_s = EngineValueField(
        label="within (s)",
        help_text="a question whether the shared dependency comes back: the seconds after "
        "the trigger's end it has to",
    )
    ask_explanation = forms.CharField(
        required=False, label="explanation", widget=forms.Textarea(attrs={"rows": 2, "cols": 40})
    )

    #: Row field per part of a step's path (``steps[i].<part>...``).
    FIELD_OF = {
        "burst": "burst",
        "concurrency": "concurrency",
        "wait_ms": "wait_ms",
        "set_dependency": "changes",
        "set_policy": "changes",
        "expect": "expect",
        "situation": "situation",
        "ask": "ask_question",
        "ask.question": "ask_question",
        "ask.measure": "ask_measure",
        "ask.tolerance": "ask_tolerance",
        "ask.within_s": "ask_within_s",
        "ask.explanation": "ask_explanation",
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from labs.grading import ASK_MEASURES

        # A select, but a plain text field underneath: an unknown measure is refused by the
        # lesson validator, with the allowed measures.
        self.fields["ask_measure"].widget = forms.Select(
            choices=[("", "(no question)"), *((m, m) for m in ASK_MEASURES)]
        )

    @classmethod
    def initial_for(cls, step) -> dict:
        """The row's initial values for a stored step."""
        if not isinstance(step, dict):
            return {"action": "burst"}
        action = next((a for a, _ in STEP_ACTIONS if a in step), "burst")
        row = {"action": action}
        if action in ("set_dependency", "set_policy"):
            row["changes"] = step[action]
        elif action in step:
            row[action] = step[action]
        for key in ("concurrency", "expect", "situation"):
            if key in step:
                row[key] = step[key]
        ask = step.get("ask")
        if isinstance(ask, dict):
            for key in ("question", "measure", "tolerance", "within_s", "explanation"):
                if key in ask:
                    row[f"ask_{key}"] = ask[key]
        return row

    def step(self) -> dict:
        """The step this (cleaned) row says, keys in the scenario files' order. A value typed
        in a field its action does not use is kept, so the validator names it."""
        data = self.cleaned_data
        action = data.get("action") or "burst"
        step: dict = {}
        if action in ("set_dependency", "set_policy"):
            step[action] = data.get("changes")
        elif action in ("burst", "wait_ms"):
            step[action] = data.get(action)
        else:
            step[action] = None
        for key in ("burst", "wait_ms", "concurrency"):
            if key != action and data.get(key) is not None:
                step[key] = data[key]
        if action not in ("set_dependency", "set_policy") and data.get("changes") is not None:
            step["set_dependency"] = data["changes"]
        if data.get("expect") is not None:
            step["expect"] = data["expect"]
        if data.get("situation") is not None:
            step["situation"] = data["situation"]
        ask = {}
        for key in ("question", "measure", "tolerance", "within_s", "explanation"):
            value = data.get(f"ask_{key}")
            if value not in (None, ""):
                ask[key] = value
        if ask:
            step["ask"] = ask
        return step

    def field_for(self, path: str) -> str | None:
        """The row field a problem's path within the step names (None: the row as a whole)."""
        for part in (".".join(path.split(".")[:2]), path.split(".")[0]):
            if part in self.FIELD_OF:
                return self.FIELD_OF[part]
        return "action" if path else None


StepRowFormSet = forms.formset_factory(
    StepRowForm, extra=1, can_delete=True, can_order=True, max_num=100, validate_max=True
)


class ScenarioAdminForm(forms.ModelForm):
    """Edit a scenario script through one field per part, so each problem the lesson
    validator (the engine's checks and the questions') finds is shown beside the part it names (``policy.max_attempts`` under Policy).

    The steps can be edited two ways: as raw JSON (the ``steps`` field) or as rows
    (:attr:`step_rows`, a formset of :class:`StepRowForm`, one per step, with a blank row to
    add one, Delete and Order to remove and move them). The steps are not rows in the
    database but a list inside ``Scenario.script``, the JSON the engine reads, the CLI runs
    and the scenario files hold; so the rows are a formset over that list rather than a
    Django inline, and the script stays the one source of truth. Whichever of the two was
    edited is saved (both in one save is refused, naming both); a problem in a row is shown
    beside the row field its path names.
    """

    STEP_ROWS_PREFIX = "step"

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
        steps = self.initial["steps"] if isinstance(self.initial["steps"], list) else []
        # Rows take part only when the page posted them (a client may post the JSON alone).
        posted = self.is_bound and f"{self.STEP_ROWS_PREFIX}-TOTAL_FORMS" in self.data
        self.step_rows = StepRowFormSet(
            self.data if posted else None,
            initial=[StepRowForm.initial_for(step) for step in steps],
            prefix=self.STEP_ROWS_PREFIX,
        )
        self._rows_posted = posted

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
        rows = self._step_rows_used()
        if rows is False:
            return cleaned  # a row's problem (or both ways edited) is already reported
        if rows is not None:
            script["steps"] = [form.step() for form in rows]
        if cleaned.get("seed") is None:
            script.pop("seed", None)
        else:
            script["seed"] = cleaned["seed"]

        from labs.grading import validate_lesson

        problems = validate_lesson(script)
        for problem in problems:
            if rows and self._add_row_error(rows, problem):
                continue
            self.add_error(self._field_for(problem.field), str(problem))
        if not problems:
            self.instance.script = script
        return cleaned

    def _step_rows_used(self):
        """The row forms to build the steps from, in order (deleted and blank rows left out);
        None when the raw JSON is what counts; False when nothing can be built (a row's JSON
        is malformed, or both the rows and the raw JSON were edited)."""
        if not self._rows_posted:
            return None
        if not self.step_rows.is_valid():
            self.add_error(None, "A step row has a problem: see the rows under Steps as rows.")
            return False
        if not self.step_rows.has_changed():
            return None
        if self.has_changed() and "steps" in self.changed_data:
            message = (
                "The steps were edited both as rows and as raw JSON: keep one of the two "
                "(the other is reset when the page is reloaded)."
            )
            self.add_error("steps", message)
            self.add_error(None, message)
            return False
        return list(self.step_rows.ordered_forms)

    def _add_row_error(self, rows: list[StepRowForm], problem) -> bool:
        """Put ``problem`` beside its row field (``steps[2].ask.measure``: row 3's measure);
        False when it is not about one step."""
        match = _STEP_PATH.match(problem.field or "")
        if not match or int(match.group(1)) >= len(rows):
            return False
        form = rows[int(match.group(1))]
        form.add_error(form.field_for(match.group(2) or ""), problem.message)
        if not any("step row" in str(e) for e in self.non_field_errors()):
            self.add_error(None, "A step row has a problem: see the rows under Steps as rows.")
        return True

    def _field_for(self, path: str) -> str | None:
        """The form field a problem's field path belongs to (None: the form as a whole)."""
        match = _TOP_LEVEL.match(path or "")
        top = match.group(1) if match else ""
        if top in self.SCRIPT_FIELDS:
            return top
        return {"name": "slug", "title": "title", "description": "description"}.get(top)
