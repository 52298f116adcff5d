"""One registry of journal kinds (labs.journal.kinds): nothing writes a kind it does not know,
and every place that counts calls counts them the same way."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest
from django.db import transaction

from labs.journal import kinds, rows
from labs.journal import store as journal
from labs.models import JournalEvent, Traffic
from labs.selectors.dashboard import class_dashboard_rows
from labs.worker.traffic import _summary
from tests.conftest import make_classroom, make_scenario, make_session, make_student
from tests.engine.helpers import Rig

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.django_db


def test_append_entries_refuses_a_kind_it_does_not_know_and_writes_nothing():
    room = make_classroom()
    session = make_session(make_student("alice", room), room, make_scenario())
    good = journal.entry(session, "policy_set", "policy saved")
    bad = journal.entry(session, "made_up", "no such thing")
    with pytest.raises(kinds.UnknownKind, match="'made_up'"), transaction.atomic():
        journal.append_entries([good, bad])
    assert not JournalEvent.objects.filter(session=session).exists()


def _written_kinds(path: Path) -> list[tuple[int, str]]:
    """The kinds a module hands to ``entry(session, kind, ...)`` or ``kind=...`` of an ``Entry``,
    ``JournalEvent`` or ``entry`` call, as literals or module constants."""
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in {"entry", "Entry", "JournalEvent", "create"}:
            continue
        args = list(node.args[1:2]) if name == "entry" else []
        args += [k.value for k in node.keywords if k.arg == "kind"]
        for arg in args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((node.lineno, arg.value))
            elif isinstance(arg, ast.Name) and arg.id in constants:
                found.append((node.lineno, constants[arg.id]))
    return found


def test_every_kind_written_in_the_code_is_in_the_registry():
    written = {}
    for path in [*(ROOT / "labs").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        if "migrations" in path.parts or path.name == "test_journal_kinds.py":
            continue
        for line, kind in _written_kinds(path):
            written[f"{path.relative_to(ROOT)}:{line}"] = kind
    assert len(written) > 20, "the scan found the journal's writers"
    unknown = {where: kind for where, kind in written.items() if kind not in kinds.KINDS}
    assert unknown == {}


def test_the_model_field_takes_its_choices_from_the_registry():
    field = JournalEvent._meta.get_field("kind")
    assert [name for name, _ in field.choices] == list(kinds.KINDS)


OUTCOMES = ["success", "degraded", "rejected_open", "rejected_bulkhead", "timeout", "503"]

RIGS = [
    ({"mode": "down"}, {"breaker": {"failure_threshold": 2}}),  # failures, then fast-fails
    ({"mode": "down"}, {"fallback": "default"}),  # answered by the fallback: degraded
    ({"mode": "flaky", "fail_count": 2}, {}),  # retried into successes
]


@pytest.mark.parametrize(("dependency", "policy"), RIGS)
def test_the_counts_agree_across_the_burst_result_the_rows_and_the_class_summary(
    dependency, policy
):
    rig = Rig(dependency, policy)
    result = rig.burst(4)
    events = [e.to_dict() for e in rig.events]
    counted = kinds.count_calls(events)
    assert counted == {
        "calls": len(result.calls),
        "succeeded": result.succeeded,
        "degraded": result.degraded,
        "fast_failed": result.fast_failed,
        "failed": result.failed,
        "attempts_total": result.attempts_total,
    }
    assert counted["calls"] == 4 and max(counted[n] for n in kinds.CALL_COUNTS[1:5]) > 0
    from_rows = kinds.zero()
    for event in events:
        for name, n in rows.summary_delta(event).items():
            if name in from_rows:
                from_rows[name] += n
    assert from_rows == counted
    payloads = [{**e, "seq": i, "state_to": e.get("state_to") or ""} for i, e in enumerate(events)]
    summary = journal.class_summary(payloads)
    assert {name: summary[name] for name in kinds.CALL_COUNTS} == counted


def test_the_counts_agree_across_the_traffic_summary_and_the_dashboards_sql():
    room = make_classroom()
    session = make_session(make_student("alice", room), room, make_scenario())
    outcomes = Counter({o: i + 1 for i, o in enumerate(OUTCOMES)})
    entries = [
        journal.entry(session, "call_result", "a call", outcome=outcome)
        for outcome, n in outcomes.items()
        for _ in range(n)
    ]
    entries += [journal.entry(session, "attempt", "an attempt", outcome="ok") for _ in range(3)]
    journal.record(entries)
    expected = kinds.count_outcomes(outcomes, attempts=3)
    assert expected["degraded"] == 2 and expected["failed"] == 5 + 6

    traffic = Traffic(session=session, calls=sum(outcomes.values()))
    summary = _summary(traffic, sum(outcomes.values()), outcomes)
    assert {n: summary[n] for n in kinds.CALL_COUNTS if n != "attempts_total"} == {
        n: expected[n] for n in kinds.CALL_COUNTS if n != "attempts_total"
    }

    (row,) = [r for r in class_dashboard_rows(classroom_id=room.pk) if r.session_id == session.pk]
    assert (row.calls, row.attempts_total, row.fast_failed, row.succeeded) == (
        expected["calls"],
        expected["attempts_total"],
        expected["fast_failed"],
        expected["succeeded"],
    )


def test_every_kind_has_a_tone_and_a_rows_tone_comes_from_the_registry():
    assert {k.tone for k in kinds.KINDS.values()} <= set(kinds.TONES)
    cases = {
        ("attempt", "ok"): "ok", ("attempt", "error"): "bad",
        ("call_result", "success"): "ok", ("call_result", "degraded"): "degraded",
        ("call_result", "rejected_open"): "fast", ("call_result", "failure"): "bad",
        ("rejected", ""): "fast", ("sleep", ""): "wait", ("transition", ""): "state",
        ("burst_failed", ""): "bad", ("policy_set", ""): "note", ("made_up", ""): "note",
    }  # fmt: skip
    assert {case: rows.row_tone({"kind": case[0], "outcome": case[1]}) for case in cases} == cases


# --- kinds compared, not only written -------------------------------------------------------

#: Words compared with something called ``kind`` in labs/ that are not journal kinds: a socket
#: message's type, a policy token's prefix, a change's target, a form field's number type, a
#: breaker's kind.
OTHER_KINDS = {"ping", "resync", "run_burst", "mine", "burst", "step", "dependency", "int",
               "rolling_ratio", "consecutive"}  # fmt: skip

JS_KIND = re.compile(r"\.kind\s*[!=]==?\s*\"([^\"]+)\"")


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for item in node.elts for s in _strings(item)]
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("frozenset", "set", "tuple"):
        return [s for arg in node.args for s in _strings(arg)]
    return []


def _is_kind(node: ast.AST) -> bool:
    """``kind``, ``x.kind``, ``x["kind"]`` or ``x.get("kind")``."""
    if isinstance(node, ast.Name):
        return node.id == "kind"
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Subscript):
        return _strings(node.slice) == ["kind"]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "get" and bool(node.args) and _strings(node.args[0]) == ["kind"]
    return False


def _compared_kinds(tree: ast.AST) -> list[tuple[int, str]]:
    """Kind strings compared with a kind (``kind == "x"``, ``row["kind"] in (...)``) or held in
    a ``*_KIND`` / ``*_KINDS`` constant, by line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(
                isinstance(t, ast.Name) and t.id.endswith(("KIND", "KINDS")) for t in targets
            ):
                found += [(node.lineno, s) for s in _strings(node.value)]
        elif isinstance(node, ast.Compare) and _is_kind(node.left):
            for op, right in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn):
                    found += [(node.lineno, s) for s in _strings(right)]
    return found


def test_the_comparison_scan_sees_a_kind_compared_and_a_kind_constant():
    tree = ast.parse(
        "if row['kind'] in ('burst_end', 'made_up'):\n    pass\n"
        "if e.get('kind') == 'also_made_up':\n    pass\n"
        "LOST_KIND = 'third_made_up'\n"
    )
    assert sorted(k for _, k in _compared_kinds(tree)) == [
        "also_made_up", "burst_end", "made_up", "third_made_up"
    ]
    assert JS_KIND.findall('if (e.kind === "made_up" || event.kind !== "x") {') == ["made_up", "x"]


def test_every_kind_compared_in_the_code_and_the_scripts_is_in_the_registry():
    """A kind the code waits for but nothing writes (a typo, a kind renamed on one side) is as
    wrong as one written that the registry lacks. The engine is left out: its settings, retry
    budgets and servers have kinds of their own, and its events are checked by the registry."""
    found = []
    for path in sorted((ROOT / "labs").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[1] in ("migrations", "experiments", "engine"):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [(f"{relative}:{line}", kind) for line, kind in _compared_kinds(tree)]
    for path in sorted((ROOT / "static" / "js").rglob("*.js")):
        for number, text in enumerate(path.read_text().splitlines(), 1):
            found += [(f"{path.relative_to(ROOT)}:{number}", k) for k in JS_KIND.findall(text)]
    assert len({kind for _, kind in found}) >= 15, "the scan finds the kinds the code compares"
    unknown = {where: kind for where, kind in found
               if kind not in kinds.KINDS and kind not in OTHER_KINDS}  # fmt: skip
    assert unknown == {}
