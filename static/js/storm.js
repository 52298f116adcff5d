/* Failure Lab: the storm panel. Streams a class's shared dependency from ws/classes/<id>/storm/.
 *
 * The server pushes one message a second (a snapshot on connect and after a gap, else a tick
 * carrying the last few seconds again, since a second's counters keep changing after it has
 * passed). The page keeps one row per second in `points`, replacing a second it already has,
 * and draws at most once per animation frame: the uPlot charts get new arrays, the headline
 * numbers and the per-student table are rewritten. A hole in the seconds (a lost message)
 * asks the server for a snapshot.
 */
(function () {
  "use strict";

  const root = document.getElementById("storm");
  if (!root || root.dataset.configured !== "1") return;

  const status = document.getElementById("storm-status");
  const configLine = document.getElementById("storm-config");
  const loadBox = document.getElementById("chart-load");
  const waitBox = document.getElementById("chart-wait");
  const studentRows = document.getElementById("student-rows");
  const bigs = {};
  root.querySelectorAll("[data-metric]").forEach(function (el) { bigs[el.dataset.metric] = el; });
  const recoveryLabel = document.getElementById("recovery-label");

  const RETRY_BUDGET = 0.1;
  const HEADLINE_SECONDS = 3;
  const BASELINE_SECONDS = 10;
  const RECOVERED_GOODPUT = 0.9;
  const MIN_SPAN_S = 40;
  const LEAD_S = 10;
  const COLORS = { offered: "#4fc3ff", capacity: "#ffffff", goodput: "#4cff7a", shed: "#ff5c5c",
    timeout: "#ffa94d", p50: "#b197fc", p99: "#f783ac", wasted: "#ffd23f",
    band: "rgba(255, 92, 92, 0.22)" };

  /** @type {Map<number, object>} second -> Second.to_dict() */
  const points = new Map();
  /** @type {Map<number, object>} trigger start (s) -> trigger */
  const triggers = new Map();
  let windowS = 300;
  let now = 0;
  let model = null;
  let students = [];
  let sortKey = "share";
  let sortDesc = true;
  let loadPlot = null;
  let waitPlot = null;
  let frame = 0;
  let socket = null;
  let retry = 0;
  let refreshAsked = 0;
  let ignoreTicksUntil = 0; // the browser test's stand-in for dropped messages
  // For the tests: messages applied, frames drawn and the time drawing took (the browser's own
  // layout and paint come on top; the browser test reads Chromium's long tasks for those).
  const stats = { snapshots: 0, ticks: 0, draws: 0, drawMs: 0, maxDrawMs: 0, drawAt: [], drawn: [] };

  // --- the model -----------------------------------------------------------------------------
  function merge(seconds) {
    seconds.forEach(function (s) { points.set(s.second, s); });
    const oldest = now - windowS + 1;
    points.forEach(function (_v, sec) { if (sec < oldest) points.delete(sec); });
  }

  function setModel(m) {
    model = m;
    if (m.trigger) triggers.set(m.trigger.from_s, m.trigger);
    const c = m.config;
    configLine.textContent = c.servers + " servers × " + c.service_ms + " ms, capacity " +
      Math.round(m.capacity_per_s) + " attempts/s";
  }

  function applySnapshot(msg) {
    stats.snapshots += 1;
    windowS = msg.window_s;
    now = msg.now;
    points.clear();
    merge(msg.seconds);
    setModel(msg.model);
    students = msg.students;
    studentsDirty = true;
    schedule();
  }

  function applyTick(msg) {
    stats.ticks += 1;
    const first = msg.seconds.length ? msg.seconds[0].second : msg.now;
    if (first > now + 1) askRefresh(); // a hole the resent seconds do not cover
    now = msg.now;
    merge(msg.seconds);
    setModel(msg.model);
    if (msg.students) { students = msg.students; studentsDirty = true; }
    schedule();
  }

  function askRefresh() {
    if (Date.now() - refreshAsked > 1000 && socket && socket.readyState === WebSocket.OPEN) {
      refreshAsked = Date.now();
      socket.send(JSON.stringify({ type: "refresh" }));
    }
  }

  // The chart starts a little before the first second with traffic (at least MIN_SPAN_S
  // back), so the start of a lesson is not squeezed into the right edge of the window.
  function firstShown() {
    let active = now;
    points.forEach(function (p, sec) { if (p.offered > 0 && sec < active) active = sec; });
    return Math.max(now - windowS + 1, Math.min(now - MIN_SPAN_S + 1, active - LEAD_S));
  }

  function sorted() {
    const xs = [];
    for (let s = firstShown(); s <= now; s++) {
      xs.push(points.get(s) || { second: s, offered: 0, ok: 0, error: 0, shed: 0, skipped: 0,
        timeout: 0, wasted_us: 0, calls: 0, calls_ok: 0, retries: 0, wait_p50_ms: null, wait_p99_ms: null });
    }
    return xs;
  }

  // --- headline numbers ----------------------------------------------------------------------
  // Over the last HEADLINE_SECONDS complete seconds: attempts per call, retries per attempt,
  // goodput (calls succeeded per second) against the healthy baseline, which is the mean
  // goodput of the BASELINE_SECONDS before the latest trigger (without one, the calls asked
  // for). Recovered: the first second after the trigger's end whose retry ratio is within
  // the 10 % budget and whose goodput is back to RECOVERED_GOODPUT of the baseline; until
  // then "not recovered", counting up from the end.
  function sum(rows, key) { return rows.reduce(function (a, r) { return a + r[key]; }, 0); }

  function latestTrigger() {
    let latest = null;
    triggers.forEach(function (t) { if (!latest || t.from_s > latest.from_s) latest = t; });
    return latest;
  }

  function baseline(rows, trigger) {
    if (trigger) {
      const before = rows.filter(function (r) {
        return r.second < trigger.from_s && r.second >= trigger.from_s - BASELINE_SECONDS && r.calls > 0;
      });
      if (before.length) return sum(before, "calls_ok") / before.length;
    }
    const recent = rows.slice(-HEADLINE_SECONDS - 1, -1);
    return recent.length ? sum(recent, "calls") / recent.length : 0;
  }

  function headline(rows) {
    const recent = rows.slice(-HEADLINE_SECONDS - 1, -1); // complete seconds only
    const offered = sum(recent, "offered");
    const calls = sum(recent, "calls");
    const retries = sum(recent, "retries");
    const goodput = recent.length ? sum(recent, "calls_ok") / recent.length : 0;
    const trigger = latestTrigger();
    const base = baseline(rows, trigger);
    const out = {
      amplification: calls ? offered / calls : null,
      retry_ratio: offered ? retries / offered : null,
      goodput_share: base ? goodput / base : null,
      recovery: null,
      recovered: null,
    };
    if (trigger && now >= trigger.until_s) {
      const after = rows.filter(function (r) { return r.second >= Math.floor(trigger.until_s) && r.second < now; });
      const back = after.find(function (r) {
        return r.offered > 0 && r.retries / r.offered <= RETRY_BUDGET && base && r.calls_ok >= RECOVERED_GOODPUT * base;
      });
      out.recovered = Boolean(back);
      out.recovery = back ? Math.max(0, back.second - trigger.until_s) : now - trigger.until_s;
    }
    return out;
  }

  function show(name, text, tone) {
    const el = bigs[name];
    el.textContent = text;
    el.parentElement.dataset.tone = tone || "";
  }

  function drawHeadline(rows) {
    const h = headline(rows);
    show("amplification", h.amplification === null ? "–" : h.amplification.toFixed(2) + "×",
      h.amplification !== null && h.amplification > 1 + RETRY_BUDGET ? "bad" : "good");
    show("retry_ratio", h.retry_ratio === null ? "–" : Math.round(h.retry_ratio * 100) + " %",
      h.retry_ratio !== null && h.retry_ratio > RETRY_BUDGET ? "bad" : "good");
    show("goodput_share", h.goodput_share === null ? "–" : Math.round(h.goodput_share * 100) + " %",
      h.goodput_share !== null && h.goodput_share < RECOVERED_GOODPUT ? "bad" : "good");
    if (h.recovery === null) {
      show("recovery", "–", "");
      recoveryLabel.textContent = "time to recovery (after a trigger)";
    } else if (h.recovered) {
      show("recovery", h.recovery.toFixed(0) + " s", "good");
      recoveryLabel.textContent = "time to recovery";
    } else {
      show("recovery", "+" + h.recovery.toFixed(0) + " s", "bad");
      recoveryLabel.textContent = "not recovered since the trigger ended";
    }
    root.dataset.headline = JSON.stringify(h);
  }

  // --- the charts ----------------------------------------------------------------------------
  function bandHook(u) {
    const ctx = u.ctx;
    ctx.save();
    ctx.fillStyle = COLORS.band;
    triggers.forEach(function (t) {
      const x0 = Math.max(u.bbox.left, u.valToPos(t.from_s, "x", true));
      const x1 = Math.min(u.bbox.left + u.bbox.width, u.valToPos(t.until_s, "x", true));
      if (x1 > x0) ctx.fillRect(x0, u.bbox.top, x1 - x0, u.bbox.height);
    });
    ctx.restore();
  }

  function size(box) { return { width: box.clientWidth, height: Math.max(120, box.clientHeight - 40) }; }

  function line(label, stroke, width, dash) {
    return { label: label, stroke: stroke, width: width, dash: dash, points: { show: false } };
  }

  function axis(label) {
    return { label: label, stroke: "#fff", grid: { stroke: "#333" }, ticks: { stroke: "#555" },
      font: "16px system-ui", labelFont: "16px system-ui" };
  }

  function makePlots() {
    const x = { label: "time", stroke: "#fff", grid: { stroke: "#333" }, ticks: { stroke: "#555" }, font: "16px system-ui" };
    loadPlot = new window.uPlot(Object.assign(size(loadBox), {
      scales: { x: { time: true } },
      axes: [x, axis("attempts / s")],
      series: [
        {},
        line("offered", COLORS.offered, 3),
        line("capacity", COLORS.capacity, 2, [8, 6]),
        line("goodput (calls ok)", COLORS.goodput, 3),
        line("shed", COLORS.shed, 2),
        line("timed out", COLORS.timeout, 2),
      ],
      hooks: { drawClear: [bandHook] },
    }), [[], [], [], [], [], []], loadBox);
    waitPlot = new window.uPlot(Object.assign(size(waitBox), {
      scales: { x: { time: true } },
      axes: [Object.assign({}, x), axis("ms")],
      series: [
        {},
        line("queue wait p50", COLORS.p50, 2),
        line("queue wait p99", COLORS.p99, 2),
        line("wasted server ms / s", COLORS.wasted, 2),
      ],
      hooks: { drawClear: [bandHook] },
    }), [[], [], [], []], waitBox);
  }

  function drawCharts(rows) {
    const capacity = model ? model.capacity_per_s : null;
    const xs = rows.map(function (r) { return r.second; });
    loadPlot.setData([
      xs,
      rows.map(function (r) { return r.offered; }),
      rows.map(function () { return capacity; }),
      rows.map(function (r) { return r.calls_ok; }),
      rows.map(function (r) { return r.shed; }),
      rows.map(function (r) { return r.timeout; }),
    ]);
    waitPlot.setData([
      xs,
      rows.map(function (r) { return r.wait_p50_ms; }),
      rows.map(function (r) { return r.wait_p99_ms; }),
      rows.map(function (r) { return r.wasted_us / 1000; }),
    ]);
  }

  // --- the per-student table -----------------------------------------------------------------
  // Rewritten only when a message brought the table or the sort changed (every other tick),
  // one row per session kept and its cells' text set only where it changed, so an update
  // costs the browser little style and layout work.
  const rowOf = new Map();
  let studentsDirty = true;

  function setCell(td, text) { if (td.textContent !== text) td.textContent = text; }

  function drawStudents() {
    if (!studentsDirty) return;
    studentsDirty = false;
    const rows = students.slice().sort(function (a, b) {
      const av = a[sortKey];
      const bv = b[sortKey];
      const order = typeof av === "number" ? av - bv : String(av).localeCompare(String(bv));
      return sortDesc ? -order : order;
    });
    const keep = new Set();
    rows.forEach(function (r, index) {
      keep.add(r.session);
      let tr = rowOf.get(r.session);
      if (!tr) {
        tr = document.createElement("tr");
        tr.dataset.session = r.session;
        for (let i = 0; i < 5; i++) tr.appendChild(document.createElement("td"));
        rowOf.set(r.session, tr);
      }
      const hot = r.retry_ratio > RETRY_BUDGET ? "1" : "";
      if ((tr.dataset.hot || "") !== hot) { if (hot) tr.dataset.hot = hot; else delete tr.dataset.hot; }
      const cells = tr.children;
      setCell(cells[0], r.student);
      setCell(cells[1], r.attempts_per_s.toFixed(1));
      setCell(cells[2], Math.round(r.retry_ratio * 100) + " %");
      setCell(cells[3], r.state.replace("_", "-"));
      if (cells[3].className !== "state-" + r.state) cells[3].className = "state-" + r.state;
      setCell(cells[4], Math.round(r.share * 100) + " %");
      if (studentRows.children[index] !== tr) studentRows.insertBefore(tr, studentRows.children[index] || null);
    });
    rowOf.forEach(function (tr, session) {
      if (!keep.has(session)) { tr.remove(); rowOf.delete(session); }
    });
  }

  root.querySelectorAll(".sort").forEach(function (button) {
    button.addEventListener("click", function () {
      if (button.dataset.sort === sortKey) sortDesc = !sortDesc;
      else { sortKey = button.dataset.sort; sortDesc = sortKey !== "student" && sortKey !== "state"; }
      root.querySelectorAll(".students th").forEach(function (th) { th.removeAttribute("aria-sort"); });
      button.closest("th").setAttribute("aria-sort", sortDesc ? "descending" : "ascending");
      studentsDirty = true;
      schedule();
    });
  });

  // --- drawing -------------------------------------------------------------------------------
  function schedule() {
    if (!frame) frame = window.requestAnimationFrame(draw);
  }

  function draw() {
    const started = performance.now();
    // A user-timing mark per update: the browser test finds the task that drew it in
    // Chromium's performance timeline (the mark is dropped at once; the trace keeps it).
    performance.mark("storm-draw");
    performance.clearMarks("storm-draw");
    frame = 0;
    if (!loadPlot) makePlots();
    const rows = sorted();
    drawCharts(rows);
    drawHeadline(rows);
    drawStudents();
    const spent = performance.now() - started;
    stats.draws += 1;
    stats.drawAt.push(started);
    if (stats.drawAt.length > 1000) stats.drawAt.shift();
    stats.drawMs += spent;
    if (spent > stats.maxDrawMs) stats.maxDrawMs = spent;
    // When the charts were drawn (uPlot draws in a microtask queued by setData, so this one
    // runs after it), in epoch ms, with the last seconds' offered counts drawn:
    // benchmarks/storm_panel_bench.py --browser measures counter-to-drawn latency from it.
    const last = rows.slice(-4).map(function (r) { return [r.second, r.offered]; });
    window.queueMicrotask(function () {
      stats.drawn.push([performance.timeOrigin + performance.now(), last]);
      if (stats.drawn.length > 4000) stats.drawn.shift();
    });
  }

  window.addEventListener("resize", function () {
    if (loadPlot) { loadPlot.setSize(size(loadBox)); waitPlot.setSize(size(waitBox)); }
  });

  // --- the socket ----------------------------------------------------------------------------
  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + window.location.host + root.dataset.wsPath);
    socket.addEventListener("open", function () { retry = 0; setStatus("live", "Live"); });
    socket.addEventListener("message", function (event) {
      let msg;
      try { msg = JSON.parse(event.data); } catch (err) { return; }
      if (msg.type === "snapshot") applySnapshot(msg);
      else if (msg.type === "tick" && Date.now() >= ignoreTicksUntil) applyTick(msg);
    });
    socket.addEventListener("close", function (event) {
      socket = null;
      if (event.code === 4403) { setStatus("denied", "Not allowed: you do not teach this class."); return; }
      retry = Math.min(retry + 1, 6);
      setStatus("offline", "Reconnecting…");
      window.setTimeout(connect, Math.min(15000, 500 * 2 ** retry));
    });
  }

  // --- the chart as an image, for slides ------------------------------------------------------
  // Both charts' canvases (the trigger band included) on one black canvas, downloaded as PNG.
  function exportPng() {
    if (!loadPlot) return;
    const parts = [loadPlot.ctx.canvas, waitPlot.ctx.canvas];
    const out = document.createElement("canvas");
    out.width = Math.max(parts[0].width, parts[1].width);
    out.height = parts[0].height + parts[1].height;
    const ctx = out.getContext("2d");
    ctx.fillStyle = "#000";
    ctx.fillRect(0, 0, out.width, out.height);
    ctx.drawImage(parts[0], 0, 0);
    ctx.drawImage(parts[1], 0, parts[0].height);
    const link = document.createElement("a");
    link.download = "storm-chart-" + now + ".png";
    link.href = out.toDataURL("image/png");
    link.click();
  }
  document.getElementById("export-png").addEventListener("click", exportPng);

  // Refusals (422) carry the problems to show: let htmx swap them in like a success.
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    const code = event.detail.xhr.status;
    if (code === 422 || code === 409) { event.detail.shouldSwap = true; event.detail.isError = false; }
  });

  // Hooks for the browser tests.
  window.failureLabStorm = {
    points: function () { return sorted(); },
    students: function () { return students.slice(); },
    model: function () { return model; },
    headline: function () { return headline(sorted()); },
    chartData: function () { return loadPlot ? loadPlot.data.map(function (xs) { return Array.from(xs); }) : null; },
    tableRows: function () { return studentRows.rows.length; },
    ignoreTicks: function (ms) { ignoreTicksUntil = Date.now() + ms; },
    stats: stats,
  };

  connect();
})();
