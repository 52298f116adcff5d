/* The what-if and compare timelines: each figure's <div data-timeline="<id>"> is drawn by the
 * lab page's timeline module from the events in the json_script block of that id (a burst as
 * it ran, its replay, or a scenario run under a policy). The charts in one container share
 * one time scale, so a replay lines up under the burst it replays. */

import { createTimeline } from "./timeline.js";

function eventsOf(box) {
  const data = document.getElementById(box.dataset.timeline);
  try {
    return data ? JSON.parse(data.textContent) : [];
  } catch (err) {
    return [];
  }
}

/** Draw every timeline chart inside ``container`` (the document by default), once each. */
export function drawReplayTimelines(container) {
  const scope = container || document;
  const charts = [];
  scope.querySelectorAll("[data-timeline]").forEach(function (box) {
    if (box.dataset.drawn) return;
    const desc = box.parentNode.querySelector('[data-role="timeline-desc"]');
    const timeline = createTimeline(box, desc, {
      time: function (e) { return e.t; },
      maxBursts: Infinity,
    });
    eventsOf(box).forEach(timeline.add);
    charts.push({ box: box, timeline: timeline });
  });
  const span = charts.reduce(function (most, c) { return Math.max(most, c.timeline.span()); }, 0);
  charts.forEach(function (c) {
    c.timeline.setSpan(span);
    c.timeline.draw();
    c.box.dataset.drawn = "1";
  });
  return charts.length;
}
