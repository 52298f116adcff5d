/* The call counts as the server counts them (labs.journal.kinds): the rules come from the
 * page's "count-rules" JSON, so the page, the burst result, the traffic summary and the
 * dashboard never disagree on what a kind of row adds. */

let rules = null;

function load() {
  if (rules) return rules;
  const node = document.getElementById("count-rules");
  rules = node ? JSON.parse(node.textContent) : { calls: [], attempts_total: [], fast_fail_outcomes: [] };
  return rules;
}

/** Which of succeeded, degraded, fast_failed or failed a call's outcome counts as. */
export function callCount(outcome) {
  if (outcome === "success") return "succeeded";
  if (outcome === "degraded") return "degraded";
  return load().fast_fail_outcomes.indexOf(outcome) >= 0 ? "fast_failed" : "failed";
}

/** What one journal row adds to the call counts ({} for nothing). */
export function countDelta(kind, outcome) {
  const r = load();
  if (r.calls.indexOf(kind) >= 0) {
    const delta = { calls: 1 };
    delta[callCount(outcome)] = 1;
    return delta;
  }
  if (r.attempts_total.indexOf(kind) >= 0) return { attempts_total: 1 };
  return {};
}

/** Whether a row is counted by the second (steady traffic's engine events, no burst), not
 * shown on its own: labs.journal.kinds.per_second. */
export function perSecond(kind, burst) {
  return !burst && (load().per_second_kinds || []).indexOf(kind) >= 0;
}
