// offset-journal report: draws the charts as SVG from the JSON data in #report-data.
// Hand-written, no library, no network. Data strings only ever go into textContent.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
                  "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f"];
  const W = 960, M = {l: 72, r: 16, t: 12, b: 28};

  function el(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    const t = el("text", Object.assign({x: x, y: y}, attrs || {}), parent);
    t.textContent = s;
    return t;
  }
  function title(parent, s) { el("title", {}, parent).textContent = s; }
  function iso(ms) { return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + "Z"; }
  function num(v) {
    if (v === null || v === undefined) return "-";
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    return String(Math.round(v * 10) / 10);
  }
  function bucketTime(b) { return data.lo + (b + 0.5) * data.bucketMs; }
  function xDomain() {
    let lo = data.lo, hi = data.hi;
    for (const r of data.runs) {
      if (r.start !== null) lo = Math.min(lo, r.start);
      if (r.end !== null) hi = Math.max(hi, r.end);
    }
    if (hi <= lo) hi = lo + 1000;
    return [lo, hi];
  }
  const DOM = xDomain();
  function sx(ms) { return M.l + (ms - DOM[0]) / (DOM[1] - DOM[0]) * (W - M.l - M.r); }

  function frame(id, height, label) {
    const host = document.getElementById(id);
    const svg = el("svg", {viewBox: "0 0 " + W + " " + height, width: "100%",
                           "data-chart": id, role: "img"}, host);
    title(svg, label);
    // time axis
    const y = height - M.b;
    el("line", {x1: M.l, x2: W - M.r, y1: y, y2: y, class: "axis"}, svg);
    for (let i = 0; i <= 5; i++) {
      const ms = DOM[0] + (DOM[1] - DOM[0]) * i / 5, x = sx(ms);
      el("line", {x1: x, x2: x, y1: M.t, y2: y, class: "grid"}, svg);
      text(svg, x, y + 16, iso(ms).slice(5, 19), {"text-anchor": i === 0 ? "start" : i === 5
        ? "end" : "middle", class: "tick"});
    }
    return svg;
  }

  function yScale(svg, height, max, unit) {
    const top = max > 0 ? max * 1.05 : 1, y0 = height - M.b;
    const sy = v => y0 - (v / top) * (y0 - M.t);
    for (let i = 0; i <= 4; i++) {
      const v = top * i / 4;
      el("line", {x1: M.l, x2: W - M.r, y1: sy(v), y2: sy(v), class: "grid"}, svg);
      text(svg, M.l - 6, sy(v) + 4, num(v), {"text-anchor": "end", class: "tick"});
    }
    text(svg, M.l + 4, M.t + 10, unit, {class: "unit"});
    return sy;
  }

  // The usual time between a line's points: batches may come less often than buckets.
  function spacing(pts) {
    const gaps = [];
    for (let i = 1; i < pts.length; i++) gaps.push(pts[i][0] - pts[i - 1][0]);
    gaps.sort((a, b) => a - b);
    return gaps.length ? gaps[Math.floor(gaps.length / 2)] : 0;
  }

  // Lines with gaps where a value is missing or the query ran no batch for much longer
  // than usual (between runs): one path, "M" after each gap.
  function line(svg, pts, sy, color, name) {
    let d = "", pen = false, last = -Infinity;
    const broken = 3 * Math.max(data.bucketMs, spacing(pts));
    for (const [ms, v] of pts) {
      if (v === null || v === undefined) { pen = false; continue; }
      if (ms - last > broken) pen = false;
      d += (pen ? "L" : "M") + sx(ms).toFixed(1) + "," + sy(v).toFixed(1);
      pen = true;
      last = ms;
    }
    if (!d) return;
    const p = el("path", {d: d, fill: "none", stroke: color, "stroke-width": 1.6,
                          class: "series"}, svg);
    title(p, name);
  }

  function legend(id, items) {
    const host = document.getElementById(id);
    const box = document.createElement("div");
    box.className = "legend";
    for (const [color, label] of items) {
      const s = document.createElement("span");
      const sw = document.createElement("i");
      sw.style.background = color;
      s.appendChild(sw);
      s.appendChild(document.createTextNode(label));
      box.appendChild(s);
    }
    host.appendChild(box);
  }

  function timeline() {
    const lanes = [];
    for (const r of data.runs) if (!lanes.includes(r.qid)) lanes.push(r.qid);
    const laneH = 22, height = M.t + (lanes.length + 1) * laneH + M.b + 8;
    const svg = frame("timeline", height, "runs and restarts of " + data.query);
    lanes.forEach((q, i) => text(svg, M.l - 6, M.t + i * laneH + 15, q.slice(0, 8),
                                 {"text-anchor": "end", class: "tick"}));
    for (const r of data.runs) {
      const i = lanes.indexOf(r.qid), start = r.start ?? DOM[0], end = r.end ?? DOM[1];
      const bar = el("rect", {x: sx(start), y: M.t + i * laneH + 3,
                              width: Math.max(2, sx(end) - sx(start)), height: laneH - 8,
                              class: "run" + (r.failed ? " failed" : r.terminated ? "" : " open")},
                     svg);
      title(bar, "run " + r.id + " (checkpoint " + r.qid + ")\n" + iso(start) + " .. " +
            (r.end === null ? "?" : iso(end)) + "\n" + r.batches + " batches" +
            (r.first === null ? "" : " (" + r.first + ".." + r.last + ")") +
            (r.failed ? "\nFAILED" : r.terminated ? "" : "\nno termination seen") +
            (r.host ? "\nhost " + r.host : ""));
    }
    const fy = M.t + lanes.length * laneH;
    text(svg, M.l - 6, fy + 15, "findings", {"text-anchor": "end", class: "tick"});
    for (const m of data.restarts) {
      const x = sx(m.at);
      const g = el("g", {class: "restart"}, svg);
      el("line", {x1: x, x2: x, y1: M.t, y2: fy, class: "restart-line"}, g);
      el("path", {d: "M" + (x - 5) + "," + M.t + "L" + (x + 5) + "," + M.t + "L" + x + "," +
                  (M.t + 7) + "Z", class: "restart-mark"}, g);
      title(g, m.label + " at " + iso(m.at) + "\nrun " + m.run + " (checkpoint " + m.qid + ")" +
            (m.plan ? "\nplan: " + m.plan : ""));
    }
    for (const f of data.findings) {
      if (f.at === null) continue;
      const x = sx(Math.min(Math.max(f.at, DOM[0]), DOM[1])), y = fy + 11;
      const d = el("path", {d: "M" + x + "," + (y - 6) + "L" + (x + 6) + "," + y + "L" + x + "," +
                            (y + 6) + "L" + (x - 6) + "," + y + "Z",
                            class: "finding-mark " + (f.defect ? "defect" : "ok")}, svg);
      title(d, f.kind + ": " + f.message);
    }
  }

  function lagChart() {
    const series = data.top.map((p, i) => ({
      name: p.topic + "-" + p.partition, color: COLORS[i % COLORS.length],
      pts: p.points.map(q => [bucketTime(q[0]), q[1]])}));
    let max = 0;
    for (const s of series) for (const [, v] of s.pts) if (v !== null) max = Math.max(max, v);
    const band = data.others ? data.others.points : [];
    for (const [, , hi] of band) if (hi !== null) max = Math.max(max, hi);
    const peak = data.batches.map(q => [bucketTime(q[0]), q[6]]);
    for (const [, v] of peak) if (v !== null) max = Math.max(max, v);
    const height = 260, svg = frame("lag", height, "lag per partition");
    const sy = yScale(svg, height, max, "records behind");
    const ok = band.filter(q => q[1] !== null && q[2] !== null);
    if (ok.length) {
      const upper = ok.map(q => sx(bucketTime(q[0])).toFixed(1) + "," + sy(q[2]).toFixed(1));
      const lower = ok.slice().reverse().map(
        q => sx(bucketTime(q[0])).toFixed(1) + "," + sy(q[1]).toFixed(1));
      const b = el("path", {d: "M" + upper.join("L") + "L" + lower.join("L") + "Z",
                            class: "band"}, svg);
      title(b, "the other " + data.others.partitions + " partitions: lowest to highest lag");
    }
    for (const s of series) line(svg, s.pts, sy, s.color, s.name);
    const hasPeak = peak.some(q => q[1] !== null);
    if (hasPeak) {
      line(svg, peak, sy, "#000", "highest lag of any partition (Spark)");
      svg.lastChild.setAttribute("stroke-dasharray", "4 3");
    }
    const items = series.map(s => [s.color, s.name]);
    if (hasPeak) items.push(["#000", "peak, any partition (Spark's maxOffsetsBehindLatest)"]);
    if (data.others) items.push(["#c7c7c7", "other " + data.others.partitions + " partitions"]);
    legend("lag", items);
  }

  function offsetsChart() {
    const host = document.getElementById("offsets");
    if (!data.top.length) return;
    const pick = document.createElement("select");
    pick.id = "offsets-partition";
    data.top.forEach((p, i) => {
      const o = document.createElement("option");
      o.value = String(i);
      o.textContent = p.topic + "-" + p.partition;
      pick.appendChild(o);
    });
    host.appendChild(pick);
    const area = document.createElement("div");
    host.appendChild(area);
    area.id = "offsets-chart";
    function draw() {
      area.textContent = "";
      const p = data.top[Number(pick.value)];
      let lo = Infinity, hi = -Infinity;
      for (const q of p.points) for (const v of [q[2], q[3]]) {
        if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      }
      if (lo === Infinity) { lo = 0; hi = 1; }
      const height = 220, svg = frame("offsets-chart", height, "offsets of " + pick.value);
      const span = Math.max(1, hi - lo);
      const sy0 = yScale(svg, height, span, "offset - " + num(lo));
      const sy = v => sy0(v - lo);
      line(svg, p.points.map(q => [bucketTime(q[0]), q[2]]), sy, COLORS[0], "end offset");
      line(svg, p.points.map(q => [bucketTime(q[0]), q[3]]), sy, COLORS[1], "latest offset");
    }
    pick.addEventListener("change", draw);
    draw();
    legend("offsets", [[COLORS[0], "end offset (read up to)"],
                       [COLORS[1], "latest offset (newest in Kafka)"]]);
  }

  function batchCharts() {
    const b = data.batches;
    let maxRows = 0, maxDur = 0, maxFresh = 0;
    for (const q of b) {
      maxRows = Math.max(maxRows, q[2]);
      if (q[4] !== null) maxDur = Math.max(maxDur, q[4]);
      if (q[5] !== null) maxFresh = Math.max(maxFresh, q[5]);
    }
    let svg = frame("rows", 200, "input rows per bucket");
    let sy = yScale(svg, 200, maxRows, "input rows");
    const bw = Math.max(1, sx(data.lo + data.bucketMs) - sx(data.lo) - 1);
    for (const q of b) {
      const x = sx(data.lo + q[0] * data.bucketMs), y = sy(q[2]);
      const r = el("rect", {x: x, y: y, width: bw, height: Math.max(0, 200 - M.b - y),
                            class: "bar"}, svg);
      title(r, iso(data.lo + q[0] * data.bucketMs) + ": " + q[1] + " batches, " + q[2] +
            " input rows");
    }
    svg = frame("durations", 200, "batch durations");
    sy = yScale(svg, 200, maxDur, "ms");
    line(svg, b.map(q => [bucketTime(q[0]), q[3]]), sy, COLORS[0], "mean duration");
    line(svg, b.map(q => [bucketTime(q[0]), q[4]]), sy, COLORS[1], "longest duration");
    legend("durations", [[COLORS[0], "mean"], [COLORS[1], "longest"]]);
    if (b.some(q => q[5] !== null)) {
      svg = frame("freshness", 200, "freshness");
      sy = yScale(svg, 200, maxFresh, "seconds");
      line(svg, b.map(q => [bucketTime(q[0]), q[5]]), sy, COLORS[2], "freshness");
    } else {
      const p = document.createElement("p");
      p.className = "note";
      p.textContent = "No event times journaled (the query has no withWatermark): " +
                      "no freshness to show.";
      document.getElementById("freshness").appendChild(p);
    }
  }

  timeline();
  lagChart();
  offsetsChart();
  batchCharts();
  document.body.setAttribute("data-rendered", "yes");
})();
