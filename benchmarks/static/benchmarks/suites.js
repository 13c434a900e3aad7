/* Evaluation suites: made from the thread list (its filters as the server resolved them, or
 * the threads ticked), uploaded as JSONL (a new suite, or a suite's new version), and a
 * suite's trend over its replays: one line chart per score, a line per target. */
(function () {
  "use strict";

  var G = window.Gaia;
  var h = G.h, q = G.q, qa = G.qa, api = G.api, fixed = G.fixed, notice = G.notice;
  var PAGE = G.PAGE;
  var body = document.body;

  // ------------------------------------------------------------------------------------------
  // The thread list: "Make an evaluation suite"

  G.pickedThreads = {};  // gaia/threads.js ticks the boxes of rows it swaps in from it

  function pickedIds() { return Object.keys(G.pickedThreads).filter(function (id) { return G.pickedThreads[id]; }); }

  function setupSuiteFromThreads() {
    var form = q("#suite-form");
    if (!form) return;
    document.addEventListener("change", function (e) {
      if (!e.target.classList || !e.target.classList.contains("thread-pick")) return;
      G.pickedThreads[e.target.value] = e.target.checked;
      var n = pickedIds().length;
      q("#picked-count").textContent = n;
      q("#suite-from-selected").checked = n > 0;
      if (!n) q('input[name="from"][value="filter"]', form).checked = true;
    });
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var err = q("#suite-error"), made = q("#suite-made");
      var d = new FormData(form);
      var spec;
      if (d.get("from") === "selected") {
        if (!pickedIds().length) { err.textContent = "Tick one or more threads below."; err.hidden = false; return; }
        spec = { ids: pickedIds() };
      } else {
        spec = JSON.parse(q("#suite-filter").textContent);
      }
      spec.turns = d.get("turns");
      err.hidden = true;
      made.hidden = true;
      q("#suite-submit").disabled = true;
      api("POST", "benchmarks/suites", { name: d.get("name"), from_threads: spec }).then(function (suite) {
        made.replaceChildren("Made ", h("a", { id: "suite-link", href: "/runs/suites/" + encodeURIComponent(suite.id) + "/",
          text: suite.name + " v" + suite.version }), ": " + suite.question_count + " cases. ",
          h("a", { href: "/runs/new/?suite=" + encodeURIComponent(suite.name + "@" + suite.version), text: "Replay it" }));
        made.hidden = false;
        notice("Suite " + suite.name + " v" + suite.version + " made.");
      }).catch(function (e2) {
        err.textContent = e2.message;
        err.hidden = false;
      }).then(function () { q("#suite-submit").disabled = false; });
    });
  }

  // ------------------------------------------------------------------------------------------
  // JSONL uploads: a new suite (its name typed) or a new version of this page's suite

  function setupUploads() {
    qa("form.jsonl-upload").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        e.preventDefault();
        var err = q('[data-role="error"]', form);
        var name = form.dataset.name || new FormData(form).get("name");
        var file = q('input[type="file"]', form).files[0];
        err.hidden = true;
        if (!file) { err.textContent = "Choose a JSONL file."; err.hidden = false; return; }
        var button = q("button[type=submit]", form);
        button.disabled = true;
        file.text().then(function (text) {
          return api("POST", "benchmarks/suites?name=" + encodeURIComponent(name), text, "application/jsonl");
        }).then(function (suite) {
          window.location.href = "/runs/suites/" + encodeURIComponent(suite.id) + "/";
        }).catch(function (e2) {
          err.textContent = e2.message;
          err.hidden = false;
          button.disabled = false;
        });
      });
    });
  }

  // ------------------------------------------------------------------------------------------
  // A suite's trend

  var SCORES = [["judge_score", "Judge score"], ["similarity", "Embedding similarity"], ["f1", "Token F1"],
                ["rouge_l", "ROUGE-L"], ["exact_match", "Exact match"]];

  function loadTrend() {
    var box = q("#trend");
    if (!box) return;
    api("GET", "benchmarks/suites/" + encodeURIComponent(body.dataset.suite) + "/trend").then(function (data) {
      var points = data.points || [];
      if (!points.length) { box.replaceChildren(h("p", { "class": "muted", text: "No finished replay of this suite yet." })); return; }
      var targets = [];
      points.forEach(function (p) { Object.keys(p.agents || {}).forEach(function (a) { if (targets.indexOf(a) < 0) targets.push(a); }); });
      // the primary score is the judge's when the latest replay had one, else the similarity
      var primary = points[points.length - 1].judge ? "judge_score" : "similarity";
      var scores = SCORES.filter(function (s) { return s[0] === primary; }).concat(SCORES.filter(function (s) { return s[0] !== primary; }));
      var x = points.map(function (p) { return "#" + p.run_id + " v" + p.version; });
      function values(metric, target) {
        return points.map(function (p) { var a = (p.agents || {})[target]; return a && typeof a[metric] === "number" ? a[metric] : null; });
      }
      var charts = scores.filter(function (s) {
        return targets.some(function (t) { return values(s[0], t).some(function (v) { return v !== null; }); });
      }).map(function (s) {
        var chart = h("div", { "class": "chart" + (s[0] === primary ? " primary" : ""), "data-metric": s[0] });
        window.GaiaCharts.lines(chart, { title: s[1] + (s[0] === primary ? " (primary)" : ""), metric: s[0], x: x, max: 1,
          series: targets.map(function (t) { return { label: t, values: values(s[0], t) }; }) });
        return chart;
      });
      var table = h("table", { "class": "trend-points" },
        h("thead", null, h("tr", null, h("th", { text: "Run" }), h("th", { "class": "num", text: "Version" }), h("th", { text: "Finished" }),
          h("th", { text: "Judge" }), targets.map(function (t) { return h("th", { "class": "num", text: t }); }))),
        h("tbody", null, points.map(function (p) {
          var key = p.judge ? "judge_score" : "similarity";
          return h("tr", { "data-run": p.run_id }, h("td", null, h("a", { href: "/runs/" + encodeURIComponent(p.run_id) + "/", text: "#" + p.run_id })),
            h("td", { "class": "num", text: "v" + p.version }), h("td", null, G.timeNode(p.finished_at)), h("td", { text: p.judge || "–" }),
            targets.map(function (t) { var a = (p.agents || {})[t]; return h("td", { "class": "num", title: key, text: a ? fixed(a[key]) : "" }); }));
        })));
      box.replaceChildren(h("div", { "class": "trend-charts" }, charts),
        h("p", { "class": "muted small", text: "Each point is a finished replay; the table gives each target's primary score (the judge's when the replay had one, else the similarity)." }),
        h("div", { "class": "scroll" }, table));
    }).catch(function (err) {
      box.replaceChildren(h("p", { "class": "error", text: "The trend is not available: " + err.message }));
    });
  }

  G.pages.push({ attach: function () {}, resync: function () { return null; },
                 live: PAGE !== "suites" && PAGE !== "suite" });
  if (PAGE === "threads") setupSuiteFromThreads();
  if (PAGE === "suites" || PAGE === "suite") setupUploads();
  if (PAGE === "suite") loadTrend();
})();
