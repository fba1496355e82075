// vramkit live page: polls /api/samples and draws, per GPU, memory, utilization, temperature,
// power, PCIe and the memory of the top processes over wall-clock time, and host memory in all and
// per NUMA node, as SVG charts with legends and axes in units. No libraries, no network beyond the
// server that served this page. Charts are drawn at the pixel width of their box (no stretching),
// again when the window is resized.
(function () {
  'use strict';
  var SVG_NS = 'http://www.w3.org/2000/svg';
  var state = { since: 0, history: [], maxPoints: 600, intervalMs: 1000, timer: null, latest: null };
  var PALETTE = ['#2f6fdf', '#e08a1e', '#1f9d55', '#c0392b', '#8e44ad', '#16a2b8', '#7f8c8d', '#d35400'];

  function formatBytes(b) {
    if (b === undefined || b === null) return '-';
    var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    var i = 0;
    while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toFixed(b >= 100 ? 0 : 1)) + ' ' + units[i];
  }
  // Rates in decimal units, as the terminal view and the Prometheus metrics give them.
  function formatRate(b) {
    var units = [[1e9, 'GB/s'], [1e6, 'MB/s'], [1e3, 'kB/s']];
    for (var i = 0; i < units.length; i++) if (Math.abs(b) >= units[i][0]) return (b / units[i][0]).toFixed(b >= 100 * units[i][0] ? 0 : 1) + ' ' + units[i][1];
    return b.toFixed(b < 10 && b !== Math.round(b) ? 1 : 0) + ' B/s';
  }
  function formatPercent(v) { return v.toFixed(0) + ' %'; }
  function formatCelsius(v) { return v.toFixed(0) + ' °C'; }
  function formatWatts(v) { return v.toFixed(0) + ' W'; }
  function pad2(n) { return (n < 10 ? '0' : '') + n; }
  function clock(t) {
    var d = new Date(t);
    return pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + ':' + pad2(d.getSeconds());
  }

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svgEl(tag, attrs, text) {
    var e = document.createElementNS(SVG_NS, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // A y scale top that reads well: 1, 2 or 5 times a power of ten (bytes: of 1024).
  function niceTop(v, binary) {
    if (!(v > 0)) return 1;
    var base = binary ? 1024 : 10, p = 1;
    if (binary) { while (p * 1024 <= v) p *= 1024; } else { p = Math.pow(10, Math.floor(Math.log10(v))); }
    var steps = binary ? [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] : [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v) return steps[i] * p;
    return base * p;
  }

  // Draws a chart: spec = {series: [{name, color, points: [[t, v]], area, dash}], ymax, format,
  // unit, t0, t1, width}. Returns an SVG sized in pixels, with a y axis (labels in units), a
  // wall-clock x axis with labels that never overlap, and the data.
  function drawChart(spec) {
    var W = Math.max(240, Math.floor(spec.width)), H = 150, L = 64, R = 8, T = 10, B = 22;
    var svg = svgEl('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img' });
    var t0 = spec.t0, t1 = spec.t1, ymax = spec.ymax > 0 ? spec.ymax : 1;
    var x = function (t) { return L + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - L - R); };
    var y = function (v) { return (H - B) - Math.min(v / ymax, 1.05) * (H - B - T); };
    [0, 0.5, 1].forEach(function (f) {
      var yy = y(ymax * f);
      svg.appendChild(svgEl('line', { 'class': 'grid', x1: L, x2: W - R, y1: yy, y2: yy }));
      svg.appendChild(svgEl('text', { 'class': 'ylabel', x: L - 4, y: yy + 3.5, 'text-anchor': 'end' }, spec.format(ymax * f)));
    });
    svg.appendChild(svgEl('line', { 'class': 'axis', x1: L, x2: L, y1: T, y2: H - B }));
    svg.appendChild(svgEl('line', { 'class': 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
    // Time ticks: at most one label per 70 px, at round seconds, newest at the right edge.
    var span = Math.max(t1 - t0, 1), maxTicks = Math.max(2, Math.floor((W - L - R) / 70));
    var steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600].map(function (s) { return s * 1000; });
    var step = steps[steps.length - 1];
    for (var i = 0; i < steps.length; i++) if (span / steps[i] <= maxTicks - 1) { step = steps[i]; break; }
    var lastRight = -Infinity;
    for (var tt = Math.ceil(t0 / step) * step; tt <= t1; tt += step) {
      var xx = x(tt);
      var half = 24;
      if (xx - half < lastRight + 6 || xx + half > W) continue;
      svg.appendChild(svgEl('line', { 'class': 'tick', x1: xx, x2: xx, y1: H - B, y2: H - B + 4 }));
      svg.appendChild(svgEl('text', { 'class': 'xlabel', x: xx, y: H - 6, 'text-anchor': 'middle' }, clock(tt)));
      lastRight = xx + half;
    }
    if (lastRight === -Infinity) {
      // No round time fell inside the span (a span shorter than the step, or ticks too close to
      // the edges on a narrow chart): label the newest sample's time at the right edge instead.
      svg.appendChild(svgEl('line', { 'class': 'tick', x1: x(t1), x2: x(t1), y1: H - B, y2: H - B + 4 }));
      svg.appendChild(svgEl('text', { 'class': 'xlabel', x: W - R, y: H - 6, 'text-anchor': 'end' }, clock(t1)));
    }
    var drawn = 0;
    spec.series.forEach(function (s) {
      if (s.points.length === 0) return;
      var d = s.points.map(function (p, i) { return (i ? 'L' : 'M') + x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1); }).join(' ');
      if (s.area) {
        var a = d + ' L' + x(s.points[s.points.length - 1][0]).toFixed(1) + ',' + y(0) + ' L' + x(s.points[0][0]).toFixed(1) + ',' + y(0) + ' Z';
        svg.appendChild(svgEl('path', { 'class': 'area', d: a, fill: s.color }));
      }
      var attrs = { 'class': 'line' + (s.cls ? ' ' + s.cls : ''), d: d, stroke: s.color, 'data-points': String(s.points.length) };
      if (s.dash) attrs['stroke-dasharray'] = '4 3';
      svg.appendChild(svgEl('path', attrs));
      drawn += s.points.length;
    });
    svg.setAttribute('data-points', String(drawn));
    return svg;
  }

  // One chart box: title with the unit, the legend (one entry per series, with its latest value),
  // and the SVG.
  function chartBox(container, title, spec, attrs) {
    var box = el('div', { 'class': 'chart' });
    box.appendChild(el('div', { 'class': 'title' }, title + ' (' + spec.unit + ')'));
    var legend = el('ul', { 'class': 'legend' });
    spec.series.forEach(function (s) {
      var li = el('li');
      var sw = el('span', { 'class': 'swatch' + (s.dash ? ' dashed' : '') });
      sw.style.borderColor = s.color;
      if (!s.dash) sw.style.background = s.color;
      li.appendChild(sw);
      var last = s.points.length ? s.points[s.points.length - 1][1] : undefined;
      li.appendChild(document.createTextNode(s.name + ': ' + (last === undefined ? 'n/a' : spec.format(last))));
      legend.appendChild(li);
    });
    box.appendChild(legend);
    container.appendChild(box);
    spec.width = box.clientWidth - 2 * 8;  // the box's padding
    var svg = drawChart(spec);
    Object.keys(attrs || {}).forEach(function (k) { svg.setAttribute(k, attrs[k]); });
    box.appendChild(svg);
    return box;
  }

  function gpuSeries(h, uuid, field) {
    var pts = [];
    h.forEach(function (s) {
      s.gpus.forEach(function (o) {
        if (o.uuid === uuid && o.state === 'ok' && o[field] !== undefined) pts.push([s.t, o[field]]);
      });
    });
    return pts;
  }

  // The processes that were at some point among the top ones on this GPU, largest peak first,
  // each with its memory over time (points only where it was among the top).
  function processSeries(h, uuid, limit) {
    var byPid = {};
    h.forEach(function (s) {
      s.gpus.forEach(function (o) {
        if (o.uuid !== uuid) return;
        (o.procs || []).forEach(function (p) {
          var e = byPid[p.pid] || (byPid[p.pid] = { pid: p.pid, command: p.command, peak: 0, points: [] });
          e.points.push([s.t, p.used]);
          e.peak = Math.max(e.peak, p.used);
          if (p.command) e.command = p.command;
        });
      });
    });
    return Object.keys(byPid).map(function (k) { return byPid[k]; })
      .sort(function (a, b) { return b.peak - a.peak; }).slice(0, limit);
  }

  function shortCommand(c) {
    c = (c || '').split(' ').slice(0, 2).join(' ');
    return c.length > 24 ? c.slice(0, 23) + '…' : c;
  }

  function render() {
    var h = state.history;
    if (h.length === 0) return;
    var t1 = h[h.length - 1].t, t0 = h[0].t;
    var latest = h[h.length - 1];

    var gpus = document.getElementById('gpus');
    gpus.textContent = '';
    if (latest.gpus.length === 0) {
      gpus.appendChild(el('p', { 'class': 'notice' }, (latest.gpu_unavailable_reason || 'no GPUs') + ': host memory only'));
    }
    latest.gpus.forEach(function (g) {
      var section = el('div', { 'class': 'gpu' + (g.state !== 'ok' ? ' lost' : ''), 'data-gpu-section': String(g.index) });
      section.appendChild(el('h3', null, 'GPU ' + g.index + ' · ' + g.name + (g.state !== 'ok' ? ' [' + g.state + (g.state_reason ? ': ' + g.state_reason : '') + ']' : '')));
      var grid = el('div', { 'class': 'charts' });
      section.appendChild(grid);
      gpus.appendChild(section);
      var total = g.total || 0;
      chartBox(grid, 'Memory', {
        series: [{ name: 'used', color: PALETTE[0], points: gpuSeries(h, g.uuid, 'used'), area: true, cls: 'used' },
                 { name: 'reserved', color: PALETTE[1], points: gpuSeries(h, g.uuid, 'reserved'), dash: true }],
        ymax: total || niceTop(Math.max.apply(null, gpuSeries(h, g.uuid, 'used').map(function (p) { return p[1]; }).concat([1])), true),
        format: formatBytes, unit: 'bytes, 0 to ' + (total ? formatBytes(total) + ' total' : 'peak'), t0: t0, t1: t1
      }, { 'data-gpu': String(g.index), 'data-kind': 'memory' });
      chartBox(grid, 'Utilization', {
        series: [{ name: 'GPU busy', color: PALETTE[2], points: gpuSeries(h, g.uuid, 'util') }],
        ymax: 100, format: formatPercent, unit: '%', t0: t0, t1: t1
      }, { 'data-kind': 'util' });
      var temps = gpuSeries(h, g.uuid, 'temp');
      chartBox(grid, 'Temperature', {
        series: [{ name: 'GPU', color: PALETTE[3], points: temps }],
        ymax: Math.max(100, niceTop(Math.max.apply(null, temps.map(function (p) { return p[1]; }).concat([1])), false)),
        format: formatCelsius, unit: '°C', t0: t0, t1: t1
      }, { 'data-kind': 'temp' });
      var power = gpuSeries(h, g.uuid, 'power');
      chartBox(grid, 'Power', {
        series: [{ name: 'board', color: PALETTE[4], points: power }],
        ymax: niceTop(Math.max.apply(null, power.map(function (p) { return p[1]; }).concat([100])), false),
        format: formatWatts, unit: 'W', t0: t0, t1: t1
      }, { 'data-kind': 'power' });
      var rx = gpuSeries(h, g.uuid, 'rx'), tx = gpuSeries(h, g.uuid, 'tx');
      chartBox(grid, 'PCIe', {
        series: [{ name: 'rx (to GPU)', color: PALETTE[5], points: rx }, { name: 'tx (from GPU)', color: PALETTE[1], points: tx, dash: true }],
        ymax: niceTop(Math.max.apply(null, rx.concat(tx).map(function (p) { return p[1]; }).concat([1])), false),
        format: formatRate, unit: 'bytes/s', t0: t0, t1: t1
      }, { 'data-kind': 'pcie' });
      var procs = processSeries(h, g.uuid, 5);
      var ptop = Math.max.apply(null, procs.map(function (p) { return p.peak; }).concat([1]));
      chartBox(grid, 'Top processes', {
        series: procs.length ? procs.map(function (p, i) {
          return { name: 'pid ' + p.pid + ' ' + shortCommand(p.command), color: PALETTE[i % PALETTE.length], points: p.points };
        }) : [{ name: 'no processes', color: PALETTE[6], points: [] }],
        ymax: niceTop(ptop, true), format: formatBytes, unit: 'device memory, bytes', t0: t0, t1: t1
      }, { 'data-kind': 'processes', 'data-processes': String(procs.length) });
    });

    var host = document.getElementById('host');
    host.textContent = '';
    if (latest.host_total !== undefined) {
      var hused = [];
      h.forEach(function (s) {
        if (s.host_total !== undefined && s.host_available !== undefined) hused.push([s.t, s.host_total - s.host_available]);
      });
      chartBox(host, 'Host memory in use', {
        series: [{ name: 'in use (total − available)', color: PALETTE[0], points: hused, area: true, cls: 'used' }],
        ymax: latest.host_total, format: formatBytes, unit: 'bytes, 0 to ' + formatBytes(latest.host_total) + ' total', t0: t0, t1: t1
      }, { 'data-host': '1' });
    }
    (latest.numa || []).forEach(function (n) {
      var pts = [];
      h.forEach(function (s) {
        (s.numa || []).forEach(function (m) { if (m.node === n.node) pts.push([s.t, m.total - m.free]); });
      });
      chartBox(host, 'NUMA node ' + n.node, {
        series: [{ name: 'in use (total − free)', color: PALETTE[(n.node + 2) % PALETTE.length], points: pts, area: true }],
        ymax: n.total, format: formatBytes, unit: 'bytes, 0 to ' + formatBytes(n.total), t0: t0, t1: t1
      }, { 'data-numa': String(n.node) });
    });
  }

  function renderProcesses(full) {
    var body = document.querySelector('#processes tbody');
    body.textContent = '';
    if (!full) return;
    var rows = [];
    full.gpus.forEach(function (g) { (g.processes || []).forEach(function (p) { rows.push([g.index, p]); }); });
    rows.sort(function (a, b) { return (b[1].used_bytes || 0) - (a[1].used_bytes || 0); });
    rows.forEach(function (r) {
      var p = r[1], tr = el('tr');
      tr.appendChild(el('td', { 'class': 'num' }, String(p.pid)));
      tr.appendChild(el('td', null, p.user || ''));
      tr.appendChild(el('td', { 'class': 'num' }, String(r[0])));
      tr.appendChild(el('td', { 'class': 'num' }, p.used_bytes !== undefined ? formatBytes(p.used_bytes) : 'n/a'));
      tr.appendChild(el('td', { 'class': 'num' }, p.host_rss_bytes !== undefined ? formatBytes(p.host_rss_bytes) : '-'));
      tr.appendChild(el('td', null, p.workload || ''));
      tr.appendChild(el('td', null, p.command || ''));
      body.appendChild(tr);
    });
  }

  function poll() {
    fetch('/api/samples?since=' + state.since, { cache: 'no-store' })
      .then(function (r) { if (!r.ok) throw new Error('HTTP ' + r.status); return r.json(); })
      .then(function (data) {
        state.intervalMs = data.interval_ms || state.intervalMs;
        state.maxPoints = data.capacity || state.maxPoints;
        data.samples.forEach(function (s) { state.history.push(s); state.since = Math.max(state.since, s.t); });
        if (state.history.length > state.maxPoints) state.history.splice(0, state.history.length - state.maxPoints);
        render();
        renderProcesses(data.latest);
        var st = document.getElementById('status');
        st.textContent = 'live · ' + state.history.length + ' samples · every ' + (state.intervalMs / 1000) + ' s · times are local';
        st.className = 'status';
        document.body.setAttribute('data-samples', String(state.history.length));
      })
      .catch(function (e) {
        var st = document.getElementById('status');
        st.textContent = 'disconnected: ' + e.message;
        st.className = 'status bad';
      })
      .then(function () { state.timer = setTimeout(poll, state.intervalMs); });
  }

  var resizeTimer = null;
  window.addEventListener('resize', function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(render, 100);
  });
  poll();
})();
