/* The compare page's goodput chart on the shared dependency's model, on uPlot
 * (static/vendor/uplot): calls succeeded per second under policy A and policy B, the healthy
 * rate and the trigger's span as a shaded band. Each <div data-goodput="<id>"> is drawn from
 * the json_script block of that id (labs.presenters.replay.shared_goodput_series); the words
 * of its axes and legend come in that block too, its colours from the page's CSS. */

const MIN_HEIGHT = 240;
const MAX_HEIGHT = 320;
const FONT_PX = 13;

function dataOf(box) {
  const block = document.getElementById(box.dataset.goodput);
  try {
    return block ? JSON.parse(block.textContent) : null;
  } catch (err) {
    return null;
  }
}

// About a third as high as wide, so a phone's chart is not a thin strip nor a desktop's a wall.
function sizeOf(box) {
  const width = Math.max(240, box.clientWidth);
  return { width: width, height: Math.min(MAX_HEIGHT, Math.max(MIN_HEIGHT, Math.round(width / 3))) };
}

function colors(box) {
  const style = window.getComputedStyle(box);
  function read(name, fallback) { return style.getPropertyValue(name).trim() || fallback; }
  return {
    a: read("--policy-a", "#1d4ed8"),
    b: read("--policy-b", "#c2410c"),
    baseline: read("--fg-muted", "#374151"),
    band: read("--trigger-band", "rgba(185, 28, 28, 0.12)"),
    bandText: read("--danger", "#b91c1c"),
    text: read("--fg-muted", "#374151"),
    grid: read("--border", "#cbd5e1"),
    font: read("--font", "system-ui"),
  };
}

function count(_u, value) {
  return value === null || value === undefined ? "–" : String(Math.round(value));
}

// The trigger's span, shaded behind the lines, its name at the top of the band.
function bandHook(trigger, c) {
  return function (u) {
    const ctx = u.ctx;
    const ratio = u.pxRatio || 1;
    const x0 = Math.max(u.bbox.left, u.valToPos(trigger.from_s, "x", true));
    const x1 = Math.min(u.bbox.left + u.bbox.width, u.valToPos(trigger.until_s, "x", true));
    if (x1 <= x0) return;
    ctx.save();
    ctx.fillStyle = c.band;
    ctx.fillRect(x0, u.bbox.top, x1 - x0, u.bbox.height);
    ctx.fillStyle = c.bandText;
    ctx.font = "600 " + FONT_PX * ratio + "px " + c.font;
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.fillText(trigger.label, x0 + 4 * ratio, u.bbox.top + 4 * ratio);
    ctx.restore();
  };
}

function axis(label, c, values) {
  return {
    label: label, stroke: c.text, font: FONT_PX + "px " + c.font, labelFont: "600 " + FONT_PX + "px " + c.font,
    grid: { stroke: c.grid, width: 1 }, ticks: { stroke: c.grid, width: 1 }, values: values,
  };
}

function makePlot(box, data) {
  const c = colors(box);
  const labels = data.labels;
  const top = Math.max(1, data.baseline, Math.max.apply(null, data.a), Math.max.apply(null, data.b));
  return new window.uPlot(Object.assign(sizeOf(box), {
    scales: {
      x: { time: false, range: [0, data.duration_s] },
      // headroom above the highest second for the trigger's name
      y: { range: [0, Math.ceil(top * 1.25)] },
    },
    axes: [
      axis(labels.x, c, function (_u, ticks) { return ticks.map(function (t) { return t + " s"; }); }),
      Object.assign(axis(labels.y, c), { size: 52 }),
    ],
    series: [
      { label: labels.second, value: function (_u, v) { return v === null || v === undefined ? "–" : Math.floor(v) + "–" + (Math.floor(v) + 1) + " s"; } },
      { label: labels.a, stroke: c.a, width: 3, points: { show: false }, value: count },
      { label: labels.b, stroke: c.b, width: 2.5, dash: [10, 5], points: { show: false }, value: count },
      { label: labels.baseline, stroke: c.baseline, width: 1.5, dash: [2, 4], points: { show: false }, value: count },
    ],
    legend: { markers: { dash: function (_u, i) { return ["solid", "solid", "dashed", "dotted"][i]; } } },
    cursor: { drag: { x: false, y: false } },
    hooks: { drawClear: [bandHook(data.trigger, c)] },
  }), [data.x, data.a, data.b, data.x.map(function () { return data.baseline; })], box);
}

/** Draw every goodput chart inside ``container`` (the document by default), once each. */
export function drawGoodputCharts(container) {
  const scope = container || document;
  let drawn = 0;
  scope.querySelectorAll("[data-goodput]").forEach(function (box) {
    if (box.goodputPlot || !window.uPlot) return;
    const data = dataOf(box);
    if (!data) return;
    const plot = makePlot(box, data);
    box.goodputPlot = plot; // for the browser tests
    drawn += 1;
    if (window.ResizeObserver) {
      let width = box.clientWidth;
      new ResizeObserver(function () {
        if (box.clientWidth === width) return;
        width = box.clientWidth;
        plot.setSize(sizeOf(box));
      }).observe(box);
    }
  });
  return drawn;
}
