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

  /* What every panel has: the title, squeezed into the room left of n (about
     6.6 px a character at 11 px bold, 5.8 for n), the axes and the unit. */
  function frame(cls, title, n, unit) {
    var pw = W - ML - MR, ph = H - MT - MB, nText = "n=" + n.toLocaleString("en-US"), room = pw - nText.length * 5.8 - 8;
    var fit = title.length * 6.6 > room ? ' textLength="' + room.toFixed(0) + '" lengthAdjust="spacingAndGlyphs"' : "";
    return ['<svg class="' + cls + '" width="' + W + '" height="' + H + '" viewBox="0 0 ' + W + " " + H + '" role="img">',
      '<text x="' + ML + '" y="14" class="pt"' + fit + ">" + esc(title) + "</text>",
      '<text x="' + (W - MR) + '" y="14" class="pn" text-anchor="end">' + nText + "</text>",
      '<line x1="' + ML + '" y1="' + (MT + ph) + '" x2="' + (W - MR) + '" y2="' + (MT + ph) + '" class="ax"/>',
      '<line x1="' + ML + '" y1="' + MT + '" x2="' + ML + '" y2="' + (MT + ph) + '" class="ax"/>',
      '<text x="12" y="' + (MT + ph / 2) + '" class="tk" transform="rotate(-90 12 ' + (MT + ph / 2) + ')" text-anchor="middle">' + esc(unit) + "</text>"];
  }

  function foot(tlo, thi) {
    var day = function (t) { return new Date(t).toISOString().slice(5, 16).replace("T", " "); };
    return '<text x="' + ML + '" y="' + (H - 6) + '" class="tk">' + day(tlo) + '</text><text x="' + (W - MR) + '" y="' + (H - 6) +
      '" class="tk" text-anchor="end">' + day(thi) + "</text></svg>";
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
    var o = frame("panel", title, n, unit);
    var ab = abandoned(rows, phase);
    if (ab) o.push('<text x="' + (W - MR - 2) + '" y="' + (MT + 9) + '" class="pn" text-anchor="end">' + esc(ab) + "</text>");
    [0, 0.5, 1].forEach(function (f) {
      o.push('<text x="' + (ML - 4) + '" y="' + (sy(ymax * f) + 3).toFixed(1) + '" class="tk" text-anchor="end">' + fmt(ymax * f) + "</text>");
    });
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
    return o.join("") + foot(tlo, thi);
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
      var p = c.panels[td.dataset.cell], x = e.clientX - svg.getBoundingClientRect().left;
      tipEl.textContent = c.tip ? c.tip(c.cells[p.key] || [], p, c.lo, c.hi, x)
        : tip(c.cells[p.key] || [], p.phase, c.spec, c.lo, c.hi, x, p.title);
      tipEl.style.display = "block"; tipEl.style.left = (e.clientX + 12) + "px"; tipEl.style.top = (e.clientY + 12) + "px";
    });
    el.addEventListener("mouseleave", function () { tipEl.style.display = "none"; });
  }

  /* SLO attainment from /api/slo (`phasemeter slo --format json` per step, and
     for the whole window): one row per SLO × model, one column per input
     bucket as in the grid. A panel: attainment per step, the target dashed,
     the steps under it shaded red; in its corner the whole window's attainment
     and the most-missed objective with the phase it burns. */
  function pct(v) { return v === null || v === undefined ? "–" : (v * 100).toFixed(1) + "%"; }

  function burns(w) {
    if (!w || w.attainment === null) return "";
    if (w.burning === "none") return "nothing missed";
    return w.burning === "errors" ? "burns: failed generations" : "most missed " + w.burning_objective + " · burns " + w.burning;
  }

  function sloPanel(rows, p, tlo, thi) {
    var pw = W - ML - MR, ph = H - MT - MB, span = Math.max(thi - tlo, 1), lo = p.ylo, tg = p.target, w = p.whole;
    var step = p.step || span / 1000, sx = function (t) { return ML + (t - tlo) / span * pw; };
    var top = 1 + (1 - lo) * 0.25;  // headroom over 100 % for the whole window's two lines
    var sy = function (v) { return MT + ph - Math.max(0, Math.min((v - lo) / (top - lo), 1)) * ph; };
    var under = w && w.attainment !== null && w.attainment < tg, o = frame("slo", p.title, w ? w.n : 0, "attained");
    [lo, tg].concat(sy(tg) - sy(1) > 10 ? [1] : []).forEach(function (v) {  // 100 % only where it does not hide the target
      o.push('<text x="' + (ML - 4) + '" y="' + (sy(v) + 3).toFixed(1) + '" class="tk" text-anchor="end">' + pct(v) + "</text>");
    });
    rows.forEach(function (r) {
      if (r.attainment === null || r.attainment >= tg) return;
      var x = sx(ms(r.t)), y = sy(tg);
      o.push('<rect x="' + x.toFixed(1) + '" y="' + y.toFixed(1) + '" width="' + Math.max(1, sx(ms(r.t) + step * 1000) - x).toFixed(1) +
        '" height="' + (sy(r.attainment) - y).toFixed(1) + '" class="miss"/>');
    });
    o.push('<line x1="' + ML + '" y1="' + sy(tg).toFixed(1) + '" x2="' + (W - MR) + '" y2="' + sy(tg).toFixed(1) + '" class="tgt"/>');
    segments(rows, "attainment", step, sx, sy).forEach(function (s) {
      o.push(s.length > 1 ? '<path d="' + d(s) + '" class="med"/>' : '<circle cx="' + s[0][0].toFixed(1) + '" cy="' + s[0][1].toFixed(1) + '" r="1.5" class="dot"/>');
    });
    if (w) {
      o.push('<text x="' + (W - MR - 2) + '" y="' + (MT + 8) + '" class="' + (under ? "tl" : "pn") + '" text-anchor="end">' +
        pct(w.attainment) + " attained · target " + pct(tg) + "</text>");
      o.push('<text x="' + (W - MR - 2) + '" y="' + (MT + 19) + '" class="' + (under ? "tl" : "pn") + '" text-anchor="end">' + esc(burns(w)) + "</text>");
    }
    return o.join("") + foot(tlo, thi);
  }

  function sloTip(rows, p, tlo, thi, x) {
    if (!rows.length) return "";
    var t = tlo + (x - ML) / (W - ML - MR) * (thi - tlo), b = rows[0];
    rows.forEach(function (r) { if (Math.abs(ms(r.t) - t) < Math.abs(ms(b.t) - t)) b = r; });
    var lines = [b.t.replace("T", " ").replace("Z", " UTC"), p.title,
      "attained " + pct(b.attainment) + " of n=" + b.n + " (target " + pct(p.target) + ")"];
    Object.keys(b).forEach(function (k) { if (/_miss_share$/.test(k)) lines.push("missed " + k.slice(0, -11) + " " + pct(b[k])); });
    lines.push("failed " + pct(b.failed_share), "burn rate " + fmt(b.burn_rate) + "×");
    if (b.attainment < 1) lines.push(burns(b));
    return lines.join("\n");
  }

  function sloDraw(v, tlo, thi) {
    v.panels.forEach(function (p) {
      var rows = v.cells[p.key] || [];
      p.td.innerHTML = rows.length ? sloPanel(rows, p, tlo, thi) : "";
    });
  }

  /* Builds and draws the attainment rows into el; returns {panels, cells} for
     sloDraw and hover. No SLO declared: the one line saying how to declare one. */
  function sloView(el, doc, bucketOrder, tlo, thi) {
    var v = {panels: [], cells: {}, tip: sloTip}, seen = [], order = bucketOrder || [];
    if (!doc.slos.length) {
      el.innerHTML = '<p class="note">SLO attainment: ' + esc(doc.note || "no SLO is declared") + "</p>";
      return v;
    }
    doc.slos.forEach(function (s) { s.rows.forEach(function (r) { if (seen.indexOf(r.input_bucket) < 0) seen.push(r.input_bucket); }); });
    var buckets = order.filter(function (b) { return seen.indexOf(b) >= 0; })
      .concat(seen.filter(function (b) { return order.indexOf(b) < 0; }));
    var t = document.createElement("table");
    t.className = "sgrid";
    t.innerHTML = "<tr><th></th>" + buckets.map(function (b) { return "<th>" + esc(b) + "</th>"; }).join("") + "</tr>";
    doc.slos.forEach(function (s, i) {
      var m = s.meta, whole = {}, models = [], lo = m.target;
      ((doc.window[i] || {}).rows || []).forEach(function (r) { whole[r.model + "\u0000" + r.input_bucket] = r; });
      s.rows.forEach(function (r) {
        var k = i + "\u0000" + r.model + "\u0000" + r.input_bucket;
        (v.cells[k] = v.cells[k] || []).push(r);
        if (models.indexOf(r.model) < 0) models.push(r.model);
        if (r.attainment !== null && r.attainment < lo) lo = r.attainment;
      });
      lo = Math.max(0, Math.floor(lo * 10 - 0.5) / 10);  // room under the lowest step and the target
      t.insertRow().innerHTML = '<th colspan="' + (buckets.length + 1) + '" class="sh">SLO ' + esc(m.slo) + ": " + esc(m.objectives) +
        " · " + esc(m.path) + " path, step " + (m.step_s ? m.step_s + "s" : "whole window") +
        (s.rows.length ? "" : " · (no generations in scope in this window)") + "</th>";
      models.sort().forEach(function (md) {
        var tr = t.insertRow();
        tr.innerHTML = "<th>" + esc(md) + "<br>" + esc(m.slo) + "</th>";
        buckets.forEach(function (b) {
          var td = tr.insertCell();
          v.panels.push({td: td, key: i + "\u0000" + md + "\u0000" + b, whole: whole[md + "\u0000" + b], target: m.target,
            ylo: lo, step: m.step_s, title: md + " · " + m.slo + " · " + b});
          td.dataset.cell = v.panels.length - 1;
        });
      });
    });
    el.innerHTML = '<p class="note">SLO attainment per step (line) against the target (dashed), red where under it; ' +
      "in the corner the whole window: attained, and the most-missed objective with the phase it burns.</p>";
    el.appendChild(t);
    sloDraw(v, tlo, thi);
    return v;
  }

  return {spec: spec, panel: panel, tip: tip, cells: cells, grid: grid, draw: draw, hover: hover,
    sloView: sloView, sloDraw: sloDraw, sloTip: sloTip, fmt: fmt, esc: esc, ms: ms, SPECS: SPECS};
})();
