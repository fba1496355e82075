// vramkit live page: polls /api/samples and draws per-GPU and host memory over time as SVG.
// No libraries, no network beyond the server that served this page.
(function () {
  'use strict';
  var SVG_NS = 'http://www.w3.org/2000/svg';
  var state = { since: 0, history: [], maxPoints: 600, intervalMs: 1000, timer: null };

  function formatBytes(b) {
    if (b === undefined || b === null) return '-';
    var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    var i = 0;
    while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toFixed(2)) + ' ' + units[i];
  }

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function svgEl(tag, attrs) {
    var e = document.createElementNS(SVG_NS, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    return e;
  }

  // Draws series [{cls, points: [[t, v], ...]}] scaled to [t0, t1] x [0, ymax] into a new SVG.
  function drawChart(series, ymax, t0, t1) {
    var W = 600, H = 140, L = 46, B = 14;
    var svg = svgEl('svg', { viewBox: '0 0 ' + W + ' ' + H, preserveAspectRatio: 'none', role: 'img' });
    var x = function (t) { return L + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - L - 4); };
    var y = function (v) { return (H - B) - (ymax > 0 ? v / ymax : 0) * (H - B - 4); };
    [0, 0.5, 1].forEach(function (f) {
      svg.appendChild(svgEl('line', { 'class': 'grid', x1: L, x2: W - 4, y1: y(ymax * f), y2: y(ymax * f) }));
      var label = svgEl('text', { x: 2, y: y(ymax * f) + 3 });
      label.textContent = formatBytes(ymax * f);
      svg.appendChild(label);
    });
    var span = svgEl('text', { x: L, y: H - 2 });
    span.textContent = 'last ' + Math.round((t1 - t0) / 1000) + ' s';
    svg.appendChild(span);
    var drawn = 0;
    series.forEach(function (s) {
      if (s.points.length === 0) return;
      var d = s.points.map(function (p, i) { return (i ? 'L' : 'M') + x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1); }).join(' ');
      if (s.area) {
        var a = d + ' L' + x(s.points[s.points.length - 1][0]).toFixed(1) + ',' + y(0) + ' L' + x(s.points[0][0]).toFixed(1) + ',' + y(0) + ' Z';
        svg.appendChild(svgEl('path', { 'class': s.cls + '-area', d: a }));
      }
      svg.appendChild(svgEl('path', { 'class': s.cls, d: d, 'data-points': String(s.points.length) }));
      drawn += s.points.length;
    });
    svg.setAttribute('data-points', String(drawn));
    return svg;
  }

  function chartBox(title, figures, svg, extraClass) {
    var box = el('div', { 'class': 'chart' + (extraClass ? ' ' + extraClass : '') });
    box.appendChild(el('div', { 'class': 'title' }, title));
    box.appendChild(el('div', { 'class': 'figures' }, figures));
    box.appendChild(svg);
    return box;
  }

  function render() {
    var h = state.history;
    if (h.length === 0) return;
    var t1 = h[h.length - 1].t, t0 = h[0].t;
    var latest = h[h.length - 1];

    var gpus = document.getElementById('gpus');
    gpus.textContent = '';
    if (latest.gpus.length === 0) {
      gpus.appendChild(el('p', null, latest.gpu_unavailable_reason || 'no GPUs'));
    }
    latest.gpus.forEach(function (g) {
      var used = [], reserved = [];
      h.forEach(function (s) {
        s.gpus.forEach(function (o) {
          if (o.uuid !== g.uuid) return;
          if (o.used !== undefined) used.push([s.t, o.used]);
          if (o.reserved !== undefined) reserved.push([s.t, o.reserved]);
        });
      });
      var total = g.total || 0;
      var figures = g.state !== 'ok' ? ('state ' + g.state + (g.state_reason ? ': ' + g.state_reason : ''))
        : 'used ' + formatBytes(g.used) + ' of ' + formatBytes(total) + (g.reserved !== undefined ? ', reserved ' + formatBytes(g.reserved) : '') +
          (g.util !== undefined ? ', util ' + g.util.toFixed(0) + '%' : '');
      var svg = drawChart([{ cls: 'used', points: used, area: true }, { cls: 'reserved', points: reserved }], total, t0, t1);
      svg.setAttribute('data-gpu', String(g.index));
      gpus.appendChild(chartBox('GPU ' + g.index + ' · ' + g.name, figures, svg, g.state !== 'ok' ? 'lost' : ''));
    });

    var host = document.getElementById('host');
    host.textContent = '';
    if (latest.host_total !== undefined) {
      var hused = [];
      h.forEach(function (s) {
        if (s.host_total !== undefined && s.host_available !== undefined) hused.push([s.t, s.host_total - s.host_available]);
      });
      var hsvg = drawChart([{ cls: 'used', points: hused, area: true }], latest.host_total, t0, t1);
      hsvg.setAttribute('data-host', '1');
      host.appendChild(chartBox('Host', 'in use ' + formatBytes(latest.host_total - (latest.host_available || 0)) + ' of ' +
        formatBytes(latest.host_total) + ', available ' + formatBytes(latest.host_available), hsvg));
    }
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
        st.textContent = 'live · ' + state.history.length + ' samples · every ' + (state.intervalMs / 1000) + ' s';
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

  poll();
})();
