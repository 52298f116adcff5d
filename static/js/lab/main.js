/* Failure Lab: the live lab page, and the what-if and compare pages' charts. Native ES
 * modules, no framework, no build step; this one wires the parts together:
 *
 * - socket.js: the websocket, its reconnects and pings; journal.js: rows by seq, fragments,
 *   steady traffic's seconds (a line each, opened: its rows);
 * - summary.js: the burst summary panel, filled from pushes and counted live; badge.js: the
 *   breaker badge's cooldown;
 * - timeline.js: the burst timeline (painted by canvas.js); strip.js: the traffic strip (both
 *   on the vendored uPlot); shared.js: the shared dependency's card;
 * - burst.js: Run burst over the socket; history.js: the burst history and what-if panel;
 * - forms.js: settings groups and htmx errors; steps.js: the checklist and lesson mode;
 * - replay.js: the timelines of the what-if and compare pages; goodput.js: the compare page's
 *   goodput chart on the shared dependency's model (on uPlot too).
 *
 * window.failureLab exposes a few hooks for the browser tests (see the bottom).
 */

import { createBadge } from "./badge.js";
import { countDelta } from "./counts.js";
import { burstClicks } from "./burst.js";
import { actionMessage, startForms } from "./forms.js";
import { drawGoodputCharts } from "./goodput.js";
import { burstEvent, startHistory } from "./history.js";
import { createJournal } from "./journal.js";
import { drawReplayTimelines } from "./replay.js";
import { createSharedCard } from "./shared.js";
import { liveSocket } from "./socket.js";
import { startSteps } from "./steps.js";
import { createStrip } from "./strip.js";
import { updateSummary } from "./summary.js";
import { createTimeline } from "./timeline.js";

function startLab(root) {
  const liveStatus = document.getElementById("live-status");

  function status(state, text) {
    if (!liveStatus) return;
    liveStatus.dataset.state = state;
    liveStatus.textContent = text;
  }

  const badge = createBadge(function () { chart.redraw(); });
  const chart = createTimeline(document.getElementById("timeline-chart"), document.getElementById("timeline-desc"), {
    live: true,
    now: badge.now,
    badge: function () { return document.getElementById("breaker-badge"); },
    labels: badge.labels,
  });
  const strip = createStrip();
  const shared = createSharedCard(strip);

  const journal = createJournal({
    lastSeq: parseInt(root.dataset.lastSeq || "0", 10) || 0,
    send: function (message) { socket.send(message); },
    onEvent: function (event) {
      updateSummary(event);
      chart.add(event);
      strip.add(event);
      burstEvent(event);
    },
    onSecond: function (second) { strip.addSecond(second); },
    onFragment: function (id, element) {
      if (id === "breaker-badge") badge.arrived(element);
    },
  });

  function handle(raw) {
    let message;
    try {
      message = JSON.parse(raw);
    } catch (err) {
      return;
    }
    if (!message || typeof message !== "object") return;
    if (message.type === "events" && Array.isArray(message.events)) {
      message.events.forEach(journal.apply);
      chart.redraw();
      strip.redraw();
    } else if (message.type === "seconds") {
      journal.applySeconds(message);
      strip.redraw();
    } else if (message.type === "shared") {
      shared.apply(message);
      strip.redraw();
    } else if (message.type === "state") {
      (message.fragments || []).forEach(journal.swapFragment);
    } else if (message.type === "reload") {
      window.location.reload();
    } else if (message.type === "burst_reply") {
      clicks.replied(message);
    }
  }

  const socket = liveSocket({
    path: root.dataset.wsPath,
    after: journal.lastSeq,
    onMessage: handle,
    onGone: function () { clicks.byPost(); },
    status: status,
  });
  const clicks = burstClicks(socket);

  startHistory();
  startForms();
  startSteps(actionMessage);

  const initial = document.getElementById("chart-events");
  if (initial) {
    try {
      JSON.parse(initial.textContent).forEach(function (e) { chart.add(e); strip.add(e); });
    } catch (err) { /* no chart history */ }
  }
  const stripSeconds = document.getElementById("strip-seconds");
  if (stripSeconds) {
    try {
      JSON.parse(stripSeconds.textContent).forEach(strip.addSecond);
    } catch (err) { /* no traffic yet */ }
  }
  const badgeNow = document.getElementById("breaker-badge");
  if (badgeNow) badge.arrived(badgeNow);
  chart.redraw();
  strip.redraw();
  socket.connect();

  /* Hooks for the browser tests (and curious students in the console). */
  window.failureLab = {
    lastSeq: journal.lastSeq,
    isConnected: socket.isOpen,
    burstsAsked: clicks.asked,
    connections: socket.connections,
    dropConnection: socket.drop,
    stripCounts: function () { return strip.counts(); },
    stripShares: function () { return strip.shares(); },
    stripDrawn: function () { return strip.drawn(); },
    shared: function () { return shared.last(); },
    rowSeqs: journal.rowSeqs,
    countDelta: countDelta,
  };
}

const root = document.getElementById("lab");
if (root) startLab(root);
// What-if and compare charts: on the page, and in what htmx brings (the lab's what-if panel,
// a replay).
drawReplayTimelines(document);
drawGoodputCharts(document);
document.body.addEventListener("htmx:load", function (event) {
  drawReplayTimelines(event.detail.elt);
  drawGoodputCharts(event.detail.elt);
});
