// The round-trip slider: the curves are sweep.json (emqlab.timing.sweep_rtt at the build), the current point
// a timed run computed in the worker (emqlab_site.rtt_point: emqlab.timing.simulate and the slider's own
// summary line). This file draws; it computes nothing of the model.
"use strict";

const $ = (id) => document.getElementById(id);
const COLORS = { "atomic": "#1b7837", "finish-then-fetch": "#2166ac", "split": "#b2182b",
                 "split-then-fetch": "#e08214", "transaction": "#762a83" };
const RTT_MIN = 0.03, RTT_MAX = 250;
const box = $("slider");
let sweep = null;
let wanted = null;   // the setting to compute next (the latest move wins)
let running = false;

const rttOf = (v) => RTT_MIN * Math.pow(RTT_MAX / RTT_MIN, v / 1000);
const valueOf = (rtt) => Math.round(1000 * Math.log(rtt / RTT_MIN) / Math.log(RTT_MAX / RTT_MIN));
const fmt = (x) => Number(x.toPrecision(3)).toString();

function mode() {
  const finish = document.querySelector("input[name=finish]:checked").value;
  const fetch = $("fetch-next").checked;
  $("fetch-next").disabled = finish === "transaction";
  if (finish === "transaction") return "transaction";
  if (finish === "atomic") return fetch ? "atomic" : "finish-then-fetch";
  return fetch ? "split" : "split-then-fetch";
}

const NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// one chart: x the RTT (log), y a metric (linear from 0), a line per mode, the current point
function chart(svg, x0, title, metric, point) {
  const W = 400, H = 240, top = 40, left = x0 + 50;
  const xs = (rtt) => left + W * Math.log(rtt / RTT_MIN) / Math.log(RTT_MAX / RTT_MIN);
  const rows = sweep.rows;
  let ymax = Math.max(1, ...rows.map((r) => r[metric]), point ? point[metric] : 0) * 1.08;
  const ys = (v) => top + H - H * v / ymax;
  svg.append(el("text", { x: left, y: 22, class: "title" }, title));
  svg.append(el("rect", { x: left, y: top, width: W, height: H, class: "frame" }));
  for (const t of [0.1, 1, 10, 100]) {
    svg.append(el("line", { x1: xs(t), x2: xs(t), y1: top, y2: top + H, class: "grid" }));
    svg.append(el("text", { x: xs(t), y: top + H + 16, class: "tick", "text-anchor": "middle" }, `${t} ms`));
  }
  for (const f of [0, 0.5, 1]) {
    svg.append(el("text", { x: left - 6, y: ys(ymax * f / 1.08) + 4, class: "tick", "text-anchor": "end" },
                  fmt(ymax * f / 1.08)));
  }
  for (const m of sweep.modes) {
    const pts = rows.filter((r) => r.mode === m).map((r) => `${xs(r.rtt_ms)},${ys(r[metric])}`).join(" ");
    svg.append(el("polyline", { points: pts, fill: "none", stroke: COLORS[m], "stroke-width": 2,
                                "data-mode": m, class: "curve" }));
  }
  if (point) {
    const x = xs(point.rtt_ms);
    svg.append(el("line", { x1: x, x2: x, y1: top, y2: top + H, class: "marker" }));
    svg.append(el("circle", { cx: x, cy: ys(point[metric]), r: 6, fill: COLORS[point.mode],
                              class: "current", "data-metric": metric }));
  }
}

function draw(point) {
  const svg = $("figure");
  svg.replaceChildren();
  chart(svg, 0, "anomalies per 1,000 jobs", "anomalies_per_1000", point);
  chart(svg, 450, "jobs per second (virtual time)", "jobs_per_s", point);
  let x = 50;
  for (const m of sweep.modes) {
    svg.append(el("rect", { x, y: 308, width: 14, height: 4, fill: COLORS[m] }));
    svg.append(el("text", { x: x + 18, y: 314, class: "tick" }, m));
    x += 150;
  }
}

async function compute() {
  if (running || wanted === null) return;
  running = true;
  box.dataset.busy = "true";
  const { m, rtt } = wanted;
  wanted = null;
  try {
    const point = await emqlab.call("rtt_point", m, rtt, JSON.stringify(sweep.config));
    box.dataset.point = JSON.stringify(point);
    $("summary").textContent = point.summary;
    draw(point);
  } catch (e) {
    $("summary").textContent = `error: ${e.message}`;
  } finally {
    running = false;
    box.dataset.busy = wanted === null ? "false" : "true";
    compute();
  }
}

// exact: a preset's RTT; else the slider's position, to 3 significant digits
function changed(exact) {
  const rtt = typeof exact === "number" ? exact : Number(fmt(rttOf(Number($("rtt").value))));
  $("rtt-value").textContent = fmt(rtt);
  wanted = { m: mode(), rtt };
  box.dataset.busy = "true";
  $("summary").textContent = `computing a timed run of ${wanted.m} at ${fmt(rtt)} ms…`;
  compute();
}

const started = performance.now();
const tick = setInterval(() => { $("clock").textContent = `${Math.round((performance.now() - started) / 1000)} s`; }, 500);
(async () => {
  sweep = await (await fetch("sweep.json")).json();
  $("sweep-command").textContent = sweep.command;
  for (const [name, ms] of Object.entries(sweep.presets).sort((a, b) => a[1] - b[1])) {
    const b = document.createElement("button");
    b.textContent = `${name} ${ms} ms`;
    b.dataset.rtt = ms;
    b.onclick = () => { $("rtt").value = valueOf(ms); changed(ms); };
    $("presets").append(b, " ");
  }
  $("rtt").value = valueOf(1);
  $("rtt-value").textContent = "1";
  draw(null);
  emqlab.start(() => {
    clearInterval(tick);
    $("loading").hidden = true;
    $("rtt").addEventListener("change", () => changed());
    $("rtt").addEventListener("input", () => { $("rtt-value").textContent = fmt(rttOf(Number($("rtt").value))); });
    for (const i of document.querySelectorAll("#slider input[type=radio], #fetch-next")) {
      i.onchange = () => changed(Number($("rtt-value").textContent));
    }
    changed(1);
  });
})();
