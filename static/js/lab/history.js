/* The burst history (#burst-history) and its "what if" panel: the history asks the server
 * again (hx-trigger "labBursts from:body") when the websocket brings a burst's queueing or its
 * end, so a new burst's row appears without a reload; the what-if panel a row opens is
 * scrolled into view. */

const ENDS = ["burst_end", "burst_interrupted", "burst_failed"];
let historyTimer = null;

/* The rows of a catch-up after a reconnect ask once, not once per row. */
function burstsChanged() {
  if (historyTimer) return;
  historyTimer = window.setTimeout(function () {
    historyTimer = null;
    if (window.htmx) window.htmx.trigger(document.body, "labBursts");
  }, 150);
}

/** What a journal event changes here: the history on a burst's queueing or end, and the burst
 * form's message line at an end (a click refused because this burst was running, another
 * tab's say, learns that it ended; any other message of the form is cleared). */
export function burstEvent(event) {
  if (event.kind === "burst_queued") burstsChanged();
  if (ENDS.indexOf(event.kind) < 0) return;
  burstsChanged();
  const message = document.getElementById("burst-message");
  if (message) {
    message.textContent = message.dataset.refusal === "running"
      ? "The burst that was running has ended: press Run burst again to run yours." : "";
    message.classList.remove("is-error");
    delete message.dataset.refusal;
  }
}

export function startHistory() {
  const whatifPanel = document.getElementById("whatif");
  document.body.addEventListener("htmx:afterSwap", function (event) {
    if (whatifPanel && event.detail.target === whatifPanel && whatifPanel.firstElementChild) {
      whatifPanel.scrollIntoView({ block: "start" });
    }
  });
}
