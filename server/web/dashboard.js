// ktune's dashboard: the jobs, the devices and a page per job, live from
// ktuned's /api/ (polled), or one job (or a strategy comparison) from data
// embedded in a self-contained report (ktune report, ktune evaluate
// --html). Charts are Chart.js's. window.ktune exposes the charts and a
// count of updates, for the browser tests.
(function () {
  'use strict';

  const STATUS_COLORS = {
    OK: '#2e7d32',
    INVALID_BY_CONSTRAINT: '#9e9e9e',
    COMPILE_ERROR: '#ef6c00',
    LAUNCH_ERROR: '#6a1b9a',
    RUNTIME_FAULT: '#c62828',
    TIMEOUT: '#ad1457',
    WRONG_RESULT: '#1565c0',
  };
  const STRATEGY_COLORS = ['#1f5fbf', '#d9480f', '#2b8a3e', '#862e9c', '#e8590c', '#0b7285',
    '#5c940d', '#a61e4d'];
  const JOB_POLL_MS = 1000;
  const LIST_POLL_MS = 2000;
  const TABLE_ROWS = 500;

  const ktune = window.ktune = { charts: {}, updates: 0, view: null };
  const mode = document.body.dataset.mode || 'live';

  // --- small helpers ---------------------------------------------------

  function num(v) { return v === undefined || v === null || v === '' ? 0 : Number(v); }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function fmtMs(v) {
    if (v === undefined || v === null || Number.isNaN(v)) return '-';
    if (v >= 1000) return (v / 1000).toFixed(3) + ' s';
    if (v >= 1) return v.toFixed(3) + ' ms';
    return (v * 1000).toFixed(2) + ' us';
  }

  function fmtValue(v) {
    if (v === undefined || v === null || Number.isNaN(v)) return '-';
    const a = Math.abs(v);
    return a !== 0 && (a >= 1e6 || a < 1e-3) ? v.toExponential(3) : Number(v.toPrecision(5)).toString();
  }

  function fmtScore(v) { return v === undefined || v === null ? '-' : v.toFixed(3); }

  function fmtBytes(b) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; ++i; }
    return (i === 0 ? b : b.toFixed(1)) + ' ' + units[i];
  }

  function fmtTime(ts) {
    if (!ts) return '-';
    const d = new Date(ts);
    return Number.isNaN(d.getTime()) ? ts : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }

  function badge(state) { return el('span', { class: 'badge ' + state, text: (state || '').toLowerCase() }); }

  function statusName(s) { return (s || 'CANDIDATE_STATUS_UNSPECIFIED').toLowerCase(); }

  function problemText(problem) {
    const parts = Object.entries(problem || {}).map(([k, v]) => k + '=' + v);
    return parts.length ? parts.join(', ') : '-';
  }

  function durationSeconds(d) {
    if (!d) return 0;
    const m = /^(-?[\d.]+)s$/.exec(d);
    return m ? Number(m[1]) : 0;
  }

  function active(state) { return state === 'QUEUED' || state === 'RUNNING'; }

  async function getJson(url) {
    const r = await fetch(url, { credentials: 'same-origin', cache: 'no-store' });
    const text = await r.text();
    if (!r.ok) {
      let why = text;
      try { why = JSON.parse(text).error || text; } catch (e) { /* plain text */ }
      throw new Error(r.status + ': ' + why.trim());
    }
    return JSON.parse(text);
  }

  // The page's frame: header with navigation, an error banner, the view.
  function frame(title, here) {
    const app = document.getElementById('app');
    app.replaceChildren();
    const nav = mode === 'live'
      ? el('nav', {},
        el('a', { href: '/', class: here === 'jobs' ? 'here' : '', text: 'Jobs' }),
        el('a', { href: '/devices', class: here === 'devices' ? 'here' : '', text: 'Devices' }),
        el('a', { href: '/metrics', text: 'Metrics' }))
      : el('nav', {}, el('span', { text: 'report' }));
    const status = el('span', { class: 'status', id: 'updated' });
    app.append(el('header', { class: 'top' }, el('span', { class: 'brand', text: 'ktune' }), nav, status));
    const banner = el('div', { class: 'banner hidden', id: 'banner' });
    const main = el('main', {}, banner, el('h1', { text: title, id: 'title' }));
    app.append(main);
    return main;
  }

  function showError(err) {
    const b = document.getElementById('banner');
    if (!b) return;
    if (err) {
      b.textContent = 'The daemon does not answer (' + err.message + '); showing what was last read.';
      b.classList.remove('hidden');
    } else {
      b.classList.add('hidden');
    }
  }

  function stamp() {
    const s = document.getElementById('updated');
    if (s) s.textContent = 'updated ' + new Date().toLocaleTimeString();
  }

  // Polls `load` every `ms` while `more()` says so.
  function poll(load, ms, more) {
    const tick = async () => {
      try {
        await load();
        showError(null);
        stamp();
      } catch (e) {
        showError(e);
      }
      if (!more || more()) setTimeout(tick, ms);
    };
    tick();
  }

  // --- charts ----------------------------------------------------------

  // A dashed vertical line at options.plugins.budget.value (x units).
  const budgetLine = {
    id: 'budget',
    afterDatasetsDraw(chart, args, opts) {
      if (!opts || !opts.value) return;
      const x = chart.scales.x.getPixelForValue(opts.value);
      const area = chart.chartArea;
      if (x < area.left - 1 || x > area.right + 1) return;
      const ctx = chart.ctx;
      ctx.save();
      ctx.strokeStyle = '#b02a37';
      ctx.setLineDash([5, 4]);
      ctx.beginPath();
      ctx.moveTo(x, area.top);
      ctx.lineTo(x, area.bottom);
      ctx.stroke();
      ctx.fillStyle = '#b02a37';
      ctx.font = '11px system-ui, sans-serif';
      ctx.textAlign = x > area.right - 60 ? 'right' : 'left';
      ctx.fillText(opts.label || 'budget', x + (ctx.textAlign === 'right' ? -4 : 4), area.top + 11);
      ctx.restore();
    },
  };

  function makeChart(name, canvas, config) {
    if (ktune.charts[name]) ktune.charts[name].destroy();
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
    const chart = new Chart(canvas, config);
    ktune.charts[name] = chart;
    return chart;
  }

  function chartPanel(title, id, small) {
    const canvas = el('canvas', { id: 'chart-' + id });
    return { panel: el('div', { class: 'panel' }, el('h2', { text: title }), el('div', { class: small ? 'chart small' : 'chart' }, canvas)), canvas };
  }

  // --- one job ---------------------------------------------------------

  function objectiveOf(job) {
    const o = (job.spec && job.spec.objective) || {};
    if (o.expression) {
      return { label: o.name || o.expression, maximize: o.direction === 'MAXIMIZE', value: (m) => m.objective, format: fmtValue };
    }
    return { label: 'time', maximize: false, value: (m) => m.timeMs, format: fmtMs };
  }

  function configValue(v) {
    if (!v) return '';
    if ('intValue' in v) return Number(v.intValue);
    if ('floatValue' in v) return Number(v.floatValue);
    if ('boolValue' in v) return v.boolValue ? 'true' : 'false';
    if ('stringValue' in v) return v.stringValue;
    return v.boolValue === undefined ? 0 : String(v.boolValue);
  }

  class JobView {
    constructor(job, live) {
      this.job = job;
      this.live = live;
      this.byseq = new Map();
      this.add(job.measurements || []);
      this.build();
      this.render();
    }

    add(list) {
      for (const m of list) this.byseq.set(num(m.sequence), m);
      this.sorted = [...this.byseq.values()].sort((a, b) => num(a.sequence) - num(b.sequence));
    }

    update(job) {
      const wasActive = active(this.job.state);
      const before = this.byseq.size;
      this.job = Object.assign({}, this.job, job, { spec: this.job.spec || job.spec });
      this.add(job.measurements || []);
      this.render();
      if (this.byseq.size !== before || wasActive !== active(job.state)) ktune.updates++;
    }

    build() {
      const job = this.job;
      const main = frame(job.kernel + ' on ' + ((job.device && job.device.name) || '?'), 'jobs');
      this.facts = el('dl', { class: 'facts' });
      this.figures = el('div', { class: 'figures' });
      main.append(el('div', { class: 'grid' },
        el('div', { class: 'panel' }, el('h2', { text: 'Job' }), this.facts),
        el('div', { class: 'panel' }, el('h2', { text: 'Progress' }), this.figures)));
      const conv = chartPanel('Best so far against evaluations', 'convergence');
      const convTime = chartPanel('Best so far against time', 'convergence-time');
      const scatter = chartPanel('Every measurement, by status', 'scatter');
      const statuses = chartPanel('Status breakdown', 'statuses');
      main.append(el('div', { class: 'grid' }, conv.panel, convTime.panel, scatter.panel, statuses.panel));
      this.paramGrid = el('div', { class: 'small-multiples' });
      main.append(el('div', { class: 'panel' }, el('h2', { text: 'Time against each parameter' }), this.paramGrid));
      this.conditions = el('div');
      main.append(el('div', { class: 'panel' }, el('h2', { text: 'Conditions' }), this.conditions));
      this.table = el('tbody', { id: 'measurements' });
      this.tableNote = el('p', { class: 'note' });
      main.append(el('div', { class: 'panel' }, el('h2', { text: 'Measurements (newest first)' }),
        el('table', {},
          el('thead', {}, el('tr', {}, ['#', 'configuration', 'status', 'time', 'median', 'samples', 'compile', 'cost', 'message']
            .map((h, i) => el('th', { class: i === 0 || (i >= 3 && i <= 7) ? 'num' : '', text: h })))),
          this.table),
        this.tableNote));
      main.append(el('footer', { text: mode === 'report' ? 'Written by ktune report.' : 'Live from ktuned; updates while the job runs.' }));

      const obj = objectiveOf(job);
      const yTitle = obj.label === 'time' ? 'best time (ms)' : 'best ' + obj.label;
      const scales = (xTitle) => ({
        x: { type: 'linear', title: { display: true, text: xTitle }, beginAtZero: true },
        y: { title: { display: true, text: yTitle } },
      });
      makeChart('convergence', conv.canvas, {
        type: 'line',
        data: { datasets: [{ label: 'best so far', data: [], stepped: true, borderColor: '#1f5fbf', pointRadius: 0, borderWidth: 2 }] },
        options: { parsing: false, scales: scales('evaluations'), plugins: { legend: { display: false }, budget: {} } },
        plugins: [budgetLine],
      });
      makeChart('convergenceTime', convTime.canvas, {
        type: 'line',
        data: { datasets: [{ label: 'best so far', data: [], stepped: true, borderColor: '#2b8a3e', pointRadius: 0, borderWidth: 2 }] },
        options: { parsing: false, scales: scales('seconds since the first measurement'), plugins: { legend: { display: false }, budget: {} } },
        plugins: [budgetLine],
      });
      makeChart('scatter', scatter.canvas, {
        type: 'scatter',
        data: { datasets: [] },
        options: {
          parsing: false,
          scales: {
            x: { type: 'linear', title: { display: true, text: 'evaluation' } },
            y: { type: 'logarithmic', title: { display: true, text: 'time (ms); failures above' } },
          },
          plugins: {
            tooltip: { callbacks: { label: (c) => c.raw.label } },
            legend: { labels: { boxWidth: 10 } },
          },
        },
      });
      makeChart('statuses', statuses.canvas, {
        type: 'bar',
        data: { labels: [], datasets: [{ label: 'candidates', data: [], backgroundColor: [] }] },
        options: { plugins: { legend: { display: false } }, scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
      });
      this.paramCharts = new Map();
    }

    render() {
      const job = this.job;
      const obj = objectiveOf(job);
      const ms = this.sorted;
      const better = (a, b) => (obj.maximize ? a > b : a < b);
      document.title = 'ktune: ' + job.kernel + ' (' + (job.state || '').toLowerCase() + ')';
      document.body.dataset.jobState = job.state || '';
      document.body.dataset.evaluations = String(ms.length);

      // Facts and figures.
      const strategy = (job.spec && job.spec.strategy) || {};
      const budget = num(strategy.maxEvaluations);
      const maxTime = durationSeconds(strategy.maxTime);
      const facts = [
        ['job', job.id],
        ['state', badge(job.state)],
        ['kernel', job.kernel],
        ['device', ((job.device && job.device.name) || '?') + (job.device && job.device.id ? ' [' + job.device.id + ']' : '')],
        ['problem', problemText(job.problem)],
        ['strategy', (job.strategy || strategy.name || 'auto') + ', seed ' + num(strategy.seed)],
        ['budget', (budget ? budget + ' evaluations' : 'no evaluation limit') + (maxTime ? ', ' + maxTime + ' s' : '')],
        ['objective', obj.label + (obj.maximize ? ' (maximised)' : ' (minimised)')],
      ];
      if (job.client) facts.push(['client', job.client]);
      facts.push(['created', fmtTime(job.createdAt)], ['updated', fmtTime(job.updatedAt)]);
      if (job.message) facts.push(['message', job.message]);
      this.facts.replaceChildren(...facts.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));

      let best = null;
      const counts = {};
      for (const m of ms) {
        counts[m.status] = (counts[m.status] || 0) + 1;
        const v = obj.value(m);
        if (m.status === 'OK' && v !== undefined && (best === null || better(v, obj.value(best)))) best = m;
      }
      const figure = (label, value) => el('div', { class: 'figure' }, el('div', { class: 'value', text: value }), el('div', { class: 'label', text: label }));
      this.figures.replaceChildren(
        figure('evaluations', budget ? ms.length + ' / ' + budget : String(ms.length)),
        figure('best ' + obj.label, best ? obj.format(obj.value(best)) : '-'),
        figure('best configuration', best ? best.config.key : '-'),
        figure('ok', String(counts.OK || 0)),
        figure('failed', String(ms.length - (counts.OK || 0))));

      // Convergence, against evaluations and against time.
      const t0 = ms.length ? Date.parse(ms[0].measuredAt) : 0;
      let run = null;
      const byEval = [];
      const byTime = [];
      for (const m of ms) {
        const v = obj.value(m);
        if (m.status === 'OK' && v !== undefined && (run === null || better(v, run))) run = v;
        const seconds = m.measuredAt ? (Date.parse(m.measuredAt) - t0) / 1000 : 0;
        byEval.push({ x: num(m.sequence) + 1, y: run });
        byTime.push({ x: seconds, y: run });
      }
      const conv = ktune.charts.convergence;
      conv.data.datasets[0].data = byEval;
      conv.options.plugins.budget = { value: budget, label: 'budget ' + budget };
      conv.options.scales.x.suggestedMax = Math.max(budget, ms.length);
      conv.update('none');
      const convTime = ktune.charts.convergenceTime;
      convTime.data.datasets[0].data = byTime;
      convTime.options.plugins.budget = { value: maxTime, label: 'budget ' + maxTime + ' s' };
      convTime.options.scales.x.suggestedMax = maxTime || undefined;
      convTime.update('none');

      // Every measurement: ok ones at their time, failures in a band above.
      let top = 0;
      for (const m of ms) if (m.status === 'OK' && m.timeMs !== undefined) top = Math.max(top, m.timeMs);
      const failY = top > 0 ? top * 1.6 : 1;
      const groups = new Map();
      for (const m of ms) {
        if (!groups.has(m.status)) groups.set(m.status, []);
        const ok = m.status === 'OK' && m.timeMs !== undefined;
        groups.get(m.status).push({
          x: num(m.sequence) + 1,
          y: ok ? m.timeMs : failY,
          label: m.config.key + ': ' + (ok ? fmtMs(m.timeMs) : statusName(m.status) + (m.message ? ' (' + m.message.slice(0, 80) + ')' : '')),
        });
      }
      const scatter = ktune.charts.scatter;
      scatter.data.datasets = [...groups.entries()].map(([status, data]) => ({
        label: statusName(status), data, backgroundColor: STATUS_COLORS[status] || '#555', pointRadius: 3,
      }));
      scatter.update('none');

      // Status breakdown.
      const statuses = ktune.charts.statuses;
      const names = Object.keys(counts).sort((a, b) => counts[b] - counts[a]);
      statuses.data.labels = names.map(statusName);
      statuses.data.datasets[0].data = names.map((n) => counts[n]);
      statuses.data.datasets[0].backgroundColor = names.map((n) => STATUS_COLORS[n] || '#555');
      statuses.update('none');

      this.renderParameters(ms);
      this.renderConditions(ms, best);
      this.renderTable(ms);
    }

    renderParameters(ms) {
      const names = (ms.find((m) => m.config && m.config.names) || { config: { names: [] } }).config.names || [];
      for (const name of names) {
        let chart = this.paramCharts.get(name);
        if (!chart) {
          const p = chartPanel(name, 'param-' + name, true);
          this.paramGrid.append(p.panel);
          chart = makeChart('param:' + name, p.canvas, {
            type: 'scatter',
            data: { labels: [], datasets: [{ data: [], backgroundColor: 'rgba(31,95,191,0.55)', pointRadius: 2.5 }] },
            options: {
              scales: { x: { type: 'category', title: { display: true, text: name } }, y: { type: 'logarithmic', title: { display: true, text: 'time (ms)' } } },
              plugins: { legend: { display: false } },
            },
          });
          this.paramCharts.set(name, chart);
        }
        const points = [];
        const values = new Set();
        for (const m of ms) {
          if (m.status !== 'OK' || m.timeMs === undefined) continue;
          const v = configValue(m.config.values[name]);
          values.add(v);
          points.push({ x: String(v), y: m.timeMs });
        }
        const labels = [...values].sort((a, b) => (typeof a === 'number' && typeof b === 'number' ? a - b : String(a).localeCompare(String(b))));
        chart.data.labels = labels.map(String);
        chart.data.datasets[0].data = points;
        chart.update('none');
      }
    }

    renderConditions(ms, best) {
      const rows = [];
      const loaded = ms.filter((m) => m.conditions && m.conditions.load && m.conditions.load !== 'KIND_UNSPECIFIED');
      const kind = loaded.length ? loaded[0].conditions.load.toLowerCase() : 'isolated';
      rows.push(['load profile', kind + (loaded.length ? ' (' + loaded.length + ' of ' + ms.length + ' measurements)' : '')]);
      const canaries = loaded.map((m) => m.conditions.canarySlowdown).filter((v) => v > 0).sort((a, b) => a - b);
      if (canaries.length) rows.push(['canary slowdown, median', canaries[Math.floor(canaries.length / 2)].toFixed(2) + 'x']);
      if (best && best.conditions) {
        const c = best.conditions;
        const add = (label, v, f) => { if (v !== undefined && v !== 0 && v !== '') rows.push([label + ' (best)', f ? f(v) : String(v)]); };
        add('canary slowdown', c.canarySlowdown, (v) => v.toFixed(2) + 'x');
        add('host-link canary slowdown', c.linkCanarySlowdown, (v) => v.toFixed(2) + 'x');
        add('load throughput', c.loadThroughput, (v) => (100 * v).toFixed(1) + ' % of asked');
        for (const [k, v] of Object.entries(c.loadRates || {})) add('load ' + k, v, fmtValue);
        add('throughput', c.throughput, fmtValue);
        add('instances', c.instances);
        add('streams', c.streams);
        add('overlap', c.overlap, (v) => v.toFixed(2) + 'x');
        add('SM clock before / after', c.smClockMhzBefore ? c.smClockMhzBefore + ' / ' + num(c.smClockMhzAfter) + ' MHz' : undefined);
        add('throttled samples discarded', c.throttledSamplesDiscarded);
        add('launches per sample', c.launchesPerSample);
        add('registers', c.registers);
        add('driver', c.driver);
        add('NVRTC', c.nvrtc);
      }
      this.conditions.replaceChildren(el('dl', { class: 'facts' }, rows.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })])));
    }

    renderTable(ms) {
      const rows = [];
      for (let i = ms.length - 1; i >= 0 && rows.length < TABLE_ROWS; --i) {
        const m = ms[i];
        const s = m.stats || {};
        rows.push(el('tr', { 'data-seq': String(num(m.sequence)) },
          el('td', { class: 'num', text: String(num(m.sequence)) }),
          el('td', { class: 'key', text: m.config.key }),
          el('td', {}, el('span', { class: 'swatch' }), statusName(m.status)),
          el('td', { class: 'num', text: m.timeMs === undefined ? '-' : fmtMs(m.timeMs) }),
          el('td', { class: 'num', text: s.medianMs ? fmtMs(s.medianMs) : '-' }),
          el('td', { class: 'num', text: String(s.samples || 0) }),
          el('td', { class: 'num', text: fmtMs(m.compileMs || 0) }),
          el('td', { class: 'num', text: fmtMs(m.costMs || 0) }),
          el('td', { class: 'msg', text: (m.message || '').slice(0, 200) })));
        rows[rows.length - 1].querySelector('.swatch').style.background = STATUS_COLORS[m.status] || '#555';
      }
      this.table.replaceChildren(...rows);
      this.tableNote.textContent = ms.length > TABLE_ROWS ? 'The newest ' + TABLE_ROWS + ' of ' + ms.length + ' measurements.' : '';
    }
  }

  function showJob(id) {
    let view = null;
    let next = 0;
    let state = 'QUEUED';
    poll(async () => {
      const job = await getJson('/api/jobs/' + encodeURIComponent(id) + (view ? '?from=' + next : ''));
      const ended = view && active(state) && !active(job.state);
      state = job.state;
      if (!view) {
        view = ktune.view = new JobView(job, true);
      } else if (ended) {
        // Its last round may have re-measured earlier candidates: read all.
        view.update(await getJson('/api/jobs/' + encodeURIComponent(id)));
      } else {
        view.update(job);
      }
      for (const m of job.measurements || []) next = Math.max(next, num(m.sequence) + 1);
    }, JOB_POLL_MS, () => active(state));
  }

  // --- the jobs --------------------------------------------------------

  function showJobs() {
    const main = frame('Jobs', 'jobs');
    const body = el('tbody', { id: 'jobs' });
    const empty = el('p', { class: 'note', text: 'No jobs yet: submit one with ktune --server ADDR tune ...' });
    main.append(el('div', { class: 'panel' }, el('table', {},
      el('thead', {}, el('tr', {}, ['job', 'state', 'kernel', 'device', 'progress', 'best so far', 'strategy', 'client', 'updated']
        .map((h) => el('th', { text: h })))),
      body), empty));
    poll(async () => {
      const list = await getJson('/api/jobs');
      const jobs = list.jobs || [];
      empty.hidden = jobs.length > 0;
      body.replaceChildren(...jobs.map((j) => {
        const p = j.progress || {};
        const done = num(p.evaluations);
        const budget = num(p.maxEvaluations);
        const bar = el('span', { class: 'bar' }, el('span'));
        bar.firstChild.style.width = (budget ? Math.min(100, (100 * done) / budget) : (done ? 100 : 0)) + '%';
        const best = j.best && j.best.timeMs !== undefined ? fmtMs(j.best.timeMs) + ' (' + j.best.config.key + ')' : '-';
        return el('tr', { 'data-job-id': j.id },
          el('td', {}, el('a', { href: '/jobs/' + j.id, text: j.id.slice(0, 12) })),
          el('td', {}, badge(j.state)),
          el('td', { text: j.kernel }),
          el('td', { text: (j.device && j.device.name) || '' }),
          el('td', {}, bar, budget ? done + ' / ' + budget : String(done)),
          el('td', { class: 'key', text: best }),
          el('td', { text: j.strategy || '' }),
          el('td', { text: j.client || '' }),
          el('td', { text: fmtTime(j.updatedAt) }));
      }));
      ktune.updates++;
    }, LIST_POLL_MS);
  }

  // --- the devices -----------------------------------------------------

  function showDevices() {
    const main = frame('Devices', 'devices');
    const body = el('tbody', { id: 'devices' });
    const summary = el('dl', { class: 'facts' });
    main.append(el('div', { class: 'panel' }, el('table', {},
      el('thead', {}, el('tr', {}, ['device', 'model', 'architecture', 'memory', 'queued', 'running', 'busy', 'evaluations', 'failed', 'worker restarts', 'canary']
        .map((h) => el('th', { text: h })))),
      body)), el('div', { class: 'panel' }, el('h2', { text: 'The daemon' }), summary));
    let last = null;
    poll(async () => {
      const d = await getJson('/api/devices');
      body.replaceChildren(...d.devices.map((x) => {
        const evals = Object.values(x.evaluations || {}).reduce((a, b) => a + b, 0);
        const failed = evals - ((x.evaluations || {}).ok || 0);
        let busy = '-';
        const before = last && last.devices.find((y) => y.locator === x.locator);
        if (before && d.at > last.at) busy = (100 * Math.min(1, (x.busySeconds - before.busySeconds) / (d.at - last.at))).toFixed(0) + ' %';
        return el('tr', { 'data-device': x.locator },
          el('td', { class: 'key', text: x.locator }),
          el('td', { text: x.name + (x.simulated ? ' (replayed)' : '') }),
          el('td', { text: x.architecture || '-' }),
          el('td', { text: x.memoryBytes ? fmtBytes(x.memoryBytes) : '-' }),
          el('td', { class: 'num', text: String(x.queued) }),
          el('td', { class: 'num', text: String(x.running) }),
          el('td', { class: 'num', text: busy }),
          el('td', { class: 'num', text: String(evals) }),
          el('td', { class: 'num', text: String(failed) }),
          el('td', { class: 'num', text: String(x.workerRestarts) }),
          el('td', { class: 'num', text: x.canarySlowdown ? x.canarySlowdown.toFixed(2) + 'x' : '-' }));
      }));
      const rows = [['jobs', Object.entries(d.jobs || {}).map(([k, v]) => v + ' ' + k).join(', ') || 'none'],
        ['store', fmtBytes(d.storeBytes || 0)]];
      if (d.fleetWaiting !== undefined) rows.push(['fleet queue', d.fleetWaiting + ' waiting']);
      if (d.compile) {
        rows.push(['compile pool', d.compile.busy + ' of ' + d.compile.workers + ' workers busy, ' + d.compile.backlog + ' waiting; ' +
          d.compile.compiled + ' compiled, ' + d.compile.cacheHits + ' from the cache']);
      }
      summary.replaceChildren(...rows.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })]));
      last = d;
      ktune.updates++;
    }, LIST_POLL_MS);
  }

  // --- a strategy comparison (ktune evaluate --html) -------------------

  // Under a time budget (ktune evaluate --max-seconds): each strategy's
  // median final time and its range over the repeats, and the mean best so
  // far against recorded seconds.
  function showTimedEvaluation(data) {
    const main = frame('Strategies compared under ' + data.timeBudget + ' s of recorded time', 'report');
    const strategies = data.strategies || [];
    const color = (i) => STRATEGY_COLORS[i % STRATEGY_COLORS.length];
    const median = (v) => { const s = [...v].sort((a, b) => a - b); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
    const ms = (v) => v.toFixed(4) + ' ms';
    const head = el('tr', {}, el('th', { text: 'space' }), strategies.map((s) => el('th', { class: 'num', text: s + ': median (best to worst)' })));
    const body = el('tbody', {});
    for (const sp of data.spaces) {
      body.append(el('tr', {}, el('td', { class: 'key', text: sp.name + ' (optimum ' + ms(sp.optimum) + ')' }),
        sp.results.map((r) => el('td', { class: 'num', text: ms(median(r.finalBest)) + ' (' + ms(Math.min(...r.finalBest)) + ' to ' + ms(Math.max(...r.finalBest)) + ')' }))));
    }
    main.append(el('div', { class: 'panel' }, el('h2', { text: 'Final best time over ' + data.repeats + ' repeats' }), el('table', {}, el('thead', {}, head), body)));
    const grid = el('div', { class: 'grid' });
    main.append(grid);
    data.spaces.forEach((sp, k) => {
      const p = chartPanel(sp.name, 'space-' + k);
      grid.append(p.panel);
      const datasets = sp.results.map((r, i) => ({
        label: r.strategy, data: r.timeCurve.map(([x, y]) => ({ x, y })), borderColor: color(i), pointRadius: 0, borderWidth: 2,
      }));
      datasets.push({ label: 'optimum', data: [{ x: 0, y: sp.optimum }, { x: Math.max(...sp.results.map((r) => r.timeCurve[r.timeCurve.length - 1][0])), y: sp.optimum }], borderColor: '#2b8a3e', borderDash: [2, 2], pointRadius: 0, borderWidth: 1 });
      makeChart('space' + k, p.canvas, {
        type: 'line',
        data: { datasets },
        options: {
          parsing: false,
          scales: { x: { type: 'linear', min: 0, title: { display: true, text: 'recorded seconds (compilation included)' } }, y: { type: 'linear', min: sp.optimum * 0.99, max: sp.optimum * 1.3, title: { display: true, text: 'mean best so far (ms; to 1.3x the optimum)' } } },
          plugins: { legend: { labels: { boxWidth: 10 } } },
        },
      });
    });
    main.append(el('footer', { text: 'Written by ktune evaluate --max-seconds --html. Curves are the mean best-so-far time over the repeats against the recorded time their candidates took.' }));
  }

  function showEvaluation(data) {
    if (data.timeBudget) {
      showTimedEvaluation(data);
      return;
    }
    const main = frame('Strategies compared', 'report');
    const strategies = data.strategies || [];
    const color = (i) => STRATEGY_COLORS[i % STRATEGY_COLORS.length];
    const head = el('tr', {}, el('th', { text: 'space' }), strategies.flatMap((s) => [el('th', { class: 'num', text: s + ' short' }), el('th', { class: 'num', text: s + ' long' })]));
    const body = el('tbody', {});
    for (const sp of data.spaces) {
      body.append(el('tr', {}, el('td', { class: 'key', text: sp.name }),
        sp.results.flatMap((r) => [el('td', { class: 'num', text: fmtScore(r.shortScore) }), el('td', { class: 'num', text: fmtScore(r.longScore) })])));
    }
    const avg = el('tr', {}, el('td', { text: 'average' }), (data.averages || []).flatMap((a) => [el('td', { class: 'num', text: fmtScore(a.shortScore) }), el('td', { class: 'num', text: fmtScore(a.longScore) })]));
    body.append(avg);
    main.append(el('div', { class: 'panel' }, el('h2', { text: 'Scores (0: random search, 1: the optimum at once; ' + data.repeats + ' repeats)' }), el('table', {}, el('thead', {}, head), body)));
    const grid = el('div', { class: 'grid' });
    main.append(grid);
    data.spaces.forEach((sp, k) => {
      const p = chartPanel(sp.name, 'space-' + k);
      grid.append(p.panel);
      // Curves are [evaluations, mean best so far] pairs, log-spaced.
      const points = (curve) => curve.map(([x, y]) => ({ x, y }));
      const datasets = sp.results.map((r, i) => ({
        label: r.strategy, data: points(r.curve), borderColor: color(i), pointRadius: 0, borderWidth: 2,
      }));
      const end = sp.random.length ? sp.random[sp.random.length - 1][0] : 1;
      datasets.push({ label: 'random search', data: points(sp.random), borderColor: '#868e96', borderDash: [4, 3], pointRadius: 0, borderWidth: 1.5 });
      datasets.push({ label: 'optimum', data: [{ x: 1, y: sp.optimum }, { x: end, y: sp.optimum }], borderColor: '#2b8a3e', borderDash: [2, 2], pointRadius: 0, borderWidth: 1 });
      makeChart('space' + k, p.canvas, {
        type: 'line',
        data: { datasets },
        options: {
          parsing: false,
          scales: { x: { type: 'logarithmic', title: { display: true, text: 'evaluations' } }, y: { type: 'logarithmic', title: { display: true, text: 'mean best so far (ms)' } } },
          plugins: { budget: { value: sp.shortBudget, label: 'short budget ' + sp.shortBudget }, legend: { labels: { boxWidth: 10 } } },
        },
        plugins: [budgetLine],
      });
    });
    main.append(el('footer', { text: 'Written by ktune evaluate --html. Curves are the mean best-so-far time over the repeats; random search is its exact expectation.' }));
  }

  // --- start -----------------------------------------------------------

  function start() {
    if (typeof Chart === 'undefined') {
      document.getElementById('app').textContent = 'The charting library did not load.';
      return;
    }
    if (mode === 'report') {
      const data = JSON.parse(document.getElementById('ktune-data').textContent);
      if (data.kind === 'evaluation') showEvaluation(data);
      else ktune.view = new JobView(data.job, false);
      document.body.dataset.ready = 'true';
      return;
    }
    const path = location.pathname;
    if (path.startsWith('/jobs/')) showJob(decodeURIComponent(path.slice(6)));
    else if (path === '/devices') showDevices();
    else showJobs();
    document.body.dataset.ready = 'true';
  }

  start();
})();
