/* The scenario checklist and lesson mode: ticks kept on the server (one POST per tick); the
 * current step is the first one not ticked, and the "This step" card shows its panel only; a
 * step's own settings form (or its "Do it" button) ticks the step when it is applied, a "Wait"
 * button when its time is up. */

export function startSteps(actionMessage) {
  const steps = document.getElementById("steps");
  if (!steps) return;
  const doneUrl = steps.dataset.doneUrl || "";
  function csrfToken() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
    } catch (err) { return ""; }
  }
  // Ticks are kept on the server (per attempt at the scenario), so they survive a reload,
  // another browser and a reset's fresh start; a watcher's page has no URL and sends none.
  function store(item) {
    if (!doneUrl) return;
    const done = item.querySelector(".step-check").checked;
    const url = doneUrl.replace("/steps/0/done/", "/steps/" + item.dataset.step + "/done/");
    window.fetch(url, {
      method: "POST",
      body: new URLSearchParams({ done: done ? "1" : "0" }),
      headers: { "X-CSRFToken": csrfToken() },
      credentials: "same-origin",
    }).then(function (response) {
      if (!response.ok) actionMessage("The step's tick was not saved (HTTP " + response.status + ").", true);
    }).catch(function () {
      actionMessage("Could not save the step's tick; check the connection and try again.", true);
    });
  }
  function highlight() {
    let found = false;
    let currentStep = "done";
    steps.querySelectorAll(".step").forEach(function (item) {
      const done = item.querySelector(".step-check").checked;
      item.classList.toggle("is-done", done);
      const current = !done && !found;
      if (current) {
        found = true;
        currentStep = item.dataset.step;
      }
      item.classList.toggle("is-current", current);
      if (current) item.setAttribute("aria-current", "step");
      else item.removeAttribute("aria-current");
    });
    // Lesson mode: the "This step" card shows the current step's panel only.
    document.querySelectorAll("[data-step-panel]").forEach(function (panel) {
      panel.hidden = panel.dataset.stepPanel !== currentStep;
    });
    return currentStep;
  }
  /* A page opened mid-lesson, where the steps sit in a column of their own that scrolls (a
     wide screen): the current step is brought to the top of that column. Not on a tick: the
     step just done is about to show its grade and explanation. A phone's page is not
     scrolled. */
  const aside = document.getElementById("lab-aside");
  function scrollStepIntoAside(index) {
    const item = stepItem(index);
    if (!item || !item.previousElementSibling || !aside || aside.scrollHeight <= aside.clientHeight + 1) return;
    if (window.getComputedStyle(aside).overflowY !== "auto") return;
    aside.scrollTop = Math.max(0, item.offsetTop - 8);
  }
  function stepItem(index) {
    return steps.querySelector('.step[data-step="' + index + '"]');
  }
  function tick(item) {
    const box = item.querySelector(".step-check");
    if (!box.checked) {
      box.checked = true;
      store(item);
    }
    highlight();
  }
  scrollStepIntoAside(highlight());
  steps.addEventListener("change", function (event) {
    if (!event.target.classList.contains("step-check")) return;
    store(event.target.closest(".step"));
    highlight();
  });
  document.body.addEventListener("htmx:afterRequest", function (event) {
    const source = event.detail.elt;
    if (!source || !source.hasAttribute || !event.detail.successful) return;
    if (source.hasAttribute("data-step-do")) tick(source.closest(".step"));
    const form = source.closest && source.closest("[data-step-form]");
    const item = form && stepItem(form.dataset.stepForm);
    if (item) tick(item);
  });
  steps.addEventListener("click", function (event) {
    const button = event.target.closest("[data-step-wait]");
    if (!button || button.disabled) return;
    const until = Date.now() + (parseFloat(button.dataset.stepWait) || 0);
    button.disabled = true;
    const timer = window.setInterval(function () {
      const left = until - Date.now();
      if (left > 0) {
        button.textContent = "Waiting " + (left / 1000).toFixed(1) + " s";
        return;
      }
      window.clearInterval(timer);
      button.textContent = "Waited";
      tick(button.closest(".step"));
    }, 100);
  });
}
