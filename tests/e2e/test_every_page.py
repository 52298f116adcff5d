"""Every page a student, an instructor and an admin see, in headless Chromium against daphne, a
real worker and Redis: no console error, no page error, no Content-Security-Policy violation,
at 1920x1080; and at 390x844 none of them scrolls sideways
(``document.documentElement.scrollWidth <= innerWidth``).

The student's pages: home, the lab page mid-burst, the tour with a graded prediction, a
burst's replay (what if), compare, the experiments. The instructor's: the class dashboard,
the storm panel, the predictions, a student's session watched. The admin's: the index, a
class's change form and a shared dependency's form (its settings and the server's defences). A screenshot of each at 390 px: artifacts/e2e/page-<name>-phone.png.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from labs.services import lab
from tests.conftest import (
    DEFAULT_PASSWORD,
    make_classroom,
    make_instructor,
    make_scenario,
    make_student,
    make_user,
)
from tests.e2e.conftest import ARTIFACTS, ROOT, login
from tests.e2e.test_csp import REPORT_VIOLATIONS

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BURST_TIMEOUT_MS = 45_000
DESKTOP = {"width": 1920, "height": 1080}
PHONE = {"width": 390, "height": 844}
SIDEWAYS = "() => document.documentElement.scrollWidth - window.innerWidth"
AXE_VARIABLE = "LAB_AXE_CORE"
#: axe-core run on the page for WCAG 2 A and AA: each violation's rule and its first targets.
AXE_RUN = """async () => {
  const result = await axe.run(document, {runOnly: {type: "tag", values: ["wcag2a", "wcag2aa"]}});
  return result.violations.map(v => v.id + ": " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(", "));
}"""


#: axe-core as shipped on the npm registry, vendored beside the tests (its LICENSE beside it).
AXE_VENDORED = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"


def axe_source() -> str:
    """axe-core's script: ``LAB_AXE_CORE`` when it names another copy, else the vendored one
    (evaluated through the DevTools protocol, which the page's CSP does not govern)."""
    path = os.environ.get(AXE_VARIABLE, "").strip() or str(AXE_VENDORED)
    if not Path(path).is_file():
        pytest.fail(f"axe-core's script {path} does not exist", pytrace=False)
    return Path(path).read_text(encoding="utf-8")


#: The first elements reaching past the right edge, to name in a failure.
OFFENDERS = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > innerWidth + 1).slice(0, 6)
  .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + '.' + e.className)"""


@pytest.fixture
def room(db):
    script = json.loads((ROOT / "scenarios" / "tour.json").read_text())
    tour = make_scenario("tour", title="The tour", script=script)
    storm_script = json.loads((ROOT / "scenarios" / "storm_lesson.json").read_text())
    storm = make_scenario("storm_lesson", title=storm_script["title"], script=storm_script)
    classroom = make_classroom("Resilience A", join_code="CLASSA01")
    classroom.scenarios.add(tour, storm)
    make_instructor("teacher", classroom)
    make_user("root", is_staff=True, is_superuser=True)
    alice = make_student("alice", classroom)
    return classroom, lab.session_open(user=alice, classroom=classroom, scenario=tour)


class Watcher:
    """One browser context whose pages report console errors, page errors and CSP
    violations (through an exposed function, so none is lost to a navigation)."""

    def __init__(self, browser, viewport):
        self.problems: list[str] = []
        self.context = browser.new_context(viewport=viewport)
        self.context.set_default_timeout(BURST_TIMEOUT_MS)
        self.context.expose_function(
            "__reportCspViolation", lambda text: self.problems.append(f"CSP: {text}")
        )
        self.context.add_init_script(REPORT_VIOLATIONS)
        self.page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))

    def _console(self, msg) -> None:
        if msg.type == "error":
            self.problems.append(f"console: {msg.text} ({self.page.url})")

    def visit(self, url: str, ready: str = "main") -> None:
        self.page.goto(url)
        self.page.wait_for_selector(ready)
        self.page.wait_for_load_state("networkidle")
        self.page.wait_for_timeout(300)  # late violations (a deferred script, a swap)

    def audit(self, axe: str) -> None:
        """axe-core's WCAG 2 A/AA violations of the page."""
        before = len(self.problems)
        self.page.evaluate(axe)
        violations = self.page.evaluate(AXE_RUN)
        # axe measures with a style element of its own, which the page's CSP refuses: those
        # reports are the test tool's, not the page's.
        del self.problems[before:]
        self.problems += [f"axe: {violation} ({self.page.url})" for violation in violations]


def answer(page, step: int, value: str) -> None:
    """Answer a step's question (typed, or chosen from its list) and press its Do it."""
    field = f"#answer-{step}"
    if page.eval_on_selector(field, "e => e.tagName") == "SELECT":
        page.select_option(field, value)
    else:
        page.fill(field, value)
    page.locator(f"#step-prediction-{step} [data-step-predict]").click()
    expect(page.locator(f"#step-do-{step}")).to_be_enabled()
    page.click(f"#step-do-{step}")


def student_pages(base: str, classroom, session) -> dict[str, tuple[str, str]]:
    return {
        "home": (f"{base}/", "main h1"),
        "lab": (f"{base}/sessions/{session.pk}/", '#live-status[data-state="live"]'),
        "replay": (f"{base}/sessions/{session.pk}/bursts/1/replay/", "#replay-form"),
        "compare": (f"{base}/compare/", "main h1"),
        "experiments": (f"{base}/experiments/", "main h1"),
        "experiment-storm": (f"{base}/experiments/storm/", "#results"),
    }


def staff_pages(base: str, classroom, session) -> dict[str, tuple[str, str]]:
    return {
        "dashboard": (f"{base}/classes/{classroom.pk}/dashboard/", '#live-status[data-state="live"]'),
        "storm-panel": (f"{base}/classes/{classroom.pk}/storm/", "main h1"),
        "predictions": (f"{base}/classes/{classroom.pk}/predictions/", "main h1"),
        "watched-session": (f"{base}/sessions/{session.pk}/", '#live-status[data-state="live"]'),
    }  # fmt: skip


def admin_pages(base: str, classroom) -> dict[str, tuple[str, str]]:
    return {
        "admin": (f"{base}/admin/", "#content"),
        "admin-class": (f"{base}/admin/labs/classroom/{classroom.pk}/change/", "#classroom_form"),
        "admin-shared": (
            f"{base}/admin/labs/shareddependencyconfig/add/", "#shareddependencyconfig_form"
        ),
    }


def test_every_page_is_clean_and_fits_a_phone(browser, daphne_server, e2e_worker, room):
    classroom, session = room
    axe = axe_source()
    desk = Watcher(browser, DESKTOP)
    page = desk.page
    try:
        # The student: a graded prediction (the tour's step 1), then the lab page mid-burst.
        login(page, daphne_server, "alice", DEFAULT_PASSWORD)
        desk.visit(f"{daphne_server}/sessions/{session.pk}/", '#live-status[data-state="live"]')
        answer(page, 1, "9")
        expect(page.locator("#step-prediction-1 .step-grade")).to_contain_text("right")
        page.click('.step[data-step="2"] [data-step-do]')
        expect(page.locator("#dependency-form [data-role=mode]")).to_have_text("Down")
        answer(page, 3, "12")
        expect(page.locator("#step-prediction-3 .step-grade")).to_contain_text("right")
        page.click('.step[data-step="4"] [data-step-do]')
        expect(page.locator("#dependency-form [data-role=mode]")).to_have_text("Healthy")
        page.click('.step[data-step="5"] [data-step-wait]')
        expect(page.locator('.step[data-step="5"] [data-step-wait]')).to_have_text("Waited")
        answer(page, 6, "closed")
        expect(page.locator("#step-prediction-6 .step-grade")).to_contain_text("right")
        expect(page.locator('[data-step-panel="done"]')).to_be_visible()
        desk.audit(axe)  # a lesson with every question graded
        lab.session_set_dependency(
            session=session, user=session.owner, changes={"mode": "slow", "latency_ms": 300}
        )
        page.fill("#id_size", "10")
        page.click("#run-burst")
        expect(page.locator("#burst-summary")).to_have_attribute("data-status", "running")
        page.wait_for_timeout(1000)  # pushes arriving, the timeline growing
        desk.audit(axe)  # mid-burst
        expect(page.locator("#burst-summary")).to_have_attribute(
            "data-status", "done", timeout=BURST_TIMEOUT_MS
        )
        for url, ready in student_pages(daphne_server, classroom, session).values():
            desk.visit(url, ready)
            desk.audit(axe)
        # The instructor, then the admin.
        desk.context.clear_cookies()
        login(page, daphne_server, "teacher", DEFAULT_PASSWORD)
        for url, ready in staff_pages(daphne_server, classroom, session).values():
            desk.visit(url, ready)
            desk.audit(axe)
        desk.context.clear_cookies()
        login(page, daphne_server, "root", DEFAULT_PASSWORD)
        for name, (url, ready) in admin_pages(daphne_server, classroom).items():
            desk.visit(url, ready)
            # The class's change form is Django's own widgets (a split date and time without
            # labels, the inline's role selects, filter_horizontal's icon): not audited here.
            if name != "admin-class":
                desk.audit(axe)
        assert desk.problems == []
    finally:
        desk.context.close()

    phone = Watcher(browser, PHONE)
    wide: dict[str, int] = {}
    try:
        for user, pages in (
            ("alice", student_pages(daphne_server, classroom, session)),
            ("teacher", staff_pages(daphne_server, classroom, session)),
            ("root", admin_pages(daphne_server, classroom)),
        ):
            phone.context.clear_cookies()
            login(phone.page, daphne_server, user, DEFAULT_PASSWORD)
            for name, (url, ready) in pages.items():
                phone.visit(url, ready)
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                phone.page.screenshot(path=str(ARTIFACTS / f"page-{name}-phone.png"))
                over = phone.page.evaluate(SIDEWAYS)
                if over > 0:
                    wide[name] = (over, phone.page.evaluate(OFFENDERS))
                if name == "home":  # a lesson's words take the width, its button under them
                    assert phone.page.eval_on_selector_all(
                        ".scenario-item",
                        """items => items.length > 0 && items.every(i => {
                             const words = i.firstElementChild.getBoundingClientRect();
                             const button = i.lastElementChild.getBoundingClientRect();
                             return button.top >= words.bottom; })""",
                    )
        assert wide == {}, f"pages wider than 390 px, by how many px: {wide}"
        assert phone.problems == []
    finally:
        phone.context.close()


def test_axe_core_finds_a_violation_it_should(page):
    """The audit can fail: on a page with an image without alternative text and an unlabelled
    field, the vendored axe-core reports both rules."""
    page.set_content('<html lang="en"><title>t</title><main><img src="x.png">'
                     '<input type="text"></main></html>')
    page.evaluate(axe_source())
    rules = {line.split(":")[0] for line in page.evaluate(AXE_RUN)}
    assert {"image-alt", "label"} <= rules, rules
