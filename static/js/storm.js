/* Failure Lab: the storm panel. Streams a class's shared dependency from ws/classes/<id>/storm/.
 *
 * The server pushes one message a second (a snapshot on connect and after a gap, else a tick
 * carrying the last few seconds again, since a second's counters keep changing after it has
 * passed). The page keeps one row per second in `points`, replacing a second it already has,
 * and draws at most once per animation frame: the uPlot charts get new arrays, the headline
 * numbers and the per-student table are rewritten. A hole in the seconds (a lost message)
 * asks the server for a snapshot. Only complete seconds are drawn (the one under way is
 * still being counted). The tiles and the recovery clock come computed from the server
 * (labs.presenters.storm_headline), the table's figures too (the sessions' own counters),
 * and so does the edge: the stable line, capacity / (1 + the class's largest retry count),
 * drawn beside the capacity line with the vulnerable band between them shaded, and the region
 * the class's load is in (the headline's `edge`, the load tile).
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
  const regionLabel = document.getElementById("region-label");

  const RETRY_BUDGET = 0.1;
  const RECOVERED_GOODPUT = 0.9;
  const MIN_SPAN_S = 40;
  const LEAD_S = 10;
  const COLORS = { offered: "#4fc3ff", capacity: "#ffffff", goodput: "#4cff7a", shed: "#ff5c5c",
    timeout: "#ffa94d", p50: "#b197fc", p99: "#f783ac", wasted: "#ffd23f",
    band: "rgba(255, 92, 92, 0.22)", calls: "#e599f7", stable: "#ffd23f",
    vulnerable: "rgba(255, 210, 63, 0.22)" };
  // The words on the chart's vulnerable band, and on the load tile for each region.
  const VULNERABLE_TEXT = "vulnerable: a trigger here may not end";
  const REGION_WORDS = { stable: "stable", vulnerable: "vulnerable", over_capacity: "over capacity" };
  const REGION_TONES = { stable: "good", vulnerable: "warn", over_capacity: "bad" };

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
      Math.round(m.capacity_per_s) + " attempts/s" + defences(c);
  }

  // The server's defences that are on, in a few words for the header ("" when none is).
  function defences(c) {
    const on = [];
    if (c.rate_per_s != null) on.push("rate limit " + c.rate_per_s + "/s (429)");
    if (c.queue_limit != null) on.push("at most " + c.queue_limit + " waiting");
    if (c.concurrency_limit != null && c.concurrency && c.concurrency !== "fixed") {
      on.push((c.concurrency === "aimd" ? "AIMD" : "gradient") + " limit from " + c.concurrency_limit + " up to " + c.concurrency_max);
    } else if (c.concurrency_limit != null) {
      on.push("at most " + c.concurrency_limit + " in the server");
    }
    if (c.codel_target_ms != null) on.push("CoDel " + c.codel_target_ms + " ms / " + c.codel_interval_ms + " ms");
    if (c.discipline === "lifo") on.push("newest first (LIFO)");
    if (c.discipline === "adaptive_lifo") on.push("newest first past " + c.lifo_after_ms + " ms (adaptive LIFO)");
    return on.length ? "; defends itself: " + on.join(", ") : "";
  }

  // The headline's edge (labs.presenters.storm.storm_edge): the capacity, the class's
  // largest retry count, the stable line, the load and its region; nothing before it came.
  function edge() {
    const e = headlineNow && headlineNow.edge;
    return e || { capacity_per_s: null, retries: null, stable_per_s: null, load_per_s: null, region: null };
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
    drawChain(msg.chain);
    headlineNow = msg.headline;
    schedule();
  }

  function applyTick(msg) {
    stats.ticks += 1;
    const first = msg.seconds.length ? msg.seconds[0].second : msg.now;
    if (first > now + 1) askRefresh(); // a hole the resent seconds do not cover
    now = msg.now;
    merge(msg.seconds);
    setModel(msg.model);
    if (msg.students) { students = msg.students; studentsDirty = true; drawChain(msg.chain); }
    if (msg.headline) headlineNow = msg.headline;
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
    return Math.max(now - windowS + 1, Math.min(now - MIN_SPAN_S, active - LEAD_S));
  }

  // The complete seconds, oldest first: the second under way (`now`) is left out, since its
  // counters are still growing and would draw a dip at the right edge on every tick.
  function sorted() {
    const xs = [];
    for (let s = firstShown(); s < now; s++) {
      xs.push(points.get(s) || { second: s, offered: 0, ok: 0, error: 0, shed: 0, skipped: 0,
        limited: 0, timeout: 0, wasted_us: 0, calls: 0, calls_ok: 0, retries: 0, wait_p50_ms: null, wait_p99_ms: null });
    }
    return xs;
  }

  // --- headline numbers ---------------------------------------------------------------------
  // The server computes the tiles from complete seconds (labs.presenters.storm_headline): the
  // recovery clock belongs to the latest trigger of the current run of traffic; with no
  // traffic the tiles say so, in a neutral colour.
  let headlineNow = null;

  function show(name, text, tone) {
    const el = bigs[name];
    if (el.textContent !== text) el.textContent = text;
    el.parentElement.dataset.tone = tone || "";
  }

  function percent(x) { return Math.round(x * 100) + " %"; }

  // The load tile: the region the class's calls per second are in, against the chart's lines.
  function drawRegion() {
    const e = edge();
    if (!bigs.region) return;
    if (e.stable_per_s === null) {
      show("region", "no sessions", "idle");
      regionLabel.textContent = "load: no session calls the shared dependency yet";
    } else {
      const line = "stable below " + fmt(e.stable_per_s) + " calls/s (" + e.retries +
        (e.retries === 1 ? " retry" : " retries") + " a call)";
      if (e.region === null) {
        show("region", "no traffic", "idle");
        regionLabel.textContent = "load; " + line;
      } else {
        show("region", REGION_WORDS[e.region], REGION_TONES[e.region]);
        regionLabel.textContent = "load " + fmt(e.load_per_s) + " calls/s; " + line;
      }
    }
    root.dataset.region = e.region || "";
  }

  function drawHeadline() {
    const h = headlineNow;
    if (!h) return;
    drawRegion();
    root.dataset.trafficState = h.state;
    if (h.state === "no_traffic") {
      ["amplification", "retry_ratio", "goodput_share", "recovery"].forEach(function (name) {
        show(name, "no traffic", "idle");
      });
      recoveryLabel.textContent = "time to recovery (starts with traffic)";
      root.dataset.headline = JSON.stringify(h);
      return;
    }
    show("amplification", h.amplification === null ? "–" : h.amplification.toFixed(2) + "×",
      h.amplification !== null && h.amplification > 1 + RETRY_BUDGET ? "bad" : "good");
    show("retry_ratio", h.retry_ratio === null ? "–" : percent(h.retry_ratio),
      h.retry_ratio !== null && h.retry_ratio > RETRY_BUDGET ? "bad" : "good");
    show("goodput_share", h.goodput_share === null ? "–" : percent(h.goodput_share),
      h.goodput_share !== null && h.goodput_share < RECOVERED_GOODPUT ? "bad" : "good");
    if (h.state === "healthy") {
      show("recovery", "no trigger", "idle");
      recoveryLabel.textContent = "time to recovery (after a trigger)";
    } else if (h.state === "triggered") {
      show("recovery", "trigger", "warn");
      recoveryLabel.textContent = h.trigger.kind + " trigger running, " +
        Math.max(0, Math.ceil(h.trigger.until_s - now)) + " s left";
    } else if (h.state === "recovered") {
      show("recovery", h.recovery_s.toFixed(0) + " s", "good");
      recoveryLabel.textContent = "time to recovery";
    } else {
      show("recovery", "+" + h.recovery_s.toFixed(0) + " s", "bad");
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

  // The vulnerable band, between the stable line and the capacity, behind the lines.
  function edgeBand(u) {
    const e = edge();
    if (e.stable_per_s === null || !(e.capacity_per_s > e.stable_per_s)) return null;
    const top = Math.max(u.bbox.top, u.valToPos(e.capacity_per_s, "y", true));
    const bottom = Math.min(u.bbox.top + u.bbox.height, u.valToPos(e.stable_per_s, "y", true));
    return bottom > top ? { top: top, bottom: bottom } : null;
  }

  function vulnerableHook(u) {
    const band = edgeBand(u);
    if (!band) return;
    u.ctx.save();
    u.ctx.fillStyle = COLORS.vulnerable;
    u.ctx.fillRect(u.bbox.left, band.top, u.bbox.width, band.bottom - band.top);
    u.ctx.restore();
  }

  // The band's words, over the lines (on a dark backing, so a line under them cannot hide
  // them), at its left end, in as many lines as the plot's width needs (a phone's: two);
  // above the capacity line when the band is too thin to hold them.
  function vulnerableLabel(u) {
    const band = edgeBand(u);
    if (!band) return;
    const ctx = u.ctx;
    const px = (compact ? 16 : 20) * devicePixelRatio;
    const pad = 4 * devicePixelRatio;
    const x = u.bbox.left + 10 * devicePixelRatio;
    ctx.save();
    ctx.font = "bold " + px + "px system-ui";
    ctx.textBaseline = "middle";
    const lines = wrap(ctx, VULNERABLE_TEXT, u.bbox.width - 20 * devicePixelRatio - 2 * pad);
    const width = Math.max.apply(null, lines.map(function (l) { return ctx.measureText(l).width; }));
    const step = px * 1.2;
    const height = lines.length * step;
    const inside = band.bottom - band.top >= height + 2 * pad;
    const top = inside ? (band.top + band.bottom - height) / 2 : Math.max(u.bbox.top + pad, band.top - height - pad);
    ctx.fillStyle = "rgba(0, 0, 0, 0.6)";
    ctx.fillRect(x - pad, top - pad, width + 2 * pad, height + 2 * pad);
    ctx.fillStyle = COLORS.stable;
    lines.forEach(function (l, i) { ctx.fillText(l, x, top + step * (i + 0.5)); });
    ctx.restore();
  }

  // Words in lines no wider than `room` (a word longer than that gets a line of its own).
  function wrap(ctx, text, room) {
    const lines = [];
    text.split(" ").forEach(function (word) {
      const last = lines.length ? lines[lines.length - 1] + " " + word : null;
      if (last !== null && ctx.measureText(last).width <= room) lines[lines.length - 1] = last;
      else lines.push(word);
    });
    return lines;
  }

  // The plot fills its box under its legend (one or two lines, measured once it exists).
  function size(box, plot) {
    const legend = plot ? plot.root.querySelector(".u-legend") : null;
    const below = legend ? legend.getBoundingClientRect().height + 4 : 48;
    return { width: box.clientWidth, height: Math.max(90, Math.floor(box.clientHeight - below)) };
  }

  function resizePlots() {
    if (!loadPlot) return;
    if (isCompact() !== compact) {
      compact = isCompact();
      loadPlot.destroy();
      waitPlot.destroy();
      loadPlot = waitPlot = null;
      schedule();
      return;
    }
    [[loadPlot, loadBox], [waitPlot, waitBox]].forEach(function (pair) {
      const want = size(pair[1], pair[0]);
      if (want.width !== pair[0].width || want.height !== pair[0].height) pair[0].setSize(want);
    });
  }

  function line(label, stroke, width, dash, scale) {
    const out = { label: label, stroke: stroke, width: width, dash: dash, scale: scale || "y",
      points: { show: false }, value: function (_u, v) { return v === null || v === undefined ? "–" : fmt(v); } };
    if (!dash) delete out.dash;
    return out;
  }

  function fmt(v) { return v >= 100 ? Math.round(v).toString() : (Math.round(v * 10) / 10).toString(); }

  function two(n) { return n < 10 ? "0" + n : String(n); }

  // Clock time of a second, in the browser's time zone: one label format for every tick (no
  // date: the panel shows at most five minutes), spaced so labels never touch.
  function clock(sec) {
    const d = new Date(sec * 1000);
    return two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
  }

  // Ticks at whole multiples of a step from 5 s to 5 min, about one per 130 px.
  function timeSplits(u, _i, min, max) {
    const steps = [5, 10, 15, 30, 60, 120, 300];
    const want = Math.max(2, Math.floor(u.bbox.width / devicePixelRatio / 130));
    const step = steps.find(function (st) { return (max - min) / st <= want; }) || 300;
    // no label closer than half a label to either edge (it would be cut off)
    const margin = (max - min) * 45 / Math.max(1, u.bbox.width / devicePixelRatio);
    const out = [];
    for (let t = Math.ceil((min + margin) / step) * step; t <= max - margin; t += step) out.push(t);
    return out;
  }

  // Smaller type on the axes of a smaller screen (a 1280x720 projector), so the plots keep
  // their height; the plots are made again when a resize crosses the line.
  function isCompact() { return window.innerHeight < 860 || window.innerWidth < 1500; }
  let compact = isCompact();
  function font() { return (compact ? 15 : 18) + "px system-ui"; }

  function xAxis() {
    return { stroke: "#fff", grid: { stroke: "#333" }, ticks: { stroke: "#555" }, font: font(),
      size: compact ? 34 : 44, splits: timeSplits, values: function (_u, ticks) { return ticks.map(clock); } };
  }

  // A y axis wide enough for a 5-digit tick and its title beside it (uPlot's default size
  // let a 4-digit tick run into the title), on the left or (side 1) the right.
  function yAxis(label, scale, side, stroke) {
    return { scale: scale, side: side || 3, label: label, stroke: stroke || "#fff",
      grid: { show: !side, stroke: "#333" }, ticks: { stroke: "#555" }, font: font(),
      labelFont: "bold " + font(), size: compact ? 64 : 78, labelSize: compact ? 22 : 28, gap: 6,
      values: function (_u, ticks) { return ticks.map(function (v) { return v >= 1000 ? (v / 1000) + "k" : String(v); }); } };
  }

  // A right-hand axis that draws nothing and takes a y axis's width.
  function gutterAxis(scale) {
    return { scale: scale, side: 1, size: compact ? 64 : 78, stroke: "transparent",
      grid: { show: false }, ticks: { show: false },
      values: function (_u, ticks) { return ticks.map(function () { return ""; }); } };
  }

  function timeSeries() {
    return { label: "at", value: function (_u, v) { return v === null || v === undefined ? "–" : clock(v); } };
  }

  function makePlots() {
    loadPlot = new window.uPlot(Object.assign(size(loadBox), {
      scales: { x: { time: false } },
      // an empty right axis as wide as the wait plot's, so both plots share one time axis
      axes: [xAxis(), yAxis("attempts / s", "y"), gutterAxis("y")],
      series: LOAD_SERIES.map(function (s) { return s.label === "at" ? timeSeries() : line.apply(null, s.line); }),
      legend: { live: true },
      hooks: { drawClear: [bandHook, vulnerableHook], draw: [vulnerableLabel], setCursor: [latestLegend] },
    }), LOAD_SERIES.map(function () { return []; }), loadBox);
    waitPlot = new window.uPlot(Object.assign(size(waitBox), {
      scales: { x: { time: false }, ms: { auto: true }, wasted: { auto: true } },
      axes: [xAxis(), yAxis("ms", "ms"), yAxis("ms/s", "wasted", 1, COLORS.wasted)],
      series: [
        timeSeries(),
        line("queue wait p50 (ms)", COLORS.p50, 2, undefined, "ms"),
        line("p99 (ms)", COLORS.p99, 2, undefined, "ms"),
        line("wasted server time (ms per s, right axis)", COLORS.wasted, 2, undefined, "wasted"),
      ],
      legend: { live: true },
      hooks: { drawClear: [bandHook], setCursor: [latestLegend] },
    }), [[], [], [], []], waitBox);
  }

  // The boxes take their size from the page's grid, which may settle after the first draw
  // (fonts, the table filling in) or change (a projector, a resized window): follow it.
  if (window.ResizeObserver) {
    let pending = 0;
    const observer = new ResizeObserver(function () {
      if (!pending) pending = window.requestAnimationFrame(function () { pending = 0; resizePlots(); fitRows(); });
    });
    observer.observe(loadBox);
    observer.observe(waitBox);
  }

  // With no pointer over a chart, its legend shows the latest complete second's values.
  function latestLegend(u) {
    if (u.cursor.left === undefined || u.cursor.left < 0) showLatest(u);
  }

  function showLatest(u) {
    const n = u.data[0].length;
    if (n && (u.cursor.left === undefined || u.cursor.left < 0)) u.setLegend({ idx: n - 1 }, false);
  }

  // The load chart's series, in drawing order (goodput over the calls asked, which it
  // hides while every call succeeds), each with what it draws of a second.
  const LOAD_SERIES = [
    { label: "at", value: function (r) { return r.second; } },
    { label: "offered", line: ["offered", COLORS.offered, 3], value: function (r) { return r.offered; } },
    { label: "load", line: ["load", COLORS.calls, 3], value: function (r) { return r.calls; } },
    { label: "capacity", line: ["capacity", COLORS.capacity, 2, [8, 6]], value: function () { return model ? model.capacity_per_s : null; } },
    { label: "stable line", line: ["stable line", COLORS.stable, 3, [6, 6]], value: function () { return edge().stable_per_s; } },
    { label: "goodput", line: ["goodput", COLORS.goodput, 3], value: function (r) { return r.calls_ok; } },
    { label: "shed or 429", line: ["shed or 429", COLORS.shed, 2], value: function (r) { return r.shed + (r.limited || 0); } },
    { label: "timed out", line: ["timed out", COLORS.timeout, 2], value: function (r) { return r.timeout; } },
  ];

  function drawCharts(rows) {
    const xs = rows.map(function (r) { return r.second; });
    loadPlot.setData(LOAD_SERIES.map(function (s) { return rows.map(s.value); }));
    waitPlot.setData([
      xs,
      rows.map(function (r) { return r.wait_p50_ms; }),
      rows.map(function (r) { return r.wait_p99_ms; }),
      rows.map(function (r) { return r.wasted_us / 1000; }),
    ]);
    showLatest(loadPlot);
    showLatest(waitPlot);
    // The legends have their values now (a fresh legend is taller than it will stay): fit
    // each plot under its legend (nothing happens when the size is already right).
    resizePlots();
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
    several = {};
    rows.forEach(function (r) { several[r.student] = (several[r.student] || 0) + 1; });
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
      setCell(cells[0], r.student + (several[r.student] > 1 && r.scenario ? " · " + r.scenario : "")
        + (r.tier ? " · tier " + r.tier : ""));
      setCell(cells[1], r.attempts_per_s.toFixed(1));
      setCell(cells[2], r.attempts ? Math.round(r.retry_ratio * 100) + " %" : "–");
      setCell(cells[3], STATE_WORDS[r.state] || r.state);
      if (cells[3].className !== "state-" + r.state) cells[3].className = "state-" + r.state;
      setCell(cells[4], Math.round(r.share * 100) + " %");
      if (studentRows.children[index] !== tr) studentRows.insertBefore(tr, studentRows.children[index] || null);
    });
    rowOf.forEach(function (tr, session) {
      if (!keep.has(session)) { tr.remove(); rowOf.delete(session); }
    });
    fitRows();
  }

  // The chain of students: a row per tier (calls entering it, attempts it sends on, and
  // their ratio, the tier's amplification) and the shared dependency's hits per user request.
  const chainBox = document.getElementById("storm-chain");
  const chainRows = document.getElementById("chain-rows");
  const chainLeaf = document.getElementById("chain-leaf");

  function ratioText(x) { return x === null || x === undefined ? "–" : x.toFixed(1) + "×"; }

  function drawChain(chain) {
    if (!chainBox) return;
    const hide = !chain;
    if (chainBox.hidden !== hide) { chainBox.hidden = hide; window.requestAnimationFrame(fitRows); }
    if (hide) return;
    while (chainRows.children.length > chain.tiers.length) chainRows.lastChild.remove();
    chain.tiers.forEach(function (t, i) {
      let tr = chainRows.children[i];
      if (!tr) {
        tr = document.createElement("tr");
        for (let c = 0; c < 5; c++) tr.appendChild(document.createElement("td"));
        chainRows.appendChild(tr);
      }
      const last = i === chain.tiers.length - 1;
      setCell(tr.children[0], t.tier === 1 ? "1 (front)" : last ? t.tier + " (back)" : String(t.tier));
      setCell(tr.children[1], String(t.services));
      setCell(tr.children[2], t.calls_per_s.toFixed(1));
      setCell(tr.children[3], t.attempts_per_s.toFixed(1));
      setCell(tr.children[4], ratioText(t.amplification));
    });
    const leaf = chain.leaf_per_request;
    const text = leaf === null || leaf === undefined
      ? "No user requests at the front in the last " + chain.window_s + " s."
      : "Each user request reached the shared dependency <strong>" + leaf.toFixed(1) + "</strong> times.";
    if (chainLeaf.innerHTML !== text) chainLeaf.innerHTML = text;
  }

  const STATE_WORDS = { closed: "closed", half_open: "half-open", open: "open", idle: "no calls" };
  let several = {};

  // Whole rows only: the rows that fit the box are shown, the rest hidden and counted
  // below it ("+ 9 more: sort to see them"), so no row is ever cut in half.
  const studentsBox = studentRows.closest(".storm-students");
  const moreLine = document.getElementById("students-more");

  function fitRows() {
    const all = Array.from(studentRows.children);
    all.forEach(function (tr) { if (tr.hidden) tr.hidden = false; });
    if (!studentsBox || !all.length) { if (moreLine) moreLine.textContent = ""; return; }
    const table = studentRows.closest("table");
    const rowH = all[0].getBoundingClientRect().height || 1;
    const fixed = table.getBoundingClientRect().height - all.length * rowH;
    const room = studentsBox.clientHeight - fixed - (moreLine ? moreLine.getBoundingClientRect().height || rowH : 0);
    let fit = Math.max(1, Math.floor(room / rowH));
    if (fit >= all.length) fit = all.length;
    all.forEach(function (tr, i) { const hide = i >= fit; if (tr.hidden !== hide) tr.hidden = hide; });
    if (moreLine) {
      const text = fit < all.length ? "+ " + (all.length - fit) + " more: sort to see them" : "";
      if (moreLine.textContent !== text) moreLine.textContent = text;
    }
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
    drawHeadline();
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
    resizePlots();
    fitRows();
  });

  // --- the trigger form shows the parameter its kind uses -------------------------------------
  const triggerKind = document.getElementById("trigger-kind");
  function showTriggerFields() {
    if (!triggerKind) return;
    const uses = { factor: "slow", servers: "capacity" };
    root.querySelectorAll("#trigger-form [data-field]").forEach(function (label) {
      const kind = uses[label.dataset.field];
      const hide = Boolean(kind) && triggerKind.value !== kind;
      if (label.hidden !== hide) label.hidden = hide;
    });
  }
  if (triggerKind) {
    triggerKind.addEventListener("change", showTriggerFields);
    showTriggerFields();
  }

  // --- the traffic form says what it will offer before it starts --------------------------------
  const trafficForm = document.getElementById("traffic-form");
  const trafficLoad = document.getElementById("traffic-load");
  function sayLoad() {
    if (!trafficForm || !trafficLoad) return;
    const sessions = parseInt(trafficForm.dataset.sessions, 10) || 0;
    const capacity = parseFloat(trafficForm.dataset.capacity) || 0;
    const rate = parseInt(document.getElementById("traffic-rate").value, 10);
    if (!(rate >= 1)) { trafficLoad.textContent = "Calls/s: a whole number of calls per second."; return; }
    const offered = sessions * rate;
    trafficLoad.textContent = sessions + (sessions === 1 ? " session" : " sessions") + " x " + rate +
      " calls/s = " + offered + " calls/s, capacity " + Math.round(capacity) + " attempts/s" +
      (offered > capacity ? ": over capacity before any trigger" : "");
    if (offered > capacity) trafficLoad.dataset.over = "1"; else delete trafficLoad.dataset.over;
  }
  if (trafficForm) {
    trafficForm.addEventListener("input", sayLoad);
    sayLoad();
  }

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
    headline: function () { return headlineNow; },
    now: function () { return now; },
    chartData: function () { return loadPlot ? loadPlot.data.map(function (xs) { return Array.from(xs); }) : null; },
    chartSeries: function () { return LOAD_SERIES.map(function (s) { return s.label; }); },
    edge: function () { return edge(); },
    tableRows: function () { return studentRows.rows.length; },
    shownRows: function () { return Array.from(studentRows.rows).filter(function (tr) { return !tr.hidden; }).length; },
    ignoreTicks: function (ms) { ignoreTicksUntil = Date.now() + ms; },
    stats: stats,
  };

  connect();
})();
