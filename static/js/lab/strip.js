/* The traffic strip, on uPlot (static/vendor/uplot): per second of the session's last minute of
 * calls (bursts and steady traffic alike), attempts stacked by the outcome the client saw (for
 * the shared dependency, the model's answer: ok, error, shed, skipped, 429, timeout), calls stacked
 * by result (succeeded, degraded, failed, fast-failed: counted as labs.journal.kinds counts them), a band with the breaker's state in that second and, in
 * shared mode, the session's share of the shared dependency's load: one plot a row, on one
 * time axis. Drawn from a burst's journal events as the page receives them and from steady
 * traffic's seconds (labs.journal.seconds: each second's counts, sent once a second, a second
 * sent again replacing its counts); redrawn at most once a frame. */

import { callCount, perSecond } from "./counts.js";
import { eventTime, onNextFrame } from "./util.js";

const PANEL_H = { attempts: 96, calls: 72, share: 52 };
const AXIS_W = 92; // the rows' titles and their largest value
const BAND_H = 10; // the breaker's band, above the attempts' bars (CSS px)
const X_AXIS_H = 26;
const STRIP_SECONDS = 60;
const ATTEMPT_KINDS = ["ok", "error", "timeout", "shed", "skipped", "limited"];
const CALL_KINDS = ["succeeded", "degraded", "failed", "fast_failed"];

/** The strip chart in #traffic-strip (its text alternative in #traffic-strip-desc): uPlot
 * rows made on the first draw, given new data on each one after. */
export function createStrip() {
  const box = document.getElementById("traffic-strip");
  const desc = document.getElementById("traffic-strip-desc");
  const rowCounts = new Map(); // second -> { attempts: {kind: n}, calls: {kind: n} }, bursts' rows
  const traffic = new Map(); // second -> steady traffic's counts of that second, as the server sent them
  const seconds = new Map(); // second -> both of the above added up (see merged)
  const rowTransitions = [];
  let transitions = [];
  const seen = new Set();
  const latest = document.getElementById("strip-latest");
  // Shared mode: this session's attempts per second of the model's arrival time (attempts,
  // retries) and the class's offered attempts per second, both from the "shared" messages
  // (the counters the model keeps per session and for the class).
  const own = new Map();
  const offered = new Map();
  let ownBefore = 0; // own counts are complete for the seconds before this one

  function bucket(second) {
    let b = rowCounts.get(second);
    if (!b) {
      b = { attempts: {}, calls: {} };
      rowCounts.set(second, b);
    }
    return b;
  }

  function addUp(into, counts) {
    Object.keys(counts).forEach(function (k) {
      if (counts[k]) into[k] = (into[k] || 0) + counts[k];
    });
  }

  // A second's counts from both sources (its entry in ``seconds`` is rebuilt on each change).
  function merged(second) {
    const b = { attempts: {}, calls: {} };
    const rows = rowCounts.get(second);
    if (!rows && !traffic.has(second)) {
      seconds.delete(second);
      return b;
    }
    if (rows) {
      addUp(b.attempts, rows.attempts);
      addUp(b.calls, rows.calls);
    }
    const t = traffic.get(second);
    if (t) {
      addUp(b.attempts, t.attempts);
      CALL_KINDS.forEach(function (k) { if (t.counts[k]) b.calls[k] = (b.calls[k] || 0) + t.counts[k]; });
    }
    seconds.set(second, b);
    return b;
  }

  function rebuildTransitions() {
    transitions = rowTransitions.slice();
    Array.from(traffic.keys()).sort(function (a, b) { return a - b; }).forEach(function (second) {
      traffic.get(second).transitions.forEach(function (pair) {
        transitions.push({ t: second, from: pair[0], to: pair[1] });
      });
    });
  }

  /* One second of steady traffic (its absolute counts): kept when it counts at least as many
     rows as the copy already here. */
  function addSecond(second) {
    if (!second || typeof second.t !== "number") return;
    const had = traffic.get(second.t);
    if (had && had.n > second.n) return;
    traffic.set(second.t, second);
    const oldest = second.t - 2 * STRIP_SECONDS;
    traffic.forEach(function (_v, s) { if (s < oldest) { traffic.delete(s); merged(s); } });
    merged(second.t);
    if (second.transitions.length || (had && had.transitions.length)) rebuildTransitions();
    showLatest();
  }

  // The newest complete second in words (the second under way is still filling up).
  function showLatest() {
    if (!latest) return;
    const nowSecond = Math.floor(Date.now() / 1000);
    const done = Array.from(traffic.keys()).filter(function (s) { return s < nowSecond; });
    if (!done.length) return;
    const second = traffic.get(Math.max.apply(null, done));
    latest.dataset.second = String(second.t);
    latest.textContent = "Last full second of traffic (" + second.clock + "): " + second.text;
  }

  function attemptKind(event) {
    const answer = event.data && event.data.outcome;
    if (answer) return ATTEMPT_KINDS.indexOf(answer) >= 0 ? answer : "error";
    if (event.outcome === "ok") return "ok";
    return event.error === "timeout" ? "timeout" : "error";
  }

  function callKind(event) {
    return callCount(event.outcome);
  }

  function add(event) {
    if (!event || seen.has(event.seq)) return;
    // Steady traffic's rows come counted, a second at a time (addSecond).
    if (perSecond(event.kind, event.burst)) return;
    seen.add(event.seq);
    const second = Math.floor(eventTime(event) / 1000);
    const part = event.data && (event.data.host !== undefined || event.data.dependency === "b");
    if (event.state_to && !part) {
      rowTransitions.push({ t: second, to: event.state_to, from: event.state_from });
      rebuildTransitions();
    }
    if (event.kind === "attempt") {
      const counts = bucket(second).attempts;
      const kind = attemptKind(event);
      counts[kind] = (counts[kind] || 0) + 1;
    } else if (event.kind === "call_result") {
      const counts = bucket(second).calls;
      const kind = callKind(event);
      counts[kind] = (counts[kind] || 0) + 1;
    }
    merged(second);
  }

  const plots = {}; // row -> uPlot
  let drawn = { seconds: 0, attempts: 0, calls: 0, shares: 0, labels: [] };

  const redraw = onNextFrame(function () { if (box && window.uPlot) draw(); });

  function stateAt(second) {
    transitions.sort(function (a, b) { return a.t - b.t; });
    let state = transitions.length ? transitions[0].from || "closed" : "closed";
    for (let i = 0; i < transitions.length && transitions[i].t <= second; i++) state = transitions[i].to;
    return state;
  }

  function total(counts) {
    return Object.keys(counts).reduce(function (sum, k) { return sum + counts[k]; }, 0);
  }

  function cssVar(name, fallback) {
    return window.getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
  }

  function colors() {
    const ok = cssVar("--breaker-closed", "#15803d");
    const bad = cssVar("--danger", "#b91c1c");
    const wait = cssVar("--wait", "#475569");
    const probe = cssVar("--probe", "#f59e0b");
    return {
      attempts: { ok: ok, error: bad, timeout: wait, shed: probe, skipped: probe, limited: probe },
      calls: { succeeded: ok, degraded: cssVar("--degraded", "#a16207"), failed: bad, fast_failed: cssVar("--fast", "#6d28d9") },
      share: cssVar("--accent", "#2563eb"),
      band: { closed: cssVar("--breaker-closed-bg", "#dcfce7"), open: cssVar("--breaker-open", "#b91c1c"), half_open: probe },
      bandEdge: ok,
      text: cssVar("--fg-muted", "#374151"),
      grid: cssVar("--border", "#e5e7eb"),
      font: cssVar("--font", "system-ui"),
    };
  }

  // Stacked bars: each series is the running total of the kinds up to its own, drawn from
  // the tallest down, so every kind shows as its own slice of the second's bar.
  function stacked(kinds, key, xs, first) {
    const sums = kinds.map(function () { return []; });
    xs.forEach(function (_x, i) {
      const b = seconds.get(first + i);
      let sum = 0;
      kinds.forEach(function (kind, k) {
        const n = b ? b[key][kind] || 0 : 0;
        sum += n;
        sums[k].push(n ? sum : null);
      });
    });
    return sums.reverse();
  }

  function bars(label, color) {
    return {
      label: label, fill: color, stroke: color, width: 0, points: { show: false },
      paths: window.uPlot.paths.bars({ size: [0.82, 24], align: 0 }),
    };
  }

  // The row's left gutter, written by its draw hook (gutterHook); a grid line at its largest value.
  function yAxis(max, c) {
    return {
      scale: "y", size: AXIS_W, stroke: c.text, grid: { stroke: c.grid, width: 1 }, ticks: { show: false },
      splits: function () { return [max]; },
      values: function () { return [""]; },
    };
  }

  // The row's title halfway down its bars and its largest value at their foot (as the
  // breaker's band, when there is one, sits at the top).
  function gutterHook(title, max, maxText, c) {
    return function (u) {
      const ratio = u.pxRatio || 1;
      const ctx = u.ctx;
      const barsTop = u.valToPos(max, "y", true);
      const bottom = u.valToPos(0, "y", true);
      ctx.save();
      ctx.fillStyle = c.text;
      ctx.font = 13 * ratio + "px " + c.font;
      ctx.textAlign = "left";
      ctx.textBaseline = "middle";
      ctx.fillText(title, 4 * ratio, (barsTop + bottom) / 2);
      ctx.textBaseline = "bottom";
      ctx.fillText(maxText, 4 * ratio, bottom);
      ctx.restore();
    };
  }

  function xAxis(c, show) {
    return {
      show: show, stroke: c.text, font: "12px " + c.font, size: X_AXIS_H, grid: { show: false },
      ticks: { show: false },
      splits: function () { return [-STRIP_SECONDS + 1, 0]; },
      values: function () { return ["-" + STRIP_SECONDS + " s", "last"]; },
    };
  }

  // The breaker's state per second, a band above the attempts' bars ("breaker" beside it).
  function bandHook(first, c, withBand) {
    return function (u) {
      if (!withBand) return;
      const ctx = u.ctx;
      const h = BAND_H * (u.pxRatio || 1);
      const top = u.bbox.top;
      ctx.save();
      for (let i = 0; i < STRIP_SECONDS; i++) {
        const x0 = u.valToPos(i - STRIP_SECONDS + 1 - 0.5, "x", true);
        const x1 = u.valToPos(i - STRIP_SECONDS + 1 + 0.5, "x", true);
        const state = stateAt(first + i);
        ctx.fillStyle = c.band[state] || c.band.closed;
        ctx.fillRect(x0, top, x1 - x0, h);
        if (state === "closed") {
          ctx.strokeStyle = c.bandEdge;
          ctx.lineWidth = 0.5 * (u.pxRatio || 1);
          ctx.strokeRect(x0, top, x1 - x0, h);
        }
      }
      ctx.fillStyle = c.text;
      ctx.font = 13 * (u.pxRatio || 1) + "px " + c.font;
      ctx.textAlign = "left";
      ctx.textBaseline = "middle";
      ctx.fillText("breaker", 4 * (u.pxRatio || 1), top + h / 2);
      ctx.restore();
    };
  }

  function plot(row, options, data) {
    const width = Math.max(240, box.clientWidth);
    let u = plots[row];
    if (u && (u.series.length !== options.series.length || u.width !== width)) {
      u.destroy();
      u = null;
    }
    if (!u) {
      const holder = document.createElement("div");
      holder.className = "strip-row strip-" + row;
      box.appendChild(holder);
      u = new window.uPlot(Object.assign({ width: width, padding: [4, 14, 0, 0], legend: { show: false }, cursor: { show: false } }, options), data, holder);
      plots[row] = u;
      return;
    }
    u.batch(function () {
      // axes and hooks close over this draw's figures: set them again
      Object.assign(u.axes[1], { splits: options.axes[1].splits, values: options.axes[1].values });
      u.hooks.drawClear = options.hooks.drawClear || [];
      u.hooks.draw = options.hooks.draw || [];
      u.setScale("y", { min: options.scales.y.range[0], max: options.scales.y.range[1] });
      u.setData(data, false);
      u.redraw(false, true);
    });
  }

  function remove(row) {
    if (!plots[row]) return;
    plots[row].root.parentNode.remove();
    delete plots[row];
  }

  function draw() {
    const empty = box.querySelector(".strip-empty");
    if (!seconds.size) {
      Object.keys(plots).forEach(remove);
      if (empty) empty.hidden = false;
      if (desc) desc.textContent = "No call yet.";
      drawn = { seconds: 0, attempts: 0, calls: 0, shares: 0, labels: [] };
      return;
    }
    if (empty) empty.hidden = true;
    const c = colors();
    const last = Math.max.apply(null, Array.from(seconds.keys()));
    const first = last - STRIP_SECONDS + 1;
    const xs = [];
    for (let s = first; s <= last; s++) xs.push(s - last);
    let maxAttempts = 1;
    let maxCalls = 1;
    let attempts = 0;
    let calls = 0;
    for (let s = first; s <= last; s++) {
      const b = seconds.get(s);
      if (!b) continue;
      maxAttempts = Math.max(maxAttempts, total(b.attempts));
      maxCalls = Math.max(maxCalls, total(b.calls));
      attempts += total(b.attempts);
      calls += total(b.calls);
    }
    // With a breaker per host there is no dependency-wide breaker to draw (the timeline
    // has a lane per host).
    const badgeNow = document.getElementById("breaker-badge");
    const withBand = !(badgeNow && badgeNow.dataset.scope === "host");
    const withShare = offered.size > 0;
    const xRange = { time: false, range: [-STRIP_SECONDS + 0.5, 0.5] };
    // the band's room above the tallest bar: BAND_H and a gap, in the row's units
    const bandRoom = withBand ? (BAND_H + 6) / (PANEL_H.attempts - BAND_H - 6) : 0.05;
    const attemptSeries = ATTEMPT_KINDS.slice().reverse().map(function (k) { return bars(k, c.attempts[k]); });
    plot("attempts", {
      height: PANEL_H.attempts,
      scales: { x: xRange, y: { range: [0, maxAttempts * (1 + bandRoom)] } },
      axes: [xAxis(c, false), yAxis(maxAttempts, c)],
      series: [{}].concat(attemptSeries),
      hooks: { drawClear: [bandHook(first, c, withBand)], draw: [gutterHook("attempts", maxAttempts, "max " + maxAttempts, c)] },
    }, [xs].concat(stacked(ATTEMPT_KINDS, "attempts", xs, first)));
    const callSeries = CALL_KINDS.slice().reverse().map(function (k) { return bars(k, c.calls[k]); });
    plot("calls", {
      height: PANEL_H.calls + (withShare ? 0 : X_AXIS_H),
      scales: { x: xRange, y: { range: [0, maxCalls * 1.05] } },
      axes: [xAxis(c, !withShare), yAxis(maxCalls, c)],
      series: [{}].concat(callSeries),
      hooks: { draw: [gutterHook("calls", maxCalls, "max " + maxCalls, c)] },
    }, [xs].concat(stacked(CALL_KINDS, "calls", xs, first)));
    let shareBars = 0;
    if (withShare) {
      let maxShare = 0;
      const values = xs.map(function (_x, i) {
        const v = shareAt(first + i);
        if (v !== null && v > maxShare) maxShare = v;
        if (v !== null && v > 0) shareBars += 1;
        return v === null || v <= 0 ? null : v;
      });
      const top = maxShare > 0 ? maxShare : 1;
      plot("share", {
        height: PANEL_H.share + X_AXIS_H,
        scales: { x: xRange, y: { range: [0, top * 1.05] } },
        axes: [xAxis(c, true), yAxis(top, c)],
        series: [{}, bars("your share", c.share)],
        hooks: { draw: [gutterHook("your share", top, "max " + Math.round(top * 100) + " %", c)] },
      }, [xs, values]);
    } else {
      remove("share");
    }
    drawn = {
      seconds: xs.length, attempts: attempts, calls: calls, shares: shareBars,
      labels: (withBand ? ["breaker"] : []).concat(["attempts", "calls"], withShare ? ["your share"] : []),
    };
    if (desc) {
      desc.textContent = "The last " + STRIP_SECONDS + " s of calls: " + attempts + " attempts and " +
        calls + " calls, per second by outcome, and the breaker's state.";
    }
  }

  // The second under way becomes the last full one as the clock moves on, message or not.
  if (latest) window.setInterval(showLatest, 1000);

  // Follow the card's width (a resized window, a phone turned).
  if (box && window.ResizeObserver) {
    let width = box.clientWidth;
    new ResizeObserver(function () {
      if (box.clientWidth === width) return;
      width = box.clientWidth;
      redraw();
    }).observe(box);
  }

  function counts() {
    const out = {};
    seconds.forEach(function (b, second) {
      if (Object.keys(b.attempts).length || Object.keys(b.calls).length) out[second] = { attempts: b.attempts, calls: b.calls };
    });
    return out;
  }

  // This session's attempts in ``second`` (model time) over the class's; null if unknown.
  function shareAt(second) {
    const all = offered.get(second);
    if (!all || second >= ownBefore) return null; // the second under way: not complete yet
    const mine = own.get(second);
    return mine ? mine.attempts / all : 0;
  }

  function setOwn(second, attempts, retries) {
    own.set(second, { attempts: attempts, retries: retries });
    if (second + 1 > ownBefore) ownBefore = second + 1;
  }

  function setOffered(second, n) {
    offered.set(second, n);
    const oldest = second - 2 * STRIP_SECONDS;
    offered.forEach(function (_v, s) { if (s < oldest) offered.delete(s); });
    own.forEach(function (_v, s) { if (s < oldest) own.delete(s); });
  }

  function shares() {
    const out = {};
    offered.forEach(function (_n, s) { out[s] = shareAt(s); });
    return out;
  }

  return { add: add, addSecond: addSecond, redraw: redraw, counts: counts, setOffered: setOffered, setOwn: setOwn, shares: shares, drawn: function () { return drawn; } };
}
