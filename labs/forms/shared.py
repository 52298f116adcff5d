"""Parsing the class's shared-dependency forms: its settings and a trigger.

The posted strings become the JSON values the engine validates (``labs.forms.lab.coerce``);
the services validate them (field and range named on refusal). Blank fields are not sent, so
they keep the current setting (or take the engine's default), but for a setting that may be
off (the server's defences): posted blank, it is off.
"""

from __future__ import annotations

from typing import Any

from django import forms

from labs.engine import LIMITS
from labs.engine.shared import DEFENCES
from labs.forms.lab import coerce
from labs.live import runtime
from labs.models import SharedDependencyConfig
from labs.presenters.server import CHOICE_WORDS
from labs.services import chain as chain_services
from labs.services.shared import shared_problems
from labs.services.storm import shared_sessions

#: (field, LIMITS path, label) of the shared dependency's settings.
SHARED_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("servers", "shared.servers", "Servers"),
    ("service_ms", "shared.service_ms", "Service time per attempt (ms)"),
    ("max_queue_ms", "shared.max_queue_ms", "Longest queue wait before shedding (ms)"),
    ("rate_per_s", "shared.rate_per_s", "Rate limit (attempts/s)"),
    ("rate_burst", "shared.rate_burst", "Rate limit's burst (attempts)"),
    ("queue_limit", "shared.queue_limit", "Queue limit (attempts waiting)"),
    ("concurrency_limit", "shared.concurrency_limit", "Concurrency limit (attempts in the server)"),
    ("concurrency", "shared.concurrency", "Concurrency limit moves"),
    ("concurrency_max", "shared.concurrency_max", "Adaptive limit's highest (attempts)"),
    ("limit_latency_ms", "shared.limit_latency_ms", "AIMD: slow answer (ms)"),
    ("codel_target_ms", "shared.codel_target_ms", "CoDel target wait (ms)"),
    ("codel_interval_ms", "shared.codel_interval_ms", "CoDel interval (ms)"),
    ("discipline", "shared.discipline", "Queue order"),
    ("lifo_after_ms", "shared.lifo_after_ms", "Adaptive LIFO: newest first past (ms)"),
)
#: A setting's help where its range alone would name code values.
HELP_WORDS = {
    "shared.concurrency": "fixed, or adaptive: starting at the concurrency limit, moved by "
    "every answer",
    "shared.discipline": "which waiting attempt a freed server takes; newest first works with "
    "the rate and queue limits, not with CoDel or a concurrency limit",
}
#: The settings drawn under "The server's defences" (a blank one is off).
DEFENCE_NAMES = frozenset(DEFENCES)

#: (field, LIMITS path, label) of a trigger.
TRIGGER_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("kind", "shared.trigger.kind", "Trigger"),
    ("duration_ms", "shared.trigger.duration_ms", "For (ms)"),
    ("factor", "shared.trigger.factor", "Slow: service time x"),
    ("servers", "shared.trigger.servers", "Capacity drop: servers left"),
)


def _values(post, params) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, path, _label in params:
        raw = post.get(name, "")
        if raw.strip() or (name in post and LIMITS[path].nullable):
            values[name] = coerce(raw, LIMITS[path])
    return values


def shared_values(post) -> dict[str, Any]:
    """The posted shared-dependency settings (blank fields left out)."""
    return _values(post, SHARED_PARAMS)


def trigger_values(post) -> dict[str, Any]:
    """The posted trigger (blank fields left out: the engine's defaults)."""
    return _values(post, TRIGGER_PARAMS)


def fields(params, current: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """What the template needs to draw each input: name, label, range, current value."""
    out = []
    for name, path, label in params:
        limit = LIMITS[path]
        out.append(
            {
                "name": name,
                "label": label,
                "help": HELP_WORDS.get(path)
                or limit.describe().replace("null (off)", "blank (off)"),
                "choices": limit.choices if limit.type == "choice" else None,
                "labelled_choices": [(c, CHOICE_WORDS.get(c, c)) for c in limit.choices],
                "min": limit.min,
                "max": limit.max,
                "step": "any" if limit.type == "number" else "1",
                "value": (current or {}).get(name, limit.default),
                "defence": name in DEFENCE_NAMES and path.startswith("shared."),
            }
        )
    return out


def problem_texts(problems, params) -> list[str]:
    """Each problem as people read it: the field's label, not its code name, and "blank"
    where the engine says "null" ("Queue limit (attempts waiting): must be blank (off) or
    between 1 and 100000 attempts (got 0)")."""
    labels = {name: label for name, _path, label in params}
    out = []
    for p in problems:
        name = p.field.rpartition(".")[2]
        text = p.message.replace("null (off)", "blank (off)")
        out.append(f"{labels[name]}: {text}" if name in labels else str(p))
    return out


def _label(name: str) -> str:
    """The model field's name in words, capitalised: "Service time (ms)"."""
    verbose = str(SharedDependencyConfig._meta.get_field(name).verbose_name)
    return verbose[:1].upper() + verbose[1:]


def _help(path: str) -> str:
    return f"Allowed: {LIMITS[path].describe().replace('null (off)', 'blank (off)')}."


#: What the admin adds to a setting's allowed range, in words.
ADMIN_NOTES = {
    "max_queue_ms": " A longer wait is shed at once.",
    "rate_per_s": " Faster is answered 429 with a Retry-After.",
    "queue_limit": " An attempt that would wait behind this many is shed.",
    "concurrency_limit": " Attempts waiting or being served.",
    "codel_target_ms": " Once every wait has been longer for an interval, a longer wait is shed.",
}
#: A setting whose admin help says what it does instead of listing code values.
ADMIN_HELP = {
    "discipline": "Which waiting attempt a freed server takes: the oldest, the newest, or the "
    "oldest until it has waited longer than the adaptive LIFO threshold. Newest first works "
    "with the rate limit and the queue limit, not with CoDel or a concurrency limit (they "
    "decide on the wait an attempt has at its arrival).",
    "concurrency": "Fixed, or adaptive from the concurrency limit: AIMD cuts it to 0.9x on an "
    "answer slower than the AIMD latency (or a failure) and adds 1 while half of it is in use; "
    "gradient moves it with the latency against the fastest seen.",
}
#: The defences that may be left blank in the admin and then take the engine's default.
BLANK_DEFAULT = tuple(name for name in DEFENCES if not LIMITS[f"shared.{name}"].nullable)


def _admin_field(name: str, path: str) -> forms.Field:
    """The admin's field for one setting, from its :data:`LIMITS` entry: the model field's
    label, its range in words, the engine's default; a defence may be left blank (off, or
    its default)."""
    limit = LIMITS[path]
    help_text = ADMIN_HELP.get(name) or _help(path) + ADMIN_NOTES.get(name, "")
    if name in BLANK_DEFAULT and limit.type != "choice":
        unit = " ms" if limit.unit == "ms" else ""
        help_text += f" Blank: {limit.default}{unit}."
    common = {
        "label": _label(name),
        "required": name not in DEFENCE_NAMES,
        "initial": limit.default,
        "help_text": help_text,
    }
    if limit.type == "choice":
        choices = SharedDependencyConfig._meta.get_field(name).choices
        return forms.ChoiceField(choices=choices, **common)
    if limit.type == "number":
        return forms.FloatField(**common)
    return forms.IntegerField(**common)


class SharedDependencyAdminForm(forms.ModelForm):
    """The admin's form for a class's shared dependency: each value is checked by the engine's
    validator and its problem shown beside the field in the field's words ("Must be between
    1 and 2000 ms (got 0)"), never under a code name such as ``service_ms``. Its fields come
    from :data:`SHARED_PARAMS` (:func:`_admin_field`)."""

    chain_tiers = forms.IntegerField(
        label="Tiers",
        required=False,
        help_text="The sessions on the shared dependency in this many tiers (2 to 6, no more "
        "than there are sessions): tier 1 runs the traffic, each tier calls the next through "
        "its own policy, the back tier calls the shared dependency. Blank: no chain. Changed "
        "only while no traffic runs.",
    )
    chain_order = forms.ChoiceField(
        label="Order",
        choices=[(name, words.capitalize()) for name, words in chain_services.ORDERS.items()],
        initial="even",
        required=False,
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, path, _label_text in SHARED_PARAMS:
            self.fields[name] = _admin_field(name, path)
        if self.instance.pk is not None:
            self.fields["chain_tiers"].initial = runtime.chain_depth(self.instance.classroom_id)
        self.chain_changed = False

    class Meta:
        model = SharedDependencyConfig
        fields = ["classroom", *(name for name, _path, _label in SHARED_PARAMS)]

    def clean(self):
        cleaned = super().clean()
        for name in BLANK_DEFAULT:  # blank: the engine's default
            if name in cleaned and cleaned[name] in (None, ""):
                cleaned[name] = LIMITS[f"shared.{name}"].default
        values = {name: cleaned[name] for name, _path, _label in SHARED_PARAMS if name in cleaned}
        for problem in shared_problems(values):
            if problem.field in self.fields:
                message = problem.message.replace("null (off)", "blank (off)")
                self.add_error(problem.field, message[:1].upper() + message[1:])
            else:
                self.add_error(None, str(problem))
        self._clean_chain(cleaned)
        return cleaned

    def _clean_chain(self, cleaned: dict[str, Any]) -> None:
        """The chain's tiers, checked as the dashboard's form is (range, sessions, no run
        going) when they changed; saved by the admin through the service."""
        self.chain_changed = bool({"chain_tiers", "chain_order"} & set(self.changed_data))
        classroom = cleaned.get("classroom") or getattr(self.instance, "classroom", None)
        if not self.chain_changed or classroom is None:
            return
        available = len(shared_sessions(classroom))
        for problem in chain_services.validate_chain_settings(
            cleaned.get("chain_tiers"), cleaned.get("chain_order") or "even", available
        ):
            name = "chain_tiers" if problem.field == "tiers" else "chain_order"
            self.add_error(name, problem.message[:1].upper() + problem.message[1:])
        busy = chain_services.busy_sessions(classroom)
        if busy:
            self.add_error("chain_tiers", chain_services.busy_message(busy))


def chain_values(post: Any) -> dict[str, Any]:
    """The chain form's values: ``tiers`` a whole number, None when blank (no chain), else
    the text as typed (the service names it in its refusal); ``order`` as chosen."""
    raw = str(post.get("tiers", "")).strip()
    tiers: Any = None if not raw else int(raw) if raw.isdigit() else raw
    return {"tiers": tiers, "order": post.get("order", "even")}
