/* The shared dependency's card, shown while the session calls the class's shared dependency.
 * Each "shared" message carries the dependency's state, the class's per-second totals and, as
 * "mine", this session's own counters per second and its figures over the last complete
 * seconds (retry ratio, share, attempts), computed by the server from the counters the storm
 * panel's table reads (naming nobody else). The per-second figures go to the traffic strip. */

const WINDOW_S = 5; // labs.presenters.SESSION_WINDOW_S: the complete seconds "mine" covers

function percent(x) { return x === null || x === undefined ? "–" : Math.round(x * 100) + " %"; }

/** The card in #shared-status, feeding ``strip`` the per-second figures. */
export function createSharedCard(strip) {
  const card = document.getElementById("shared-status");
  let last = null;

  function text(name, value) {
    const node = card.querySelector('[data-role="' + name + '"]');
    if (node && node.textContent !== value) node.textContent = value;
  }

  function apply(message) {
    if (!card) return;
    if (!message.active) {
      card.hidden = true;
      last = null;
      return;
    }
    (message.seconds || []).forEach(function (s) { strip.setOffered(s.second, s.offered); });
    const mine = message.mine || { seconds: [], window: {} };
    mine.seconds.forEach(function (s) { strip.setOwn(s.second, s.offered, s.retries); });
    const w = mine.window || {};
    last = {
      now: message.now,
      state: message.state,
      share: w.share === undefined ? null : w.share,
      retry_ratio: w.retry_ratio === undefined ? null : w.retry_ratio,
      attempts: w.attempts || 0,
      retries: w.retries || 0,
      offered: w.class_offered || 0,
    };
    card.hidden = false;
    card.dataset.state = message.state;
    text("shared-state", message.state);
    text("shared-reason", message.reason || "");
    text("shared-share", percent(last.share));
    text("shared-retry", percent(last.retry_ratio));
    text("shared-load", Math.round(last.offered / WINDOW_S) + " of " +
      Math.round(message.capacity_per_s) + " attempts/s");
  }

  return { apply: apply, last: function () { return last; } };
}
