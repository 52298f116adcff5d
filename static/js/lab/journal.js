/* The journal on the lab page: rows inserted by seq (newest first), anything at or below the
 * last seq seen dropped as a duplicate, and fragments ({id, html}) replacing the element with
 * the same id (badge, burst summary). Steady traffic comes as seconds (labs.journal.seconds):
 * one line a second with its counts, replaced when the same second comes again counting more
 * rows; a student who opens a second gets its rows from the server then. */

import { parseHTML } from "./util.js";

/**
 * The journal list and what it has seen. ``options``: lastSeq (the page's, from the
 * server), send(message) (asks the socket to resync after a gap), onEvent(event) (each new
 * event, after its row and fragments), onFragment(id, element) (each swapped fragment).
 */
export function createJournal(options) {
  const list = document.getElementById("journal-rows");
  let lastSeq = options.lastSeq;

  // A second opened: its rows, fetched (again when the line has counted more rows since).
  function loadSecond(details) {
    const line = details.parentElement;
    const box = details.querySelector(".second-rows");
    if (!box || !line || box.dataset.loadedN === line.dataset.n) return;
    box.dataset.loadedN = line.dataset.n;
    if (window.htmx) {
      window.htmx.ajax("GET", box.dataset.url, { target: box, swap: "innerHTML" });
    }
  }

  if (list) {
    // "toggle" does not bubble: listen while it goes down to the details.
    list.addEventListener("toggle", function (event) {
      const details = event.target;
      if (details.tagName === "DETAILS" && details.open && details.parentElement.classList.contains("journal-second")) {
        loadSecond(details);
      }
    }, true);
  }

  function swapFragment(fragment) {
    if (!fragment || !fragment.id) return;
    const current = document.getElementById(fragment.id);
    const fresh = parseHTML(fragment.html);
    if (!current || !fresh) return;
    current.replaceWith(fresh);
    if (window.htmx) window.htmx.process(fresh);
    options.onFragment(fragment.id, fresh);
  }

  function insertRow(html, seq) {
    const row = typeof html === "string" ? parseHTML(html) : html;
    if (!row || !list) return;
    let next = list.firstElementChild;
    while (next && Number(next.dataset.seq) > seq) next = next.nextElementSibling;
    list.insertBefore(row, next);
    const empty = document.getElementById("journal-empty");
    if (empty) empty.textContent = "";
  }

  function apply(event) {
    if (!event || typeof event.seq !== "number") return;
    if (event.seq <= lastSeq) return; // a duplicate (replay overlapping a push)
    if (document.getElementById("ev-" + event.seq)) {
      lastSeq = event.seq;
      return;
    }
    if (lastSeq && event.seq !== lastSeq + 1) {
      // Never expected (the server sends each connection a gap-free sequence); ask again.
      options.send({ type: "resync", after: lastSeq });
      return;
    }
    insertRow(event.html, event.seq);
    lastSeq = event.seq;
    (event.fragments || []).forEach(swapFragment);
    options.onEvent(event);
  }

  function rowSeqs() {
    return Array.prototype.map.call(list.querySelectorAll(":scope > li.journal-row"), function (row) {
      return Number(row.dataset.seq);
    });
  }

  // One second's line: new, or the same second counting more rows (its counts are absolute).
  // An open line keeps its rows shown and fetches them again.
  function upsertSecond(second) {
    if (!list || !second || typeof second.t !== "number" || !second.html) return false;
    const current = document.getElementById("sec-" + second.t);
    if (current && Number(current.dataset.n) >= second.n) return false;
    const fresh = parseHTML(second.html);
    if (!fresh) return false;
    if (current) {
      const details = current.querySelector("details");
      if (details && details.open) {
        current.className = fresh.className;
        current.dataset.n = fresh.dataset.n;
        current.dataset.seq = fresh.dataset.seq;
        details.querySelector("summary").replaceWith(fresh.querySelector("summary"));
        loadSecond(details);
        return true;
      }
      current.remove();
    }
    insertRow(fresh, Number(fresh.dataset.seq));
    return true;
  }

  function applySeconds(message) {
    if (typeof message.through === "number" && message.through > lastSeq) lastSeq = message.through;
    (message.seconds || []).forEach(function (second) {
      upsertSecond(second);
      options.onSecond(second);
    });
    (message.fragments || []).forEach(swapFragment);
  }

  return {
    apply: apply,
    applySeconds: applySeconds,
    swapFragment: swapFragment,
    lastSeq: function () { return lastSeq; },
    rowSeqs: rowSeqs,
  };
}
