/* Failure Lab: the live lab page. Plain JavaScript, no framework, no build step.
 *
 * - A websocket to ws/sessions/<id>/?after=<last seq>. The server replays every journal row
 *   after that number, then pushes new ones. Rows are inserted by seq (newest first);
 *   anything at or below the last seq seen is a duplicate and dropped. On close the page
 *   reconnects with jittered exponential backoff, sending its last seq, so it never has a gap.
 *   Close code 4403 means "not allowed": no reconnecting then.
 * - Fragments ({id, html}) replace the element with the same id (badge, burst summary).
 * - The breaker badge counts the cooldown down from open_until_ms, corrected for the
 *   difference between the server's clock and this one; at zero it reads HALF-OPEN (an open
 *   breaker whose cooldown elapsed lets the next call through as the probe).
 * - The timeline chart (SVG) is drawn from the events: per call its attempts as segments
 *   coloured by outcome, the backoff gaps, fast-fails, half-open probes, and a band with the
 *   breaker's state over time. It grows while a burst runs.
 * - The burst history (#burst-history) is fetched again (htmx) when the websocket brings a
 *   burst's queueing or its end, so a new burst's row, with its one "what if" link, appears
 *   without a reload; the what-if panel it opens is scrolled into view.
 * - Lesson mode: the "This step" card shows the current step's panel (the first step not
 *   ticked); a step's own settings form ticks the step when it is applied.
 * - Collapsible groups of settings keep their open or closed state when htmx swaps their
 *   form, and open when a swap brings an error inside them.
 * - The traffic strip chart (SVG): per second of the last minute of calls, attempts by
 *   outcome, calls ok/failed/fast-failed, the breaker's state band and, in shared mode, the
 *   session's share of the shared dependency's load.
 * - The shared dependency's card: in shared mode the server pushes the dependency's state,
 *   the class's per-second totals and this session's own per-second counters with its retry
 *   ratio and share over the last complete seconds ("shared" messages, naming nobody else),
 *   counted in Redis where each attempt is decided: the same figures the storm panel's table
 *   shows for this session.
 * - The scenario checklist keeps its ticks on the server (one POST per tick).
 * - window.failureLab exposes a few hooks for the browser tests (see the bottom).
 */
(function () {
  "use strict";

  const root = document.getElementById("lab");
  if (!root) return;

  const wsPath = root.dataset.wsPath;
  let lastSeq = parseInt(root.dataset.lastSeq || "0", 10) || 0;
  const journal = document.getElementById("journal-rows");
  const liveStatus = document.getElementById("live-status");
  const announcer = document.getElementById("breaker-announce");

  const RECONNECT_BASE_MS = 500;
  const RECONNECT_CAP_MS = 15000;
  const PING_EVERY_MS = 15000;
  const SILENCE_LIMIT_MS = 40000; // no message (not even a pong) for this long: reconnect

  let socket = null;
  let failures = 0;
  let reconnectTimer = null;
  let stopped = false;
  let lastMessageAt = Date.now();
  let connections = 0;

  // --- helpers -------------------------------------------------------------------------------

  function parseHTML(html) {
    const tpl = document.createElement("template");
    tpl.innerHTML = (html || "").trim();
    return tpl.content.firstElementChild;
  }

  function setStatus(state, text) {
    if (!liveStatus) return;
    liveStatus.dataset.state = state;
    liveStatus.textContent = text;
  }

  function announce(text) {
    if (announcer) announcer.textContent = text;
  }

  // --- the websocket -------------------------------------------------------------------------

  function socketUrl() {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + window.location.host + wsPath + "?after=" + lastSeq;
  }

  function connect() {
    if (stopped) return;
    window.clearTimeout(reconnectTimer);
    reconnectTimer = null;
    setStatus("connecting", failures ? "Reconnecting…" : "Connecting to live updates…");
    let ws;
    try {
      ws = new WebSocket(socketUrl());
    } catch (err) {
      scheduleReconnect();
      return;
    }
    socket = ws;
    ws.addEventListener("open", function () {
      if (ws !== socket) return;
      connections += 1;
      lastMessageAt = Date.now();
      setStatus("live", "Live");
    });
    ws.addEventListener("message", function (message) {
      if (ws !== socket) return;
      failures = 0;
      lastMessageAt = Date.now();
      handle(message.data);
    });
    // An "error" event is always followed by "close": reconnecting happens there.
    ws.addEventListener("close", function (event) {
      if (ws !== socket) return;
      socket = null;
      burstsByPost();
      if (event.code === 4403) {
        stopped = true;
        setStatus("denied", "Live updates stopped: reload the page.");
        return;
      }
      scheduleReconnect();
    });
  }

  function scheduleReconnect() {
    if (stopped || reconnectTimer) return;
    // Full jitter: a random delay up to an exponentially growing ceiling, so thirty pages
    // that lost the server at the same moment do not come back at the same moment.
    const ceiling = Math.min(RECONNECT_CAP_MS, RECONNECT_BASE_MS * 2 ** failures);
    const delay = Math.max(100, Math.round(Math.random() * ceiling));
    failures += 1;
    setStatus("offline", "Connection lost; reconnecting in " + (delay / 1000).toFixed(1) + " s…");
    reconnectTimer = window.setTimeout(connect, delay);
  }

  /* Give up on the current socket at once (no closing handshake to wait for) and reconnect.
   Its listeners ignore it from now on: they act only while it is the current socket. */
  function dropConnection() {
    const ws = socket;
    socket = null;
    burstsByPost();
    if (ws) {
      try { ws.close(4000, "dropped by the page"); } catch (err) { /* already closed */ }
    }
    scheduleReconnect();
  }

  function send(message) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
  }

  window.setInterval(function () {
    if (!socket || socket.readyState !== WebSocket.OPEN) return;
    if (Date.now() - lastMessageAt > SILENCE_LIMIT_MS) {
      dropConnection(); // a half-open TCP connection: the network went away silently
      return;
    }
    send({ type: "ping" });
  }, PING_EVERY_MS);

  window.addEventListener("online", function () {
    if (!socket && !stopped) {
      failures = 0;
      connect();
    }
  });

  // --- messages ------------------------------------------------------------------------------

  function handle(raw) {
    let message;
    try {
      message = JSON.parse(raw);
    } catch (err) {
      return;
    }
    if (!message || typeof message !== "object") return;
    if (message.type === "events" && Array.isArray(message.events)) {
      message.events.forEach(applyEvent);
      chart.redraw();
      strip.redraw();
    } else if (message.type === "shared") {
      shared.apply(message);
      strip.redraw();
    } else if (message.type === "state") {
      (message.fragments || []).forEach(swapFragment);
    } else if (message.type === "reload") {
      window.location.reload();
    } else if (message.type === "burst_reply") {
      burstReplied(message);
    }
  }

  function applyEvent(event) {
    if (!event || typeof event.seq !== "number") return;
    if (event.seq <= lastSeq) return; // a duplicate (replay overlapping a push)
    if (document.getElementById("ev-" + event.seq)) {
      lastSeq = event.seq;
      return;
    }
    if (lastSeq && event.seq !== lastSeq + 1) {
      // Never expected (the server sends each connection a gap-free sequence); ask again.
      send({ type: "resync", after: lastSeq });
      return;
    }
    insertRow(event.html, event.seq);
    lastSeq = event.seq;
    (event.fragments || []).forEach(swapFragment);
    updateSummary(event);
    chart.add(event);
    strip.add(event);
    if (event.kind === "burst_queued") burstsChanged();
    if (event.kind === "burst_end" || event.kind === "burst_interrupted" || event.kind === "burst_failed") {
      burstsChanged();
      // A click refused because this burst was running (another tab's, say) learns that it
      // ended; any other message of the form is cleared.
      const message = document.getElementById("burst-message");
      if (message) {
        message.textContent = message.dataset.refusal === "running"
          ? "The burst that was running has ended: press Run burst again to run yours." : "";
        message.classList.remove("is-error");
        delete message.dataset.refusal;
      }
    }
  }

  function insertRow(html, seq) {
    const row = parseHTML(html);
    if (!row || !journal) return;
    let next = journal.firstElementChild;
    while (next && Number(next.dataset.seq) > seq) next = next.nextElementSibling;
    journal.insertBefore(row, next);
    const empty = document.getElementById("journal-empty");
    if (empty) empty.textContent = "";
  }

  function swapFragment(fragment) {
    if (!fragment || !fragment.id) return;
    const current = document.getElementById(fragment.id);
    const fresh = parseHTML(fragment.html);
    if (!current || !fresh) return;
    current.replaceWith(fresh);
    if (window.htmx) window.htmx.process(fresh);
    if (fragment.id === "breaker-badge") badgeArrived(fresh);
  }

  // --- burst summary (live counts between the server's fragments) ----------------------------

  function bump(box, stat, by) {
    const cell = box.querySelector('[data-stat="' + stat + '"]');
    if (!cell) return;
    let value = parseFloat(cell.dataset.raw || cell.textContent) || 0;
    value += by;
    cell.dataset.raw = String(value);
    cell.textContent = String(Math.round(value));
  }

  function updateSummary(event) {
    const box = document.getElementById("burst-summary");
    if (!box || !event.burst || String(event.burst) !== box.dataset.burstId) return;
    if (box.dataset.status === "done") return;
    // What the event adds to the counts comes from the server (labs.presenters.summary_delta).
    const delta = event.summary_delta || {};
    Object.keys(delta).forEach(function (stat) { bump(box, stat, delta[stat]); });
    if (event.kind === "burst_interrupted" || event.kind === "burst_failed") {
      box.dataset.status = event.kind === "burst_interrupted" ? "interrupted" : "failed";
      const label = box.querySelector('[data-role="status"]');
      if (label) label.textContent = box.dataset.status;
    }
  }

  // --- breaker badge and its cooldown --------------------------------------------------------

  // The engine's state labels (labs.engine.STATE_LABELS), rendered into the page.
  const labelsData = document.getElementById("state-labels");
  const LABELS = labelsData ? JSON.parse(labelsData.textContent) : {};
  let clockOffset = 0; // server clock minus this clock, in ms
  let announcedState = null;

  // With a breaker per host (data-scope="host") the badge lists each host's breaker, each
  // with its own cooldown (data-open-until-ms on its row), and no breaker for the dependency.
  let announcedParts = null; // part key -> state, last announced

  function badgeArrived(badge) {
    const serverNow = parseFloat(badge.dataset.serverNowMs);
    if (serverNow) clockOffset = serverNow - Date.now();
    if (badge.dataset.scope === "host") {
      const states = {};
      const changed = [];
      badge.querySelectorAll("li[data-part]").forEach(function (item) {
        states[item.dataset.part] = item.dataset.state;
        if (announcedParts && announcedParts[item.dataset.part] !== item.dataset.state) {
          changed.push(item.firstChild.textContent.trim() + "'s breaker " + (LABELS[item.dataset.state] || item.dataset.state));
        }
      });
      if (changed.length) announce(changed.join("; "));
      announcedParts = states;
      announcedState = null;
    } else {
      const state = badge.dataset.state;
      if (announcedState !== null && state !== announcedState) {
        announce("Breaker " + (LABELS[state] || state));
      }
      announcedState = state;
      announcedParts = null;
    }
    tickBadge();
    chart.redraw();
  }

  // A host's breaker: its cooldown counted down on its row, HALF-OPEN at zero.
  function tickPart(item) {
    if (item.dataset.state !== "open") return;
    const until = parseFloat(item.dataset.openUntilMs);
    if (!until) return;
    const left = until - (Date.now() + clockOffset);
    if (left > 0) {
      const seconds = item.querySelector('[data-role="seconds"]');
      if (seconds) seconds.textContent = (left / 1000).toFixed(1);
      return;
    }
    item.dataset.state = "half_open";
    const label = item.querySelector('[data-role="state"]');
    if (label) {
      label.textContent = LABELS.half_open;
      label.className = label.className.replace(/breaker-(closed|open|half_open)\b/, "breaker-half_open");
    }
    const cooldown = item.querySelector('[data-role="cooldown"]');
    if (cooldown) cooldown.textContent = "cooldown over: the next call is the probe";
    if (announcedParts) announcedParts[item.dataset.part] = "half_open";
    chart.redraw();
  }

  function tickBadge() {
    const badge = document.getElementById("breaker-badge");
    if (badge && badge.dataset.scope === "host") {
      badge.querySelectorAll("li[data-part]").forEach(tickPart);
      return;
    }
    if (!badge || badge.dataset.state !== "open") return;
    const until = parseFloat(badge.dataset.openUntilMs);
    if (!until) return; // forced open: no cooldown
    const left = until - (Date.now() + clockOffset);
    const cooldown = badge.querySelector('[data-role="cooldown"]');
    if (left > 0) {
      const seconds = badge.querySelector('[data-role="seconds"]');
      if (seconds) seconds.textContent = (left / 1000).toFixed(1);
      return;
    }
    badge.dataset.state = "half_open";
    const label = badge.querySelector('[data-role="state"]');
    if (label) {
      label.textContent = LABELS.half_open;
      label.className = label.className.replace(/breaker-(closed|open|half_open)\b/, "breaker-half_open");
    }
    if (cooldown) cooldown.textContent = "cooldown over: the next call is the probe";
    chart.redraw();
    announce("Breaker HALF-OPEN: the cooldown is over, the next call is a probe");
    announcedState = "half_open";
  }

  window.setInterval(tickBadge, 100);

  // --- SVG drawing, shared by the timeline and the traffic strip ------------------------------

  const NS = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ``draw`` at the next animation frame, however many times this is called before it.
  function onNextFrame(draw) {
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

  // --- the timeline chart --------------------------------------------------------------------

  const chart = (function () {
    const svg = document.getElementById("timeline-chart");
    const desc = document.getElementById("timeline-desc");
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
    const events = [];
    const seen = {};

    function when(event) {
      if (event.t_ms && event.t_ms > 1e11) return event.t_ms;
      const parsed = Date.parse(event.at);
      return isNaN(parsed) ? 0 : parsed;
    }

    function add(event) {
      if (seen[event.seq]) return;
      seen[event.seq] = true;
      events.push(event);
    }

    const redraw = onNextFrame(function () { if (svg) draw(); });


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
          (hostTransitions[host] || (hostTransitions[host] = [])).push({ t: when(e), from: e.state_from, to: e.state_to });
        } else if (e.state_to && !(e.data && e.data.dependency === "b")) {
          transitions.push({ t: when(e), from: e.state_from, to: e.state_to });
        }
        if (partOf) hosts[host] = true;
        if (!e.burst) return;
        let b = bursts[e.burst];
        if (!b) {
          b = bursts[e.burst] = { id: e.burst, start: null, end: null, done: false, finished: false, number: null, whatif: true, calls: {}, firstCall: null, size: null, seq: e.seq };
          order.push(b);
        }
        const t = when(e);
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
        bursts: order.filter(function (b) { return b.start !== null; }).slice(-MAX_BURSTS),
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
      const now = Date.now() + clockOffset;
      while (svg.lastChild && svg.lastChild.nodeName !== "desc") svg.removeChild(svg.lastChild);
      if (!bursts.length) {
        svg.setAttribute("viewBox", "0 0 " + WIDTH + " 60");
        svg.appendChild(el("text", { x: 12, y: 34, class: "tl-empty" }, "Run a burst: its calls appear here as they happen."));
        if (desc) desc.textContent = "No burst yet.";
        return;
      }
      bursts.forEach(function (b) {
        if (!b.done) b.end = Math.max(b.end, Math.min(now, b.end + 30000));
        b.duration = Math.max(20, b.end - b.start);
      });
      // One time scale for every burst shown (so lengths compare), a minimum width each.
      const room = WIDTH - LEFT - TAIL - 10 - GAP * (bursts.length - 1);
      const total = bursts.reduce(function (sum, b) { return sum + b.duration; }, 0);
      let scale = room / total;
      const narrow = bursts.filter(function (b) { return b.duration * scale < MIN_BURST_PX; });
      if (narrow.length && narrow.length < bursts.length) {
        const wide = bursts.filter(function (b) { return b.duration * scale >= MIN_BURST_PX; });
        const wideTotal = wide.reduce(function (sum, b) { return sum + b.duration; }, 0);
        scale = (room - MIN_BURST_PX * narrow.length) / wideTotal;
      }
      let rows = 1;
      let x = LEFT;
      bursts.forEach(function (b) {
        b.x = x;
        b.width = Math.max(MIN_BURST_PX, b.duration * scale);
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
      const badgeNow = document.getElementById("breaker-badge");
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
      svg.setAttribute("viewBox", "0 0 " + WIDTH + " " + height);

      if (showGlobal) svg.appendChild(el("text", { x: 4, y: bandY + 13, class: "tl-axis" }, "breaker"));
      hostLanes.forEach(function (h, i) {
        svg.appendChild(el("text", { x: 4, y: hostY + i * HOST_STEP + HOST_H - 2, class: "tl-axis tl-host-axis", "data-host": h }, "host " + h));
      });
      for (let r = 0; r < rows; r++) {
        if (rows <= 12 || r % 2 === 0) {
          svg.appendChild(el("text", { x: 4, y: rowsY + r * ROW_H + BAR_H, class: "tl-axis" }, "call " + (r + 1)));
        }
      }

      const summaryText = [];
      bursts.forEach(function (b, index) {
        function px(t) { return b.x + (t - b.start) * b.scale; }
        const g = el("g", { class: "tl-burst" });
        // state band: split the burst's span at each transition inside it (not drawn for a
        // burst with a breaker per host: no call asked the dependency's breaker then)
        const cuts = [b.start];
        data.transitions.forEach(function (tr) { if (tr.t > b.start && tr.t < b.end) cuts.push(tr.t); });
        cuts.push(b.end);
        for (let i = 0; showGlobal && !b.perHost && i < cuts.length - 1; i++) {
          const state = stateAt(data.transitions, cuts[i]);
          const bandX = px(cuts[i]);
          g.appendChild(el("rect", {
            x: bandX.toFixed(1), y: bandY, width: Math.max(1, px(cuts[i + 1]) - bandX).toFixed(1),
            height: BAND_H, class: "tl-band tl-band-" + state
          }));
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
            const band = el("rect", {
              x: laneX.toFixed(1), y: hostY + lane * HOST_STEP, width: Math.max(1, px(laneCuts[i + 1]) - laneX).toFixed(1),
              height: HOST_H, class: "tl-band tl-host-band tl-band-" + state, "data-host": h
            });
            band.appendChild(el("title", {}, "host " + h + ": " + (LABELS[state] || state)));
            g.appendChild(band);
          }
        });
        const last = b.first + Math.max(0, (b.size || 1) - 1);
        const range = last === b.first ? String(b.first) : b.first + "–" + last;
        const noun = last === b.first ? "call " : "calls ";
        const label = b.width > 170 ? noun + range + " · " + Math.round(b.end - b.start) + " ms" : noun + range;
        g.appendChild(el("text", { x: b.x, y: 15, class: "tl-label" }, label + (b.done ? "" : " …")));

        let fastFails = 0;
        Object.keys(b.calls).forEach(function (key) {
          const callNo = Number(key);
          const c = b.calls[key];
          const y = rowsY + (callNo - b.first) * ROW_H;
          c.sleeps.forEach(function (s) {
            g.appendChild(el("line", {
              x1: px(s.start).toFixed(1), x2: px(s.end).toFixed(1), y1: y + BAR_H / 2, y2: y + BAR_H / 2, class: "tl-wait"
            }));
          });
          c.attempts.forEach(function (a) {
            const ax = px(a.start);
            const rect = el("rect", {
              x: ax.toFixed(1), y: y, width: Math.max(2, px(a.end) - ax).toFixed(1), height: BAR_H,
              class: a.ok ? "tl-ok" : "tl-bad"
            });
            const where = a.host !== undefined && a.host !== null ? " on host " + a.host : "";
            rect.appendChild(el("title", {}, "call " + callNo + ", attempt " + a.n + where + ": " + (a.ok ? "ok" : a.error)));
            g.appendChild(rect);
          });
          if (c.result && c.result.outcome && c.result.outcome !== "success" && c.attempts.length === 0) {
            fastFails += 1;
            const fx = px(c.result.t);
            const mark = el("path", {
              d: "M" + (fx - 4) + " " + y + " l8 " + BAR_H + " M" + (fx + 4) + " " + y + " l-8 " + BAR_H,
              class: "tl-fast"
            });
            mark.appendChild(el("title", {}, "call " + callNo + ": " + c.result.outcome.replace("_", " ") + ", 0 attempts"));
            g.appendChild(mark);
          }
          if (c.result && c.result.probe) {
            const dx = px(c.result.t) + 6;
            const cy = y + BAR_H / 2;
            const diamond = el("path", { d: "M" + dx + " " + (cy - 5) + " l5 5 l-5 5 l-5 -5 z", class: "tl-probe" });
            diamond.appendChild(el("title", {}, "call " + callNo + ": half-open probe, " + c.result.outcome));
            g.appendChild(diamond);
          }
        });
        if (index < bursts.length - 1) {
          g.appendChild(el("text", { x: b.x + b.width + GAP / 2, y: rowsY + 4, class: "tl-gap", "text-anchor": "middle" }, "⋯"));
        }
        svg.appendChild(g);
        const calls = Object.keys(b.calls).length;
        summaryText.push("calls " + b.first + " to " + (b.first + Math.max(0, calls - 1)) + ": " + calls + " calls" + (fastFails ? ", " + fastFails + " failed fast" : "") + (b.done ? "" : ", running"));
      });
      // the tail: the breakers' states as the badge shows them now (open -> half-open live):
      // each host's with a breaker per host, else the dependency's
      const lastBurst = bursts[bursts.length - 1];
      const tailX = lastBurst.x + lastBurst.width + 6;
      let nowText;
      if (perHostNow) {
        hostLanes.forEach(function (h, lane) {
          const state = partsNow[h] || "closed";
          svg.appendChild(el("rect", { x: tailX, y: hostY + lane * HOST_STEP, width: TAIL - 10, height: HOST_H, class: "tl-band tl-host-band tl-band-" + state, "data-host": h, "data-now": "" }));
        });
        nowText = "Host breakers now: " + hostLanes.map(function (h) {
          const state = partsNow[h] || "closed";
          return "host " + h + " " + (LABELS[state] || state);
        }).join(", ");
      } else {
        const stateNow = badgeNow ? badgeNow.dataset.state : stateAt(data.transitions, now);
        svg.appendChild(el("rect", { x: tailX, y: bandY, width: TAIL - 10, height: BAND_H, class: "tl-band tl-band-" + stateNow, "data-now": "" }));
        nowText = "Breaker now " + (LABELS[stateNow] || stateNow);
      }
      svg.appendChild(el("text", { x: tailX, y: 15, class: "tl-now" }, "now"));
      if (desc) desc.textContent = nowText + ". Last " + bursts.length + " burst(s), " + summaryText.join("; ") + ".";
    }

    // live growth while a burst runs
    window.setInterval(function () {
      const running = events.length && events.some(function (e) { return e.kind === "burst_start"; }) &&
        collect().bursts.some(function (b) { return !b.done; });
      if (running) redraw();
    }, 250);

    return { add: add, redraw: redraw };
  })();

  // --- burst history and what if -------------------------------------------------------------

  /* The history asks the server again (hx-trigger "labBursts from:body") when a burst is
     queued or ends; the rows of a catch-up after a reconnect ask once, not once per row. */
  let historyTimer = null;
  function burstsChanged() {
    if (historyTimer) return;
    historyTimer = window.setTimeout(function () {
      historyTimer = null;
      if (window.htmx) window.htmx.trigger(document.body, "labBursts");
    }, 150);
  }

  const whatifPanel = document.getElementById("whatif");
  document.body.addEventListener("htmx:afterSwap", function (event) {
    if (whatifPanel && event.detail.target === whatifPanel && whatifPanel.firstElementChild) {
      whatifPanel.scrollIntoView({ block: "start" });
    }
  });

  // --- collapsible settings groups -----------------------------------------------------------

  /* A swapped form comes back with each group in its default state: keep what the student
     opened or closed (by the group's id), and open every group, and "All settings", that
     holds an error. */
  let openBefore = null;
  document.body.addEventListener("htmx:beforeSwap", function () {
    openBefore = {};
    document.querySelectorAll("details.field-group[id]").forEach(function (d) { openBefore[d.id] = d.open; });
  });
  document.body.addEventListener("htmx:afterSwap", function () {
    if (openBefore) {
      Object.keys(openBefore).forEach(function (id) {
        const d = document.getElementById(id);
        if (d && !d.querySelector(".has-error")) d.open = openBefore[id];
      });
      openBefore = null;
    }
    // Lesson mode: the dependency's mode, from its form (closed away under "All settings").
    const mode = document.querySelector('#dependency-form [data-role="mode"]');
    const lessonMode = document.querySelector('#this-step [data-role="lesson-mode"]');
    if (mode && lessonMode) lessonMode.textContent = mode.textContent;
    document.querySelectorAll("#lab .has-error, #lab .form-errors").forEach(function (el) {
      for (let d = el.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) d.open = true;
    });
  });

  // --- htmx: errors that do not swap a form --------------------------------------------------

  function actionMessage(text, isError) {
    const status = document.getElementById("action-status");
    if (!status) return;
    status.textContent = text;
    status.classList.toggle("is-error", !!isError);
  }

  document.body.addEventListener("htmx:responseError", function (event) {
    const code = event.detail.xhr ? event.detail.xhr.status : 0;
    if (code === 400 || code === 409 || code === 422) return; // the form shows why
    if (code === 403) actionMessage("Only the session's owner can change it; you are watching it.", true);
    else if (code === 404) actionMessage("This session is not available to you.", true);
    else actionMessage("The server could not do that (HTTP " + code + "); try again.", true);
  });
  document.body.addEventListener("htmx:sendError", function () {
    actionMessage("Could not reach the server; check the connection and try again.", true);
  });

  // --- Run burst over the socket --------------------------------------------------------------

  /* A click in the burst form while it shows no field error goes over the open websocket
     ({type: "run_burst"}): the server checks and queues it as the form's POST would, with no
     HTTP request around it (less than half the CPU), and answers with the form's message line (burst_reply). With
     no open socket, a form showing errors, a "Do it" button, or numbers the server wants
     shown beside their fields (fallback), htmx posts the form as usual. A click whose socket
     closes before the answer is posted then (a second burst is refused with 409, never run
     twice). */
  const BURST_REPLY_WAIT_MS = 10000;
  const burstAsks = new Map(); // id -> {issue, timer}
  let burstAskId = 0;

  document.body.addEventListener("htmx:confirm", function (event) {
    const form = event.detail.elt;
    if (!form || form.id !== "burst-form") return;
    if (!socket || socket.readyState !== WebSocket.OPEN) return;
    if (form.querySelector('input[name="errors_shown"]')) return;
    event.preventDefault();
    const id = ++burstAskId;
    const issue = event.detail.issueRequest;
    const data = new FormData(form);
    const timer = window.setTimeout(function () {
      if (!burstAsks.delete(id)) return;
      swapMessage('<p id="burst-message" class="form-message is-error" role="status">' +
        "No answer from the lab yet; the journal shows the burst when it starts.</p>");
    }, BURST_REPLY_WAIT_MS);
    burstAsks.set(id, { issue: issue, timer: timer });
    send({ type: "run_burst", id: id, size: data.get("size"), concurrency: data.get("concurrency") });
  });

  function burstReplied(message) {
    const ask = burstAsks.get(message.id);
    if (!ask) return;
    burstAsks.delete(message.id);
    window.clearTimeout(ask.timer);
    if (message.fallback) ask.issue(true);
    else if (typeof message.html === "string") swapMessage(message.html);
  }

  function burstsByPost() {
    burstAsks.forEach(function (ask) {
      window.clearTimeout(ask.timer);
      ask.issue(true);
    });
    burstAsks.clear();
  }

  function swapMessage(html) {
    const current = document.getElementById("burst-message");
    if (!current) return;
    const holder = document.createElement("div");
    holder.innerHTML = html;
    const fresh = holder.firstElementChild;
    if (fresh && fresh.id === "burst-message") current.replaceWith(fresh);
  }

  // --- scenario checklist --------------------------------------------------------------------

  const steps = document.getElementById("steps");
  if (steps) {
    const doneUrl = steps.dataset.doneUrl || "";
    function csrfToken() {
      try {
        return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
      } catch (err) { return ""; }
    }
    // Ticks are kept on the server (per attempt at the scenario), so they survive a reload,
    // another browser and a reset's fresh start; a watcher's page has no URL and sends none.
    function store(item) {
      if (!doneUrl) return;
      const done = item.querySelector(".step-check").checked;
      const url = doneUrl.replace("/steps/0/done/", "/steps/" + item.dataset.step + "/done/");
      window.fetch(url, {
        method: "POST",
        body: new URLSearchParams({ done: done ? "1" : "0" }),
        headers: { "X-CSRFToken": csrfToken() },
        credentials: "same-origin",
      }).then(function (response) {
        if (!response.ok) actionMessage("The step's tick was not saved (HTTP " + response.status + ").", true);
      }).catch(function () {
        actionMessage("Could not save the step's tick; check the connection and try again.", true);
      });
    }
    function highlight() {
      let found = false;
      let currentStep = "done";
      steps.querySelectorAll(".step").forEach(function (item) {
        const done = item.querySelector(".step-check").checked;
        item.classList.toggle("is-done", done);
        const current = !done && !found;
        if (current) {
          found = true;
          currentStep = item.dataset.step;
        }
        item.classList.toggle("is-current", current);
        if (current) item.setAttribute("aria-current", "step");
        else item.removeAttribute("aria-current");
      });
      // Lesson mode: the "This step" card shows the current step's panel only.
      document.querySelectorAll("[data-step-panel]").forEach(function (panel) {
        panel.hidden = panel.dataset.stepPanel !== currentStep;
      });
      return currentStep;
    }
    /* A page opened mid-lesson, where the steps sit in a column of their own that scrolls (a
       wide screen): the current step is brought to the top of that column. Not on a tick: the
       step just done is about to show its grade and explanation. A phone's page is not
       scrolled. */
    const aside = document.getElementById("lab-aside");
    function scrollStepIntoAside(index) {
      const item = stepItem(index);
      if (!item || !item.previousElementSibling || !aside || aside.scrollHeight <= aside.clientHeight + 1) return;
      if (window.getComputedStyle(aside).overflowY !== "auto") return;
      aside.scrollTop = Math.max(0, item.offsetTop - 8);
    }
    function stepItem(index) {
      return steps.querySelector('.step[data-step="' + index + '"]');
    }
    function tick(item) {
      const box = item.querySelector(".step-check");
      if (!box.checked) {
        box.checked = true;
        store(item);
      }
      highlight();
    }
    scrollStepIntoAside(highlight());
    steps.addEventListener("change", function (event) {
      if (!event.target.classList.contains("step-check")) return;
      store(event.target.closest(".step"));
      highlight();
    });
    document.body.addEventListener("htmx:afterRequest", function (event) {
      const source = event.detail.elt;
      if (!source || !source.hasAttribute || !event.detail.successful) return;
      if (source.hasAttribute("data-step-do")) tick(source.closest(".step"));
      const form = source.closest && source.closest("[data-step-form]");
      const item = form && stepItem(form.dataset.stepForm);
      if (item) tick(item);
    });
    steps.addEventListener("click", function (event) {
      const button = event.target.closest("[data-step-wait]");
      if (!button || button.disabled) return;
      const until = Date.now() + (parseFloat(button.dataset.stepWait) || 0);
      button.disabled = true;
      const timer = window.setInterval(function () {
        const left = until - Date.now();
        if (left > 0) {
          button.textContent = "Waiting " + (left / 1000).toFixed(1) + " s";
          return;
        }
        window.clearInterval(timer);
        button.textContent = "Waited";
        tick(button.closest(".step"));
      }, 100);
    });
  }

  // --- traffic strip chart -------------------------------------------------------------------

  // Per second of the session's last STRIP_SECONDS seconds of calls (bursts and steady traffic
  // alike): attempts stacked by the outcome the client saw (for the shared dependency, the
  // model's answer: ok, error, shed, skipped, timeout), calls stacked by result (ok, failed,
  // fast-failed), and a band with the breaker's state in that second. Drawn from the journal
  // events the page receives; redrawn at most once a frame.
  const strip = (function () {
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

    function when(event) {
      if (event.t_ms && event.t_ms > 1e11) return event.t_ms;
      const parsed = Date.parse(event.at);
      return isNaN(parsed) ? 0 : parsed;
    }

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
      const second = Math.floor(when(event) / 1000);
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
        svg.appendChild(el("rect", {
          x: x, y: y, width: w, height: h, class: prefix + kind,
          "data-second": second, "data-count": n,
        }));
      });
    }

    function draw() {
      while (svg.lastChild && svg.lastChild.nodeName !== "desc") svg.removeChild(svg.lastChild);
      if (!seconds.size) {
        svg.setAttribute("viewBox", "0 0 " + WIDTH + " 40");
        svg.appendChild(el("text", { x: 12, y: 26, class: "tl-empty" }, "Start traffic: its calls appear here second by second."));
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
      if (withBand) svg.appendChild(el("text", { x: 4, y: bandY + 9, class: "tl-axis" }, "breaker"));
      svg.appendChild(el("text", { x: 4, y: attemptsBottom - ROW_H / 2, class: "tl-axis" }, "attempts"));
      svg.appendChild(el("text", { x: 4, y: attemptsBottom - 2, class: "tl-axis" }, "max " + maxAttempts));
      svg.appendChild(el("text", { x: 4, y: callsBottom - ROW_H / 2, class: "tl-axis" }, "calls"));
      svg.appendChild(el("text", { x: 4, y: callsBottom - 2, class: "tl-axis" }, "max " + maxCalls));
      let attempts = 0;
      let calls = 0;
      for (let s = first; s <= last; s++) {
        const x = LEFT + (s - first) * w;
        if (withBand) svg.appendChild(el("rect", { x: x, y: bandY, width: w, height: BAND_H, class: "tl-band-" + stateAt(s) }));
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
        svg.appendChild(el("text", { x: 4, y: shareBottom - SHARE_H / 2, class: "tl-axis" }, "your share"));
        svg.appendChild(el("text", { x: 4, y: shareBottom - 2, class: "tl-axis" }, "max " + Math.round(top * 100) + " %"));
        shares.forEach(function (v, i) {
          if (v === null || v <= 0) return;
          const h = (v / top) * SHARE_H;
          svg.appendChild(el("rect", {
            x: LEFT + i * w + 0.5, y: shareBottom - h, width: Math.max(1, w - 1), height: h,
            class: "ts-share", "data-second": first + i, "data-share": v.toFixed(4),
          }));
        });
      }
      svg.appendChild(el("text", { x: LEFT, y: shareBottom + 16, class: "tl-now" }, "-" + STRIP_SECONDS + " s"));
      svg.appendChild(el("text", { x: WIDTH - 40, y: shareBottom + 16, class: "tl-now" }, "last"));
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
  })();

  // --- the shared dependency's card -----------------------------------------------------------

  // Shown while the session calls the class's shared dependency. Each "shared" message carries
  // the dependency's state, the class's per-second totals and, as "mine", this session's own
  // counters per second and its figures over the last complete seconds (retry ratio, share,
  // attempts), computed by the server from the counters the storm panel's table reads.
  const shared = (function () {
    const card = document.getElementById("shared-status");
    const WINDOW_S = 5; // labs.presenters.SESSION_WINDOW_S: the complete seconds "mine" covers
    let last = null;

    function role(name) { return card ? card.querySelector('[data-role="' + name + '"]') : null; }

    function text(name, value) {
      const node = role(name);
      if (node && node.textContent !== value) node.textContent = value;
    }

    function percent(x) { return x === null || x === undefined ? "–" : Math.round(x * 100) + " %"; }

    function apply(message) {
      if (!card) return;
      if (!message.active) {
        card.hidden = true;
        last = null;
        return;
      }
      (message.seconds || []).forEach(function (s) { strip.setOffered(s.second, s.offered); });
      const mine = message.mine || { seconds: [], window: {} };
      mine.seconds.forEach(function (s) { strip.setOwn(s.second, s.offered, s.retries); });
      const w = mine.window || {};
      last = {
        now: message.now,
        state: message.state,
        share: w.share === undefined ? null : w.share,
        retry_ratio: w.retry_ratio === undefined ? null : w.retry_ratio,
        attempts: w.attempts || 0,
        retries: w.retries || 0,
        offered: w.class_offered || 0,
      };
      card.hidden = false;
      card.dataset.state = message.state;
      text("shared-state", message.state);
      text("shared-reason", message.reason || "");
      text("shared-share", percent(last.share));
      text("shared-retry", percent(last.retry_ratio));
      text("shared-load", Math.round(last.offered / WINDOW_S) + " of " +
        Math.round(message.capacity_per_s) + " attempts/s");
    }

    return { apply: apply, last: function () { return last; } };
  })();

  // --- start ---------------------------------------------------------------------------------

  const initial = document.getElementById("chart-events");
  if (initial) {
    try {
      JSON.parse(initial.textContent).forEach(function (e) { chart.add(e); strip.add(e); });
    } catch (err) { /* no chart history */ }
  }
  const badge = document.getElementById("breaker-badge");
  if (badge) badgeArrived(badge);
  chart.redraw();
  strip.redraw();
  connect();

  /* Hooks for the browser tests (and curious students in the console). */
  window.failureLab = {
    lastSeq: function () { return lastSeq; },
    isConnected: function () { return !!socket && socket.readyState === WebSocket.OPEN; },
    burstsAsked: function () { return burstAskId; },
    connections: function () { return connections; },
    dropConnection: dropConnection,
    stripCounts: function () { return strip.counts(); },
    stripShares: function () { return strip.shares(); },
    shared: function () { return shared.last(); },
    rowSeqs: function () {
      return Array.prototype.map.call(journal.querySelectorAll(".journal-row"), function (row) {
        return Number(row.dataset.seq);
      });
    },
  };
})();
