/* The burst summary's live counts between the server's fragments: what each event adds comes
 * from the server (labs.presenters.summary_delta, the event's ``summary_delta``). */

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
