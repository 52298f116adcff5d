/* Small helpers every part of the lab page uses: HTML elements, the time of a journal
 * event, a redraw at most once a frame, and the page's screen-reader announcements. */

/** The first element of an HTML string (a pushed fragment or journal row). */
export function parseHTML(html) {
  const tpl = document.createElement("template");
  tpl.innerHTML = (html || "").trim();
  return tpl.content.firstElementChild;
}

/** A journal event's time in ms since the epoch: the server's t_ms, else its ISO time. */
export function eventTime(event) {
  if (event.t_ms && event.t_ms > 1e11) return event.t_ms;
  const parsed = Date.parse(event.at);
  return isNaN(parsed) ? 0 : parsed;
}

/** ``draw`` at the next animation frame, however many times this is called before it. */
export function onNextFrame(draw) {
  let pending = false;
  return function () {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () {
      pending = false;
      draw();
    });
  };
}

/** Say ``text`` to screen readers (the page's polite live region). */
export function announce(text) {
  const announcer = document.getElementById("breaker-announce");
  if (announcer) announcer.textContent = text;
}

/** The engine's state labels (labs.engine.STATE_LABELS), rendered into the page. */
export function stateLabels() {
  const data = document.getElementById("state-labels");
  try {
    return data ? JSON.parse(data.textContent) : {};
  } catch (err) {
    return {};
  }
}
