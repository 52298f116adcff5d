"""Forms of the live lab page: the dependency, the client policy and a burst.

The engine is the one validator (``labs.engine.LIMITS`` through the services): these forms only
turn posted strings into the JSON types the engine expects and map the engine's problems back
onto the fields they name. A value that does not even parse is handed to the engine as typed,
so a wrong number and a number out of range get the same kind of message, naming the field and
its allowed range (``must be an integer between 1 and 5 (got '2.5')``). Numbers are read as
typed in plain decimal notation only: ``1e1``, ``10.0`` or ``1_0`` is not taken for 10.

Every input is bounded (:mod:`labs.forms.bounded`): a value longer than its field allows is
refused by name before the engine sees it (``too_long``; the view answers with the form) and is
not echoed back.

Only fields present in the POST are changes: a scenario step's "Do it" button posts just
``mode=down``, the full form posts every field. A nullable field posted blank means "off".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.http import QueryDict

from labs.engine import LIMITS, Problem
from labs.engine.config import Limit
from labs.forms.bounded import BoundedInputsMixin
from labs.presenters.server import CHOICE_WORDS, SERVER_LABELS
from labs.presenters.text import MODE_LABELS

#: Characters a number field accepts: more than any value in range, typed any way.
NUMBER_MAX_LENGTH = 32
#: A comma-separated list of up to 100 outcomes.
LIST_MAX_LENGTH = 1500
_PLAIN_INTEGER = re.compile(r"[+-]?[0-9]+")
_PLAIN_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")

#: The settings of a student's own server with a queue (mode ``server``), as the lab page
#: offers them: the class model's (``shared.*`` ranges) that change what one caller meets; the
#: rest (the rate limit's burst, the adaptive limits, CoDel's interval) keep their defaults.
SERVER_KEYS = tuple(SERVER_LABELS)
SERVER_FIELDS: tuple[tuple[str, str, str], ...] = tuple(
    (f"server_{key}", f"dependency.server.{key}", label) for key, label in SERVER_LABELS.items()
)

# (form field name, path in LIMITS, label)
DEPENDENCY_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("latency_ms", "dependency.latency_ms", "Latency per attempt"),
    ("error", "dependency.error", "Failure kind"),
    ("fail_count", "dependency.fail_count", "Flaky: failing attempts"),
    ("rate", "dependency.rate", "Error rate: failure probability"),
    ("down_for_ms", "dependency.down_for_ms", "Outage: down for"),
    ("retry_after_ms", "dependency.retry_after_ms", "Rate limited: 429s for"),
    ("outcomes", "dependency.outcomes", "Script: outcomes in order"),
    # Beyond one dependency (docs/engine.md): hosts, side effects, fallbacks, dependency B.
    ("hosts", "dependency.hosts", "Hosts: each host's mode"),
    ("spread", "dependency.spread", "Hosts: spread"),
    ("side_effect", "dependency.side_effect", "Side effect per processed attempt"),
    ("honours_keys", "dependency.honours_keys", "Honours idempotency keys"),
    ("fallbacks", "dependency.fallbacks", "Fallbacks it offers"),
    ("b_mode", "dependency.b.mode", "Dependency B: mode"),
    ("b_latency_ms", "dependency.b.latency_ms", "Dependency B: latency per attempt"),
    ("b_every", "dependency.b_every", "Dependency B: takes every n-th call"),
    # A server with a queue (mode ``server``): the shared model's settings, the student's own.
    *SERVER_FIELDS,
)

#: Which parameters matter for each mode (the page highlights them; all are always sent).
MODE_PARAMS: dict[str, tuple[str, ...]] = {
    "healthy": ("latency_ms",),
    "flaky": ("latency_ms", "fail_count", "error"),
    "down": ("latency_ms", "error"),
    "slow": ("latency_ms",),
    "error_rate": ("latency_ms", "rate", "error"),
    "outage": ("latency_ms", "down_for_ms", "error"),
    "rate_limited": ("latency_ms", "retry_after_ms"),
    "script": ("latency_ms", "outcomes", "error"),
    "shared": (),
    "server": tuple(name for name, _, _ in SERVER_FIELDS),
}

POLICY_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("max_attempts", "policy.max_attempts", "Max attempts per call"),
    ("backoff_base_ms", "policy.backoff_base_ms", "Backoff base"),
    ("backoff_cap_ms", "policy.backoff_cap_ms", "Backoff cap"),
    ("jitter", "policy.jitter", "Jitter"),
    ("nesting", "policy.nesting", "Nesting"),
    ("deadline_ms", "policy.deadline_ms", "Per-call deadline"),
    ("attempt_timeout_ms", "policy.attempt_timeout_ms", "Attempt timeout"),
    ("breaker_kind", "policy.breaker.kind", "Breaker kind"),
    ("breaker_failure_threshold", "policy.breaker.failure_threshold", "Failure threshold K"),
    ("breaker_cooldown_ms", "policy.breaker.cooldown_ms", "Cooldown"),
    ("breaker_cooldown_jitter_pct", "policy.breaker.cooldown_jitter_pct", "Cooldown jitter"),
    ("breaker_half_open_max_probes", "policy.breaker.half_open_max_probes", "Half-open probes"),
    ("breaker_success_threshold", "policy.breaker.success_threshold", "Successes to close"),
    ("breaker_failure_ratio", "policy.breaker.failure_ratio", "Rolling: failure ratio"),
    ("breaker_min_calls", "policy.breaker.min_calls", "Rolling: minimum calls"),
    ("breaker_window_ms", "policy.breaker.window_ms", "Rolling: time window"),
    ("breaker_buckets", "policy.breaker.buckets", "Rolling: buckets"),
    ("breaker_window_calls", "policy.breaker.window_calls", "Rolling: count window"),
    ("budget_token_ratio", "policy.retry_budget.token_ratio", "Retry budget: token ratio"),
    ("budget_max_tokens", "policy.retry_budget.max_tokens", "Retry budget: ceiling"),
    # The peer libraries' settings (docs/engine.md), shown under "Advanced".
    ("breaker_cooldown_edge", "policy.breaker.cooldown_edge", "Cooldown edge"),
    ("breaker_cooldown_multiplier", "policy.breaker.cooldown_multiplier", "Cooldown multiplier"),
    ("breaker_cooldown_max_ms", "policy.breaker.cooldown_max_ms", "Cooldown ceiling"),
    ("breaker_ratio_checked_on", "policy.breaker.ratio_checked_on", "Rolling: ratio checked on"),
    ("breaker_half_open_calls", "policy.breaker.half_open_calls", "Half-open: probes per period"),
    ("breaker_half_open_decision", "policy.breaker.half_open_decision", "Half-open: decided by"),
    ("breaker_slow_call_ms", "policy.breaker.slow_call_ms", "Rolling: slow call above"),
    ("breaker_slow_call_ratio", "policy.breaker.slow_call_ratio", "Rolling: slow-call ratio"),
    ("breaker_admission", "policy.breaker.admission", "Admission"),
    ("breaker_counts", "policy.breaker.counts", "Counts kept"),
    ("breaker_count_interval_ms", "policy.breaker.count_interval_ms", "Counts clear every"),
    ("budget_kind", "policy.retry_budget.kind", "Retry budget: kind"),
    ("budget_ttl_ms", "policy.retry_budget.ttl_ms", "Finagle: deposit lifetime"),
    (
        "budget_min_retries_per_sec",
        "policy.retry_budget.min_retries_per_sec",
        "Finagle: minimum retries per second",
    ),
    (
        "budget_percent_can_retry",
        "policy.retry_budget.percent_can_retry",
        "Finagle: retries per request",
    ),
    ("retry_after", "policy.retry_after", "Retry-After handling"),
    # Beyond one dependency (docs/engine.md).
    ("breaker_scope", "policy.breaker_scope", "One breaker per"),
    ("bulkhead", "policy.bulkhead", "Bulkhead: calls in flight per dependency"),
    ("pool_wait_ms", "policy.pool_wait_ms", "Pool: longest wait for a slot"),
    ("fallback", "policy.fallback", "Fallback"),
    ("fallback_max_age_ms", "policy.fallback_max_age_ms", "Fallback: cached answer's max age"),
    ("idempotency_keys", "policy.idempotency_keys", "Idempotency key per call"),
)

#: Every setting's label on the page, by its path (a problem one form shows of the other's).
SETTING_LABELS: dict[str, str] = {
    path: label for _, path, label in DEPENDENCY_FIELDS + POLICY_FIELDS
}

#: Policy fields grouped for the page (legend, field names).
POLICY_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Retries",
        ("max_attempts", "backoff_base_ms", "backoff_cap_ms", "jitter", "nesting"),
    ),
    (
        "Circuit breaker",
        (
            "breaker_kind",
            "breaker_failure_threshold",
            "breaker_cooldown_ms",
            "breaker_cooldown_jitter_pct",
            "breaker_half_open_max_probes",
            "breaker_success_threshold",
            "breaker_failure_ratio",
            "breaker_min_calls",
            "breaker_window_ms",
            "breaker_buckets",
            "breaker_window_calls",
        ),
    ),
    ("Retry budget", ("budget", "budget_token_ratio", "budget_max_tokens")),
    ("Time limits", ("deadline_ms", "attempt_timeout_ms")),
    (
        "Hosts, bulkhead, fallback, keys",
        (
            "breaker_scope",
            "bulkhead",
            "pool_wait_ms",
            "fallback",
            "fallback_max_age_ms",
            "idempotency_keys",
        ),
    ),
)

#: The peer libraries' settings, grouped for the page's collapsed "Advanced" section.
POLICY_ADVANCED_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Breaker: cooldown",
        ("breaker_cooldown_edge", "breaker_cooldown_multiplier", "breaker_cooldown_max_ms"),
    ),
    (
        "Breaker: ratio and half-open",
        ("breaker_ratio_checked_on", "breaker_half_open_calls", "breaker_half_open_decision"),
    ),
    ("Breaker: slow calls", ("breaker_slow_call_ms", "breaker_slow_call_ratio")),
    ("Breaker: counting", ("breaker_counts", "breaker_count_interval_ms", "breaker_admission")),
    (
        "Retry budget: peer kinds",
        (
            "budget_kind",
            "budget_ttl_ms",
            "budget_min_retries_per_sec",
            "budget_percent_can_retry",
        ),
    ),
    ("Retry-After", ("retry_after",)),
)


@dataclass(frozen=True)
class FieldGroup:
    """One collapsible group of a settings form on the page (``templates/labs/_field_groups.html``).

    ``fields`` are shown first; each of ``parts`` is a (legend, field names) fieldset inside the
    group. ``open`` is how the group starts; a group holding a field with an error opens.
    """

    key: str
    legend: str
    fields: tuple[str, ...] = ()
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    open: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        return self.fields + tuple(name for _, names in self.parts for name in names)


#: The lab page's settings, grouped once for every page that shows them: the dependency form's
#: groups, then the policy form's (dependency, retries, breaker, budget and deadline, advanced).
DEPENDENCY_FIELD_GROUPS: tuple[FieldGroup, ...] = (
    FieldGroup(
        "dependency",
        "Its parameters",
        fields=(
            "latency_ms",
            "error",
            "fail_count",
            "rate",
            "down_for_ms",
            "retry_after_ms",
            "outcomes",
        ),
    ),
    FieldGroup(
        "dependency-advanced",
        "Advanced: hosts, side effects, fallbacks, dependency B",
        fields=(
            "hosts",
            "spread",
            "side_effect",
            "honours_keys",
            "fallbacks",
            "b_mode",
            "b_latency_ms",
            "b_every",
        ),
        open=False,
    ),
    FieldGroup(
        "server",
        "Server with a queue: its servers and defences",
        fields=tuple(name for name, _, _ in SERVER_FIELDS),
        open=False,
    ),
)
POLICY_FIELD_GROUPS: tuple[FieldGroup, ...] = (
    FieldGroup("retries", "Retries", fields=POLICY_GROUPS[0][1]),
    FieldGroup("breaker", "Circuit breaker", fields=POLICY_GROUPS[1][1]),
    FieldGroup(
        "budget", "Retry budget and deadline", fields=POLICY_GROUPS[2][1] + POLICY_GROUPS[3][1]
    ),
    FieldGroup(
        "advanced",
        "Advanced",
        parts=(POLICY_GROUPS[4], *POLICY_ADVANCED_GROUPS),
        open=False,
    ),
)


#: Form fields whose path is not a LIMITS entry of its own: dependency B's mode and latency.
FORM_LIMITS: dict[str, Limit] = {
    "dependency.b.mode": Limit(
        None,
        type="choice",
        choices=tuple(
            m for m in LIMITS["dependency.mode"].choices if m not in ("shared", "server")
        ),
        nullable=True,
    ),
    "dependency.b.latency_ms": LIMITS["dependency.latency_ms"],
    **{path: LIMITS[f"shared.{path.rsplit('.', 1)[1]}"] for _, path, _ in SERVER_FIELDS},
}
#: A setting's help where its range alone would name code values.
HELP_WORDS = {
    "dependency.server.discipline": "first come, first served, newest first, or adaptive "
    "LIFO; newest first works with the rate and queue limits, not with CoDel or a concurrency "
    "limit",
}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0", "")


def limit_of(path: str) -> Limit:
    """The Limit of a form field's path (LIMITS, or B's mode and latency)."""
    return FORM_LIMITS.get(path) or LIMITS[path]


def hosts_text(dependency: dict[str, Any]) -> str:
    """A dependency's hosts as the form shows them: ``same`` (the dependency's own mode),
    ``down`` or ``slow:300`` (a mode and a latency), comma-separated."""
    out = []
    for host in dependency.get("hosts") or []:
        mode = host.get("mode")
        token = mode or "same"
        if "latency_ms" in host:
            token = f"{mode or dependency.get('mode', 'healthy')}:{_num(host['latency_ms'])}"
        out.append(token)
    return ", ".join(out)


def hosts_from_text(tokens: list[str]) -> list[Any]:
    """The hosts of :func:`hosts_text`'s tokens (anything else is kept as typed for the
    engine to name)."""
    hosts: list[Any] = []
    for token in tokens:
        mode, _, latency = token.partition(":")
        host: dict[str, Any] = {} if mode == "same" else {"mode": mode}
        if latency:
            host["latency_ms"] = coerce(latency, LIMITS["dependency.latency_ms"])
        hosts.append(host)
    return hosts


BURST_SIZE = LIMITS["steps[].burst"]
BURST_CONCURRENCY = LIMITS["steps[].concurrency"]


def describe_limit(path: str) -> str:
    """The allowed values of one setting, for the page (``between 1 and 5``)."""
    limit = limit_of(path)
    if path == "policy.backoff_cap_ms":
        return f"between the backoff base and {int(limit.max or 0)} ms"
    if path == "dependency.outcomes":
        return f"1 to 100 of {', '.join(limit.choices)}, comma-separated"
    if path == "dependency.hosts":
        return "blank (one host) or 1 to 8 of: same, a mode, or mode:latency (slow:300)"
    if path == "dependency.fallbacks":
        return f"blank or {', '.join(limit.choices)}, comma-separated"
    text = limit.describe()
    if limit.nullable:
        text = text.replace("null (off)", "blank (off)")
    return text


def coerce(raw: str, limit: Limit) -> Any:
    """A posted string as the JSON value the engine validates; unparsable text is kept as a
    string so the engine's message shows it (``(got 'abc')``)."""
    text = raw.strip()
    if limit.type == "choice":
        return None if text in ("", "off") and limit.nullable else text
    if limit.type == "bool":
        low = text.lower()
        return True if low in _TRUE else False if low in _FALSE else text
    if limit.type == "list":
        return [token.strip() for token in text.replace(";", ",").split(",") if token.strip()]
    if text == "":
        return None if limit.nullable else text
    if _PLAIN_INTEGER.fullmatch(text):
        return int(text)
    if limit.type == "number" and _PLAIN_DECIMAL.fullmatch(text):
        return float(text)
    return text


def _field_for(name: str, path: str, label: str) -> forms.Field:
    limit = limit_of(path)
    help_text = describe_limit(path)  # the labels already say what each setting does
    if limit.type == "choice":
        off = [("", "off")] if limit.nullable else []
        return forms.ChoiceField(
            label=label,
            choices=off + [(c, CHOICE_WORDS.get(c, c.replace("_", " "))) for c in limit.choices],
            required=False,
            # the options' words (``rolling ratio``), as the select shows them
            help_text=HELP_WORDS.get(path)
            or help_text.replace("null (off)", "off").replace("_", " "),
        )
    if limit.type == "bool":
        return forms.ChoiceField(
            label=label,
            choices=[("false", "no"), ("true", "yes")],
            required=False,
            help_text="yes or no",
        )
    if limit.type == "list":
        placeholder = {"hosts": "same, down, same", "fallbacks": "cached"}.get(
            name, "fail, fail, ok"
        )
        return forms.CharField(
            label=label,
            required=False,
            max_length=LIST_MAX_LENGTH,
            help_text=help_text,
            widget=forms.TextInput(attrs={"placeholder": placeholder, "spellcheck": "false"}),
        )
    attrs: dict[str, Any] = {"min": _num(limit.min), "max": _num(limit.max), "inputmode": "decimal"}
    attrs["step"] = "any" if limit.type == "number" else "1"
    if limit.nullable:
        attrs["placeholder"] = "off"
    return forms.CharField(
        label=f"{label} ({limit.unit})" if limit.unit not in ("", "calls", "servers") else label,
        required=False,
        max_length=NUMBER_MAX_LENGTH,
        help_text=help_text,
        widget=forms.NumberInput(attrs=attrs),
    )


def _num(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else str(value)


def _describe_error(field: forms.Field, name: str, auto_id: str = "") -> None:
    """Point the input at its range and its error, so a screen reader reads both (``auto_id``:
    the input's id when the form has a prefix or ids of its own)."""
    auto_id = auto_id or f"id_{name}"
    field.widget.attrs["aria-describedby"] = f"{auto_id}_helptext {auto_id}_error"


class _LabInputsMixin(BoundedInputsMixin):
    """Bounded inputs whose length message reads like the engine's (``Label: ...``) and points
    the input at it."""

    def too_long_message(self, name: str, limit: int, length: int) -> str:
        _describe_error(self.fields[name], name, self[name].auto_id)
        label = self.fields[name].label or name.replace("_", " ").capitalize()
        return f"{label}: at most {limit} characters (got {length})"


class _EngineForm(_LabInputsMixin, forms.Form):
    """A form whose values are checked by the engine; ``changes()`` is what to send it."""

    #: (field name, LIMITS path, label)
    spec: tuple[tuple[str, str, str], ...] = ()
    #: the problem path prefix the engine uses for these fields ("dependency." / "policy.")
    prefix_path = ""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, path, label in self.spec:
            self.fields[name] = _field_for(name, path, label)
        self._paths = {path: name for name, path, _ in self.spec}
        self._posted: set[str] = set(self.data.keys()) if self.is_bound else set()

    @classmethod
    def initial_from(cls, settings: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_post(cls, post, current: dict[str, Any], prefix: str | None = None):
        """A bound form showing the posted values over the current settings (so a refused
        form re-renders whole), whose ``changes()`` are only what was posted (with
        ``prefix``, the posted names carry it: ``a-max_attempts``)."""
        data = QueryDict(mutable=True)
        for key, value in cls.initial_from(current).items():
            data[f"{prefix}-{key}" if prefix else key] = "" if value is None else str(value)
        for key in post:
            data.setlist(key, post.getlist(key))
        form = cls(data, prefix=prefix)
        form._posted = set(post.keys())
        return form

    def posted(self, name: str) -> bool:
        return self.add_prefix(name) in self._posted

    def raw(self, name: str) -> str:
        value = self.data.get(self.add_prefix(name), "")
        return value if isinstance(value, str) else str(value)

    def add_problems(self, problems: Iterable[Problem]) -> None:
        """Put each engine problem beside the field it names (or above the form)."""
        for problem in problems:
            name = self.field_for_path(problem.field)
            if name is None:
                # a setting of the other form (a policy that does not fit this dependency):
                # named by its label there, never by its path
                label = SETTING_LABELS.get(problem.field.split("[", 1)[0])
                self.add_error(None, f"{label}: {problem.message}" if label else str(problem))
            else:
                self.add_error(name, f"{self.fields[name].label}: {problem.message}")
                _describe_error(self.fields[name], name, self[name].auto_id)

    def field_for_path(self, path: str) -> str | None:
        bare = path.split("[", 1)[0]
        if not bare.startswith(self.prefix_path):
            return self._extra_path(bare)
        return self._paths.get(bare) or self._extra_path(bare)

    def _extra_path(self, path: str) -> str | None:
        return None

    #: The form's groups on the page (:class:`FieldGroup`).
    groups: tuple[FieldGroup, ...] = ()

    def field_groups(self) -> list[dict[str, Any]]:
        """The groups with their bound fields, for ``labs/_field_groups.html``: a group holding
        an error starts open, so the message is in sight."""
        bound = []
        for group in self.groups:
            errors = self.is_bound and any(self.errors.get(name) for name in group.names)
            bound.append(
                {
                    "key": group.key,
                    "legend": group.legend,
                    "open": group.open or bool(errors),
                    "fields": [self[name] for name in group.fields],
                    "parts": [(legend, [self[n] for n in names]) for legend, names in group.parts],
                }
            )
        return bound

    def problems_summary(self) -> list[str]:
        """Every error message of the form, for the page's error summary."""
        messages = [str(m) for m in self.non_field_errors()]
        for name in self.fields:
            messages += [str(m) for m in self.errors.get(name, [])]
        return messages


class DependencyForm(_EngineForm):
    """The fake dependency: a submit button per mode (``mode``) and its parameters."""

    spec = DEPENDENCY_FIELDS
    prefix_path = "dependency."
    groups = DEPENDENCY_FIELD_GROUPS

    mode = forms.ChoiceField(
        label="Dependency mode",
        choices=[(m, MODE_LABELS[m]) for m in LIMITS["dependency.mode"].choices],
        required=False,
        help_text="one of " + ", ".join(MODE_LABELS[m] for m in LIMITS["dependency.mode"].choices),
    )

    @classmethod
    def initial_from(cls, dependency: dict[str, Any]) -> dict[str, Any]:
        initial = {name: dependency.get(name) for name, _, _ in cls.spec}
        initial["mode"] = dependency.get("mode", "healthy")
        initial["outcomes"] = ", ".join(dependency.get("outcomes") or [])
        initial["hosts"] = hosts_text(dependency)
        initial["fallbacks"] = ", ".join(dependency.get("fallbacks") or [])
        initial["honours_keys"] = "true" if dependency.get("honours_keys") else "false"
        server = dependency.get("server") or {}
        for key in SERVER_KEYS:
            initial[f"server_{key}"] = server.get(key, LIMITS[f"shared.{key}"].default)
        b = dependency.get("b") or {}
        initial["b_mode"] = b.get("mode") or ""
        initial["b_latency_ms"] = b.get("latency_ms", LIMITS["dependency.latency_ms"].default)
        return initial

    def changes(self) -> dict[str, Any]:
        """The posted settings, coerced for the engine (only the posted keys)."""
        changes: dict[str, Any] = {}
        if self.posted("mode"):
            changes["mode"] = self.raw("mode").strip()
        server: dict[str, Any] = {}
        for name, path, _ in self.spec:
            if name in ("b_mode", "b_latency_ms") or not self.posted(name):
                continue
            value = coerce(self.raw(name), limit_of(path))
            if name.startswith("server_"):
                server[name.removeprefix("server_")] = value
            else:
                changes[name] = hosts_from_text(value) if name == "hosts" else value
        if server:
            changes["server"] = server
        if self.posted("b_mode"):
            mode = coerce(self.raw("b_mode"), limit_of("dependency.b.mode"))
            if mode is None:
                changes["b"] = None
            else:
                b = {"mode": mode}
                if self.posted("b_latency_ms"):
                    b["latency_ms"] = coerce(
                        self.raw("b_latency_ms"), limit_of("dependency.b.latency_ms")
                    )
                changes["b"] = b
        return changes

    def field_groups(self) -> list[dict[str, Any]]:
        """The groups; the server's starts open while the mode is (or is being set to) a
        server with a queue."""
        groups = super().field_groups()
        mode = self.raw("mode") if self.is_bound else self.initial.get("mode")
        for group in groups:
            group["open"] = group["open"] or (group["key"] == "server" and mode == "server")
        return groups

    def _extra_path(self, path: str) -> str | None:
        if path == "dependency.server":
            return "server_servers"
        if path == "dependency.b":
            return "b_mode"
        return "mode" if path == "dependency.mode" else None


class PolicyForm(_EngineForm):
    """Every client policy setting of the engine (docs/engine.md)."""

    spec = POLICY_FIELDS
    prefix_path = "policy."
    groups = POLICY_FIELD_GROUPS

    budget = forms.ChoiceField(
        label="Retry budget",
        choices=[("off", "off"), ("on", "on")],
        required=False,
        help_text="off, or on with the token ratio and ceiling below",
    )

    @classmethod
    def initial_from(cls, policy: dict[str, Any]) -> dict[str, Any]:
        breaker = policy.get("breaker") or {}
        budget = policy.get("retry_budget")
        initial: dict[str, Any] = {}
        for name, path, _ in cls.spec:
            parts = path.split(".")
            if parts[1] == "breaker":
                initial[name] = breaker.get(parts[2])
            elif parts[1] == "retry_budget":
                initial[name] = (budget or {}).get(parts[2], LIMITS[path].default)
            elif LIMITS[path].type == "bool":
                initial[name] = "true" if policy.get(parts[1]) else "false"
            else:
                initial[name] = policy.get(parts[1], LIMITS[path].default)
        initial["budget"] = "on" if budget else "off"
        return initial

    def changes(self) -> dict[str, Any]:
        """The posted policy as a nested change set for ``session_set_policy``."""
        changes: dict[str, Any] = {}
        breaker: dict[str, Any] = {}
        budget: dict[str, Any] = {}
        for name, path, _ in self.spec:
            if not self.posted(name):
                continue
            value = coerce(self.raw(name), LIMITS[path])
            parts = path.split(".")
            if parts[1] == "breaker":
                breaker[parts[2]] = value
            elif parts[1] == "retry_budget":
                budget[parts[2]] = value
            else:
                changes[parts[1]] = value
        if breaker:
            changes["breaker"] = breaker
        if self.posted("budget"):
            switch = self.raw("budget").strip()
            if switch == "off":
                changes["retry_budget"] = None
            elif switch == "on":
                changes["retry_budget"] = budget
            else:
                changes["retry_budget"] = switch  # the engine names it
        elif budget:
            changes["retry_budget"] = budget
        return changes

    def _extra_path(self, path: str) -> str | None:
        return "budget" if path == "policy.retry_budget" else None

    @property
    def advanced_groups(self) -> list[tuple[str, list[forms.BoundField]]]:
        """The "Advanced" section's groups as (legend, bound fields), for the template."""
        return [
            (legend, [self[name] for name in names]) for legend, names in POLICY_ADVANCED_GROUPS
        ]

    @property
    def advanced_has_errors(self) -> bool:
        """Whether a field of the "Advanced" section carries an error (the page opens it)."""
        if not self.is_bound:
            return False
        return any(self.errors.get(name) for _, names in POLICY_ADVANCED_GROUPS for name in names)


class BurstForm(_LabInputsMixin, forms.Form):
    """Run burst: how many calls, by how many concurrent callers."""

    size = forms.CharField(
        label="Calls in the burst",
        required=False,
        max_length=NUMBER_MAX_LENGTH,
        help_text=describe_limit("steps[].burst"),
        widget=forms.NumberInput(
            attrs={"min": _num(BURST_SIZE.min), "max": _num(BURST_SIZE.max), "step": "1"}
        ),
    )
    concurrency = forms.CharField(
        label="Concurrent callers",
        required=False,
        max_length=NUMBER_MAX_LENGTH,
        help_text=describe_limit("steps[].concurrency"),
        widget=forms.NumberInput(
            attrs={
                "min": _num(BURST_CONCURRENCY.min),
                "max": _num(BURST_CONCURRENCY.max),
                "step": "1",
            }
        ),
    )

    def values(self) -> tuple[Any, Any]:
        """(size, concurrency) as ints where they parse, else as typed (the service names
        the problem); a missing concurrency means one caller."""
        size = coerce(str(self.data.get("size", "")), BURST_SIZE)
        concurrency = (
            coerce(str(self.data.get("concurrency", "")), BURST_CONCURRENCY)
            if "concurrency" in self.data
            else 1
        )
        return size, concurrency

    def add_problems(self, problems: Iterable[Problem]) -> None:
        for problem in problems:
            if problem.field in self.fields:
                self.add_error(
                    problem.field, f"{self.fields[problem.field].label}: {problem.message}"
                )
                _describe_error(self.fields[problem.field], problem.field)
            else:
                self.add_error(None, str(problem))
