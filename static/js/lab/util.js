/* Small helpers every part of the lab page uses: HTML and SVG elements, the time of a journal
 * event, a redraw at most once a frame, and the page's screen-reader announcements. */

const SVG_NS = "http://www.w3.org/2000/svg";

/** The first element of an HTML string (a pushed fragment or journal row). */
export function parseHTML(html) {
  const tpl = document.createElement("template");
  tpl.innerHTML = (html || "").trim();
  return tpl.content.firstElementChild;
}

/** An SVG element with its attributes and, optionally, its text. */
export function svgEl(name, attrs, text) {
  const node = document.createElementNS(SVG_NS, name);
  for (const key in attrs) node.setAttribute(key, attrs[key]);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Empty an SVG, keeping its <desc>. */
export function clearSvg(svg) {
  while (svg.lastChild && svg.lastChild.nodeName !== "desc") svg.removeChild(svg.lastChild);
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
