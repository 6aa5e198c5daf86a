// Metrics as charts over time: `GET /metrics` read every two seconds while the page
// is open (request rate, latency percentiles, storage size, writer batch sizes and
// commits), and the last day's storage from `get_analytics`.

import { metricsText, op } from '../api.js';
import { lineChart } from '../chart.js';
import { attempt, bytes, fill, h } from '../ui.js';

const EVERY_MS = 2000;
/** Samples kept: ten minutes at one every two seconds. */
const KEPT = 300;

export async function render(main) {
  const status = h('div');
  const charts = h('div', { class: 'charts' });
  const history = h('div', { class: 'charts' });
  fill(main, h('h1', {}, 'Metrics'), h('p', { class: 'hint' }, 'Live figures, read every 2 s while this page is open.'), status, charts,
    h('h2', {}, 'Storage over the last day'), history);
  const samples = [];
  let timer = null;

  async function sample() {
    const text = await attempt(status, metricsText);
    if (text !== undefined) {
      samples.push({ time: Date.now(), metrics: parse(text) });
      if (samples.length > KEPT) samples.shift();
      draw(charts, samples);
    }
    timer = setTimeout(sample, EVERY_MS);
  }
  await sample();
  loadHistory(history);
  return () => clearTimeout(timer);
}

/** Prometheus's text format: `{name: [{labels, value}]}`. */
export function parse(text) {
  const metrics = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = {};
    for (const pair of (match[3] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
    (metrics[match[1]] ??= []).push({ labels, value: Number(match[4]) });
  }
  return metrics;
}

const sum = (metrics, name, keep = () => true) => (metrics[name] ?? []).filter((s) => keep(s.labels)).reduce((total, s) => total + s.value, 0);

/** Rates between consecutive samples of a counter (per second). */
function rate(samples, name) {
  const points = [];
  for (let i = 1; i < samples.length; i += 1) {
    const seconds = (samples[i].time - samples[i - 1].time) / 1000;
    const grown = sum(samples[i].metrics, name) - sum(samples[i - 1].metrics, name);
    points.push([samples[i].time, Math.max(0, grown) / seconds]);
  }
  return points;
}

/**
 * The `quantile` of a histogram's observations between consecutive samples; `null`
 * for an interval that observed nothing (no request is not a 0 ms request).
 */
export function quantile(samples, name, q) {
  const points = [];
  for (let i = 1; i < samples.length; i += 1) {
    const buckets = new Map();
    for (const [at, sign] of [[i, 1], [i - 1, -1]]) {
      for (const s of samples[at].metrics[`${name}_bucket`] ?? []) {
        const bound = s.labels.le === '+Inf' ? Infinity : Number(s.labels.le);
        buckets.set(bound, (buckets.get(bound) ?? 0) + sign * s.value);
      }
    }
    const bounds = [...buckets.keys()].sort((a, b) => a - b);
    const total = buckets.get(Infinity) ?? 0;
    if (total <= 0) { points.push([samples[i].time, null]); continue; }
    const bound = bounds.find((b) => buckets.get(b) >= q * total) ?? Infinity;
    const finite = Number.isFinite(bound) ? bound : bounds[bounds.length - 2] ?? 0;
    points.push([samples[i].time, finite]);
  }
  return points;
}

/** Mean of a histogram's observations between consecutive samples; `null` for none. */
export function mean(samples, name) {
  const points = [];
  for (let i = 1; i < samples.length; i += 1) {
    const count = sum(samples[i].metrics, `${name}_count`) - sum(samples[i - 1].metrics, `${name}_count`);
    const total = sum(samples[i].metrics, `${name}_sum`) - sum(samples[i - 1].metrics, `${name}_sum`);
    points.push([samples[i].time, count > 0 ? total / count : null]);
  }
  return points;
}

function draw(place, samples) {
  const ms = (v) => `${(v * 1000).toFixed(v < 0.01 ? 2 : 1)} ms`;
  const perSecond = (v) => `${v.toFixed(v < 10 ? 1 : 0)}/s`;
  const gauge = (name) => samples.map((s) => [s.time, sum(s.metrics, name)]);
  fill(place,
    lineChart({ title: 'Requests per second', series: [{ name: 'requests', points: rate(samples, 'lyre_requests_total') }], format: perSecond }),
    lineChart({
      title: 'Request latency',
      series: [0.5, 0.9, 0.99].map((q) => ({ name: `p${Math.round(q * 100)}`, points: quantile(samples, 'lyre_request_duration_seconds', q) })),
      format: ms,
      idle: 'no requests',
    }),
    lineChart({ title: 'Storage size', series: [{ name: 'databases', points: gauge('lyre_database_size_bytes') }, { name: 'transaction logs', points: gauge('lyre_transaction_log_size_bytes') }], format: bytes }),
    lineChart({ title: 'Writer batch size (jobs per commit)', series: [{ name: 'mean', points: mean(samples, 'lyre_writer_batch_size') }], idle: 'no commits' }),
    lineChart({ title: 'Writer commits per second', series: [{ name: 'commits', points: rate(samples, 'lyre_writer_commits_total') }], format: perSecond }),
    lineChart({ title: 'Resident memory', series: [{ name: 'process', points: gauge('lyre_process_resident_memory_bytes') }], format: bytes }));
}

/** Each database's size over the last day, from the analytics the server aggregates. */
async function loadHistory(place) {
  const records = await attempt(place, () => op('get_analytics', { metric: 'database-size', start_time: Date.now() - 24 * 3600 * 1000 }));
  if (!records) return;
  const byDatabase = new Map();
  for (const record of records) {
    if (!byDatabase.has(record.database)) byDatabase.set(record.database, []);
    byDatabase.get(record.database).push([record.time, record.size]);
  }
  if (!byDatabase.size) {
    fill(place, h('p', { class: 'hint' }, 'Nothing aggregated yet: the server records storage once per analytics period (a minute by default).'));
    return;
  }
  fill(place, lineChart({ title: 'Database size', series: [...byDatabase].map(([name, points]) => ({ name, points })), format: bytes }));
}
