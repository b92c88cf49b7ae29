/* Per P/D pool, from /api/pools (`query bands --by`, `latency --by`): a row per
   model · pool, its own phase's tokens/s, then the KV transfer's seconds. */
var PMPools = (function () {
  "use strict";
  var B = PMBands, L = B.SPECS.latency;
  var KV = Object.assign({}, L, {phases: [["kv_transfer", "KV transfer s"]]});

  function phaseOf(by) { return by === "prefill_replica" ? "prefill" : "decode"; }

  // kv rows: the transfer's columns only (a latency row's abandoned counts are not its).
  function cells(rows, by, kv) {
    return B.cells(rows.filter(function (r) { return !kv || r.kv_transfer_n > 0; }).map(function (r) {
      var o = {};
      Object.keys(r).forEach(function (k) { if (!kv || /^kv_transfer_/.test(k)) o[k] = r[k]; });
      o.t = r.t; o.model = r.model + " · " + r[by]; o.input_bucket = r.input_bucket;
      return o;
    }));
  }

  function view(el, doc) {
    var ph = phaseOf(doc.by), T = B.SPECS.throughput;
    var v = {b: {spec: Object.assign({}, T, {phases: T.phases.filter(function (p) { return p[0] === ph; })})},
      k: {spec: KV}, step: doc.step_s};
    el.innerHTML = '<p class="note" id="pools-note">' + B.esc(doc.pools.length ? ph + " pools: " + doc.pools.join(", ") : doc.note) +
      '</p><div id="pools-b"></div><div id="pools-k"></div>';
    [["b", doc.bands, false], ["k", doc.latency, true]].forEach(function (g) {
      var p = v[g[0]];
      p.cells = cells(g[1], doc.by, g[2]);
      p.panels = doc.pools.length ? B.grid(el.querySelector("#pools-" + g[0]), p.cells, doc.bucket_order, p.spec) : [];
    });
    return v;
  }

  function draw(v, lo, hi) {
    [v.b, v.k].forEach(function (p) { B.draw(p.panels, p.cells, p.spec, lo, hi, v.step); });
  }

  return {view: view, draw: draw, cells: cells};
})();
