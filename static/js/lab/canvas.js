/* The burst timeline's drawing surface: a uPlot chart (static/vendor/uplot) whose canvas
 * shows the timeline's marks, laid out in a fixed-width coordinate space (as an SVG viewBox
 * would) and scaled to the box's width. Its marks' colours come from the page's custom
 * properties; hovering a mark shows its title (a call's attempt, a probe, a host's state). */

// Mark class -> how it is painted: fill, stroke, line width, dash, font (size in layout units).
const STYLES = {
  "tl-band-closed": { fill: "--breaker-closed-bg", stroke: "--breaker-closed", width: 0.5 },
  "tl-band-open": { fill: "--breaker-open" },
  "tl-band-half_open": { fill: "--probe" },
  "tl-ok": { fill: "--breaker-closed" },
  "tl-bad": { fill: "--danger" },
  "tl-wait": { stroke: "--wait", width: 2, dash: [3, 3] },
  "tl-fast": { stroke: "--fast", width: 2.5 },
  "tl-probe": { fill: "--probe", stroke: "--fg", width: 1 },
  "tl-axis": { fill: "--fg-muted", font: 13 },
  "tl-label": { fill: "--fg", font: 13, weight: 600 },
  "tl-now": { fill: "--fg-muted", font: 12 },
  "tl-empty": { fill: "--fg-muted", font: 15 },
  "tl-gap": { fill: "--fg-muted", font: 16 },
};

function styleOf(mark) {
  const classes = mark.class.split(" ");
  for (let i = classes.length - 1; i >= 0; i--) {
    if (STYLES[classes[i]]) return STYLES[classes[i]];
  }
  return {};
}

function inside(mark, x, y) {
  if (!mark.title) return false;
  if (mark.shape === "rect") return x >= mark.x && x <= mark.x + mark.width && y >= mark.y && y <= mark.y + mark.height;
  if (mark.shape === "path") return Math.abs(x - mark.cx) <= 6 && Math.abs(y - mark.cy) <= 8;
  return false;
}

/** The surface in ``box``, ``layoutWidth`` units wide: paint(marks, layoutHeight). */
export function createCanvas(box, layoutWidth) {
  const root = window.getComputedStyle(document.documentElement);
  const font = root.getPropertyValue("--font").trim() || "system-ui";
  let marks = [];
  let layoutHeight = 60;
  let plot = null;

  function color(name) { return root.getPropertyValue(name).trim() || "#374151"; }

  function size() {
    const width = Math.max(200, box.clientWidth);
    return { width: width, height: Math.round(layoutHeight * width / layoutWidth) };
  }

  function paintMarks(u) {
    const ctx = u.ctx;
    const k = u.bbox.width / layoutWidth;
    ctx.save();
    ctx.translate(u.bbox.left, u.bbox.top);
    marks.forEach(function (mark) {
      const style = styleOf(mark);
      ctx.fillStyle = style.fill ? color(style.fill) : "transparent";
      ctx.strokeStyle = style.stroke ? color(style.stroke) : "transparent";
      ctx.lineWidth = (style.width || 1) * k;
      ctx.setLineDash((style.dash || []).map(function (d) { return d * k; }));
      if (mark.shape === "rect") {
        if (style.fill) ctx.fillRect(mark.x * k, mark.y * k, mark.width * k, mark.height * k);
        if (style.stroke) ctx.strokeRect(mark.x * k, mark.y * k, mark.width * k, mark.height * k);
      } else if (mark.shape === "line") {
        ctx.beginPath();
        ctx.moveTo(mark.x1 * k, mark.y1 * k);
        ctx.lineTo(mark.x2 * k, mark.y2 * k);
        ctx.stroke();
      } else if (mark.shape === "path") {
        ctx.save();
        ctx.scale(k, k);
        ctx.lineWidth = style.width || 1;
        const path = new window.Path2D(mark.d);
        if (style.fill) ctx.fill(path);
        if (style.stroke) ctx.stroke(path);
        ctx.restore();
      } else if (mark.shape === "text") {
        ctx.font = (style.weight || 400) + " " + (style.font || 13) * k + "px " + font;
        ctx.textAlign = mark.anchor === "middle" ? "center" : "left";
        ctx.textBaseline = "alphabetic";
        ctx.fillText(mark.text, mark.x * k, mark.y * k);
      }
    });
    ctx.restore();
  }

  // Hovering a mark with a title shows it as the chart's tooltip.
  function hover(u) {
    const k = u.bbox.width / layoutWidth / (u.pxRatio || 1);
    const x = u.cursor.left / k;
    const y = u.cursor.top / k;
    let found = null;
    for (let i = marks.length - 1; i >= 0 && !found; i--) {
      if (inside(marks[i], x, y)) found = marks[i];
    }
    u.over.title = found ? found.title : "";
  }

  function make() {
    plot = new window.uPlot(Object.assign(size(), {
      padding: [0, 0, 0, 0],
      legend: { show: false },
      cursor: { x: false, y: false, points: { show: false }, drag: { x: false, y: false } },
      scales: { x: { time: false, range: [0, 1] }, y: { range: [0, 1] } },
      axes: [{ show: false }, { show: false }],
      series: [{}],
      hooks: { draw: [paintMarks], setCursor: [hover] },
    }), [[0, 1]], box);
  }

  if (window.ResizeObserver) {
    let width = box.clientWidth;
    new ResizeObserver(function () {
      if (!plot || box.clientWidth === width) return;
      width = box.clientWidth;
      plot.setSize(size());
    }).observe(box);
  }

  /** Show ``next`` marks (the timeline's, laid out ``height`` units high). */
  function paint(next, height) {
    next.forEach(function (mark) {
      if (mark.shape === "path") {
        const m = /^M(-?[\d.]+) (-?[\d.]+)/.exec(mark.d);
        mark.cx = m ? Number(m[1]) : 0;
        mark.cy = m ? Number(m[2]) + 5 : 0;
      }
    });
    marks = next;
    layoutHeight = height;
    box.timelineMarks = marks; // for the browser tests
    if (!window.uPlot) return;
    if (!plot) {
      make();
      return;
    }
    const want = size();
    if (want.width !== plot.width || want.height !== plot.height) plot.setSize(want);
    else plot.redraw(false, false);
  }

  return { paint: paint };
}
