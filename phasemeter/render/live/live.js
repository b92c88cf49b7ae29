/* The live page: state in the URL, data from the worker's own endpoints.
   Bands come from /api/bands (the CLI's `query bands` code); after the first
   load only the steps since the last one are asked for and appended, so a
   refresh costs the worker one short query instead of the whole window.
   SLO attainment comes from /api/slo (`phasemeter slo`'s code) with each load
   and every 30 s: its headline is the whole window, so it is asked again whole. Per pool:
   /api/pools (pools.js), when chosen. */
(function () {
  "use strict";
  var B = PMBands, $ = function (id) { return document.getElementById(id); };
  var WINDOWS = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400, "7d": 604800};
  var REFRESH_MS = 5000, ALERTS_EVERY = 6;  // alerts run the rules' queries: every 30 s is enough
  var SLO_EVERY_MS = 30000;  // as alerts: attainment over the window moves slowly
  var state = readURL(), data = null, ticks = 0, busy = false, drawnOnce = false, panels = [];
  var sloDoc = null, sloAt = 0, sloV = {panels: [], cells: {}};
  var poolsAt = 0, poolsV = null;

  function readURL() {
    var q = new URLSearchParams(location.search);
    return {win: q.get("win") || "1h", from: q.get("from") || "", to: q.get("to") || "now",
      step: q.get("step") || "auto", model: q.get("model") || "", bucket: q.get("bucket") || "",
      stuck: Number(q.get("stuck") || 30), pools: q.get("pools") || ""};
  }

  // Only what differs from the defaults goes in the URL: links stay short.
  function writeURL() {
    var q = new URLSearchParams();
    if (state.win !== "1h") q.set("win", state.win);
    if (state.win === "custom") { q.set("from", state.from); q.set("to", state.to || "now"); }
    if (state.step !== "auto") q.set("step", state.step);
    if (state.model) q.set("model", state.model);
    if (state.bucket) q.set("bucket", state.bucket);
    if (state.pools) q.set("pools", state.pools);
    if (state.stuck !== 30) q.set("stuck", String(state.stuck));
    var s = q.toString();
    history.pushState(null, "", location.pathname + (s ? "?" + s : ""));
  }

  function live() { return state.win !== "custom" || state.to === "now" || state.to === ""; }
  function span() { return state.win === "custom" ? null : WINDOWS[state.win] * 1000; }

  function api(over, route) {
    var q = new URLSearchParams(), p = {from: state.win === "custom" ? state.from : "-" + state.win,
      to: state.win === "custom" ? (state.to || "now") : "now", step: state.step, model: state.model, bucket: state.bucket};
    Object.keys(over || {}).forEach(function (k) { p[k] = over[k]; });
    Object.keys(p).forEach(function (k) { if (p[k]) q.set(k, p[k]); });
    return "api/" + (route || "bands") + "?" + q.toString();
  }

  function get(url) {
    return fetch(url, {cache: "no-store"}).then(function (r) {
      return r.json().then(function (doc) {
        if (!r.ok) throw new Error(doc.error || ("HTTP " + r.status));
        return doc;
      });
    });
  }

  function showError(e) { var el = $("error"); el.textContent = e ? String(e.message || e) : ""; el.hidden = !e; }

  function lastT(rows) { return rows.reduce(function (m, r) { return Math.max(m, B.ms(r.t)); }, 0) || null; }

  function load() {
    busy = true;
    return get(api()).then(function (doc) {
      data = {doc: doc, cells: B.cells(doc.rows), last: lastT(doc.rows)};
      fillSelect("model", doc.models_in_window, state.model);
      fillSelect("bucket", doc.bucket_order, state.bucket);
      $("meta").textContent = doc.path + " path, step " + doc.step_s + "s" + (doc.step_rule ? " (" + doc.step_rule + ")" : "");
      showError(null);
      build();
      draw();
      return Promise.all([slo(), pools()]);
    }).catch(showError).then(function () { busy = false; });
  }

  // The steps since the last one seen (that one again: it may have grown).
  function append() {
    if (!data || !live()) return Promise.resolve();
    var from = data.last ? new Date(data.last).toISOString() : (state.win === "custom" ? state.from : "-" + state.win);
    return get(api({from: from, step: data.doc.step_s + "s", path: data.doc.path})).then(function (doc) {
      var known = Object.keys(data.cells).length, fresh = B.cells(doc.rows), lo = span() ? Date.now() - span() : -Infinity;
      Object.keys(fresh).forEach(function (k) {
        var kept = (data.cells[k] || []).filter(function (r) { return B.ms(r.t) < B.ms(fresh[k][0].t); });
        data.cells[k] = kept.concat(fresh[k]);
      });
      Object.keys(data.cells).forEach(function (k) {  // slide the window: drop what fell off its start
        data.cells[k] = data.cells[k].filter(function (r) { return B.ms(r.t) >= lo; });
        if (!data.cells[k].length) delete data.cells[k];
      });
      data.last = lastT(doc.rows) || data.last;
      if (Object.keys(data.cells).length !== known) build();  // a new cell: the grid changes shape
      draw();
    });
  }

  // Steps of whole minutes (at least the bands' step): per 15 s an attainment
  // is a handful of generations, and whole minutes let the per-minute counts answer.
  function slo() {
    sloAt = Date.now();
    return get(api({step: Math.max(60, Math.ceil(data.doc.step_s / 60) * 60) + "s"}, "slo")).then(function (doc) {
      var r = range();
      sloDoc = doc;
      sloV = B.sloView($("slo"), doc, data.doc.bucket_order, r[0], r[1]);
    }, function (e) {  // its own line: the bands above stay usable
      sloDoc = null; sloV = {panels: [], cells: {}};
      $("slo").innerHTML = '<p class="error">SLO attainment: ' + B.esc(e.message || e) + "</p>";
    });
  }

  // Off unless chosen: it reads raw rows twice (rollups keep no pools).
  function pools() {
    $("pools").hidden = !state.pools;
    if (!state.pools) return Promise.resolve(poolsV = null);
    poolsAt = Date.now();
    return get(api({step: data.doc.step_s + "s", by: state.pools}, "pools")).then(function (doc) {
      var r = range();
      PMPools.draw(poolsV = PMPools.view($("pools-body"), doc), r[0], r[1]);
    }, function (e) {
      poolsV = null;
      $("pools-body").innerHTML = '<p class="error">per pool: ' + B.esc(e.message || e) + "</p>";
    });
  }

  function fillSelect(id, values, chosen) {
    var el = $(id), seen = {};
    el.innerHTML = '<option value="">all</option>';
    (values || []).concat(chosen ? chosen.split(",") : []).forEach(function (v) {
      if (seen[v]) return;
      seen[v] = 1;
      var o = document.createElement("option");
      o.value = o.textContent = v;
      el.appendChild(o);
    });
    el.value = chosen;
  }

  // The grid's shape changes only with the set of cells; bands.js builds it.
  function build() {
    panels = B.grid($("grid"), data.cells, data.doc.bucket_order, B.SPECS.throughput);
  }

  function range() {
    if (span()) return [Date.now() - span(), Date.now()];
    return [B.ms(data.doc.start), live() ? Date.now() : B.ms(data.doc.end)];  // custom "to now" grows
  }

  function draw() {
    var r = range();
    B.draw(panels, data.cells, B.SPECS.throughput, r[0], r[1], data.doc.step_s);
    if (sloDoc) B.sloDraw(sloV, r[0], r[1]);  // the same time axis as the bands
    if (poolsV) PMPools.draw(poolsV, r[0], r[1]);
    if (!drawnOnce && panels.length) {  // time to first chart, shown to whoever measures it
      drawnOnce = true;
      document.documentElement.dataset.firstChartMs = String(Math.round(performance.now()));
    }
    $("status").textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC" + (live() ? " · every 5 s" : "");
  }

  function row(cells, cls) { return "<tr" + (cls ? ' class="' + cls + '"' : "") + ">" + cells.map(function (c) { return "<td>" + c + "</td>"; }).join("") + "</tr>"; }

  function health() {
    return get("health").then(function (h) {
      var paused = h.paused_reason ? '<span class="red">paused: ' + B.esc(h.paused_reason) + "</span>" : '<span class="ok">' + B.esc(h.status) + "</span>";
      $("health").querySelector(".body").innerHTML = "<table>" + [
        ["status", paused], ["consumed", h.consumed], ["stored", h.accepted], ["dead-lettered", h.rejected],
        ["store retries", h.store_retries], ["lag", h.lag == null ? "not known yet" : h.lag + " records"],
        ["uptime", Math.round(h.uptime_s) + " s"]].map(function (c) { return row([c[0], String(c[1])]); }).join("") + "</table>";
    });
  }

  function inflight() {
    return get("inflight").then(function (v) {
      var rows = v.in_flight.map(function (c) {
        var old = c.oldest_age_s > state.stuck;
        return row([B.esc(c.model), B.esc(c.input_bucket), c.phase, String(c.in_flight), c.oldest_age_s.toFixed(1) + " s"], old ? "red" : "");
      });
      $("inflight").querySelector(".body").innerHTML = (rows.length ? "<table><tr><th>model</th><th>bucket</th><th>phase</th><th>n</th><th>oldest</th></tr>" +
        rows.join("") + "</table>" : "(nothing in flight)") + '<div class="note">red: oldest over ' + state.stuck + " s; abandoned after " + v.abandon_after_s + " s</div>";
    });
  }

  function alerts() {
    return get("api/alerts").then(function (a) {
      var other = {}, rows = [];
      a.results.forEach(function (r) {
        if (r.state === "firing") {
          var rb = /^https?:/.test(r.runbook_url) ? '<a href="' + B.esc(r.runbook_url) + '">runbook</a>' : B.esc(r.runbook_url);
          rows.push(row(['<span class="red">firing</span>', B.esc(r.rule), B.esc(r.model), B.esc(r.input_bucket), r.change_pct + " %", rb]));
        } else other[r.state] = (other[r.state] || 0) + 1;
      });
      var rest = Object.keys(other).map(function (s) { return other[s] + " " + B.esc(s); }).join(", ");
      $("alerts").querySelector(".body").innerHTML = (rows.length ? "<table>" + rows.join("") + "</table>" : '<span class="ok">nothing firing</span>') +
        (rest ? '<div class="note">' + rest + "</div>" : "");
    });
  }

  function tick() {
    if (document.visibilityState !== "visible" || busy) return;  // a hidden tab costs the worker nothing
    busy = true;
    var jobs = [health(), inflight(), append()];
    if (ticks++ % ALERTS_EVERY === 0) jobs.push(alerts());
    if (data && live() && Date.now() - sloAt >= SLO_EVERY_MS) jobs.push(slo());
    if (data && live() && state.pools && Date.now() - poolsAt >= SLO_EVERY_MS) jobs.push(pools());
    Promise.all(jobs).catch(showError).then(function () { busy = false; });
  }

  function syncControls() {
    $("win").value = state.win; $("step").value = state.step; $("pools-by").value = state.pools;
    $("custom").hidden = state.win !== "custom"; $("from").value = state.from; $("to").value = state.to;
  }

  function changed() {
    state.win = $("win").value; state.step = $("step").value; state.model = $("model").value; state.bucket = $("bucket").value;
    state.pools = $("pools-by").value;
    state.from = $("from").value.trim(); state.to = $("to").value.trim() || "now";
    $("custom").hidden = state.win !== "custom";
    if (state.win === "custom" && !state.from) return;  // wait for a start time and "apply"
    writeURL();
    load();
  }

  ["win", "step", "model", "bucket", "pools-by"].forEach(function (id) { $(id).addEventListener("change", changed); });
  $("apply").addEventListener("click", changed);
  window.addEventListener("popstate", function () { state = readURL(); syncControls(); load(); });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") tick(); else $("status").textContent = "paused (tab hidden)";
  });
  B.hover($("grid"), $("tip"), function () {
    if (!data) return null;
    var r = range();
    return {panels: panels, cells: data.cells, spec: B.SPECS.throughput, lo: r[0], hi: r[1]};
  });
  B.hover($("slo"), $("tip"), function () {
    if (!data || !sloV.panels.length) return null;
    var r = range();
    return {panels: sloV.panels, cells: sloV.cells, tip: B.sloTip, lo: r[0], hi: r[1]};
  });
  window.addEventListener("error", function (e) { showError(e.message); });

  syncControls();
  load().then(function () { busy = false; ticks = 0; tick(); });
  setInterval(tick, REFRESH_MS);
})();
