// Charts of the server's own metrics (`GET /metrics`, read every few seconds), drawn as SVG
// here: no library. The page keeps the last ten minutes; a reload starts afresh.

import { call } from "./api.js";

export const EVERY_MS = 5000;
const KEEP_MS = 10 * 60 * 1000;
const SVG = "http://www.w3.org/2000/svg";

/** The Prometheus text format as `[{name, labels, value}]`. */
export function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = {};
    for (const [, k, v] of (match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

/** The sum of the samples named `name` whose labels include `where`. */
function sum(samples, name, where = {}) {
  let total = 0;
  for (const s of samples) {
    if (s.name !== name) continue;
    if (Object.entries(where).every(([k, v]) => s.labels[k] === v)) total += s.value;
  }
  return total;
}

/** What each chart shows: a counter's rate per second, a gauge, or a mean over the interval. */
const SERIES = [
  { id: "acquisitions", title: "Acquisitions / s", rate: (m) => sum(m, "fencelock_requests_total", { op: "acquire", outcome: "granted" }) },
  { id: "contention", title: "Contention / s", rate: (m) => sum(m, "fencelock_contention_total") },
  { id: "timeouts", title: "Timeouts / s", rate: (m) => sum(m, "fencelock_timeouts_total") },
  {
    id: "latency",
    title: "Acquire latency, mean (ms)",
    mean: (m) => [
      sum(m, "fencelock_request_duration_seconds_sum", { op: "acquire" }) * 1000,
      sum(m, "fencelock_request_duration_seconds_count", { op: "acquire" }),
    ],
  },
  { id: "live", title: "Live leases", gauge: (m) => sum(m, "fencelock_live_leases") },
  { id: "waiters", title: "Waiters", gauge: (m) => sum(m, "fencelock_waiters") },
];

function svg(name, attributes = {}) {
  const element = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attributes)) element.setAttribute(k, String(v));
  return element;
}

/** A number for an axis: 3 significant digits at most. */
function short(value) {
  if (value === 0) return "0";
  if (Math.abs(value) >= 1000) return `${(value / 1000).toPrecision(3)}k`;
  return String(Number(value.toPrecision(3)));
}

/** One chart: a figure with its title, last value and a line over ten minutes. */
class Chart {
  constructor(container, series) {
    this.series = series;
    this.points = [];
    const figure = document.createElement("figure");
    figure.className = "chart";
    const caption = document.createElement("figcaption");
    const title = document.createElement("span");
    title.textContent = series.title;
    this.value = document.createElement("span");
    this.value.className = "value";
    caption.append(title, this.value);
    this.svg = svg("svg", { viewBox: "0 0 300 80", role: "img", "aria-label": series.title });
    this.line = svg("polyline", { class: "line", fill: "none" });
    this.area = svg("polygon", { class: "area" });
    this.top = svg("text", { x: 2, y: 10, class: "axis" });
    this.svg.append(svg("line", { x1: 0, y1: 79.5, x2: 300, y2: 79.5, class: "base" }), this.area, this.line, this.top);
    figure.append(caption, this.svg);
    container.append(figure);
  }

  add(at, value) {
    this.points.push([at, value]);
    while (this.points.length && this.points[0][0] < at - KEEP_MS) this.points.shift();
    this.value.textContent = short(value);
    this.draw(at);
  }

  draw(now) {
    const max = Math.max(0, ...this.points.map(([, v]) => v));
    const x = (t) => (300 * (t - (now - KEEP_MS))) / KEEP_MS;
    const y = (v) => 78 - (66 * v) / (max || 1);
    const coords = this.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
    this.line.setAttribute("points", coords.join(" "));
    if (this.points.length) {
      const first = x(this.points[0][0]).toFixed(1);
      const last = x(this.points[this.points.length - 1][0]).toFixed(1);
      this.area.setAttribute("points", `${first},79 ${coords.join(" ")} ${last},79`);
    }
    this.top.textContent = `max ${short(max)}`;
  }
}

/** The charts in `container`, fed from `/metrics` every {@link EVERY_MS} until `stop()`. */
export class Charts {
  constructor(container) {
    this.charts = SERIES.map((series) => new Chart(container, series));
    this.previous = null;
    this.timer = null;
  }

  start() {
    if (this.timer) return;
    this.poll();
    this.timer = setInterval(() => this.poll(), EVERY_MS);
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
  }

  async poll() {
    let samples;
    try {
      const response = await call("/metrics");
      if (!response.ok) return;
      samples = parseMetrics(await response.text());
    } catch {
      return; // The next poll tries again; the stream's status says whether the server is up.
    }
    const at = Date.now();
    const now = { at, values: SERIES.map((s) => (s.rate ? s.rate(samples) : s.mean ? s.mean(samples) : s.gauge(samples))) };
    const before = this.previous;
    this.previous = now;
    SERIES.forEach((series, i) => {
      if (series.gauge) return this.charts[i].add(at, now.values[i]);
      if (!before) return;
      const seconds = (at - before.at) / 1000;
      if (series.rate) this.charts[i].add(at, Math.max(0, now.values[i] - before.values[i]) / seconds);
      else {
        const [sumNow, countNow] = now.values[i];
        const [sumBefore, countBefore] = before.values[i];
        const count = countNow - countBefore;
        this.charts[i].add(at, count > 0 ? (sumNow - sumBefore) / count : 0);
      }
    });
  }
}
