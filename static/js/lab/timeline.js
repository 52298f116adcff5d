/* The burst timeline, drawn from journal events on uPlot's canvas (canvas.js): per call its attempts as segments
 * coloured by outcome, the backoff gaps, fast-fails, half-open probes, and a band with the
 * breaker's state over time (a lane per host with a breaker per host). On the lab page it
 * shows the last four bursts, grows while a burst runs and ends with the breakers' states
 * now; on the replay page each chart is one burst, every chart on one time scale. */

import { eventTime, onNextFrame } from "./util.js";
import { createCanvas } from "./canvas.js";

const WIDTH = 960;
const LEFT = 64;
const GAP = 30;
const TAIL = 56; // after the last burst: the breaker's state now
const BAND_Y = 24;
const BAND_H = 18;
// Host lanes (a breaker per host) sit between the breaker band and the call rows, one
// label's height apart so their labels never overlap (13 px type).
const HOST_H = 14;
const HOST_STEP = 18;
const ROW_H = 20;
const BAR_H = 14;
const MAX_BURSTS = 4;
const MIN_BURST_PX = 70;

/**
 * A timeline drawn into the element ``box`` (its text alternative into ``desc``). ``options``: live
 * (the lab page: the breakers now, growth while a burst runs), now() (the server's clock),
 * badge() (the breaker badge, or null), labels (state labels), time(event) (an event's ms;
 * the journal's clock by default), span (ms: a fixed scale, for charts that line up), maxBursts.
 */
export function createTimeline(box, desc, options) {
  const live = !!options.live;
  const labels = options.labels || {};
  const time = options.time || eventTime;
  const maxBursts = options.maxBursts || MAX_BURSTS;
  let span = options.span || 0;
  const events = [];
  const seen = {};

  function add(event) {
    if (seen[event.seq]) return;
    seen[event.seq] = true;
    events.push(event);
  }

  const canvas = box ? createCanvas(box, WIDTH) : null;
  let marks = [];
  const redraw = onNextFrame(function () { if (canvas) draw(); });

  function mark(shape, attrs, text, title) {
    marks.push(Object.assign({ shape: shape, text: text, title: title }, attrs));
  }

  function collect() {
    const bursts = {};
    const order = [];
    const transitions = [];
    const hostTransitions = {}; // host -> its breaker's transitions (breaker_scope: host)
    const hosts = {};
    events.forEach(function (e) {
      const host = e.data && e.data.host;
      const partOf = host !== undefined && host !== null;
      if (e.state_to && partOf) {
        (hostTransitions[host] || (hostTransitions[host] = [])).push({ t: time(e), from: e.state_from, to: e.state_to });
      } else if (e.state_to && !(e.data && e.data.dependency === "b")) {
        transitions.push({ t: time(e), from: e.state_from, to: e.state_to });
      }
      if (partOf) hosts[host] = true;
      if (!e.burst) return;
      let b = bursts[e.burst];
      if (!b) {
        b = bursts[e.burst] = { id: e.burst, start: null, end: null, done: false, finished: false, number: null, whatif: true, calls: {}, firstCall: null, size: null, seq: e.seq };
        order.push(b);
      }
      const t = time(e);
      // burst_queued and burst_end carry the burst's number; a row read back from the
      // journal says whatif: false when its burst can never be replayed.
      if (e.data && typeof e.data.burst === "number") b.number = e.data.burst;
      if (e.whatif === false) b.whatif = false;
      if (e.kind === "burst_end") b.finished = true;
      if (e.kind === "burst_queued") return;
      if (e.kind === "burst_start") {
        b.start = t;
        b.firstCall = e.data && e.data.first_call;
        b.size = e.data && e.data.size;
        b.perHost = !!(e.data && e.data.breakers === "host");
      }
      if (b.start === null || t < b.start) b.start = t;
      if (b.end === null || t > b.end) b.end = t;
      if (e.kind === "burst_end" || e.kind === "burst_interrupted" || e.kind === "burst_failed") b.done = true;
      if (!e.call) return;
      const c = b.calls[e.call] || (b.calls[e.call] = { attempts: [], sleeps: [], result: null });
      if (e.kind === "attempt") {
        const latency = e.latency_ms || 0;
        c.attempts.push({ start: t - latency, end: t, ok: e.outcome === "ok", n: e.attempt, error: e.error, host: e.data && e.data.host });
        if (t - latency < b.start) b.start = t - latency;
      } else if (e.kind === "sleep") {
        c.sleeps.push({ start: t, end: t + (e.backoff_ms || 0) });
        if (t + (e.backoff_ms || 0) > b.end) b.end = t + (e.backoff_ms || 0);
      } else if (e.kind === "call_result") {
        c.result = { t: t, outcome: e.outcome, probe: !!(e.data && e.data.probe) };
      }
    });
    order.sort(function (a, b) { return a.seq - b.seq; });
    transitions.sort(function (a, b) { return a.t - b.t; });
    Object.keys(hostTransitions).forEach(function (h) { hostTransitions[h].sort(function (a, b) { return a.t - b.t; }); });
    return {
      bursts: order.filter(function (b) { return b.start !== null; }).slice(-maxBursts),
      transitions: transitions,
      hostTransitions: hostTransitions,
      hosts: Object.keys(hosts).map(Number).sort(function (a, b) { return a - b; })
    };
  }

  function stateAt(transitions, t) {
    let state = transitions.length ? transitions[0].from || "closed" : "closed";
    for (let i = 0; i < transitions.length && transitions[i].t <= t; i++) state = transitions[i].to;
    return state;
  }

  function draw() {
    const data = collect();
    const bursts = data.bursts;
    const now = options.now ? options.now() : 0;
    marks = [];
    if (!bursts.length) {
      mark("text", { x: 12, y: 34, class: "tl-empty" }, "Run a burst: its calls appear here as they happen.");
      canvas.paint(marks, 60);
      if (desc) desc.textContent = "No burst yet.";
      return;
    }
    bursts.forEach(function (b) {
      if (!b.done && live) b.end = Math.max(b.end, Math.min(now, b.end + 30000));
      b.duration = Math.max(20, b.end - b.start);
    });
    // One time scale for every burst shown (so lengths compare), a minimum width each.
    const room = WIDTH - LEFT - (live ? TAIL : 0) - 10 - GAP * (bursts.length - 1);
    const total = bursts.reduce(function (sum, b) { return sum + b.duration; }, 0);
    // A replay's charts share one scale, given as the longest burst's span (options.span).
    let scale = room / (span || total);
    const minWidth = span ? 3 : MIN_BURST_PX;
    const narrow = bursts.filter(function (b) { return b.duration * scale < MIN_BURST_PX; });
    if (!span && narrow.length && narrow.length < bursts.length) {
      const wide = bursts.filter(function (b) { return b.duration * scale >= MIN_BURST_PX; });
      const wideTotal = wide.reduce(function (sum, b) { return sum + b.duration; }, 0);
      scale = (room - MIN_BURST_PX * narrow.length) / wideTotal;
    }
    let rows = 1;
    let x = LEFT;
    bursts.forEach(function (b) {
      b.x = x;
      b.width = Math.max(minWidth, b.duration * scale);
      b.scale = b.width / b.duration;
      x += b.width + GAP;
      const callNumbers = Object.keys(b.calls).map(Number);
      b.first = b.firstCall || (callNumbers.length ? Math.min.apply(null, callNumbers) : 1);
      const span = b.size || (callNumbers.length ? Math.max.apply(null, callNumbers) - b.first + 1 : 1);
      rows = Math.max(rows, span);
    });
    // The dependency's breaker row for the bursts that asked it; with a breaker per host
    // (a burst_start with breakers: host, or the badge now) a lane per host instead, and
    // no dependency-wide row when no burst shown used it.
    const badgeNow = options.badge ? options.badge() : null;
    const perHostNow = !!badgeNow && badgeNow.dataset.scope === "host";
    const partsNow = {};
    if (perHostNow) {
      badgeNow.querySelectorAll("li[data-part]").forEach(function (item) {
        const m = /^h(\d+)$/.exec(item.dataset.part);
        if (m) partsNow[m[1]] = item.dataset.state;
      });
    }
    const showGlobal = bursts.some(function (b) { return !b.perHost; }) || !perHostNow;
    const showHosts = bursts.some(function (b) { return b.perHost; }) || perHostNow;
    const hostLanes = !showHosts ? [] : data.hosts.concat(Object.keys(partsNow).map(Number).filter(function (h) {
      return data.hosts.indexOf(h) < 0;
    })).sort(function (a, b) { return a - b; });
    let y = BAND_Y;
    const bandY = showGlobal ? y : null;
    if (showGlobal) y += BAND_H + 4;
    const hostY = y;
    y += hostLanes.length * HOST_STEP;
    const rowsY = y + 8;
    const height = rowsY + rows * ROW_H + 26;

    if (showGlobal) mark("text", { x: 4, y: bandY + 13, class: "tl-axis" }, "breaker");
    hostLanes.forEach(function (h, i) {
      mark("text", { x: 4, y: hostY + i * HOST_STEP + HOST_H - 2, class: "tl-axis tl-host-axis", host: h }, "host " + h);
    });
    for (let r = 0; r < rows; r++) {
      if (rows <= 12 || r % 2 === 0) {
        mark("text", { x: 4, y: rowsY + r * ROW_H + BAR_H, class: "tl-axis" }, "call " + (r + 1));
      }
    }

    const summaryText = [];
    bursts.forEach(function (b, index) {
      function px(t) { return b.x + (t - b.start) * b.scale; }
      // state band: split the burst's span at each transition inside it (not drawn for a
      // burst with a breaker per host: no call asked the dependency's breaker then)
      const cuts = [b.start];
      data.transitions.forEach(function (tr) { if (tr.t > b.start && tr.t < b.end) cuts.push(tr.t); });
      cuts.push(b.end);
      for (let i = 0; showGlobal && !b.perHost && i < cuts.length - 1; i++) {
        const state = stateAt(data.transitions, cuts[i]);
        const bandX = px(cuts[i]);
        mark("rect", {
          x: bandX, y: bandY, width: Math.max(1, px(cuts[i + 1]) - bandX),
          height: BAND_H, class: "tl-band tl-band-" + state
        });
      }
      hostLanes.forEach(function (h, lane) {
        if (!b.perHost) return; // the hosts had no breaker of their own in this burst
        const own = data.hostTransitions[h] || [];
        const laneCuts = [b.start];
        own.forEach(function (tr) { if (tr.t > b.start && tr.t < b.end) laneCuts.push(tr.t); });
        laneCuts.push(b.end);
        for (let i = 0; i < laneCuts.length - 1; i++) {
          const state = own.length ? stateAt(own, laneCuts[i]) : "closed";
          const laneX = px(laneCuts[i]);
          mark("rect", {
            x: laneX, y: hostY + lane * HOST_STEP, width: Math.max(1, px(laneCuts[i + 1]) - laneX),
            height: HOST_H, class: "tl-band tl-host-band tl-band-" + state, host: h
          }, undefined, "host " + h + ": " + (labels[state] || state));
        }
      });
      const last = b.first + Math.max(0, (b.size || 1) - 1);
      const range = last === b.first ? String(b.first) : b.first + "–" + last;
      const noun = last === b.first ? "call " : "calls ";
      const label = b.width > 170 ? noun + range + " · " + Math.round(b.end - b.start) + " ms" : noun + range;
      mark("text", { x: b.x, y: 15, class: "tl-label" }, label + (b.done ? "" : " …"));

      let fastFails = 0;
      Object.keys(b.calls).forEach(function (key) {
        const callNo = Number(key);
        const c = b.calls[key];
        const y = rowsY + (callNo - b.first) * ROW_H;
        c.sleeps.forEach(function (s) {
          mark("line", {
            x1: px(s.start), x2: px(s.end), y1: y + BAR_H / 2, y2: y + BAR_H / 2, class: "tl-wait"
          });
        });
        c.attempts.forEach(function (a) {
          const ax = px(a.start);
          const where = a.host !== undefined && a.host !== null ? " on host " + a.host : "";
          mark("rect", {
            x: ax, y: y, width: Math.max(2, px(a.end) - ax), height: BAR_H, class: a.ok ? "tl-ok" : "tl-bad"
          }, undefined, "call " + callNo + ", attempt " + a.n + where + ": " + (a.ok ? "ok" : a.error));
        });
        if (c.result && c.result.outcome && c.result.outcome !== "success" && c.attempts.length === 0) {
          fastFails += 1;
          const fx = px(c.result.t);
          mark("path", {
            d: "M" + (fx - 4) + " " + y + " l8 " + BAR_H + " M" + (fx + 4) + " " + y + " l-8 " + BAR_H,
            class: "tl-fast"
          }, undefined, "call " + callNo + ": " + c.result.outcome.replace("_", " ") + ", 0 attempts");
        }
        if (c.result && c.result.probe) {
          const dx = px(c.result.t) + 6;
          const cy = y + BAR_H / 2;
          mark("path", { d: "M" + dx + " " + (cy - 5) + " l5 5 l-5 5 l-5 -5 z", class: "tl-probe" }, undefined, "call " + callNo + ": half-open probe, " + c.result.outcome);
        }
      });
      if (index < bursts.length - 1) {
        mark("text", { x: b.x + b.width + GAP / 2, y: rowsY + 4, class: "tl-gap", anchor: "middle" }, "⋯");
      }
      const calls = Object.keys(b.calls).length;
      summaryText.push("calls " + b.first + " to " + (b.first + Math.max(0, calls - 1)) + ": " + calls + " calls" + (fastFails ? ", " + fastFails + " failed fast" : "") + (b.done ? "" : ", running"));
    });
    // the tail: the breakers' states as the badge shows them now (open -> half-open live):
    // each host's with a breaker per host, else the dependency's
    if (!live) {
      canvas.paint(marks, height);
      if (desc) desc.textContent = summaryText.join("; ") + ".";
      return;
    }
    const lastBurst = bursts[bursts.length - 1];
    const tailX = lastBurst.x + lastBurst.width + 6;
    let nowText;
    if (perHostNow) {
      hostLanes.forEach(function (h, lane) {
        const state = partsNow[h] || "closed";
        mark("rect", { x: tailX, y: hostY + lane * HOST_STEP, width: TAIL - 10, height: HOST_H, class: "tl-band tl-host-band tl-band-" + state, host: h, now: true });
      });
      nowText = "Host breakers now: " + hostLanes.map(function (h) {
        const state = partsNow[h] || "closed";
        return "host " + h + " " + (labels[state] || state);
      }).join(", ");
    } else {
      const stateNow = badgeNow ? badgeNow.dataset.state : stateAt(data.transitions, now);
      mark("rect", { x: tailX, y: bandY, width: TAIL - 10, height: BAND_H, class: "tl-band tl-band-" + stateNow, now: true });
      nowText = "Breaker now " + (labels[stateNow] || stateNow);
    }
    mark("text", { x: tailX, y: 15, class: "tl-now" }, "now");
    canvas.paint(marks, height);
    if (desc) desc.textContent = nowText + ". Last " + bursts.length + " burst(s), " + summaryText.join("; ") + ".";
  }

  // live growth while a burst runs
  if (live) {
    window.setInterval(function () {
      const running = events.length && events.some(function (e) { return e.kind === "burst_start"; }) &&
        collect().bursts.some(function (b) { return !b.done; });
      if (running) redraw();
    }, 250);
  }

  /* The ms the bursts shown take together; a chart drawn to setSpan(ms) uses the scale
     that fits that many ms, so charts of different lengths line up. */
  function totalSpan() {
    return collect().bursts.reduce(function (sum, b) { return sum + Math.max(20, b.end - b.start); }, 0);
  }

  return {
    add: add,
    redraw: redraw,
    draw: function () { if (canvas) draw(); },
    span: totalSpan,
    setSpan: function (ms) { span = ms; },
  };
}
