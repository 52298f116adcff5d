/* The burst summary panel, live. A push at a burst's queue, start and end carries the panel's
 * data (labs.presenters.lab_page.summary_update), filled into a copy of the page's prototype
 * panel (the same template partial with every part present); between them each event adds
 * what it counts (the event's ``summary_delta``). */

function setText(box, selector, text) {
  const el = box.querySelector(selector);
  if (el) el.textContent = String(text);
}

function whole(value) {
  return String(Math.round(Number(value) || 0));
}

/** The panel for ``panel`` (the server's data), from the page's prototype; null without one. */
function filled(panel) {
  const prototype = document.getElementById("burst-summary-prototype");
  const box = prototype && prototype.content.firstElementChild.cloneNode(true);
  if (!box) return null;
  const extra = panel.extra || {};
  box.dataset.burstId = panel.id == null ? "" : String(panel.id);
  box.dataset.status = panel.status;
  setText(box, '[data-role="number"]', panel.number);
  const status = box.querySelector('[data-role="status"]');
  status.className = "summary-status status-" + panel.status;
  status.textContent = panel.status_label;
  ["succeeded", "failed", "fast_failed", "attempts_total", "calls"].forEach(function (name) {
    setText(box, '[data-stat="' + name + '"]', panel[name]);
  });
  setText(box, '[data-stat="waiting_ms_total"]', whole(panel.waiting_ms_total));
  setText(box, '[data-role="size"]', panel.size);
  setText(box, '[data-stat="degraded"]', extra.degraded);
  setText(box, '[data-stat="wait_ms_total"]', whole(extra.wait_ms_total));
  setText(box, '[data-stat="backoff_ms_total"]', whole(panel.backoff_ms_total));
  setText(box, '[data-stat="rejected_bulkhead"]', extra.rejected_bulkhead);
  setText(box, '[data-stat="pool_timeout"]', extra.pool_timeout);
  if (extra.effects) {
    setText(box, '[data-role="effects-applied"]', extra.effects.applied);
    setText(box, '[data-role="effects-calls"]', extra.effects.calls);
  }
  // The parts this burst has no figure for go, as the template leaves them out.
  box.querySelectorAll("[data-extra]").forEach(function (part) {
    const name = part.dataset.extra;
    if (name === "effects" ? !extra.effects : !(name in extra)) part.remove();
  });
  if (!Object.keys(extra).length) box.querySelector('[data-role="summary-extra"]').remove();
  fillDependencies(box, extra.by_dependency);
  setText(box, '[data-role="wall"]', panel.wall_text);
  if (!panel.wall_text) box.querySelector('[data-role="wall"]').remove();
  setText(box, '[data-role="error"]', panel.error || "");
  if (!panel.error) box.querySelector('[data-role="error"]').remove();
  return box;
}

/** The table of each dependency's counts: one row per dependency, or no table. */
function fillDependencies(box, byDependency) {
  const table = box.querySelector('[data-role="by-dependency"]');
  const names = Object.keys(byDependency || {});
  if (!names.length) {
    table.remove();
    return;
  }
  const body = table.tBodies[0];
  const row = body.rows[0];
  body.replaceChildren();
  names.forEach(function (name) {
    const counts = byDependency[name];
    const copy = row.cloneNode(true);
    copy.dataset.dependency = name;
    copy.cells[0].textContent = name.toUpperCase();
    const values = [counts.calls, counts.succeeded, counts.failed, counts.fast_failed, counts.degraded, whole(counts.waited_ms)];
    values.forEach(function (value, i) { copy.cells[i + 1].textContent = String(value); });
    body.appendChild(copy);
  });
}

/** Show the panel a push carries (the burst's queue, start or end). */
export function showSummary(panel) {
  const current = document.getElementById("burst-summary");
  const box = current && filled(panel);
  if (box) current.replaceWith(box);
}

function bump(box, stat, by) {
  const cell = box.querySelector('[data-stat="' + stat + '"]');
  if (!cell) return;
  let value = parseFloat(cell.dataset.raw || cell.textContent) || 0;
  value += by;
  cell.dataset.raw = String(value);
  cell.textContent = String(Math.round(value));
}

/** Count ``event`` into the summary panel, if it is the running burst's. */
export function updateSummary(event) {
  if (event.summary) showSummary(event.summary);
  const box = document.getElementById("burst-summary");
  if (!box || !event.burst || String(event.burst) !== box.dataset.burstId) return;
  if (box.dataset.status === "done") return;
  const delta = event.summary_delta || {};
  Object.keys(delta).forEach(function (stat) { bump(box, stat, delta[stat]); });
  if (event.kind === "burst_interrupted" || event.kind === "burst_failed") {
    box.dataset.status = event.kind === "burst_interrupted" ? "interrupted" : "failed";
    const label = box.querySelector('[data-role="status"]');
    if (label) label.textContent = box.dataset.status;
  }
}
