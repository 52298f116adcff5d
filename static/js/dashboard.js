/* Failure Lab: the class dashboard. Keeps the server-rendered grid live from ws/classes/<id>/.
 *
 * The model (one entry per session) is updated as messages arrive (cheap arithmetic); the DOM
 * is written at most once per animation frame, only for rows that changed, so a hundred
 * sessions bursting at once cost one layout per frame, not one per message.
 *
 * Exactness: every row carries `base` (the journal sequence number its totals include, from
 * the server render or the websocket's snapshot). An update adds its deltas only when its
 * last_seq is past `base` (a writer batch is one transaction, so it is wholly before or wholly
 * after a snapshot; steady traffic's update of a second spans batches and says where it
 * starts, `first_seq`: one that straddles `base` asks for a snapshot instead). State, mode and activity take the newest value by last_seq, so two
 * updates delivered out of order cannot leave an old state on screen.
 */
(function () {
  "use strict";

  const root = document.getElementById("dashboard");
  if (!root) return;

  const tbody = document.getElementById("dash-rows");
  const liveStatus = document.getElementById("live-status");
  const shownCount = document.getElementById("shown-count");
  const filterText = document.getElementById("filter-text");
  const filterState = document.getElementById("filter-state");
  const filterActivity = document.getElementById("filter-activity");
  const sortSelect = document.getElementById("sort-key");
  const countCells = {};
  root.querySelectorAll("[data-count]").forEach(function (cell) { countCells[cell.dataset.count] = cell; });

  const STATE_ORDER = { open: 0, half_open: 1, closed: 2 };
  const NUMERIC = new Set(["calls", "attempts_total", "fast_failed"]);
  const LIVE_FIELDS = ["state", "mode", "activity", "burst_summary"];
  // The words for a live field come from the server with it (labs.presenters.dashboard_labels):
  // the page never makes up a label or a summary sentence of its own.
  const LABEL_OF = { state: "state_label", mode: "mode_label", burst_summary: "summary_text" };

  /** @type {Map<number, object>} */
  const rows = new Map();
  const dirty = new Set();
  let frame = 0;
  let orderDirty = true;
  let sortKey = "student";
  let sortDesc = false;
  let socket = null;
  let retry = 0;

  function entry(data, el) {
    const e = { data: Object.assign({}, data), base: data.last_seq || 0, seq: {}, el: el };
    LIVE_FIELDS.forEach(function (f) { e.seq[f] = e.base; });
    return e;
  }

  // --- initial model from the server render -------------------------------------------------
  const initial = JSON.parse(document.getElementById("dashboard-rows").textContent);
  initial.forEach(function (data) {
    rows.set(data.session, entry(data, document.getElementById("row-" + data.session)));
  });

  // --- rendering ------------------------------------------------------------------------------
  // A row the page does not have yet comes with the websocket's snapshot, rendered by the
  // server (labs.presenters.dashboard_row_html, the same function as the page's own rows).
  function createRow(e) {
    tbody.insertAdjacentHTML("beforeend", e.data.html);
    const empty = document.getElementById("no-sessions");
    if (empty) empty.remove();
    return document.getElementById("row-" + e.data.session);
  }

  function setText(el, text) {
    if (el && el.textContent !== text) el.textContent = text;
  }

  const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)").matches;

  function cellsOf(tr) {
    const cells = {};
    tr.querySelectorAll("[data-field]").forEach(function (el) { cells[el.dataset.field] = el; });
    return cells;
  }

  function paintRow(e) {
    if (!e.el) e.el = createRow(e);
    if (!e.cells) e.cells = cellsOf(e.el);
    const d = e.data;
    const tr = e.el;
    const c = e.cells;
    const stateChanged = tr.dataset.state !== d.state;
    const changed = stateChanged || tr.dataset.activity !== d.activity ||
      tr.dataset.mode !== d.mode;
    if (changed) {
      tr.dataset.state = d.state;
      tr.dataset.activity = d.activity;
      tr.dataset.mode = d.mode;
      c.state.className = "breaker breaker-" + d.state;
      c.activity.className = "activity activity-" + d.activity;
    }
    setText(c.student, d.student);
    setText(c.state, d.state_label);
    setText(c.mode, d.mode_label);
    setText(c.activity, d.activity);
    if (d.summary_text) setText(c.summary, d.summary_text);
    if (c.progress) setText(c.progress, d.progress_text || "");
    NUMERIC.forEach(function (f) { setText(c[f], String(d[f])); });
    // Only a breaker state change flashes (bursting/idle flips on every burst would keep a
    // busy class repainting). Web Animations, not a class toggle: restarting a CSS animation
    // needs a forced layout per row, which is what would make a hundred rows stutter.
    if (stateChanged && !reducedMotion && tr.animate) {
      tr.animate([{ backgroundColor: "#fef9c3" }, { backgroundColor: "transparent" }],
        { duration: 1200, easing: "ease-out" });
    }
  }

  function compare(a, b) {
    const x = a.data, y = b.data;
    let r = 0;
    if (sortKey === "state") r = STATE_ORDER[x.state] - STATE_ORDER[y.state];
    else if (NUMERIC.has(sortKey)) r = y[sortKey] - x[sortKey]; // most first
    else r = String(x[sortKey] || "").localeCompare(String(y[sortKey] || ""));
    if (sortDesc) r = -r;
    return r || x.student.localeCompare(y.student) || x.session - y.session;
  }

  function filters() {
    return {
      text: filterText.value.trim().toLowerCase(),
      state: filterState.value,
      activity: filterActivity.value,
    };
  }

  function visible(e, f) {
    const d = e.data;
    if (f.state && d.state !== f.state) return false;
    if (f.activity && d.activity !== f.activity) return false;
    if (f.text && !(d.student + " " + d.username + " " + d.scenario).toLowerCase().includes(f.text)) {
      return false;
    }
    return true;
  }

  function paintCounts() {
    const counts = { closed: 0, open: 0, half_open: 0, bursting: 0, total: 0 };
    const f = filters();
    let shown = 0;
    rows.forEach(function (e) {
      counts[e.data.state] = (counts[e.data.state] || 0) + 1;
      if (e.data.activity === "bursting") counts.bursting += 1;
      counts.total += 1;
      const show = visible(e, f);
      if (e.el && e.el.hidden === show) e.el.hidden = !show;
      if (show) shown += 1;
    });
    Object.keys(counts).forEach(function (k) {
      setText(countCells[k], String(counts[k]));
    });
    setText(shownCount, shown === counts.total ? "" : shown + " of " + counts.total + " shown");
  }

  function paintOrder() {
    const ordered = Array.from(rows.values()).sort(compare);
    let node = tbody.firstElementChild;
    ordered.forEach(function (e) {
      if (!e.el) return;
      if (e.el !== node) tbody.insertBefore(e.el, node);
      else node = node.nextElementSibling;
    });
  }

  // For tests and the benchmark: how much arrived, how many frames painted it, how long the
  // painting took (the browser's own layout and paint come on top).
  const stats = { messages: 0, progressMessages: 0, frames: 0, flushMs: 0, maxFlushMs: 0 };
  window.failureLabDashboard = { stats: stats };

  function flush() {
    const started = performance.now();
    frame = 0;
    dirty.forEach(function (id) {
      const e = rows.get(id);
      if (e) paintRow(e);
    });
    const anyChanged = dirty.size > 0;
    dirty.clear();
    if (orderDirty || (anyChanged && sortKey !== "student")) paintOrder();
    orderDirty = false;
    paintCounts();
    const spent = performance.now() - started;
    stats.frames += 1;
    stats.flushMs += spent;
    if (spent > stats.maxFlushMs) stats.maxFlushMs = spent;
  }

  function schedule() {
    if (!frame) frame = window.requestAnimationFrame(flush);
  }

  // --- model updates ----------------------------------------------------------------------------
  let refreshAsked = 0;

  function applySnapshot(list) {
    const seen = new Set();
    list.forEach(function (data) {
      seen.add(data.session);
      const old = rows.get(data.session);
      const e = entry(data, old ? old.el : document.getElementById("row-" + data.session));
      rows.set(data.session, e);
      dirty.add(data.session);
    });
    rows.forEach(function (e, id) {
      if (!seen.has(id)) {
        if (e.el) e.el.remove();
        rows.delete(id);
      }
    });
    orderDirty = true;
    schedule();
  }

  // A session opened after the snapshot: ask for a fresh one (the server throttles).
  function askRefresh() {
    if (Date.now() - refreshAsked > 1000 && socket && socket.readyState === WebSocket.OPEN) {
      refreshAsked = Date.now();
      socket.send(JSON.stringify({ type: "refresh" }));
    }
  }

  // A student's step and score: absolute values read by the server when the change arrived,
  // so the newest message simply replaces what the row showed.
  function applyProgress(msg) {
    const e = rows.get(msg.session);
    if (!e) {
      askRefresh();
      return;
    }
    e.data.progress = msg.progress;
    e.data.progress_text = msg.progress_text;
    stats.progressMessages += 1;
    dirty.add(msg.session);
    schedule();
  }

  function applyUpdate(msg) {
    const e = rows.get(msg.session);
    if (!e) {
      askRefresh();
      return;
    }
    const seq = msg.last_seq || 0;
    const d = e.data;
    if (msg.first_seq && msg.first_seq <= e.base && seq > e.base) {
      // A second of steady traffic (several batches) straddling the snapshot: part of it is
      // in the row's totals already, so only a fresh snapshot is exact.
      askRefresh();
      return;
    }
    if (seq > e.base) {
      d.calls += msg.calls || 0;
      d.attempts_total += msg.attempts_total || 0;
      d.fast_failed += msg.fast_failed || 0;
      d.succeeded += msg.succeeded || 0;
    }
    LIVE_FIELDS.forEach(function (f) {
      if (msg[f] !== undefined && msg[f] !== null && seq > e.seq[f]) {
        d[f] = msg[f];
        if (LABEL_OF[f]) d[LABEL_OF[f]] = msg[LABEL_OF[f]];
        e.seq[f] = seq;
      }
    });
    if (seq > d.last_seq) d.last_seq = seq;
    dirty.add(msg.session);
    schedule();
  }

  // --- the socket ------------------------------------------------------------------------------
  function setStatus(state, text) {
    liveStatus.dataset.state = state;
    setText(liveStatus, text);
  }

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + window.location.host + root.dataset.wsPath);
    socket.addEventListener("open", function () {
      retry = 0;
      setStatus("live", "Live");
    });
    socket.addEventListener("message", function (event) {
      let msg;
      try { msg = JSON.parse(event.data); } catch (err) { return; }
      if (msg.type === "snapshot") applySnapshot(msg.rows);
      else if (msg.type === "session") { stats.messages += 1; applyUpdate(msg); }
      else if (msg.type === "progress") applyProgress(msg);
    });
    socket.addEventListener("close", function (event) {
      socket = null;
      if (event.code === 4403) {
        setStatus("denied", "Live updates stopped: reload the page.");
        return;
      }
      retry = Math.min(retry + 1, 6);
      const delay = Math.min(15000, 500 * 2 ** retry);
      setStatus("offline", "Reconnecting… (the grid catches up when the connection is back)");
      window.setTimeout(connect, delay);
    });
  }

  // --- sorting and filtering --------------------------------------------------------------------
  function resort(key, toggle) {
    if (toggle && key === sortKey) sortDesc = !sortDesc;
    else { sortKey = key; sortDesc = false; }
    sortSelect.value = sortKey;
    // Numbers sort most-first, text A-Z; a second click on a header reverses.
    const descending = NUMERIC.has(sortKey) !== sortDesc;
    root.querySelectorAll(".sort-button").forEach(function (b) {
      const th = b.closest("th");
      if (b.dataset.sort === sortKey) th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      else th.removeAttribute("aria-sort");
    });
    orderDirty = true;
    schedule();
  }

  root.querySelectorAll(".sort-button").forEach(function (button) {
    button.addEventListener("click", function () { resort(button.dataset.sort, true); });
  });
  sortSelect.addEventListener("change", function () { resort(sortSelect.value, false); });
  [filterText, filterState, filterActivity].forEach(function (el) {
    el.addEventListener("input", schedule);
    el.addEventListener("change", schedule);
  });

  // Refusals (422) carry the problems to show: let htmx swap them in like a success.
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    const status = event.detail.xhr.status;
    if (status === 422 || status === 409) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  // The fault banner goes away when its time is up (the restore shows in the rows anyway).
  function expireBanner() {
    const banner = document.querySelector(".fault-banner");
    if (banner && Date.parse(banner.dataset.restoreAt) <= Date.now()) banner.remove();
  }
  window.setInterval(expireBanner, 1000);

  schedule();
  connect();
})();
