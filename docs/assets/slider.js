/* The round-trip slider of docs/slider.md: no kernel, no library, no network.
 *
 * Reads the sweep the docs build ran (docs/hooks.py: the rows `emqlab sweep-rtt` prints, embedded in the
 * page as <script type="application/json" id="rtt-data">, else fetched from data-src) and, for the RTT
 * chosen on a log-scale range input, shows per finish mode: round trips per job, jobs per second, anomalies
 * per 1,000 jobs and (transaction) aborted EXECs per job — as a table, as bars, and as a marker on the
 * curves against RTT. Between two measured RTTs the values are interpolated (on log RTT; throughput on a
 * log scale too) and the page says so.
 */
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = {"atomic": "#1b7837", "finish-then-fetch": "#2166ac", "transaction": "#762a83",
                "split": "#b2182b", "split-then-fetch": "#e08214"};
  var NAMES = {
    "atomic": ["atomic, fetch_next = 1", "one EVALSHA finishes the job and fetches the next"],
    "finish-then-fetch": ["finish, then fetch", "EVALSHA moveToFinished, then EVALSHA moveToActive"],
    "transaction": ["transaction", "WATCH, pipelined reads, MULTI … EXEC (3 per attempt) + the fetch"],
    "split": ["split", "the same script, one redis.call per round trip"],
    "split-then-fetch": ["split, then fetch", "a split finish, then moveToActive"]
  };
  var METRICS = [
    ["round_trips_per_job", "round trips / job"],
    ["jobs_per_s", "jobs / s"],
    ["anomalies_per_1000", "anomalies / 1,000 jobs"],
    ["aborts_per_job", "aborted EXECs / job"]
  ];

  function el(name, attrs, parent, ns) {
    var node = ns ? document.createElementNS(SVG, name) : document.createElement(name);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(node);
    return node;
  }

  function svgEl(name, attrs, parent) { return el(name, attrs, parent, true); }

  function text(parent, x, y, s, attrs) {
    var t = svgEl("text", Object.assign({x: x, y: y}, attrs || {}), parent);
    t.textContent = s;
    return t;
  }

  function fmt(v) {
    if (v === 0) return "0";
    var a = Math.abs(v);
    if (a >= 1000) return Math.round(v).toLocaleString("en-US");
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    if (a >= 1) return v.toFixed(2);
    return v.toPrecision(2);
  }

  function fmtMs(ms) { return (ms >= 10 ? ms.toFixed(0) : ms >= 1 ? ms.toFixed(1) : ms.toPrecision(2)) + " ms"; }

  /* series[mode][metric] = values at data.rtts */
  function pivot(data) {
    var series = {};
    data.modes.forEach(function (m) {
      series[m] = {};
      METRICS.forEach(function (mt) { series[m][mt[0]] = data.rtts.map(function () { return 0; }); });
    });
    data.rows.forEach(function (r) {
      var i = data.rtts.findIndex(function (x) { return Math.abs(x - r.rtt_ms) < 1e-9; });
      if (i < 0 || !series[r.mode]) return;
      METRICS.forEach(function (mt) { series[r.mode][mt[0]][i] = Number(r[mt[0]]) || 0; });
    });
    return series;
  }

  /* value at log10(rtt) = u: piecewise linear in u; throughput on a log scale where both ends are > 0 */
  function at(data, values, u, metric) {
    var us = data.rtts.map(Math.log10), n = us.length;
    if (u <= us[0]) return values[0];
    if (u >= us[n - 1]) return values[n - 1];
    for (var i = 1; i < n; i++) {
      if (u <= us[i]) {
        var t = (u - us[i - 1]) / (us[i] - us[i - 1]), a = values[i - 1], b = values[i];
        if (metric === "jobs_per_s" && a > 0 && b > 0) return Math.pow(10, Math.log10(a) + t * (Math.log10(b) - Math.log10(a)));
        return a + t * (b - a);
      }
    }
    return values[n - 1];
  }

  function bracket(data, u) {
    var us = data.rtts.map(Math.log10);
    if (u <= us[0]) return {exact: data.rtts[0]};
    if (u >= us[us.length - 1]) return {exact: data.rtts[us.length - 1]};
    /* within half a slider step of a measured RTT: that run itself (every run is reachable with the slider) */
    for (var i = 0; i < us.length; i++) if (Math.abs(us[i] - u) < 0.0051) return {exact: data.rtts[i]};
    for (var j = 1; j < us.length; j++) if (u < us[j]) return {lo: data.rtts[j - 1], hi: data.rtts[j]};
    return {exact: data.rtts[us.length - 1]};
  }

  /* -- the curves: a panel against RTT (log x) with the current RTT as a vertical line ------------------ */
  function curvePanel(svg, data, series, metric, box, title, scale) {
    var g = svgEl("g", {"class": "rtt-panel", "data-metric": metric}, svg);
    var all = [];
    data.modes.forEach(function (m) { all = all.concat(series[m][metric]); });
    var top = Math.max.apply(null, all.concat([1]));
    if (scale === "log") top = Math.pow(10, Math.ceil(Math.log10(top)));
    var pos = all.filter(function (v) { return v > 0; });
    var bottom = scale === "log" ? Math.pow(10, Math.floor(Math.log10(Math.min.apply(null, pos.length ? pos : [1])))) : 0;
    var x0 = Math.log10(data.rtts[0]), x1 = Math.log10(data.rtts[data.rtts.length - 1]);
    function X(rtt) { return box.x + (Math.log10(rtt) - x0) / (x1 - x0) * box.w; }
    function Y(v) {
      if (scale === "log") {
        if (!(v > 0)) return null;
        return box.y + box.h - (Math.log10(v) - Math.log10(bottom)) / (Math.log10(top) - Math.log10(bottom)) * box.h;
      }
      return box.y + box.h - Math.log10(1 + v) / Math.log10(1 + top) * box.h;  /* symlog: 0 at the bottom */
    }
    svgEl("rect", {x: box.x, y: box.y, width: box.w, height: box.h, "class": "rtt-frame"}, g);
    text(g, box.x + box.w / 2, box.y - 8, title, {"class": "rtt-title", "text-anchor": "middle"});
    var decades = [];
    for (var d = Math.ceil(x0 - 1e-9); d <= x1 + 1e-9; d++) decades.push(Math.pow(10, d));
    decades.forEach(function (rtt) {
      var x = X(rtt);
      svgEl("line", {x1: x, x2: x, y1: box.y + box.h, y2: box.y + box.h + 4, "class": "rtt-tick"}, g);
      text(g, x, box.y + box.h + 16, rtt >= 1 ? String(rtt) : rtt.toPrecision(1), {"class": "rtt-ticklabel", "text-anchor": "middle"});
    });
    var ticks = scale === "log" ? [] : [0];
    for (var p = Math.ceil(Math.log10(Math.max(bottom, 1e-9))); Math.pow(10, p) <= top * 1.0001; p++) {
      if (scale === "log" || p >= 0) ticks.push(Math.pow(10, p));
    }
    ticks.forEach(function (v) {
      var y = Y(v);
      if (y === null) return;
      svgEl("line", {x1: box.x, x2: box.x + box.w, y1: y, y2: y, "class": "rtt-grid"}, g);
      text(g, box.x - 5, y + 4, fmt(v), {"class": "rtt-ticklabel", "text-anchor": "end"});
    });
    text(g, box.x + box.w / 2, box.y + box.h + 32, "round-trip time (ms, log)", {"class": "rtt-axis", "text-anchor": "middle"});
    data.modes.forEach(function (m) {
      var pts = [];
      series[m][metric].forEach(function (v, i) {
        var y = Y(v);
        if (y !== null) pts.push(X(data.rtts[i]).toFixed(1) + "," + y.toFixed(1));
      });
      svgEl("polyline", {points: pts.join(" "), fill: "none", stroke: COLORS[m] || "#777", "stroke-width": 2,
                         "class": "rtt-curve", "data-mode": m}, g);
    });
    var marker = svgEl("line", {y1: box.y, y2: box.y + box.h, "class": "rtt-marker"}, g);
    var dots = {};
    data.modes.forEach(function (m) {
      dots[m] = svgEl("circle", {r: 5, fill: COLORS[m] || "#777", "class": "rtt-dot", "data-mode": m}, g);
    });
    return function update(u, values) {
      var x = box.x + (u - x0) / (x1 - x0) * box.w;
      marker.setAttribute("x1", x.toFixed(1));
      marker.setAttribute("x2", x.toFixed(1));
      data.modes.forEach(function (m) {
        var y = Y(values[m][metric]);
        if (y === null) { y = box.y + box.h; dots[m].setAttribute("class", "rtt-dot rtt-zero"); }
        else dots[m].setAttribute("class", "rtt-dot");
        dots[m].setAttribute("cx", x.toFixed(1));
        dots[m].setAttribute("cy", y.toFixed(1));
      });
    };
  }

  /* -- the bars: 1 vs 2 vs N round trips per job, and what it costs ------------------------------------ */
  function barPanel(svg, data, series, metric, box, title, scale) {
    var g = svgEl("g", {"class": "rtt-bars", "data-metric": metric}, svg);
    var all = [];
    data.modes.forEach(function (m) { all = all.concat(series[m][metric]); });
    var top = Math.max.apply(null, all.concat([1]));
    text(g, box.x, box.y - 8, title, {"class": "rtt-title"});
    var rowH = box.h / data.modes.length, bars = {}, labels = {};
    data.modes.forEach(function (m, i) {
      var y = box.y + i * rowH;
      text(g, box.x - 6, y + rowH / 2 + 4, NAMES[m] ? NAMES[m][0] : m, {"class": "rtt-ticklabel", "text-anchor": "end"});
      bars[m] = svgEl("rect", {x: box.x, y: y + 3, height: rowH - 6, width: 0, fill: COLORS[m] || "#777",
                               "class": "rtt-bar", "data-mode": m}, g);
      labels[m] = text(g, box.x + 4, y + rowH / 2 + 4, "", {"class": "rtt-value", "data-mode": m});
    });
    function W(v) {
      if (!(v > 0)) return 0;
      if (scale === "log") return Math.max(2, Math.log10(1 + v) / Math.log10(1 + top) * box.w);
      return v / top * box.w;
    }
    return function update(u, values) {
      data.modes.forEach(function (m) {
        var v = values[m][metric], w = W(v);
        bars[m].setAttribute("width", w.toFixed(1));
        labels[m].setAttribute("x", (box.x + w + 5).toFixed(1));
        labels[m].textContent = fmt(v);
      });
    };
  }

  function start(root, data) {
    var series = pivot(data);
    /* the range's ends on whole slider steps (0.01 of a decade): every measured RTT is then within half a
       step of a position the slider can take */
    var lo = Math.floor(Math.log10(data.rtts[0]) * 100) / 100, hi = Math.ceil(Math.log10(data.rtts[data.rtts.length - 1]) * 100) / 100;
    root.textContent = "";

    var controls = el("div", {"class": "rtt-controls"}, root);
    var label = el("label", {"for": "rtt-range"}, controls);
    label.textContent = "RTT ";
    var range = el("input", {type: "range", id: "rtt-range", min: lo.toFixed(2), max: hi.toFixed(2), step: "0.01",
                             value: Math.max(lo, Math.min(hi, 0)).toFixed(2), "aria-label": "round-trip time, log scale"}, controls);
    var readout = el("output", {id: "rtt-value", "for": "rtt-range"}, controls);
    var presets = el("div", {"class": "rtt-presets"}, root);
    Object.keys(data.presets || {}).sort(function (a, b) { return data.presets[a] - data.presets[b]; }).forEach(function (name) {
      var ms = data.presets[name];
      if (ms < data.rtts[0] - 1e-9 || ms > data.rtts[data.rtts.length - 1] + 1e-9) return;
      var b = el("button", {type: "button", "class": "md-button rtt-preset", "data-rtt": ms}, presets);
      b.textContent = name + " " + ms + " ms";
      b.addEventListener("click", function () { range.value = Math.log10(ms).toFixed(3); render(); });
    });
    var note = el("p", {id: "rtt-note", "class": "rtt-note"}, root);

    var table = el("table", {id: "rtt-table"}, root);
    var head = el("tr", {}, el("thead", {}, table));
    el("th", {}, head).textContent = "finish";
    METRICS.forEach(function (mt) { el("th", {}, head).textContent = mt[1]; });
    var body = el("tbody", {}, table), cells = {};
    data.modes.forEach(function (m) {
      var tr = el("tr", {"data-mode": m}, body);
      var th = el("td", {}, tr);
      var sw = el("span", {"class": "rtt-swatch"}, th);
      sw.style.background = COLORS[m] || "#777";
      el("b", {}, th).textContent = NAMES[m] ? NAMES[m][0] : m;
      el("br", {}, th);
      el("small", {}, th).textContent = NAMES[m] ? NAMES[m][1] : "";
      cells[m] = {};
      METRICS.forEach(function (mt) {
        cells[m][mt[0]] = el("td", {"data-mode": m, "data-metric": mt[0], "class": "rtt-num"}, tr);
      });
    });

    var svg = svgEl("svg", {id: "rtt-plot", viewBox: "0 0 760 560", role: "img",
                            "aria-label": "round trips per job, jobs per second and anomalies per 1,000 jobs at the chosen RTT"});
    root.appendChild(svg);
    var left = 190;
    var updates = [
      barPanel(svg, data, series, "round_trips_per_job", {x: left, y: 30, w: 520, h: 100}, "round trips per job: 1 vs 2 vs N", "linear"),
      barPanel(svg, data, series, "jobs_per_s", {x: left, y: 165, w: 520, h: 100}, "jobs per second (virtual time)", "linear"),
      curvePanel(svg, data, series, "jobs_per_s", {x: 60, y: 330, w: 290, h: 170}, "jobs per second vs RTT (log)", "log"),
      curvePanel(svg, data, series, "anomalies_per_1000", {x: 440, y: 330, w: 290, h: 170}, "anomalies per 1,000 jobs vs RTT", "symlog")
    ];

    function render() {
      var u = Number(range.value), b = bracket(data, u);
      if (b.exact !== undefined) u = Math.log10(b.exact);
      var rtt = Math.pow(10, u), values = {};
      data.modes.forEach(function (m) {
        values[m] = {};
        METRICS.forEach(function (mt) { values[m][mt[0]] = at(data, series[m][mt[0]], u, mt[0]); });
      });
      var shown = b.exact !== undefined ? b.exact : rtt;
      readout.textContent = fmtMs(shown);
      range.setAttribute("aria-valuetext", fmtMs(shown));
      var preset = Object.keys(data.presets || {}).find(function (n) { return Math.abs(data.presets[n] - shown) < 1e-9; });
      note.textContent = (b.exact !== undefined
        ? "Measured at " + fmtMs(b.exact) + (preset ? " (" + preset + ")" : "") + "."
        : "Interpolated between the runs at " + fmtMs(b.lo) + " and " + fmtMs(b.hi) + ".") +
        " " + data.rows[0].jobs + " jobs, " + data.rows[0].workers + " workers per run.";
      data.modes.forEach(function (m) {
        METRICS.forEach(function (mt) {
          var v = values[m][mt[0]];
          cells[m][mt[0]].textContent = mt[0] === "aborts_per_job" && m !== "transaction" ? "–" : fmt(v);
        });
      });
      root.setAttribute("data-rtt", shown.toPrecision(4));
      updates.forEach(function (f) { f(u, values); });
    }

    range.addEventListener("input", render);
    range.addEventListener("change", render);
    render();
    root.setAttribute("data-ready", "true");
  }

  function init() {
    var root = document.getElementById("rtt-slider");
    if (!root || root.getAttribute("data-ready")) return;
    var inline = document.getElementById("rtt-data");
    if (inline) {
      start(root, JSON.parse(inline.textContent));
    } else if (root.getAttribute("data-src")) {
      fetch(root.getAttribute("data-src")).then(function (r) { return r.json(); }).then(function (d) { start(root, d); });
    }
  }

  if (window.document$ && window.document$.subscribe) {
    window.document$.subscribe(init);  /* Material's instant navigation, when it is on */
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
