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
.high { color: #b00; } .moderate { color: #a60; }
</style></head>
<body>
<h1>Loom run <code>@TITLE@</code></h1>
<div id="headline"></div><p id="layout"></p>
<h2>Step time by phase</h2><div id="phases" class="chart"></div><div id="phases-legend" class="legend"></div>
<h2>Throughput</h2><div id="throughput" class="chart"></div>
<h2>Loss and evaluation</h2><div id="loss" class="chart"></div><div id="loss-legend" class="legend"></div>
<h2>Findings</h2><div id="findings"></div>
<h2>Remote data workers</h2><div id="workers"></div>
<h2>Parameter servers</h2><div id="servers"></div>
<h2>Autotuning</h2><div id="autotune"></div>
<h2>Settings</h2><div id="settings"></div>
<h2>Configuration</h2><div id="config"></div>
<script type="application/json" id="data">@DATA@</script>
<script>
(function () {
  const data = JSON.parse(document.getElementById('data').textContent);
  const S = data.summary, R = data.records || [];
  const steps = R.filter(r => r.type === 'step'), epochs = R.filter(r => r.type === 'epoch');
  const NS = 'http://www.w3.org/2000/svg';
  const colors = {data_wait: '#e45756', h2d: '#f58518', forward: '#4c78a8', backward: '#72b7b2',
                  comm_exposed: '#b279a2', tensor_comm: '#ff9da6', bubble: '#d4d4d4',
                  optimizer: '#54a24b', other: '#bab0ac'};
  // A language model counts tokens, and is judged by its validation loss per token (perplexity).
  const language = S.task === 'language_model';

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
    const t = el('text', Object.assign({x, y, 'font-size': 12}, attrs || {}), parent);
    t.textContent = content;
    return t;
  }
  function overlap(a, b) {
    return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
  }

  // Ticks k x step in lo..hi, rounded to the step's decimals (so 3 x 0.1 reads 0.3).
  function decimals(step) {
    let d = 0;
    while (d < 12 && Math.abs(Math.round(step * 10 ** d) - step * 10 ** d) > 1e-6 * step * 10 ** d) d++;
    return d;
  }
  function ticksIn(lo, hi, step) {
    const out = [];
    for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; k++) out.push(+(k * step).toFixed(decimals(step)));
    return out;
  }
  // The smallest spacing of 1, 2, 2.5 or 5 x 10^k (and a multiple of `least`, if given) that puts
  // at most `most` ticks in lo..hi: round numbers, never so many that their labels collide.
  function niceStep(lo, hi, most, least) {
    let unit = 10 ** Math.floor(Math.log10(Math.max((hi - lo) / most, least || 0) || 1));
    for (;; unit *= 10) {
      for (const m of [1, 2, 2.5, 5]) {
        const step = m * unit;
        if (least && (step < least || decimals(step / least) > 0)) continue;
        if (ticksIn(lo, hi, step).length <= most) return step;
      }
    }
  }
  function tickLabel(v, step) {
    if (v === 0) return '0';
    for (const [unit, suffix] of [[1e6, 'M'], [1e3, 'k']]) {
      if (step >= unit) return (v / unit).toFixed(decimals(step / unit)) + suffix;
    }
    return v.toFixed(decimals(step));
  }

  // A chart as wide as its box (so its text keeps its size on a narrow page): x over `xs`, every
  // step any chart draws (log steps and evaluations, so the charts line up and no point falls
  // left of the axis), y from 0 to the first tick at or above ymax, both with labelled ticks
  // (class "tick x", "tick y", the value in data-value). `right`, if given ({title, color}), adds
  // a second y scale for a share (0..100%) on the right. Titles sit above the plot, where no data
  // is drawn. A run of one logged step gets a step either side, its point in the middle.
  function frame(id, xs, ymax, title, right) {
    const box = document.getElementById(id);
    const W = Math.max(360, box.clientWidth), H = 270, L = 56, T = 28, B = 40, Rm = 56, pad = 8;
    const svg = el('svg', {viewBox: `0 0 ${W} ${H}`, width: W, height: H}, box);
    let lo = Math.min(...xs), hi = Math.max(...xs);
    if (hi === lo) { lo -= 1; hi += 1; }
    // `pad` keeps the first and last points' dots off the axes.
    const x = v => L + pad + (v - lo) / (hi - lo) * (W - L - Rm - 2 * pad);
    const ystep = niceStep(0, ymax, 5), top = Math.max(ystep, Math.ceil(ymax / ystep - 1e-9) * ystep);
    const y = v => H - B - v / top * (H - B - T);
    for (const v of ticksIn(0, top, ystep)) {
      el('line', {x1: L, y1: y(v), x2: W - Rm, y2: y(v), stroke: v ? '#eee' : '#888'}, svg);
      text(svg, L - 6, y(v) + 4, tickLabel(v, ystep), {'text-anchor': 'end', class: 'tick y', 'data-value': v});
    }
    const xstep = niceStep(lo, hi, Math.min(8, Math.max(4, Math.floor((W - L - Rm) / 70))), 1);
    for (const v of ticksIn(lo, hi, xstep)) {
      el('line', {x1: x(v), y1: H - B, x2: x(v), y2: H - B + 5, stroke: '#888'}, svg);
      text(svg, x(v), H - B + 18, tickLabel(v, xstep), {'text-anchor': 'middle', class: 'tick x', 'data-value': v});
    }
    el('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#888'}, svg);
    text(svg, L + (W - L - Rm) / 2, H - 5, 'step', {'text-anchor': 'middle', fill: '#555', class: 'title x'});
    text(svg, 6, T - 12, title, {fill: right ? '#e45756' : '#555', class: 'title y'});
    const y2 = v => H - B - v * (H - B - T);
    if (right) {
      el('line', {x1: W - Rm, y1: T, x2: W - Rm, y2: H - B, stroke: right.color}, svg);
      for (const v of ticksIn(0, 1, 0.2)) {
        el('line', {x1: W - Rm, y1: y2(v), x2: W - Rm + 5, y2: y2(v), stroke: right.color}, svg);
        text(svg, W - Rm + 8, y2(v) + 4, (100 * v).toFixed(0) + '%',
             {fill: right.color, class: 'tick y2', 'data-value': v});
      }
      text(svg, W - 6, T - 12, right.title, {'text-anchor': 'end', fill: right.color, class: 'title y2'});
    }
    const f = {svg, x, y, y2, W, H, L, T, B, Rm, drawn: []};
    // Every point a chart draws is placed here, so the page can say where they all are.
    f.at = (xv, yv, scale) => {
      const p = [x(xv), (scale === 'y2' ? y2 : y)(yv)];
      f.drawn.push(p);
      return p;
    };
    return f;
  }
  // The chart's plot area [left, top, right, bottom] and the points drawn in it, in pixels, and
  // how many of those lie outside it: on the <svg> as data-plot, data-points and data-outside.
  function record(f) {
    const box = [f.L, f.T, f.W - f.Rm, f.H - f.B];
    const outside = f.drawn.filter(([px, py]) => !(px >= box[0] - 0.5 && px <= box[2] + 0.5 &&
                                                   py >= box[1] - 0.5 && py <= box[3] + 0.5)).length;
    f.svg.setAttribute('data-plot', JSON.stringify(box));
    f.svg.setAttribute('data-points', JSON.stringify(f.drawn.map(p => p.map(v => +v.toFixed(1)))));
    f.svg.setAttribute('data-outside', outside);
  }
  function polyline(f, points, scale) {
    return points.map(p => f.at(p[0], p[1], scale).map(v => v.toFixed(1)).join(',')).join('L');
  }
  // A line through [step, value] points; a single point, which a line cannot show, as a dot.
  function line(f, points, color) {
    el('path', {d: 'M' + polyline(f, points), fill: 'none', stroke: color, 'stroke-width': 2, class: 'series'}, f.svg);
    if (points.length === 1) {
      const [cx, cy] = f.at(points[0][0], points[0][1]);
      el('circle', {cx, cy, r: 3, fill: color, class: 'series'}, f.svg);
    }
  }
  function none(id, why) { document.getElementById(id).textContent = why; }
  function legend(id, items) {
    document.getElementById(id).innerHTML = items.map(([color, what, dot]) =>
        `<span><i class="swatch" style="background:${color}${dot ? ';border-radius:50%' : ''}"></i>${esc(what)}</span>`).join('');
  }
  // Dots ({x, y} in pixels, a label each) labelled inside the plot: above the dot, or below it
  // where there is no room above. A label that would come near any text already in the chart
  // (a tick, a title, another label) is left out: the axis still reads its dot. Labelled first:
  // the last dot (the run's result), then dot `best` (the best evaluation), then the others
  // from the latest back; many evaluations thin to the labels that fit.
  function labelDots(f, dots, best) {
    const order = dots.map((d, i) => i).reverse();
    if (best >= 0 && best < dots.length - 1) {
      order.splice(order.indexOf(best), 1);
      order.splice(1, 0, best);
    }
    const taken = Array.from(f.svg.querySelectorAll('text'), t => t.getBBox());
    for (const i of order) {
      const d = dots[i];
      const t = text(f.svg, d.x, d.y - 10, d.label, {'text-anchor': 'middle', class: 'dot-label',
                     stroke: '#fff', 'stroke-width': 3, 'paint-order': 'stroke'});
      const w = t.getBBox().width;
      t.setAttribute('x', Math.min(Math.max(d.x, f.L + w / 2 + 3), f.W - f.Rm - w / 2 - 3));
      if (t.getBBox().y < f.T) t.setAttribute('y', d.y + 20);
      const b = t.getBBox(), near = {x: b.x - 8, y: b.y - 2, width: b.width + 16, height: b.height + 4};
      if (b.y < f.T || b.y + b.height > f.H - f.B || taken.some(p => overlap(p, near))) {
        t.remove();
      } else {
        taken.push(b);
      }
    }
  }
  // The page checks its own layout: the texts of each chart that cover one another or leave it.
  function overlaps() {
    let n = 0;
    for (const svg of document.querySelectorAll('.chart svg')) {
      const W = +svg.getAttribute('width'), H = +svg.getAttribute('height');
      const boxes = Array.from(svg.querySelectorAll('text'), t => t.getBBox());
      boxes.forEach((b, i) => {
        if (b.x < 0 || b.y < 0 || b.x + b.width > W || b.y + b.height > H) n++;
        n += boxes.slice(i + 1).filter(c => overlap(b, c)).length;
      });
    }
    return n;
  }

  // The charts, drawn to the page's width, again when it changes; returns how many were drawn.
  function drawCharts() {
    for (const id of ['phases', 'throughput', 'loss', 'phases-legend', 'loss-legend']) {
      document.getElementById(id).textContent = '';
    }
    let charts = 0;
    // The evaluations, and every step a chart draws: the charts share one x range.
    const checked = epochs.filter(e => language ? e.test_loss !== undefined : e.test_accuracy !== undefined);
    const xs = steps.map(r => r.step).concat(checked.map(e => e.step));
    // The phases of the logged steps, stacked, in milliseconds per step.
    const timed = steps.filter(r => r.phase_seconds);
    if (timed.length) {
      // The step's order, bottom up: waiting for data first, then the work.
      const order = ['data_wait', 'h2d', 'forward', 'backward', 'comm_exposed', 'tensor_comm', 'bubble',
                     'optimizer', 'other'];
      const present = Object.keys(timed[0].phase_seconds);
      const names = order.filter(n => present.includes(n)).concat(present.filter(n => !order.includes(n)));
      // One logged window is a bar across its step (inside the x range), not an area of no width.
      const lo = Math.min(...xs), hi = Math.max(...xs), half = Math.max(0.4, (hi - lo) / 60);
      const edge = v => hi > lo ? Math.min(hi, Math.max(lo, v)) : v;
      const at = timed.length > 1 ? timed.map(r => [r.step, r])
                                  : [[edge(timed[0].step - half), timed[0]], [edge(timed[0].step + half), timed[0]]];
      const totals = timed.map(r => names.reduce((a, n) => a + 1e3 * r.phase_seconds[n], 0));
      const f = frame('phases', xs, Math.max(...totals), 'ms per step');
      let base = at.map(() => 0);
      for (const n of names) {
        const top = at.map(([, r], i) => base[i] + 1e3 * r.phase_seconds[n]);
        const upper = at.map(([x], i) => [x, top[i]]);
        const lower = at.map(([x], i) => [x, base[i]]).reverse();
        el('path', {d: 'M' + polyline(f, upper) + 'L' + polyline(f, lower) + 'Z', fill: colors[n] || '#999',
                    'fill-opacity': 0.85, class: 'series'}, f.svg);
        base = top;
      }
      legend('phases-legend', names.map(n => [colors[n] || '#999', n]));
      record(f);
      charts++;
    } else {
      none('phases', 'No per-step phase times in metrics.jsonl.');
    }
    if (!steps.length) {
      none('throughput', 'No step records in metrics.jsonl.');
      none('loss', 'No step records in metrics.jsonl.');
      return charts;
    }
    const rate = r => language ? r.tokens_per_second : r.samples_per_second;
    const f = frame('throughput', xs, Math.max(...steps.map(rate)), language ? 'tokens/s' : 'samples/s');
    line(f, steps.map(r => [r.step, rate(r)]), '#4c78a8');
    record(f);
    charts++;

    const dot = (g, p) => el('circle', {cx: p[0], cy: p[1], r: 5, fill: '#54a24b', class: 'series'}, g.svg);
    const losses = steps.map(r => [r.step, r.loss]);
    let g, dots, best;
    if (language) {
      // Training and validation loss per token on one axis (the same unit); each validation
      // labelled with its perplexity, the lowest among the first labelled.
      g = frame('loss', xs, Math.max(...steps.map(r => r.loss), ...checked.map(e => e.test_loss)),
                'loss per token');
      line(g, losses, '#e45756');
      dots = checked.map(e => ({p: g.at(e.step, e.test_loss), label: 'ppl ' + Math.exp(e.test_loss).toFixed(1)}));
      best = checked.reduce((b, e, i) => e.test_loss < checked[b].test_loss ? i : b, 0);
      legend('loss-legend', [['#e45756', 'training loss per token'],
                             ['#54a24b', 'validation loss per token, labelled with its perplexity', true]]);
    } else {
      // Loss on the left scale, test accuracy on its own (0..100%) on the right.
      g = frame('loss', xs, Math.max(...steps.map(r => r.loss)), 'training loss',
                checked.length ? {title: 'test accuracy', color: '#54a24b'} : null);
      line(g, losses, '#e45756');
      dots = checked.map(e => ({p: g.at(e.step, e.test_accuracy, 'y2'), label: pct(e.test_accuracy)}));
      best = checked.reduce((b, e, i) => e.test_accuracy > checked[b].test_accuracy ? i : b, 0);
      legend('loss-legend', [['#e45756', 'training loss (left scale)']].concat(
          checked.length ? [['#54a24b', 'test accuracy after each epoch (right scale)', true]] : []));
    }
    for (const d of dots) dot(g, d.p);
    labelDots(g, dots.map(d => ({x: d.p[0], y: d.p[1], label: d.label})), best);
    record(g);
    return charts + 1;
  }
  function draw() {
    document.body.dataset.charts = drawCharts();
    document.body.dataset.overlaps = overlaps();
  }
  draw();
  let redraw = 0;
  window.addEventListener('resize', () => {
    cancelAnimationFrame(redraw);
    redraw = requestAnimationFrame(draw);
  });

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
  // The layout in words (summary.json's layout.text, each dimension's part as the run described
  // it), and its mesh: each dimension's size in data-mesh-data, -pipeline, -tensor, the
  // parameter servers in data-servers.
  const layout = S.layout || {}, mesh = layout.mesh || {};
  const layoutBox = document.getElementById('layout');
  if (layout.text) {
    layoutBox.textContent = `Layout: ${layout.text}.`;
    layoutBox.dataset.ranks = layout.ranks;
    layoutBox.dataset.servers = layout.servers || 0;
    layoutBox.dataset.zero = layout.zero || 0;
    for (const n of ['data', 'pipeline', 'tensor'])
      layoutBox.dataset['mesh' + n[0].toUpperCase() + n.slice(1)] = mesh[n] || 1;
  }
  // What the run said at its start (a batch grown with the replicas, a warm-up longer than the
  // run), then the advisor's findings.
  const findings = (S.notices || []).concat(S.findings || []);
  document.getElementById('findings').innerHTML = findings.length
      ? '<table><tr><th>severity</th><th>evidence</th><th>advice</th><th>key</th><th>at most</th></tr>' +
        findings.map(f => `<tr data-id="${esc(f.id)}"><td class="${esc(f.severity)}">${esc(f.severity)}</td><td>${esc(f.evidence)}</td>` +
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
  // The machine's cores (as this process may use them: affinity and quota) apart from the share
  // each rank on it sized its threads to. A summary from before "cores" was recorded has only
  // the share (usable_cores).
  const rankCores = machine.rank_cores !== undefined ? machine.rank_cores : machine.usable_cores;
  const rows = [
    ['precision', `${S.precision} (${choices.precision || ''})`],
    ['memory format', `${S.memory_format} (${choices.memory_format || ''})`],
    ['threads', `${S.threads} (${choices.threads || ''})`],
    ['machine', machine.cpu + (machine.cores !== undefined ? `, ${machine.cores} usable cores` : ''),
     machine.cores !== undefined ? {id: 'machine', 'data-cores': machine.cores} : {id: 'machine'}],
    ['cores per rank', `${rankCores}` + (layout.ranks > 1 ? ' (the ranks on a machine share its cores)' : ''),
     {id: 'rank-cores', 'data-cores': rankCores}],
    ['step time', Object.keys(share).filter(k => share[k] >= 0.005).map(k => `${k} ${pct(share[k])}`).join(', ')],
  ];
  const attrs = a => Object.entries(a || {}).map(([k, v]) => ` ${k}="${esc(v)}"`).join('');
  document.getElementById('settings').innerHTML =
      '<table>' + rows.map(r => `<tr${attrs(r[2])}><th>${r[0]}</th><td>${esc(r[1])}</td></tr>`).join('') + '</table>';
  // config.yaml's keys that apply to this run's model, data source and layout, one a row (its
  // key in data-key); the others counted.
  const hidden = data.settings_hidden || [];
  document.getElementById('config').innerHTML = (data.settings || []).length
      ? '<table id="config-table">' +
        data.settings.map(([k, v]) => `<tr data-key="${esc(k)}"><th><code>${esc(k)}</code></th><td><code>${esc(v)}</code></td></tr>`).join('') +
        `</table><p id="config-hidden" data-count="${hidden.length}">` +
        (hidden.length ? `${hidden.length} keys of config.yaml are left out: this run's model, data source and layout do not read them.`
                       : 'Every key of config.yaml applies to this run.') + '</p>'
      : '<p>No config.yaml in the run.</p>';
})();
</script>
</body></html>
)PAGE";

}  // namespace loom::profile
