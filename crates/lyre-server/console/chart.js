// Line charts drawn as SVG: time along the bottom, one line per series, the newest
// value of each in the legend and in the chart's accessible name.

const SVG = 'http://www.w3.org/2000/svg';
const COLORS = ['#2f5bd3', '#d3562f', '#1e7b45', '#8a3fb8'];
const [WIDTH, HEIGHT, LEFT, BOTTOM] = [360, 150, 58, 18];

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  return node;
}

/**
 * A chart of `series` (`{name, points: [[ms, value], …]}`), values shown by `format`.
 * A `null` value is an interval with nothing to measure (no request to time, no
 * commit to count): the line breaks there instead of falling to zero, and a newest
 * value of `null` shows as `idle`.
 */
export function lineChart({ title, series, format = (v) => v.toFixed(1), idle = 'nothing lately' }) {
  const figure = document.createElement('figure');
  figure.className = 'chart card';
  const caption = document.createElement('figcaption');
  caption.textContent = title;
  const points = series.flatMap((s) => s.points);
  const measured = points.filter((p) => p[1] !== null);
  const newest = (s) => {
    if (!s.points.length) return 'no data yet';
    const value = s.points[s.points.length - 1][1];
    return value === null ? idle : format(value);
  };
  const latest = series.map((s) => `${s.name}: ${newest(s)}`);
  const chart = svg('svg', { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img', 'aria-label': `${title}. Latest: ${latest.join('; ')}` });
  const top = Math.max(...measured.map((p) => p[1]), 0) || 1;
  const first = Math.min(...points.map((p) => p[0]));
  const last = Math.max(...points.map((p) => p[0]));
  const span = last - first || 1;
  const x = (t) => LEFT + ((t - first) / span) * (WIDTH - LEFT - 6);
  const y = (v) => HEIGHT - BOTTOM - (v / top) * (HEIGHT - BOTTOM - 8);
  chart.append(svg('line', { class: 'axis', x1: LEFT, y1: HEIGHT - BOTTOM, x2: WIDTH, y2: HEIGHT - BOTTOM }));
  chart.append(svg('line', { class: 'axis', x1: LEFT, y1: 4, x2: LEFT, y2: HEIGHT - BOTTOM }));
  for (const [value, at] of [[top, y(top)], [top / 2, y(top / 2)], [0, y(0)]]) {
    const label = svg('text', { x: LEFT - 4, y: at + 3, 'text-anchor': 'end' });
    label.textContent = format(value);
    chart.append(label);
  }
  if (points.length) {
    for (const [time, anchor, at] of [[first, 'start', LEFT], [last, 'end', WIDTH]]) {
      const label = svg('text', { x: at, y: HEIGHT - 4, 'text-anchor': anchor });
      label.textContent = new Date(time).toLocaleTimeString();
      chart.append(label);
    }
  }
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    for (const run of measuredRuns(s.points)) {
      if (run.length === 1) {
        // A measured interval between idle ones: a dot, as a line needs two points.
        const [[t, v]] = run;
        chart.append(svg('circle', { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 1.8, fill: color }));
        continue;
      }
      const path = run.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
      chart.append(svg('polyline', { points: path, fill: 'none', stroke: color, 'stroke-width': 1.6 }));
    }
  });
  const legend = document.createElement('div');
  legend.className = 'legend';
  series.forEach((s, i) => {
    const item = document.createElement('span');
    item.style.color = COLORS[i % COLORS.length];
    item.textContent = latest[i];
    legend.append(item);
  });
  figure.append(caption, chart, legend);
  return figure;
}

/** `points` split where a value is `null`: the runs of measured points, in order. */
function measuredRuns(points) {
  const runs = [[]];
  for (const point of points) {
    if (point[1] === null) {
      if (runs[runs.length - 1].length) runs.push([]);
    } else {
      runs[runs.length - 1].push(point);
    }
  }
  return runs.filter((run) => run.length);
}
