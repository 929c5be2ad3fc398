// roughnet report: the "Explore" section (python/roughnet/report/explore.py says what it shows).
// Plain JavaScript drawing SVG; the data is the JSON in #rn-data. No library, nothing fetched.
(function () {
  "use strict";
  var root = document.getElementById("rn-explore");
  var blob = document.getElementById("rn-data");
  if (!root || !blob) { return; }
  var D = JSON.parse(blob.textContent);
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf"];
  var W = 900, H = 400, M = {l: 78, r: 20, t: 16, b: 46};
  var state = {
    metric: D.first.metric, x: D.first.x || (D.params.length ? D.params[0].name : null),
    lines: D.first.lines || "", logY: null, logX: null, hidden: {}, zoom: null, pinned: null
  };

  // ---------------------------------------------------------------- formatting
  function num(v, digits) {
    if (v === 0) { return "0"; }
    var a = Math.abs(v);
    return a >= 1000 ? v.toLocaleString("en", {maximumFractionDigits: 0}) : String(Number(v.toPrecision(digits || 3)));
  }
  function fmtValue(unit, v) {
    if (v === null || v === undefined || !isFinite(v)) { return "-"; }
    if (unit === "us") {
      return v >= 1e6 ? num(v / 1e6) + " s" : v >= 1e3 ? num(v / 1e3) + " ms" : num(v) + " \u00b5s";
    }
    if (unit === "bit/s") {
      return v >= 1e9 ? num(v / 1e9) + " Gbit/s" : v >= 1e6 ? num(v / 1e6) + " Mbit/s" :
        v >= 1e3 ? num(v / 1e3) + " kbit/s" : num(v) + " bit/s";
    }
    if (unit === "fraction") { return num(100 * v) + " %"; }
    if (unit === "bytes") {
      return v >= 1e6 ? num(v / 1e6) + " MB" : v >= 1e3 ? num(v / 1e3) + " KB" : num(v) + " B";
    }
    if (unit === "s") { return num(v) + " s"; }
    return num(v);
  }
  function el(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) { if (Object.prototype.hasOwnProperty.call(attrs, k)) { e.setAttribute(k, attrs[k]); } }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function h(tag, text, parent) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = text; }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function metricMeta(col) {
    for (var i = 0; i < D.metrics.length; i++) { if (D.metrics[i].col === col) { return D.metrics[i]; } }
    return {col: col, title: col, unit: "", log: false};
  }
  function paramMeta(name) {
    for (var i = 0; i < D.params.length; i++) { if (D.params[i].name === name) { return D.params[i]; } }
    return null;
  }

  // ---------------------------------------------------------------- scales
  function scale(lo, hi, a, b, log) {
    if (log) { lo = Math.log10(lo); hi = Math.log10(hi); }
    if (hi === lo) { lo -= 1; hi += 1; }
    var f = function (v) { var t = log ? Math.log10(v) : v; return a + (t - lo) / (hi - lo) * (b - a); };
    f.inv = function (p) { var t = lo + (p - a) / (b - a) * (hi - lo); return log ? Math.pow(10, t) : t; };
    f.lo = lo; f.hi = hi; f.log = log;
    return f;
  }
  function ticks(s, n) {
    var out = [], lo = s.lo, hi = s.hi, i;
    if (s.log) {
      for (i = Math.floor(lo); i <= Math.ceil(hi); i++) { if (i >= lo - 1e-9 && i <= hi + 1e-9) { out.push(Math.pow(10, i)); } }
      if (out.length < 2) { out = [Math.pow(10, lo), Math.pow(10, hi)]; }
      return out;
    }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    if ((hi - lo) / step > 2 * n) { step *= 5; } else if ((hi - lo) / step > n) { step *= 2; }
    for (i = Math.ceil(lo / step) * step; i <= hi + step * 1e-9; i += step) { out.push(Math.abs(i) < step * 1e-9 ? 0 : i); }
    return out;
  }

  // ---------------------------------------------------------------- the tooltip
  var tip = h("div", null, root);
  tip.className = "rn-tip";
  tip.style.display = "none";
  function showTip(run, lines, evt) {
    tip.innerHTML = "";
    h("b", "run " + run.id + " (#" + run.i + (run.repeat ? ", repeat " + run.repeat : "") + ")", tip);
    var keys = Object.keys(run.p);
    if (keys.length) { h("div", keys.map(function (k) { return k + "=" + run.p[k]; }).join(", "), tip); }
    h("div", run.status + ", " + run.validity, tip).className = "rn-" + run.validity;
    lines.forEach(function (l) { h("div", l, tip); });
    run.reasons.forEach(function (r) { h("div", r, tip).className = "rn-reason"; });
    if (run.href) {
      var a = h("a", "artifacts", tip);
      a.href = run.href;
    }
    tip.style.display = "block";
    var box = root.getBoundingClientRect();
    tip.style.left = Math.min(evt.clientX - box.left + 14, box.width - 260) + "px";
    tip.style.top = (evt.clientY - box.top + 14) + "px";
  }
  function hideTip() { if (!state.pinned) { tip.style.display = "none"; } }
  document.addEventListener("click", function (evt) {
    if (state.pinned && !tip.contains(evt.target) && !(evt.target.classList && evt.target.classList.contains("pt"))) {
      state.pinned = null; tip.style.display = "none";
    }
  });

  // ---------------------------------------------------------------- controls
  var controls = h("div", null, root);
  controls.className = "rn-controls";
  function select(label, options, value, onChange) {
    var lab = h("label", label + " ", controls);
    var s = h("select", null, lab);
    options.forEach(function (o) {
      var opt = h("option", o[1], s);
      opt.value = o[0];
      if (o[0] === value) { opt.selected = true; }
    });
    s.addEventListener("change", function () { onChange(s.value); });
    return s;
  }
  function checkbox(label, checked, onChange) {
    var lab = h("label", null, controls);
    var c = h("input", null, lab);
    c.type = "checkbox";
    c.checked = checked;
    lab.appendChild(document.createTextNode(" " + label));
    c.addEventListener("change", function () { onChange(c.checked); });
    return c;
  }
  var params = D.params.map(function (p) { return [p.name, p.name]; });
  var metricSel = select("metric", D.metrics.map(function (m) { return [m.col, m.title]; }), state.metric,
                         function (v) { state.metric = v; state.logY = null; state.zoom = null; draw(); });
  var xSel = select("x axis", params, state.x, function (v) { state.x = v; state.logX = null; state.zoom = null; draw(); });
  var lineSel = select("series", [["", "(none)"]].concat(params), state.lines,
                       function (v) { state.lines = v; state.hidden = {}; draw(); });
  var logYBox = checkbox("log y", false, function (v) { state.logY = v; draw(); });
  var logXBox = checkbox("log x", false, function (v) { state.logX = v; state.zoom = null; draw(); });
  metricSel.id = "rn-metric"; xSel.id = "rn-x"; lineSel.id = "rn-series"; logYBox.id = "rn-logy"; logXBox.id = "rn-logx";
  var help = h("span", "hover a point: its run; click: keep it; drag: zoom; double-click: all", controls);
  help.className = "rn-help";

  var plotBox = h("div", null, root);
  var pctTitle = h("h3", null, root);
  var pctBox = h("div", null, root);

  function seriesOf(run) { return state.lines ? (run.p[state.lines] !== undefined ? run.p[state.lines] : "-") : "all runs"; }
  function seriesOrder() {
    var pm = state.lines ? paramMeta(state.lines) : null;
    var seen = {}, out = [];
    (pm ? pm.values : []).forEach(function (v) { seen[v] = true; out.push(v); });
    D.runs.forEach(function (r) { var s = seriesOf(r); if (!seen[s]) { seen[s] = true; out.push(s); } });
    return out;
  }
  function xOf(run, pm) {
    if (!pm) { return run.i; }
    if (pm.numeric) { return run.x[pm.name]; }
    var i = pm.values.indexOf(run.p[pm.name]);
    return i < 0 ? null : i;
  }
  function legend(svg, order, colorOf, y0) {
    var x = M.l, y = y0;
    order.forEach(function (s) {
      var g = el("g", {"class": "rn-legend" + (state.hidden[s] ? " off" : ""), "data-series": s}, svg);
      el("rect", {x: x, y: y - 9, width: 12, height: 12, fill: colorOf(s)}, g);
      var t = el("text", {x: x + 16, y: y + 1}, g);
      t.textContent = (state.lines ? state.lines + "=" : "") + s;
      g.addEventListener("click", function () { state.hidden[s] = !state.hidden[s]; draw(); });
      x += 30 + 7 * t.textContent.length;
      if (x > W - 150) { x = M.l; y += 18; }
    });
    return y + 18;
  }

  // ---------------------------------------------------------------- the metric plot
  function drawMetric() {
    plotBox.innerHTML = "";
    var meta = metricMeta(state.metric), pm = paramMeta(state.x);
    var order = seriesOrder();
    var colorOf = function (s) { return COLORS[order.indexOf(s) % COLORS.length]; };
    var pts = [];
    D.runs.forEach(function (r) {
      var v = r.m[state.metric], x = xOf(r, pm);
      if (v === undefined || v === null || x === null || x === undefined) { return; }
      pts.push({run: r, x: x, y: v, s: seriesOf(r)});
    });
    var svg = el("svg", {width: W, height: H + 60, viewBox: "0 0 " + W + " " + (H + 60), "class": "rn-plot",
                         "data-metric": state.metric}, plotBox);
    if (!pts.length) {
      var t0 = el("text", {x: M.l, y: 40}, svg);
      t0.textContent = "no run has a value of " + meta.title;
      return;
    }
    var xs = pts.map(function (p) { return p.x; }), ys = pts.map(function (p) { return p.y; });
    var xmin = Math.min.apply(null, xs), xmax = Math.max.apply(null, xs);
    var numericX = pm && pm.numeric;
    if (state.logX === null) { state.logX = !!numericX && xmin > 0 && xmax / xmin > 50; logXBox.checked = state.logX; }
    var logX = state.logX && numericX && xmin > 0;
    if (state.zoom) { xmin = state.zoom[0]; xmax = state.zoom[1]; }
    var visible = pts.filter(function (p) { return !state.hidden[p.s] && p.x >= xmin && p.x <= xmax; });
    var vys = (visible.length ? visible : pts).map(function (p) { return p.y; });
    var ymin = Math.min.apply(null, vys), ymax = Math.max.apply(null, vys);
    if (state.logY === null) { state.logY = meta.log && ymin > 0 && ymax / ymin > 20; logYBox.checked = state.logY; }
    var logY = state.logY && ymin > 0;
    var padX = numericX ? 0 : 0.5;
    var sx = scale(logX ? xmin : xmin - padX - (xmax - xmin) * 0.03, logX ? xmax : xmax + padX + (xmax - xmin) * 0.03,
                   M.l, W - M.r, logX);
    if (logX && xmax === xmin) { sx = scale(xmin / 2, xmax * 2, M.l, W - M.r, true); }
    var sy = logY ? scale(ymin / 1.3, ymax * 1.3, H - M.b, M.t, true)
                  : scale(Math.min(0, ymin), ymax === 0 ? 1 : ymax * 1.08, H - M.b, M.t, false);
    var clip = "rn-clip-" + Math.random().toString(36).slice(2);
    var defs = el("defs", {}, svg);
    el("rect", {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b}, el("clipPath", {id: clip}, defs));
    // axes and grid
    var grid = el("g", {"class": "rn-grid"}, svg);
    ticks(sy, 6).forEach(function (v) {
      var y = sy(v);
      el("line", {x1: M.l, x2: W - M.r, y1: y, y2: y}, grid);
      var t = el("text", {x: M.l - 6, y: y + 4, "text-anchor": "end"}, grid);
      t.textContent = fmtValue(meta.unit, v);
    });
    var xt = numericX ? ticks(sx, 8) : pm ? pm.values.map(function (_, i) { return i; }) : [];
    xt.forEach(function (v) {
      if (v < Math.min(xmin, xmax) - 1e-9 || v > xmax + 1e-9) { return; }
      var x = sx(v);
      el("line", {x1: x, x2: x, y1: M.t, y2: H - M.b}, grid);
      var t = el("text", {x: x, y: H - M.b + 16, "text-anchor": "middle"}, grid);
      t.textContent = numericX ? (pm.values.length && pts.length ? nearestLabel(pm, v) : num(v)) : pm.values[v];
    });
    var xl = el("text", {x: (M.l + W - M.r) / 2, y: H - 8, "text-anchor": "middle", "class": "rn-axis"}, svg);
    xl.textContent = state.x || "run";
    var yl = el("text", {x: 14, y: (M.t + H - M.b) / 2, "text-anchor": "middle", "class": "rn-axis",
                         transform: "rotate(-90 14 " + (M.t + H - M.b) / 2 + ")"}, svg);
    yl.textContent = meta.title;
    // zoom by dragging across the plot
    var bg = el("rect", {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, "class": "rn-bg"}, svg);
    var band = null, start = null;
    bg.addEventListener("mousedown", function (e) {
      start = svgX(svg, e); band = el("rect", {x: start, y: M.t, width: 0, height: H - M.t - M.b, "class": "rn-band"}, svg);
    });
    svg.addEventListener("mousemove", function (e) {
      if (band) { var x = svgX(svg, e); band.setAttribute("x", Math.min(x, start)); band.setAttribute("width", Math.abs(x - start)); }
    });
    svg.addEventListener("mouseup", function (e) {
      if (!band) { return; }
      var x = svgX(svg, e), a = Math.min(x, start), b = Math.max(x, start);
      band.remove(); band = null;
      if (b - a > 6) { state.zoom = [sx.inv(a), sx.inv(b)]; draw(); }
    });
    svg.addEventListener("dblclick", function () { state.zoom = null; draw(); });
    var body = el("g", {"clip-path": "url(#" + clip + ")"}, svg);
    // a line per series through the means of its points at each x
    order.forEach(function (s) {
      if (state.hidden[s]) { return; }
      var byX = {};
      pts.forEach(function (p) { if (p.s === s) { (byX[p.x] = byX[p.x] || []).push(p.y); } });
      var means = Object.keys(byX).map(Number).sort(function (a, b) { return a - b; }).map(function (k) {
        return [k, byX[k].reduce(function (a, b) { return a + b; }, 0) / byX[k].length];
      }).filter(function (km) { return !logY || km[1] > 0; });
      if (means.length < 2) { return; }
      var d = means.map(function (km, i) {
        return (i ? "L" : "M") + sx(km[0]).toFixed(1) + " " + sy(km[1]).toFixed(1);
      }).join(" ");
      el("path", {d: d, fill: "none", stroke: colorOf(s), "stroke-width": 1.6, "class": "rn-line"}, body);
    });
    // a marker per run
    pts.forEach(function (p) {
      if (state.hidden[p.s] || (logY && p.y <= 0)) { return; }
      var c = el("circle", {cx: sx(p.x).toFixed(1), cy: sy(p.y).toFixed(1), r: 4.5, fill: colorOf(p.s),
                            "class": "pt rn-" + p.run.validity, "data-run": p.run.id}, body);
      var line = meta.title + ": " + fmtValue(meta.unit, p.y);
      c.addEventListener("mouseenter", function (e) { if (!state.pinned) { showTip(p.run, [line], e); } });
      c.addEventListener("mouseleave", hideTip);
      c.addEventListener("click", function (e) { state.pinned = p.run.id; showTip(p.run, [line], e); e.stopPropagation(); });
    });
    legend(svg, order, colorOf, H + 20);
    if (state.zoom) {
      var z = el("text", {x: W - M.r, y: M.t + 12, "text-anchor": "end", "class": "rn-help"}, svg);
      z.textContent = "zoomed: double-click for all";
    }
  }
  function nearestLabel(pm, v) {
    // a tick at a swept value shows that value as written; elsewhere the number
    for (var i = 0; i < D.runs.length; i++) {
      var r = D.runs[i];
      if (r.x[pm.name] !== null && r.x[pm.name] !== undefined && Math.abs(r.x[pm.name] - v) <= Math.abs(v) * 1e-9) {
        return r.p[pm.name];
      }
    }
    return num(v);
  }
  function svgX(svg, e) {
    var box = svg.getBoundingClientRect();
    return (e.clientX - box.left) * (W / box.width);
  }

  // ---------------------------------------------------------------- latency percentiles
  function nines(q) { return q >= 100 ? null : -Math.log10(1 - q / 100); }
  function drawPercentiles() {
    pctBox.innerHTML = "";
    var runs = D.runs.filter(function (r) { return r.pct && r.pct.length; });
    pctTitle.textContent = runs.length ? (D.rtt ? "Round-trip" : "One-way latency") +
      " percentiles per run (log scales; from the stored HDR histograms, receivers merged)" : "";
    if (!runs.length) { return; }
    var order = seriesOrder();
    var colorOf = function (s) { return COLORS[order.indexOf(s) % COLORS.length]; };
    var qs = runs[0].pct.map(function (p) { return p[0]; });
    var finite = qs.filter(function (q) { return q < 100; });
    var tmax = nines(finite[finite.length - 1]) + 0.6;   // "max" to the right of the last percentile
    var tOf = function (q) { return q >= 100 ? tmax : nines(q); };
    var vals = [];
    runs.forEach(function (r) { if (!state.hidden[seriesOf(r)]) { r.pct.forEach(function (p) { if (p[1] > 0) { vals.push(p[1]); } }); } });
    if (!vals.length) { return; }
    var svg = el("svg", {width: W, height: H + 60, viewBox: "0 0 " + W + " " + (H + 60), "class": "rn-plot rn-pct"}, pctBox);
    var sx = scale(0, tmax, M.l, W - M.r, false);
    var sy = scale(Math.min.apply(null, vals) / 1.3, Math.max.apply(null, vals) * 1.3, H - M.b, M.t, true);
    var grid = el("g", {"class": "rn-grid"}, svg);
    ticks(sy, 6).forEach(function (v) {
      var y = sy(v);
      el("line", {x1: M.l, x2: W - M.r, y1: y, y2: y}, grid);
      el("text", {x: M.l - 6, y: y + 4, "text-anchor": "end"}, grid).textContent = fmtValue("us", v);
    });
    [50, 90, 99, 99.9, 99.99, 99.999, 100].forEach(function (q) {
      if (q < 100 && nines(q) > tmax) { return; }
      var x = sx(tOf(q));
      el("line", {x1: x, x2: x, y1: M.t, y2: H - M.b}, grid);
      el("text", {x: x, y: H - M.b + 16, "text-anchor": "middle"}, grid).textContent = q >= 100 ? "max" : "p" + q;
    });
    el("text", {x: (M.l + W - M.r) / 2, y: H - 8, "text-anchor": "middle", "class": "rn-axis"}, svg).textContent =
      "percentile (the tail to the right)";
    runs.forEach(function (r) {
      var s = seriesOf(r);
      if (state.hidden[s]) { return; }
      var ok = r.pct.filter(function (p) { return p[1] > 0; });
      var d = ok.map(function (p, i) { return (i ? "L" : "M") + sx(tOf(p[0])).toFixed(1) + " " + sy(p[1]).toFixed(1); }).join(" ");
      el("path", {d: d, fill: "none", stroke: colorOf(s), "stroke-width": 1.3, "class": "rn-line", "data-run": r.id}, svg);
      ok.forEach(function (p) {
        var c = el("circle", {cx: sx(tOf(p[0])).toFixed(1), cy: sy(p[1]).toFixed(1), r: 3, fill: colorOf(s),
                              "class": "pt rn-" + r.validity, "data-run": r.id}, svg);
        var line = (p[0] >= 100 ? "max" : "p" + p[0]) + ": " + fmtValue("us", p[1]);
        c.addEventListener("mouseenter", function (e) { if (!state.pinned) { showTip(r, [line], e); } });
        c.addEventListener("mouseleave", hideTip);
        c.addEventListener("click", function (e) { state.pinned = r.id; showTip(r, [line], e); e.stopPropagation(); });
      });
    });
    legend(svg, order, colorOf, H + 20);
  }

  function draw() {
    state.pinned = null;
    tip.style.display = "none";
    drawMetric();
    drawPercentiles();
  }
  var style = document.createElement("style");
  style.textContent =
    ".rn-explore{position:relative}.rn-controls label{margin-right:1.2em;font-size:.9em}" +
    ".rn-help{color:#888;font-size:.8em}.rn-plot{max-width:100%;height:auto;border:1px solid #eee;display:block;margin:.5em 0}" +
    ".rn-plot text{font-size:11px;fill:#444}.rn-plot .rn-axis{font-size:12px;fill:#222}" +
    ".rn-grid line{stroke:#eee}.rn-bg{fill:transparent;cursor:crosshair}.rn-band{fill:rgba(31,119,180,.12)}" +
    ".pt{cursor:pointer;stroke:#fff;stroke-width:1}.pt.rn-suspect{stroke:#e69500;stroke-width:2}" +
    ".pt.rn-invalid{stroke:#b00020;stroke-width:2}.rn-legend{cursor:pointer}.rn-legend.off{opacity:.35}" +
    ".rn-tip{position:absolute;z-index:5;background:#fff;border:1px solid #bbb;border-radius:4px;padding:.4em .6em;" +
    "font-size:.85em;box-shadow:0 2px 6px rgba(0,0,0,.15);max-width:420px}.rn-tip .rn-reason{color:#8a4b00}" +
    ".rn-tip .rn-suspect{color:#8a4b00}.rn-tip .rn-invalid{color:#b00020}";
  document.head.appendChild(style);
  window.rnExplore = {state: state, draw: draw, data: D};
  draw();
})();
