/* Usage over time: every [data-usage] block on a page (templates/ui/_usage.html) reads
 * /api/v1/usage for its range and filters (data-agent, data-key, data-model) and draws its
 * charts with GaiaCharts.lines (our own SVG). The range picker redraws at once; with
 * auto-refresh on, it reads again every data-refresh seconds. Every label is textContent. */
(function () {
  "use strict";
  var G = window.Gaia, C = window.GaiaCharts;
  if (!G || !C) return;

  function n(v) { return typeof v === "number" ? v : 0; }
  function pad(v) { return (v < 10 ? "0" : "") + v; }
  function label(iso, bucket) {
    var d = new Date(iso);
    var hm = pad(d.getHours()) + ":" + pad(d.getMinutes());
    if (bucket >= 86400) return (d.getMonth() + 1) + "/" + d.getDate();
    if (bucket >= 3600) return (d.getMonth() + 1) + "/" + d.getDate() + " " + hm;
    return hm;
  }
  function ms(v) {
    if (v === null || v === undefined) return "–";
    return v >= 1000 ? (v / 1000).toFixed(v >= 10000 ? 0 : 1) + " s" : Math.round(v) + " ms";
  }
  function errorsOf(f) {
    var total = 0;
    Object.keys(f.errors || {}).forEach(function (k) { total += f.errors[k]; });
    return total;
  }

  function Usage(root) {
    this.root = root;
    this.range = G.q("[data-usage-range]", root);
    this.custom = G.q("[data-usage-custom]", root);
    this.refresh = G.q("[data-usage-refresh]", root);
    this.status = G.q("[data-usage-status]", root);
    this.every = Math.max(1, Number(root.dataset.refresh || 15)) * 1000;
    this.loads = 0;
    var self = this;
    this.range.addEventListener("change", function () {
      G.show(self.custom, self.range.value === "custom");
      if (self.range.value !== "custom") self.load();
    });
    G.q("[data-usage-apply]", root).addEventListener("click", function () { self.load(); });
    this.refresh.addEventListener("change", function () { self.schedule(); });
    this.load();
    this.schedule();
  }

  Usage.prototype.params = function () {
    var p = new URLSearchParams(), d = this.root.dataset;
    if (this.range.value === "custom") {
      var since = G.q("[data-usage-since]", this.root).value;
      var until = G.q("[data-usage-until]", this.root).value;
      if (since) p.set("since", new Date(since).toISOString());
      if (until) p.set("until", new Date(until).toISOString());
    } else {
      p.set("range", this.range.value);
    }
    if (d.agent) p.set("agent", d.agent);
    if (d.key) p.set("key", d.key);
    if (d.model) p.set("model", d.model);
    return p;
  };

  Usage.prototype.schedule = function () {
    var self = this;
    clearInterval(this.timer);
    if (this.refresh.checked) this.timer = setInterval(function () { self.load(); }, this.every);
  };

  Usage.prototype.load = function () {
    var self = this, seq = ++this.loads;
    this.status.textContent = "loading…";
    return G.api("GET", "usage?" + this.params().toString()).then(function (data) {
      if (seq !== self.loads) return;  // a newer read was asked for meanwhile
      self.draw(data);
      self.status.textContent = "updated " + new Date().toLocaleTimeString();
      self.root.dataset.loaded = String(seq);
    }).catch(function (err) {
      if (seq !== self.loads) return;
      self.status.textContent = err.status ? err.message : "offline: the usage could not be read";
      self.status.classList.add("error");
    });
  };

  Usage.prototype.chart = function (name, spec) {
    var box = G.q('[data-usage-chart="' + name + '"]', this.root);
    if (!box) return;
    spec.dots = false;
    var svg = C.lines(box, spec);
    svg.setAttribute("data-points", String(spec.x.length));
    svg.setAttribute("data-sum", String(spec.series.reduce(function (a, s) {
      return a + s.values.reduce(function (b, v) { return b + n(v); }, 0); }, 0)));
  };

  Usage.prototype.draw = function (data) {
    this.status.classList.remove("error");
    var pts = data.series, b = data.bucket_seconds;
    var x = pts.map(function (p) { return label(p.start, b); });
    this.root.dataset.bucket = String(b);
    this.chart("requests", { title: "Requests per " + span(b), metric: "requests", x: x, series: [
      { label: "requests", values: pts.map(function (p) { return p.requests; }) },
      { label: "errors", values: pts.map(errorsOf) }] });
    var kinds = Object.keys(data.totals.errors || {});
    this.chart("errors", { title: "Errors by kind", metric: "errors", x: x,
      series: (kinds.length ? kinds : ["error"]).map(function (k) {
        return { label: k, values: pts.map(function (p) { return (p.errors || {})[k] || 0; }) }; }) });
    this.chart("tokens", { title: "Tokens per " + span(b), metric: "tokens", x: x, series: [
      { label: "input", values: pts.map(function (p) { return p.input_tokens; }) },
      { label: "output", values: pts.map(function (p) { return p.output_tokens; }) }] });
    this.chart("cost", { title: "Cost per " + span(b) + " (USD)", metric: "cost", x: x, series: [
      { label: "USD", values: pts.map(function (p) { return usd(p.cost_usd); }) }] });
    this.chart("ttft", { title: "Time to first token (ms)", metric: "ttft", x: x, series: [
      { label: "p50", values: pts.map(function (p) { return p.ttft_ms.p50; }) },
      { label: "p95", values: pts.map(function (p) { return p.ttft_ms.p95; }) }] });
    this.chart("duration", { title: "Duration (ms)", metric: "duration", x: x, series: [
      { label: "p50", values: pts.map(function (p) { return p.duration_ms.p50; }) },
      { label: "p95", values: pts.map(function (p) { return p.duration_ms.p95; }) }] });
    this.totals(data.totals);
    this.breakdown(data);
  };

  function usd(v) { var x = parseFloat(v); return isNaN(x) ? 0 : x; }
  function money(v) {  // dollars to the cent, or to four places below a cent
    var x = usd(v);
    return "$" + (x !== 0 && Math.abs(x) < 0.01 ? x.toFixed(4) : x.toFixed(2));
  }

  function span(b) {
    return { 60: "minute", 300: "5 min", 900: "15 min", 3600: "hour", 21600: "6 h", 86400: "day" }[b] || b + " s";
  }

  Usage.prototype.totals = function (t) {
    var box = G.q("[data-usage-totals]", this.root);
    var items = [["requests", t.requests], ["errors", errorsOf(t)],
                 ["input tokens", t.input_tokens], ["output tokens", t.output_tokens],
                 ["cost", money(t.cost_usd) + (t.unpriced_requests ? " + " + t.unpriced_requests + " unpriced" : "")],
                 ["TTFT p50 / p95", ms(t.ttft_ms.p50) + " / " + ms(t.ttft_ms.p95)],
                 ["duration p50 / p95", ms(t.duration_ms.p50) + " / " + ms(t.duration_ms.p95)]];
    box.replaceChildren.apply(box, items.map(function (it) {
      return G.h("div", { "class": "stat", "data-usage-total": it[0] },
                 G.h("span", { "class": "value" }, typeof it[1] === "number" ? C.format(it[1]) : it[1]),
                 G.h("span", { "class": "label" }, it[0]));
    }));
  };

  Usage.prototype.breakdown = function (data) {
    var box = G.q("[data-usage-breakdown]", this.root);
    if (!box) return;
    var groups = [["agent", data.by_agent, function (r) { return r.agent; }],
                  ["key", data.by_key, function (r) { return r.key ? r.name + " (" + r.key + ")" : r.name; }],
                  ["upstream model", data.by_model, function (r) { return r.model || "unknown"; }, "model"]];
    var tables = groups.map(function (g) {
      var head = G.h("tr", {}, ["by " + g[0], "requests", "errors", "in", "out", "cost", "TTFT p50/p95", "duration p50/p95"].map(function (c, i) {
        return G.h("th", { "class": i ? "num" : "" }, c); }));
      var rows = g[1].length ? g[1].map(function (r) {
        var errs = Object.keys(r.errors).map(function (k) { return k + " " + r.errors[k]; }).join(", ");
        return G.h("tr", { "data-usage-row": g[3] || g[0] },
          G.h("td", {}, g[2](r)), G.h("td", { "class": "num" }, String(r.requests)),
          G.h("td", { "class": "num", title: errs }, String(errorsOf(r))),
          G.h("td", { "class": "num" }, C.format(r.input_tokens)),
          G.h("td", { "class": "num" }, C.format(r.output_tokens)),
          G.h("td", { "class": "num", title: r.unpriced_requests ? r.unpriced_requests + " turns of an unpriced model" : "" },
              money(r.cost_usd) + (r.unpriced_requests ? " *" : "")),
          G.h("td", { "class": "num" }, ms(r.ttft_ms.p50) + " / " + ms(r.ttft_ms.p95)),
          G.h("td", { "class": "num" }, ms(r.duration_ms.p50) + " / " + ms(r.duration_ms.p95)));
      }) : [G.h("tr", { "class": "empty" }, G.h("td", { colspan: "8" }, "No turns in this range."))];
      return G.h("div", { "class": "table-scroll" }, G.h("table", {}, G.h("thead", {}, head), G.h("tbody", {}, rows)));
    });
    var users = data.by_user || [];
    if (users.length) {  // the end users clients named, each as its key's (whole hours)
      var uhead = G.h("tr", {}, ["by end user", "key", "requests", "in", "out", "cost"].map(function (c, i) {
        return G.h("th", { "class": i > 1 ? "num" : "" }, c); }));
      tables.push(G.h("div", { "class": "table-scroll" }, G.h("table", {}, G.h("thead", {}, uhead),
        G.h("tbody", {}, users.map(function (r) {
          return G.h("tr", { "data-usage-row": "user" }, G.h("td", {}, r.user), G.h("td", {}, r.key ? r.name + " (" + r.key + ")" : r.name),
            G.h("td", { "class": "num" }, String(r.requests)), G.h("td", { "class": "num" }, C.format(r.input_tokens)),
            G.h("td", { "class": "num" }, C.format(r.output_tokens)), G.h("td", { "class": "num" }, money(r.cost_usd)));
        })))));
    }
    box.replaceChildren.apply(box, tables);
  };

  G.usage = { Usage: Usage, blocks: G.qa("[data-usage]").map(function (root) { return new Usage(root); }) };
})();
