/* phasemeter band panels: inline SVG from the rows `query bands --format json`
   prints. No library: a panel is a few <path>s, so a 20-cell grid over a week
   redraws in milliseconds and the page needs nothing from the network.
   Throughput: the slow tail is the LOW end (p1), so p1 is the dashed red
   line labelled "slow tail p1"; latency rows (ttft_*) flip to p99. */
var PMBands = (function () {
  "use strict";
  var W = 300, H = 170, ML = 52, MR = 10, MT = 26, MB = 24;
  var SPECS = {
    throughput: {phases: [["prefill", "prefill tokens/s"], ["decode", "decode tokens/s"]],
      band: ["p5", "p95"], outer: ["p1", "p99"], median: "p50", tail: "p1", tailLabel: "slow tail p1",
      pcts: ["p1", "p5", "p50", "p95", "p99"]},
    latency: {phases: [["ttft", "TTFT s"], ["tpot", "TPOT s"]],
      band: ["p50", "p90"], outer: null, median: "p50", tail: "p99", tailLabel: "slow tail p99",
      pcts: ["p50", "p90", "p99"]}
  };

  function spec(rows) { return rows.length && rows[0].ttft_p50 !== undefined ? SPECS.latency : SPECS.throughput; }

  function fmt(v) {
    if (v === null || v === undefined || isNaN(v)) return "–";
    var a = Math.abs(v);
    return a >= 100 ? Math.round(v).toLocaleString("en-US") : a >= 1 ? v.toFixed(2) : v.toPrecision(4);
  }

  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; });
  }

  function ms(t) { return Date.parse(t); }

  // Runs of consecutive points; a missing step (or a null) breaks the line
  // instead of bridging the gap.
  function segments(rows, col, step, sx, sy) {
    var segs = [], cur = [], prev = null;
    rows.forEach(function (r) {
      var v = r[col], t = ms(r.t);
      if (v === null || v === undefined || (prev !== null && t - prev > step * 1500)) {
        if (cur.length) segs.push(cur);
        cur = [];
      }
      if (v !== null && v !== undefined) cur.push([sx(t), sy(v)]);
      prev = t;
    });
    if (cur.length) segs.push(cur);
    return segs;
  }

  function d(pts) {
    return pts.map(function (p, i) { return (i ? "L" : "M") + p[0].toFixed(1) + "," + p[1].toFixed(1); }).join("");
  }

  function area(rows, lo, hi, step, sx, sy) {
    var a = segments(rows, hi, step, sx, sy), b = segments(rows, lo, step, sx, sy), out = "";
    for (var i = 0; i < Math.min(a.length, b.length); i++) out += d(a[i].concat(b[i].slice().reverse())) + "Z";
    return out;
  }

  function abandoned(rows, phase) {
    if (!rows.length || rows[0].abandoned === undefined) return "";
    var col = (phase === "prefill" || phase === "ttft") ? "abandoned_prefill" : "abandoned_decode";
    var where = col === "abandoned_prefill" ? "before 1st token" : "in decode";
    var total = 0, split = 0, known = true;
    rows.forEach(function (r) { total += r.abandoned || 0; if (r[col] === null) known = false; else split += r[col] || 0; });
    if (!total) return "";
    return "abandoned " + total.toLocaleString("en-US") + (known ? " (" + split + " " + where + ")" : "");
  }

  /* One panel. rows: sorted by t, one model × bucket. tlo/thi: ms; step: s. */
  function panel(rows, phase, unit, sp, tlo, thi, step, title) {
    var P = function (p) { return phase + "_" + p; };
    var cols = [P(sp.band[0]), P(sp.band[1]), P(sp.median), P(sp.tail)].concat(sp.outer ? [P(sp.outer[1])] : []);
    var ymax = 0, n = 0;
    rows.forEach(function (r) {
      n += r[P("n")] || 0;
      cols.forEach(function (c) { if (r[c] !== null && r[c] > ymax) ymax = r[c]; });
    });
    ymax = ymax > 0 ? ymax * 1.08 : 1;
    var pw = W - ML - MR, ph = H - MT - MB, span = Math.max(thi - tlo, 1);
    var sx = function (t) { return ML + (t - tlo) / span * pw; };
    var sy = function (v) { return MT + ph - Math.min(v / ymax, 1) * ph; };
    var nText = "n=" + n.toLocaleString("en-US");
    // A long title (model · phase · bucket) would run under the n label: squeeze
    // it into the room left (about 6.6 px a character at 11 px bold, 5.8 for n).
    var room = pw - nText.length * 5.8 - 8;
    var fit = title.length * 6.6 > room ? ' textLength="' + room.toFixed(0) + '" lengthAdjust="spacingAndGlyphs"' : "";
    var o = ['<svg class="panel" width="' + W + '" height="' + H + '" viewBox="0 0 ' + W + " " + H + '" role="img">',
      '<text x="' + ML + '" y="14" class="pt"' + fit + ">" + esc(title) + "</text>",
      '<text x="' + (W - MR) + '" y="14" class="pn" text-anchor="end">' + nText + "</text>",
      '<line x1="' + ML + '" y1="' + (MT + ph) + '" x2="' + (W - MR) + '" y2="' + (MT + ph) + '" class="ax"/>',
      '<line x1="' + ML + '" y1="' + MT + '" x2="' + ML + '" y2="' + (MT + ph) + '" class="ax"/>'];
    var ab = abandoned(rows, phase);
    if (ab) o.push('<text x="' + (W - MR - 2) + '" y="' + (MT + 9) + '" class="pn" text-anchor="end">' + esc(ab) + "</text>");
    [0, 0.5, 1].forEach(function (f) {
      o.push('<text x="' + (ML - 4) + '" y="' + (sy(ymax * f) + 3).toFixed(1) + '" class="tk" text-anchor="end">' + fmt(ymax * f) + "</text>");
    });
    o.push('<text x="12" y="' + (MT + ph / 2) + '" class="tk" transform="rotate(-90 12 ' + (MT + ph / 2) + ')" text-anchor="middle">' + esc(unit) + "</text>");
    if (sp.outer) o.push('<path d="' + area(rows, P(sp.outer[0]), P(sp.outer[1]), step, sx, sy) + '" class="outer"/>');
    o.push('<path d="' + area(rows, P(sp.band[0]), P(sp.band[1]), step, sx, sy) + '" class="band"/>');
    segments(rows, P(sp.median), step, sx, sy).forEach(function (s) { o.push('<path d="' + d(s) + '" class="med"/>'); });
    var tail = segments(rows, P(sp.tail), step, sx, sy);
    tail.forEach(function (s) { o.push('<path d="' + d(s) + '" class="tail"/>'); });
    if (tail.length) {
      var last = tail[tail.length - 1][tail[tail.length - 1].length - 1];
      o.push('<text x="' + Math.min(last[0], W - MR - 2).toFixed(1) + '" y="' + Math.min(last[1] + 11, MT + ph - 2).toFixed(1) +
        '" class="tl" text-anchor="end">' + sp.tailLabel + "</text>");
    }
    var day = function (t) { return new Date(t).toISOString().slice(5, 16).replace("T", " "); };
    o.push('<text x="' + ML + '" y="' + (H - 6) + '" class="tk">' + day(tlo) + "</text>");
    o.push('<text x="' + (W - MR) + '" y="' + (H - 6) + '" class="tk" text-anchor="end">' + day(thi) + "</text></svg>");
    return o.join("");
  }

  /* Tooltip text of the step nearest to x (px inside the panel). */
  function tip(rows, phase, sp, tlo, thi, x, title) {
    if (!rows.length) return "";
    var t = tlo + (x - ML) / (W - ML - MR) * (thi - tlo), best = rows[0];
    rows.forEach(function (r) { if (Math.abs(ms(r.t) - t) < Math.abs(ms(best.t) - t)) best = r; });
    var lines = [best.t.replace("T", " ").replace("Z", " UTC"), title, "n=" + best[phase + "_n"]];
    sp.pcts.forEach(function (p) { lines.push((p === sp.tail ? "slow " : "") + p + "=" + fmt(best[phase + "_" + p])); });
    return lines.join("\n");
  }

  /* Rows grouped per "model\u0000bucket", each sorted by t. */
  function cells(rows) {
    var out = {};
    rows.forEach(function (r) { (out[r.model + "\u0000" + r.input_bucket] = out[r.model + "\u0000" + r.input_bucket] || []).push(r); });
    Object.keys(out).forEach(function (k) { out[k].sort(function (a, b) { return ms(a.t) - ms(b.t); }); });
    return out;
  }

  /* The grid, as in the PNG: one row per model × phase, one column per input
     bucket (bucketOrder first: the edges' order). Returns its panels. */
  function grid(el, cellMap, bucketOrder, sp, prefillLabel) {
    var keys = Object.keys(cellMap), models = [], seen = [], order = bucketOrder || [], panels = [];
    keys.forEach(function (k) {
      var p = k.split("\u0000");
      if (models.indexOf(p[0]) < 0) models.push(p[0]);
      if (seen.indexOf(p[1]) < 0) seen.push(p[1]);
    });
    models.sort();
    var buckets = order.filter(function (b) { return seen.indexOf(b) >= 0; })
      .concat(seen.filter(function (b) { return order.indexOf(b) < 0; }));
    if (!keys.length) { el.innerHTML = "<p>(no generations in this window)</p>"; return panels; }
    var t = document.createElement("table");
    t.className = "grid";
    t.innerHTML = "<tr><th></th>" + buckets.map(function (b) { return "<th>" + esc(b) + "</th>"; }).join("") + "</tr>";
    models.forEach(function (m) {
      sp.phases.forEach(function (ph) {
        var label = ph[0] === "prefill" && prefillLabel ? prefillLabel : ph[0], tr = t.insertRow();
        tr.innerHTML = "<th>" + esc(m) + "<br>" + esc(label) + "</th>";
        buckets.forEach(function (b) {
          var td = tr.insertCell();
          panels.push({td: td, key: m + "\u0000" + b, phase: ph[0], unit: ph[1].replace("prefill", label),
            title: m + " · " + label + " · " + b});
          td.dataset.cell = panels.length - 1;
        });
      });
    });
    el.innerHTML = "";
    el.appendChild(t);
    return panels;
  }

  function draw(panels, cellMap, sp, tlo, thi, step) {
    panels.forEach(function (p) {
      var rows = cellMap[p.key] || [];
      p.td.innerHTML = rows.length ? panel(rows, p.phase, p.unit, sp, tlo, thi, step, p.title) : "";
    });
  }

  /* One listener for the whole grid: the step under the pointer. ctx() gives
     {panels, cells, spec, lo, hi} as they are now (the live page changes them). */
  function hover(el, tipEl, ctx) {
    el.addEventListener("mousemove", function (e) {
      var td = e.target.closest && e.target.closest("td[data-cell]"), c = ctx();
      var svg = td && td.querySelector("svg");
      if (!svg || !c) { tipEl.style.display = "none"; return; }
      var p = c.panels[td.dataset.cell];
      tipEl.textContent = tip(c.cells[p.key] || [], p.phase, c.spec, c.lo, c.hi,
        e.clientX - svg.getBoundingClientRect().left, p.title);
      tipEl.style.display = "block"; tipEl.style.left = (e.clientX + 12) + "px"; tipEl.style.top = (e.clientY + 12) + "px";
    });
    el.addEventListener("mouseleave", function () { tipEl.style.display = "none"; });
  }

  return {spec: spec, panel: panel, tip: tip, cells: cells, grid: grid, draw: draw, hover: hover,
    fmt: fmt, esc: esc, ms: ms, SPECS: SPECS};
})();
