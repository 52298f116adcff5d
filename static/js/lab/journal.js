/* The journal on the lab page: rows inserted by seq (newest first), anything at or below the
 * last seq seen dropped as a duplicate, and fragments ({id, html}) replacing the element with
 * the same id (badge, burst summary). */

import { parseHTML } from "./util.js";

/**
 * The journal list and what it has seen. ``options``: lastSeq (the page's, from the
 * server), send(message) (asks the socket to resync after a gap), onEvent(event) (each new
 * event, after its row and fragments), onFragment(id, element) (each swapped fragment).
 */
export function createJournal(options) {
  const list = document.getElementById("journal-rows");
  let lastSeq = options.lastSeq;

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
    const row = parseHTML(html);
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
    return Array.prototype.map.call(list.querySelectorAll(".journal-row"), function (row) {
      return Number(row.dataset.seq);
    });
  }

  return {
    apply: apply,
    swapFragment: swapFragment,
    lastSeq: function () { return lastSeq; },
    rowSeqs: rowSeqs,
  };
}
