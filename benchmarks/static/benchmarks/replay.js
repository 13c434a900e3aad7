/* A replay run's page (templates/benchmarks/replay_run.html): its progress, live from the
 * feed's run_* events; its latest replies as they finish; the per-target summary (means,
 * tokens, latency, failures, wins/ties/losses against the reference and between targets) once
 * the run ends; cancel and resume. Its cases side by side are replay_cases.js. */
(function () {
  "use strict";

  var G = window.Gaia;
  var h = G.h, q = G.q, show = G.show, num = G.num, fixed = G.fixed, api = G.api, fail = G.fail;
  var RUN = document.body.dataset.replay;
  var LATEST = 8;  // replies listed as they finish
  var queue = null;  // {"workers": N, "alive": bool}: the page says when no worker is alive

  function orDash(v) { return v === null || v === undefined ? "–" : String(v); }

  function renderProgress(p) {
    var done = num(p.questions_done) || 0, total = num(p.questions_total) || 0;
    G.bench.setProgress(q("#run-progress"), done, total, p.status);
    q("#run-done").textContent = done;
    q("#run-total").textContent = total || "?";
    var st = q("#run-status");
    st.className = "badge status-" + p.status;
    st.textContent = p.status;
    show(q("#cancel-form"), p.status === "queued" || p.status === "running");
    show(q("#resume-form"), p.status === "cancelled" || p.status === "failed");
    G.bench.queueNotice(queue, p.status);
  }

  function summaryRow(agent, s, primary) {
    if (!s) {
      return h("tr", { "data-agent": agent }, h("td", { text: agent }),
        h("td", { "class": "muted", colspan: 14, text: "its figures come when the run ends" }));
    }
    var vs = s.vs_reference;
    return h("tr", { "data-agent": agent },
      h("td", null, h("strong", { text: agent })),
      h("td", { "class": "num", text: s.completed + "/" + s.cases }),
      h("td", { "class": "num" + (s.failed ? " bad" : ""), text: s.failed }),
      h("td", { "class": "num" + (s.judge_errors ? " bad" : ""), text: s.judge_errors }),
      h("td", { "class": "num primary", "data-metric": primary, text: fixed(s[primary]) }),
      ["exact_match", "f1", "rouge_l", "similarity", "judge_score"].map(function (m) {
        return h("td", { "class": "num", "data-metric": m, text: fixed(s[m]) });
      }),
      h("td", { "class": "num", text: orDash(s.tokens) }),
      h("td", { "class": "num", text: orDash(s.tool_calls) }),
      h("td", { "class": "num", text: fixed(s.ttft_ms_p50, 0) }),
      h("td", { "class": "num", text: fixed(s.elapsed_ms_p50, 0) }),
      h("td", { "class": "vs-reference", text: vs ? vs.win + " / " + vs.tie + " / " + vs.loss : "– (needs a judge)" }));
  }

  function renderSummary(run) {
    var summary = run.summary;
    var agents = (summary && summary.agents) || {};
    var primary = (summary && summary.primary) || G.bench.primaryKey(run);
    q("#primary-head").textContent = "Primary (" + (primary === "judge_score" ? "judge" : "similarity") + ")";
    q("#summary-note").textContent = summary ? (run.status === "succeeded" ? "" : "partial: the run is " + run.status)
      : "the figures are written when the run ends";
    var rows = q("#summary-rows");
    rows.replaceChildren.apply(rows, (run.agents || []).map(function (a) { return summaryRow(a, agents[a], primary); }));
    var pairs = (summary && summary.pairs) || {};
    var names = Object.keys(pairs);
    var pr = q("#pair-rows");
    if (!names.length) {
      pr.replaceChildren(h("tr", { "class": "empty" }, h("td", { colspan: 4, text: (run.agents || []).length > 1 ? "When the run ends." : "One target: no pair." })));
      return;
    }
    pr.replaceChildren.apply(pr, names.map(function (n) {
      var p = pairs[n];
      return h("tr", { "data-pair": n }, h("td", { text: n }), h("td", { "class": "num", text: p.win }),
        h("td", { "class": "num", text: p.tie }), h("td", { "class": "num", text: p.loss }));
    }));
  }

  var lastStatus = null;

  function renderRun(run) {
    if (run.queue) queue = run.queue;  // the detail has it; feed events do not
    G.bench.renderNotes(run.notes);
    renderProgress({ status: run.status, questions_done: run.progress.questions_done, questions_total: run.progress.questions_total });
    q("#run-started").replaceChildren(G.timeNode(run.started_at));
    q("#run-finished").replaceChildren(G.timeNode(run.finished_at));
    var err = q("#run-error");
    err.textContent = run.error || "";
    show(err, !!run.error);
    renderSummary(run);
    var ended = ["succeeded", "failed", "cancelled"].indexOf(run.status) >= 0;
    // the cases are read when there are some, and again each time the run ends
    if ((lastStatus === null && run.progress.questions_done > 0) || (ended && lastStatus !== run.status && lastStatus !== null)) {
      G.replayCases.load();
    }
    lastStatus = run.status;
  }

  function loadRun() {
    return api("GET", "benchmarks/runs/" + encodeURIComponent(RUN)).then(renderRun).catch(fail);
  }

  var latest = [];

  function addLatest(r) {
    latest.unshift(r);
    latest = latest.slice(0, LATEST);
    var tbody = q("#latest-rows");
    tbody.replaceChildren.apply(tbody, latest.map(function (x) {
      return h("tr", { "data-case": x.question_index, "data-agent": x.agent },
        h("td", { "class": "num", text: x.question_index }), h("td", { text: x.agent || "" }),
        h("td", null, G.badge(x.status || "")),
        h("td", { "class": "num", text: fixed(x.f1) }), h("td", { "class": "num", text: fixed(x.similarity) }),
        h("td", { "class": "num", title: x.judge_error || "", text: x.judge_error ? "error" : fixed(x.judge_score) }),
        h("td", { "class": "num", text: fixed(x.elapsed_ms, 0) }));
    }));
  }

  function onEvent(evt) {
    if (evt.event === "queue_changed") {
      queue = evt.queue;
      G.bench.queueNotice(queue, q("#run-status").textContent);
      return;
    }
    var id = evt.run ? evt.run.id : evt.run_id;
    if (String(id) !== String(RUN)) return;
    if (evt.event === "run_progress") renderProgress(evt);
    else if (evt.event === "question_finished") {
      addLatest(evt.result);
      var done = num(q("#run-done").textContent) || 0;
      var total = num(q("#run-total").textContent) || 0;
      if (done < total) {  // a reply is counted before the next heartbeat says so
        renderProgress({ status: q("#run-status").textContent, questions_done: done + 1, questions_total: total });
      }
    } else if (evt.run) {
      renderRun(evt.run);
      if (evt.event === "run_finished") loadRun();  // the summary is written with the end
    }
  }

  if (G.PAGE === "replay_run") {
    var first = JSON.parse(q("#run-data").textContent);
    document.addEventListener("gaia:done", function (e) {
      if (e.target.id === "resume-form" || e.target.id === "cancel-form") loadRun();
    });
    G.pages.push({
      attach: function (feed) {
        ["run_created", "run_started", "run_progress", "question_finished", "run_finished", "run_requeued",
         "queue_changed"].forEach(function (name) {
          feed.on(name, onEvent);
        });
      },
      resync: loadRun,
      live: true
    });
    renderRun(first);
  }
})();
