/* The traffic strip (SVG): per second of the session's last minute of calls (bursts and steady
 * traffic alike), attempts stacked by the outcome the client saw (for the shared dependency,
 * the model's answer: ok, error, shed, skipped, timeout), calls stacked by result (ok, failed,
 * fast-failed), a band with the breaker's state in that second and, in shared mode, the
 * session's share of the shared dependency's load. Drawn from the journal events the page
 * receives; redrawn at most once a frame. */

import { clearSvg, eventTime, onNextFrame, svgEl } from "./util.js";

/** The strip chart in #traffic-strip (its text alternative in #traffic-strip-desc). */
export function createStrip() {
  const svg = document.getElementById("traffic-strip");
  const desc = document.getElementById("traffic-strip-desc");
  const STRIP_SECONDS = 60;
  const WIDTH = 960;
  const LEFT = 70;
  const BAND_H = 10;
  const ROW_H = 60;
  const SHARE_H = 30;
  const ATTEMPT_KINDS = ["ok", "error", "timeout", "shed", "skipped"];
  const CALL_KINDS = ["ok", "failed", "fast"];
  const FAST = { rejected_open: true, rejected_half_open: true, rejected_bulkhead: true };
  const seconds = new Map(); // second -> { attempts: {kind: n}, calls: {kind: n} }
  const transitions = [];
  const seen = new Set();
  // Shared mode: this session's attempts per second of the model's arrival time (attempts,
  // retries) and the class's offered attempts per second, both from the "shared" messages
  // (the counters the model keeps per session and for the class).
  const own = new Map();
  const offered = new Map();
  let ownBefore = 0; // own counts are complete for the seconds before this one

  function bucket(second) {
    let b = seconds.get(second);
    if (!b) {
      b = { attempts: {}, calls: {} };
      seconds.set(second, b);
    }
    return b;
  }

  function attemptKind(event) {
    const answer = event.data && event.data.outcome;
    if (answer) return ATTEMPT_KINDS.indexOf(answer) >= 0 ? answer : "error";
    if (event.outcome === "ok") return "ok";
    return event.error === "timeout" ? "timeout" : "error";
  }

  function callKind(event) {
    if (event.outcome === "success" || event.outcome === "ok") return "ok";
    return FAST[event.outcome] ? "fast" : "failed";
  }

  function add(event) {
    if (!event || seen.has(event.seq)) return;
    seen.add(event.seq);
    const second = Math.floor(eventTime(event) / 1000);
    const part = event.data && (event.data.host !== undefined || event.data.dependency === "b");
    if (event.state_to && !part) transitions.push({ t: second, to: event.state_to, from: event.state_from });
    if (event.kind === "attempt") {
      const counts = bucket(second).attempts;
      const kind = attemptKind(event);
      counts[kind] = (counts[kind] || 0) + 1;
    } else if (event.kind === "call_result") {
      const counts = bucket(second).calls;
      const kind = callKind(event);
      counts[kind] = (counts[kind] || 0) + 1;
    }
  }

  const redraw = onNextFrame(function () { if (svg) draw(); });


  function stateAt(second) {
    transitions.sort(function (a, b) { return a.t - b.t; });
    let state = transitions.length ? transitions[0].from || "closed" : "closed";
    for (let i = 0; i < transitions.length && transitions[i].t <= second; i++) state = transitions[i].to;
    return state;
  }

  function total(counts) {
    return Object.keys(counts).reduce(function (sum, k) { return sum + counts[k]; }, 0);
  }

  function stack(counts, kinds, prefix, x, w, bottom, scale, second) {
    let y = bottom;
    kinds.forEach(function (kind) {
      const n = counts[kind] || 0;
      if (!n) return;
      const h = n * scale;
      y -= h;
      svg.appendChild(svgEl("rect", {
        x: x, y: y, width: w, height: h, class: prefix + kind,
        "data-second": second, "data-count": n,
      }));
    });
  }

  function draw() {
    clearSvg(svg);
    if (!seconds.size) {
      svg.setAttribute("viewBox", "0 0 " + WIDTH + " 40");
      svg.appendChild(svgEl("text", { x: 12, y: 26, class: "tl-empty" }, "Start traffic: its calls appear here second by second."));
      if (desc) desc.textContent = "No call yet.";
      return;
    }
    const last = Math.max.apply(null, Array.from(seconds.keys()));
    const first = last - STRIP_SECONDS + 1;
    const w = (WIDTH - LEFT - 10) / STRIP_SECONDS;
    let maxAttempts = 1;
    let maxCalls = 1;
    for (let s = first; s <= last; s++) {
      const b = seconds.get(s);
      if (!b) continue;
      maxAttempts = Math.max(maxAttempts, total(b.attempts));
      maxCalls = Math.max(maxCalls, total(b.calls));
    }
    const bandY = 4;
    const attemptsBottom = bandY + BAND_H + 6 + ROW_H;
    const callsBottom = attemptsBottom + 8 + ROW_H;
    const withShare = offered.size > 0;
    const shareBottom = withShare ? callsBottom + 8 + SHARE_H : callsBottom;
    svg.setAttribute("viewBox", "0 0 " + WIDTH + " " + (shareBottom + 20));
    // With a breaker per host there is no dependency-wide breaker to draw (the timeline
    // has a lane per host).
    const badgeNow = document.getElementById("breaker-badge");
    const withBand = !(badgeNow && badgeNow.dataset.scope === "host");
    if (withBand) svg.appendChild(svgEl("text", { x: 4, y: bandY + 9, class: "tl-axis" }, "breaker"));
    svg.appendChild(svgEl("text", { x: 4, y: attemptsBottom - ROW_H / 2, class: "tl-axis" }, "attempts"));
    svg.appendChild(svgEl("text", { x: 4, y: attemptsBottom - 2, class: "tl-axis" }, "max " + maxAttempts));
    svg.appendChild(svgEl("text", { x: 4, y: callsBottom - ROW_H / 2, class: "tl-axis" }, "calls"));
    svg.appendChild(svgEl("text", { x: 4, y: callsBottom - 2, class: "tl-axis" }, "max " + maxCalls));
    let attempts = 0;
    let calls = 0;
    for (let s = first; s <= last; s++) {
      const x = LEFT + (s - first) * w;
      if (withBand) svg.appendChild(svgEl("rect", { x: x, y: bandY, width: w, height: BAND_H, class: "tl-band-" + stateAt(s) }));
      const b = seconds.get(s);
      if (!b) continue;
      attempts += total(b.attempts);
      calls += total(b.calls);
      stack(b.attempts, ATTEMPT_KINDS, "ts-attempt-", x + 0.5, Math.max(1, w - 1), attemptsBottom, ROW_H / maxAttempts, s);
      stack(b.calls, CALL_KINDS, "ts-call-", x + 0.5, Math.max(1, w - 1), callsBottom, ROW_H / maxCalls, s);
    }
    if (withShare) {
      let maxShare = 0;
      const shares = [];
      for (let s = first; s <= last; s++) {
        const v = shareAt(s);
        shares.push(v);
        if (v !== null && v > maxShare) maxShare = v;
      }
      const top = maxShare > 0 ? maxShare : 1;
      svg.appendChild(svgEl("text", { x: 4, y: shareBottom - SHARE_H / 2, class: "tl-axis" }, "your share"));
      svg.appendChild(svgEl("text", { x: 4, y: shareBottom - 2, class: "tl-axis" }, "max " + Math.round(top * 100) + " %"));
      shares.forEach(function (v, i) {
        if (v === null || v <= 0) return;
        const h = (v / top) * SHARE_H;
        svg.appendChild(svgEl("rect", {
          x: LEFT + i * w + 0.5, y: shareBottom - h, width: Math.max(1, w - 1), height: h,
          class: "ts-share", "data-second": first + i, "data-share": v.toFixed(4),
        }));
      });
    }
    svg.appendChild(svgEl("text", { x: LEFT, y: shareBottom + 16, class: "tl-now" }, "-" + STRIP_SECONDS + " s"));
    svg.appendChild(svgEl("text", { x: WIDTH - 40, y: shareBottom + 16, class: "tl-now" }, "last"));
    if (desc) {
      desc.textContent = "The last " + STRIP_SECONDS + " s of calls: " + attempts + " attempts and " +
        calls + " calls, per second by outcome, and the breaker's state.";
    }
  }

  function counts() {
    const out = {};
    seconds.forEach(function (b, second) { out[second] = { attempts: b.attempts, calls: b.calls }; });
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

  return { add: add, redraw: redraw, counts: counts, setOffered: setOffered, setOwn: setOwn, shares: shares };
}
