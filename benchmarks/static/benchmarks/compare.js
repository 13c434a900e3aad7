/* The compare page: runs side by side, one column per mesh run or per replay target (the
 * API's `columns`), their metrics as a table and bar charts, the API's warnings (other
 * suites, other questions, a run that did not succeed), and the questions whose answers
 * differ. Mesh and replay runs share exact match, F1, ROUGE-L and the mean elapsed time;
 * bytes and packets are a mesh run's, similarity, the judge, tokens and TTFT a replay's. */
(function () {
  "use strict";

  var G = window.Gaia;
  var h = G.h, q = G.q, num = G.num, fixed = G.fixed, api = G.api;
  var body = document.body;

  var METRICS = [  // [key, title, unit, kinds]
    ["exact_match", "Exact match", "", "mesh replay"], ["f1", "F1", "", "mesh replay"],
    ["rouge_l", "ROUGE-L", "", "mesh replay"], ["similarity", "Embedding similarity", "", "replay"],
    ["judge_score", "Judge score", "", "replay"],
    ["bytes", "Bytes per question", "B", "mesh"], ["packets", "Packets per question", "", "mesh"],
    ["header_overhead", "Header overhead per question", "B", "mesh"],
    ["elapsed_ms", "Mean elapsed per question", "ms", "mesh replay"],
    ["ttft_ms_p50", "TTFT p50", "ms", "replay"], ["tokens", "Tokens (all cases)", "", "replay"]];

  /* A column's value of a metric: a mesh run's summary (mean_*, per-question figures) or a
   * replay target's (the means by name). */
  function value(column, key) {
    var m = column.summary || {};
    var candidates = {
      exact_match: [m.exact_match, m.mean_exact_match, m.em],
      f1: [m.f1, m.mean_f1],
      rouge_l: [m.rouge_l, m.mean_rouge_l],
      similarity: [m.similarity], judge_score: [m.judge_score],
      bytes: [m.bytes, m.bytes_per_question && m.bytes_per_question.total, m.bytes_per_question],
      packets: [m.packets, m.pkt_cnt_per_question, m.packets_per_question],
      header_overhead: [m.header_overhead, m.header_overhead_per_question],
      elapsed_ms: [m.elapsed_ms_mean, m.elapsed_ms && typeof m.elapsed_ms === "object" ? m.elapsed_ms.mean : m.elapsed_ms, m.elapsed],
      ttft_ms_p50: [m.ttft_ms_p50], tokens: [m.tokens]
    }[key];
    for (var i = 0; i < candidates.length; i++) {
      var v = num(candidates[i]);
      if (v !== null && !isNaN(v) && typeof candidates[i] !== "object") return v;
    }
    return null;
  }

  function describe(run) {  // suite@version, then what ran: the protocol or the targets and judge
    var suite = run.suite + "@" + run.suite_version;
    if (run.kind === "replay") return suite + " · replay of " + (run.agents || []).join(", ") + " · " + (run.judge ? "judged by " + run.judge : "no judge");
    return suite + " · mesh " + (run.protocol || "") + (run.baseline ? " · deterministic tools" : "");
  }

  function label(column, run) {
    return "#" + column.run + " " + (column.agent || (run && run.protocol) || "") + (run ? " · " + run.suite + "@" + run.suite_version : "") +
      (run && run.status === "failed" ? " (failed)" : "");
  }

  /* A failed run has no figures: a dash, never a bar of zeros. */
  function shown(column, run, key) { return run && run.status === "failed" ? null : value(column, key); }

  function load() {
    var ids = (body.dataset.runs || "").split(",").map(function (s) { return s.trim(); }).filter(Boolean);
    if (ids.length < 1) { q("#differences").replaceChildren(h("p", { "class": "muted", text: "Pick runs to compare on the runs page." })); return; }
    api("GET", "benchmarks/compare?runs=" + encodeURIComponent(ids.join(","))).then(function (data) {
      var runs = {};
      (data.runs || []).forEach(function (r) { runs[r.id] = r; });
      var columns = data.columns || [];
      var kinds = {};
      columns.forEach(function (c) { kinds[(runs[c.run] || {}).kind || "mesh"] = true; });
      var metrics = METRICS.filter(function (m) { return m[3].split(" ").some(function (k) { return kinds[k]; }); });
      var warn = q("#compare-warnings");
      warn.replaceChildren.apply(warn, (data.warnings || []).map(function (w) { return h("li", { text: w }); }));
      warn.hidden = !(data.warnings || []).length;
      q("#compare-head").replaceChildren(h("tr", null, h("th", { text: "Column" }), h("th", { text: "Run" }),
        metrics.map(function (m) { return h("th", { "class": "num", text: m[1] }); })));
      q("#compare-rows").replaceChildren.apply(q("#compare-rows"), columns.map(function (c) {
        var run = runs[c.run] || {};
        return h("tr", { "data-run": c.run, "data-column": c.key },
          h("td", null, h("a", { href: "/runs/" + encodeURIComponent(c.run) + "/", text: label(c, run) })),
          h("td", { "class": "small", text: describe(run) + " · " + run.status }),
          metrics.map(function (m) { return h("td", { "class": "num", text: window.GaiaCharts.format(shown(c, run, m[0])) }); }));
      }));
      var charts = q("#charts");
      charts.replaceChildren.apply(charts, metrics.map(function (m) {
        var box = h("div", { "class": "card chart", "data-metric": m[0] });
        window.GaiaCharts.bars(box, { title: m[1], unit: m[2], metric: m[0],
          items: columns.map(function (c) { return { label: label(c, runs[c.run]), value: shown(c, runs[c.run], m[0]) }; }) });
        return box;
      }));
      differences(data.questions || [], columns, runs);
    }).catch(function (err) {
      var e = q("#compare-error");
      e.textContent = err.message;
      e.hidden = false;
    });
  }

  function differences(questions, columns, runs) {
    var box = q("#differences");
    var diffs = questions.filter(function (x) { return x.differs; });
    if (!diffs.length) { box.replaceChildren(h("p", { "class": "muted", text: "Every column gave the same answers." })); return; }
    box.replaceChildren(h("div", { "class": "scroll" }, h("table", { "class": "diff" },
      h("thead", null, h("tr", null, h("th", { text: "#" }), h("th", { text: "Question" }), h("th", { text: "Gold / reference" }),
        columns.map(function (c) { return h("th", { text: label(c, runs[c.run]) }); }))),
      h("tbody", null, diffs.map(function (d) {
        return h("tr", { "data-question": d.question_index }, h("td", { "class": "num", text: d.question_index }),
          h("td", { text: d.question || "" }), h("td", { text: d.gold || "" }),
          columns.map(function (c) {
            var a = (d.runs || {})[c.key];
            if (!a) return h("td", { "class": "muted", text: "not run" });
            var extra = a.similarity !== null && a.similarity !== undefined ? " · sim " + fixed(a.similarity) : "";
            if (a.judge_score !== null && a.judge_score !== undefined) extra += " · judge " + fixed(a.judge_score);
            return h("td", { "class": a.exact_match ? "em" : "" }, h("span", { text: a.prediction === null || a.prediction === undefined ? "(" + a.status + ")" : a.prediction }),
              h("span", { "class": "muted small", text: " EM " + fixed(a.exact_match) + " · F1 " + fixed(a.f1) + extra }));
          }));
      })))));
  }

  G.pages.push({ attach: function () {}, resync: function () { return null; }, live: G.PAGE !== "compare" });
  if (G.PAGE === "compare") load();
})();
