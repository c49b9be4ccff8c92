// The HTML, style and script of the run report (see report.h). Kept apart from the C++ that
// fills it in: @TITLE@ becomes the run's name and @DATA@ the run's data as JSON.
namespace loom::profile {

extern const char* const kReportPage;
const char* const kReportPage = R"PAGE(<!doctype html>
<html><head><meta charset="utf-8"><title>Loom report: @TITLE@</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 24px; max-width: 1060px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
.chart { border: 1px solid #ddd; margin: 8px 0; } .chart svg { display: block; width: 100%; height: auto; }
table { border-collapse: collapse; } td, th { border-bottom: 1px solid #eee; padding: 3px 10px; text-align: left; vertical-align: top; }
.legend span { display: inline-block; margin-right: 14px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
pre { background: #f6f6f6; padding: 10px; overflow: auto; max-height: 320px; }
.high { color: #b00; } .moderate { color: #a60; }
</style></head>
<body>
<h1>Loom run <code>@TITLE@</code></h1>
<div id="headline"></div>
<h2>Step time by phase</h2><div id="phases" class="chart"></div><div id="phases-legend" class="legend"></div>
<h2>Throughput</h2><div id="throughput" class="chart"></div>
<h2>Loss and evaluation</h2><div id="loss" class="chart"></div>
<h2>Findings</h2><div id="findings"></div>
<h2>Remote data workers</h2><div id="workers"></div>
<h2>Parameter servers</h2><div id="servers"></div>
<h2>Autotuning</h2><div id="autotune"></div>
<h2>Settings</h2><div id="settings"></div><pre id="config"></pre>
<script type="application/json" id="data">@DATA@</script>
<script>
(function () {
  const data = JSON.parse(document.getElementById('data').textContent);
  const S = data.summary, R = data.records || [];
  const steps = R.filter(r => r.type === 'step'), epochs = R.filter(r => r.type === 'epoch');
  const NS = 'http://www.w3.org/2000/svg';
  const colors = {data_wait: '#e45756', h2d: '#f58518', forward: '#4c78a8', backward: '#72b7b2',
                  comm_exposed: '#b279a2', bubble: '#d4d4d4', optimizer: '#54a24b', other: '#bab0ac'};
  let charts = 0;

  function esc(s) { return String(s).replace(/[&<>"]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'})[c]); }
  function fmt(v) { return v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toPrecision(2); }
  function pct(v) { return (100 * v).toFixed(1) + '%'; }
  function el(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, content, attrs) {
    const t = el('text', Object.assign({x, y, 'font-size': 11}, attrs || {}), parent);
    t.textContent = content;
  }
  // Axes for steps xs and values 0..ymax; returns the svg and the two scales.
  function frame(id, xs, ymax, label) {
    const W = 1000, H = 260, L = 60, B = 30, T = 10, Rm = 10;
    const svg = el('svg', {viewBox: `0 0 ${W} ${H}`});
    document.getElementById(id).appendChild(svg);
    const lo = Math.min(...xs), hi = Math.max(...xs);
    const x = v => L + (hi > lo ? (v - lo) / (hi - lo) : 0.5) * (W - L - Rm);
    const y = v => H - B - (ymax > 0 ? v / ymax : 0) * (H - B - T);
    el('line', {x1: L, y1: H - B, x2: W - Rm, y2: H - B, stroke: '#888'}, svg);
    el('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#888'}, svg);
    for (const f of [0, 0.5, 1]) text(svg, L - 6, y(ymax * f) + 4, fmt(ymax * f), {'text-anchor': 'end'});
    text(svg, L, H - 8, 'step ' + lo);
    text(svg, W - Rm, H - 8, 'step ' + hi, {'text-anchor': 'end'});
    text(svg, L + 6, T + 12, label, {fill: '#555'});
    return {svg, x, y};
  }
  function polyline(f, points) { return points.map(p => f.x(p[0]).toFixed(1) + ',' + f.y(p[1]).toFixed(1)).join('L'); }
  function none(id, why) { document.getElementById(id).textContent = why; }

  // The phases of the logged steps, stacked, in milliseconds per step.
  const timed = steps.filter(r => r.phase_seconds);
  if (timed.length) {
    // The step's order, bottom up: waiting for data first, then the work.
    const order = ['data_wait', 'h2d', 'forward', 'backward', 'comm_exposed', 'bubble', 'optimizer', 'other'];
    const present = Object.keys(timed[0].phase_seconds);
    const names = order.filter(n => present.includes(n)).concat(present.filter(n => !order.includes(n)));
    const xs = timed.map(r => r.step);
    const totals = timed.map(r => names.reduce((a, n) => a + 1e3 * r.phase_seconds[n], 0));
    const f = frame('phases', xs, Math.max(...totals) * 1.05, 'ms per step');
    let base = timed.map(() => 0);
    for (const n of names) {
      const top = timed.map((r, i) => base[i] + 1e3 * r.phase_seconds[n]);
      const upper = xs.map((x, i) => [x, top[i]]);
      const lower = xs.map((x, i) => [x, base[i]]).reverse();
      el('path', {d: 'M' + polyline(f, upper) + 'L' + polyline(f, lower) + 'Z', fill: colors[n] || '#999',
                  'fill-opacity': 0.85, class: 'series'}, f.svg);
      base = top;
    }
    document.getElementById('phases-legend').innerHTML = names.map(
        n => `<span><i class="swatch" style="background:${colors[n] || '#999'}"></i>${esc(n)}</span>`).join('');
    charts++;
  } else {
    none('phases', 'No per-step phase times in metrics.jsonl.');
  }

  // A language model counts tokens, and is judged by its validation loss per token (perplexity).
  const language = S.task === 'language_model';
  if (steps.length) {
    const rate = r => language ? r.tokens_per_second : r.samples_per_second;
    const f = frame('throughput', steps.map(r => r.step), Math.max(...steps.map(rate)) * 1.1,
                    language ? 'tokens/s' : 'samples/s');
    el('path', {d: 'M' + polyline(f, steps.map(r => [r.step, rate(r)])), fill: 'none', stroke: '#4c78a8',
                'stroke-width': 2, class: 'series'}, f.svg);
    charts++;

    if (language) {
      // Training and validation loss per token on one axis; each validation labelled with its
      // perplexity.
      const checked = epochs.filter(e => e.test_loss !== undefined);
      const top = Math.max(...steps.map(r => r.loss), ...checked.map(e => e.test_loss)) * 1.1;
      const g = frame('loss', steps.map(r => r.step), top,
                      'training loss per token (line), validation loss (dots, labelled with perplexity)');
      el('path', {d: 'M' + polyline(g, steps.map(r => [r.step, r.loss])), fill: 'none', stroke: '#e45756',
                  'stroke-width': 2, class: 'series'}, g.svg);
      for (const e of checked) {
        el('circle', {cx: g.x(e.step), cy: g.y(e.test_loss), r: 5, fill: '#54a24b', class: 'series'}, g.svg);
        text(g.svg, g.x(e.step) - 6, g.y(e.test_loss) - 8, 'ppl ' + Math.exp(e.test_loss).toFixed(1),
             {'text-anchor': 'end'});
      }
    } else {
      // Loss on the axis; test accuracy (0..1) drawn on the same height, labelled in percent.
      const top = Math.max(...steps.map(r => r.loss)) * 1.1;
      const g = frame('loss', steps.map(r => r.step), top, 'training loss (line), test accuracy (dots, 0-100% of the height)');
      el('path', {d: 'M' + polyline(g, steps.map(r => [r.step, r.loss])), fill: 'none', stroke: '#e45756',
                  'stroke-width': 2, class: 'series'}, g.svg);
      for (const e of epochs.filter(e => e.test_accuracy !== undefined)) {
        el('circle', {cx: g.x(e.step), cy: g.y(e.test_accuracy * top), r: 5, fill: '#54a24b', class: 'series'}, g.svg);
        text(g.svg, g.x(e.step) - 6, g.y(e.test_accuracy * top) - 8, pct(e.test_accuracy), {'text-anchor': 'end'});
      }
    }
    charts++;
  } else {
    none('throughput', 'No step records in metrics.jsonl.');
    none('loss', 'No step records in metrics.jsonl.');
  }

  const dp = S.data_parallel || {};
  document.getElementById('headline').innerHTML =
      `<p><b>${esc(S.model)}</b>, ${S.parameters} parameters: ${S.steps} steps, ${S.samples} samples in ` +
      `${S.wall_seconds.toFixed(1)} s; <b>${S.samples_per_second.toFixed(1)} samples/s</b>` +
      (language ? ` (<b>${S.tokens_per_second.toFixed(0)} tokens/s</b>)` : '') +
      (language && S.test_perplexity ? `, validation perplexity <b>${S.test_perplexity.toFixed(1)}</b>` : '') +
      (!language && S.test_accuracy ? `, test accuracy <b>${pct(S.test_accuracy)}</b>` : '') +
      (S.mfu && S.mfu.mfu ? `, MFU ${pct(S.mfu.mfu)}` : '') +
      (dp.ranks > 1 ? `; ${dp.ranks} ranks over ${esc(dp.backend)}, ${pct(dp.overlap)} of the all-reduce hidden behind backward` : '') +
      '.</p>';
  const findings = S.findings || [];
  document.getElementById('findings').innerHTML = findings.length
      ? '<table><tr><th>severity</th><th>evidence</th><th>advice</th><th>key</th><th>at most</th></tr>' +
        findings.map(f => `<tr><td class="${esc(f.severity)}">${esc(f.severity)}</td><td>${esc(f.evidence)}</td>` +
                          `<td>${esc(f.advice)}</td><td><code>${esc(f.key || '')}</code></td>` +
                          `<td>${f.max_gain ? f.max_gain.toFixed(2) + 'x faster' : ''}</td></tr>`).join('') + '</table>'
      : '<p>The advisor found nothing to change.</p>';
  // Who built the batches: each remote data worker (data.remote.workers) and the local threads.
  const remote = (S.data || {}).remote;
  if (remote && remote.workers) {
    const total = remote.workers.reduce((a, w) => a + w.batches, 0) + remote.local_batches;
    const share = n => total ? pct(n / total) : '-';
    document.getElementById('workers').innerHTML =
        '<table id="worker-table"><tr><th>worker</th><th>state</th><th>build threads</th><th>batches</th>' +
        '<th>share</th><th>samples/s</th><th>MB</th><th>mean latency</th><th>failures</th>' +
        '<th>CRC mismatches</th><th>duplicates</th><th>last error</th></tr>' +
        remote.workers.map(w => `<tr><td><code>${esc(w.address)}</code></td><td>${esc(w.state)}</td>` +
                                `<td>${w.threads || '-'}</td><td>${w.batches}</td><td>${share(w.batches)}</td>` +
                                `<td>${fmt(w.samples / S.wall_seconds)}</td><td>${fmt(w.bytes / 1e6)}</td>` +
                                `<td>${fmt(1e3 * w.mean_latency_s)} ms</td><td>${w.failures}</td>` +
                                `<td>${w.crc_mismatches}</td><td>${w.duplicates}</td><td>${esc(w.last_error)}</td></tr>`).join('') +
        `<tr><td>local threads</td><td></td><td></td><td>${remote.local_batches}</td><td>${share(remote.local_batches)}</td>` +
        '<td colspan="7"></td></tr></table>';
  } else {
    none('workers', 'Not used: every batch was built by this host (data.remote.workers sends the work to CPU machines).');
  }
  // Each parameter server's load over the run (parallel.mode: ps), as worker rank 0 heard it.
  const P = S.parameter_servers;
  if (P && P.per_server) {
    document.getElementById('servers').innerHTML =
        `<p>${P.servers} servers for ${P.workers} workers; bytes within ${P.bytes_spread_parts.toFixed(2)} ` +
        `part of each other, busy (CPU) time within ${pct(P.busy_spread)} and active time within ` +
        `${pct(P.active_spread)} of the mean.</p>` +
        '<table id="server-table"><tr><th>server</th><th>host</th><th>steps</th><th>MB in</th>' +
        '<th>MB out</th><th>busy (CPU)</th><th>active</th><th>summing</th></tr>' +
        P.per_server.map(p => `<tr><td>${p.server}</td><td><code>${esc(p.host)}</code></td><td>${p.steps}</td>` +
                              `<td>${fmt(p.bytes_in / 1e6)}</td><td>${fmt(p.bytes_out / 1e6)}</td>` +
                              `<td>${fmt(p.busy_seconds)} s</td><td>${fmt(p.active_seconds)} s</td>` +
                              `<td>${fmt(p.sum_seconds)} s</td></tr>`).join('') +
        '</table>';
  } else {
    none('servers', 'Not used (parallel.mode: ps sends the gradients to parameter servers).');
  }
  const A = S.autotune;
  const settingsText = s => Object.entries(s).map(([k, v]) => `${k}=${v}`).join(' ');
  document.getElementById('autotune').innerHTML = !A
      ? '<p>Not run (<code>loom train --autotune</code> tunes threads, prefetch depth and bucket size).</p>'
      : A.skipped ? `<p>Skipped: ${esc(A.skipped)}.</p>`
      : `<p>${A.steps} steps, ${A.seconds.toFixed(1)} s: <b>${fmt(A.chosen_samples_per_second)} samples/s</b> ` +
        `with <code>${esc(settingsText(A.chosen))}</code>, ${fmt(A.start_samples_per_second)} with the starting ` +
        `settings${A.complete ? '' : ' (stopped at autotune.max_share)'}.</p>` +
        '<table id="trials"><tr><th>tried</th><th>settings</th><th>samples/s: median (samples)</th></tr>' +
        A.trials.map(t => `<tr><td>${esc(t.recheck ? t.varied + ' (current, again)' : t.varied)}</td>` +
                          `<td><code>${esc(settingsText(t.settings))}</code></td>` +
                          `<td>${fmt(t.score)} (${t.samples_per_second.map(fmt).join(', ')})</td></tr>`).join('') +
        '</table>';
  const share = (S.step_time && S.step_time.share) || {};
  const choices = S.choices || {}, machine = S.machine || {};
  const rows = [
    ['precision', `${S.precision} (${choices.precision || ''})`],
    ['memory format', `${S.memory_format} (${choices.memory_format || ''})`],
    ['threads', `${S.threads} (${choices.threads || ''})`],
    ['machine', `${machine.cpu}, ${machine.usable_cores} cores`],
    ['step time', Object.keys(share).filter(k => share[k] >= 0.005).map(k => `${k} ${pct(share[k])}`).join(', ')],
  ];
  document.getElementById('settings').innerHTML =
      '<table>' + rows.map(r => `<tr><th>${r[0]}</th><td>${esc(r[1])}</td></tr>`).join('') + '</table>';
  document.getElementById('config').textContent = data.config;
  document.body.dataset.charts = charts;
})();
</script>
</body></html>
)PAGE";

}  // namespace loom::profile
