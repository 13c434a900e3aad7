/* The benchmark pages: run lists with progress bars (the dashboard's too), a mesh run's page
 * and the submit form (mesh runs and replays), drawn from /api/v1/benchmarks/ and kept live by
 * the feed's run_* events (joined through Gaia.pages; agents/static/gaia/base.js has the
 * helpers). The compare page is compare.js; a replay's page replay.js and replay_cases.js;
 * the suites suites.js. What they share is Gaia.bench. */
(function () {
  "use strict";

  var G = window.Gaia;
  var h = G.h, q = G.q, qa = G.qa, attrSel = G.attrSel, show = G.show, orDash = G.orDash;
  var num = G.num, fixed = G.fixed, listOf = G.listOf, notice = G.notice, api = G.api;
  var fail = G.fail, badge = G.badge, API = G.API, PAGE = G.PAGE;
  var body = document.body;

  function runId(run) { return run.id !== undefined ? run.id : run.run_id; }
  function runDone(run) {
    var p = run.progress || {};
    return num(p.questions_done !== undefined ? p.questions_done : (run.questions_done !== undefined ? run.questions_done : p.done)) || 0;
  }
  function runTotal(run) {
    var p = run.progress || {};
    return num(p.questions_total !== undefined ? p.questions_total : (run.questions_total !== undefined ? run.questions_total : p.total)) || 0;
  }
  function runSuite(run) { return run.suite_name || (run.suite && typeof run.suite === "object" ? run.suite.name : run.suite) || ""; }
  function summaryOf(run) { return run.summary || run.summary_metrics || run.metrics || {}; }

  function progressNode(done, total, status) {
    var pct = total > 0 ? Math.round(100 * done / total) : (status === "succeeded" ? 100 : 0);
    var node = h("div", { "class": "progress", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100,
                          "aria-valuenow": pct, "data-status": status || "" },
      h("div", { "class": "bar", style: "width: " + pct + "%" }),
      h("span", { "class": "label", text: pct + " %" + (total ? " (" + done + "/" + total + ")" : "") }));
    return node;
  }

  function setProgress(node, done, total, status) {
    if (!node) return;
    var pct = total > 0 ? Math.round(100 * done / total) : (status === "succeeded" ? 100 : 0);
    node.setAttribute("aria-valuenow", pct);
    if (status) node.dataset.status = status;
    q(".bar", node).style.width = pct + "%";
    q(".label", node).textContent = pct + " %" + (total ? " (" + done + "/" + total + ")" : "");
  }

  /* "No worker is running": shown while the run waits (queued, or running with a lost worker)
   * and no worker is alive (the API's and queue_changed's {"workers": N, "alive": bool}). */
  function queueNotice(queue, status) {
    var node = q("#run-queue");
    if (node) show(node, !!queue && queue.alive === false && (status === "queued" || status === "running"));
  }

  /* The run's notes (a lost worker, a resume...), one a line. */
  function renderNotes(notes) {
    var list = q("#run-notes");
    if (!list) return;
    list.replaceChildren.apply(list, (notes || []).map(function (n) { return h("li", { text: n }); }));
    show(list, !!(notes && notes.length));
  }

  var picked = {};  // the runs ticked for comparison survive rows being redrawn
  document.addEventListener("change", function (e) {
    if (e.target.classList && e.target.classList.contains("run-pick")) picked[e.target.value] = e.target.checked;
  });

  function suiteRef(run) { return runSuite(run) + (run.suite_version ? " v" + run.suite_version : ""); }

  /* A replay's primary score per target ("judge_score" when judged, else "similarity"). */
  function primaryKey(run) { return run.judge ? "judge_score" : "similarity"; }

  function scoresText(run) {
    var s = summaryOf(run);
    if (run.kind === "replay") {
      var agents = s.agents || {};
      return Object.keys(agents).map(function (a) { return a + " " + fixed(agents[a][primaryKey(run)]); }).join(" · ");
    }
    return s.mean_exact_match === undefined ? "" : "EM " + fixed(s.mean_exact_match) + " · F1 " + fixed(s.mean_f1);
  }

  function runRow(run, selectable) {
    var id = runId(run);
    return h("tr", { "data-run": id, "data-kind": run.kind || "mesh" },
      selectable ? h("td", null, h("input", { type: "checkbox", "class": "run-pick", value: id, checked: !!picked[id], "aria-label": "compare run " + id })) : null,
      h("td", null, h("a", { href: "/runs/" + encodeURIComponent(id) + "/", text: "#" + id })),
      h("td", { "class": "run-kind", text: run.kind || "mesh" }),
      h("td", { "class": "run-suite" }, run.suite_id ? h("a", { href: "/runs/suites/" + encodeURIComponent(run.suite_id) + "/", text: suiteRef(run) }) : suiteRef(run)),
      h("td", { text: run.kind === "replay" ? (run.agents || []).join(", ") + (run.judge ? " (judge " + run.judge + ")" : "") : (run.protocol || "") }),
      h("td", { "class": "run-status" }, badge(run.status)),
      h("td", { "class": "run-progress" }, progressNode(runDone(run), runTotal(run), run.status)),
      h("td", { "class": "run-scores", text: scoresText(run) }),
      h("td", null, G.timeNode(run.queued_at || run.created_at)));
  }

  // ------------------------------------------------------------------------------------------
  // Benchmark runs: lists with progress bars, the run page, the compare page

  var RUN_ID = body.dataset.run;

  function loadRunList() {
    var box = q("#recent-runs") || q("#run-list");
    if (!box) return;
    var selectable = box.id === "run-list";
    var limit = Number(box.dataset.limit || 20);
    var query = new URLSearchParams({ limit: limit });
    var page = 1;
    if (selectable) {  // the runs page: its filters and page, from its address
      var params = new URLSearchParams(window.location.search);
      ["status", "kind", "suite", "agent", "sort"].forEach(function (k) { if (params.get(k)) query.set(k, params.get(k)); });
      if (params.get("since")) query.set("since", new Date(params.get("since") + "T00:00:00").toISOString());
      page = Math.max(1, Number(params.get("page")) || 1);
      query.set("offset", (page - 1) * limit);
    }
    return api("GET", "benchmarks/runs?" + query.toString()).then(function (data) {
      var runs = listOf(data, "runs");
      if (selectable) runPager(page, limit, data.count || 0);
      if (!runs.length) { box.replaceChildren(h("p", { "class": "muted", text: selectable && window.location.search ? "No run matches." : "No runs yet." })); return; }
      box.replaceChildren(h("table", { "class": "runs" },
        h("thead", null, h("tr", null, selectable ? h("th", { text: "" }) : null, sortHead("Run", "id", selectable), sortHead("Kind", "kind", selectable),
          h("th", { text: "Suite" }), sortHead("Protocol or targets", "protocol", selectable), sortHead("Status", "status", selectable), h("th", { text: "Progress" }),
          h("th", { text: "Scores" }), sortHead("Queued", "queued_at", selectable))),
        h("tbody", { id: "run-rows" }, runs.map(function (r) { return runRow(r, selectable); }))));
    }).catch(function (err) {
      box.replaceChildren(h("p", { "class": "muted", text: "Runs are not available: " + err.message }));
    });
  }

  // A column header that sorts the runs page (the API's sort, kept in the page's address as
  // the console's server-drawn lists keep it: agents.pages.templatetags.gaia_sort).
  var RUNS_DEFAULT_SORT = "-queued_at";
  function sortHead(label, column, sortable) {
    if (!sortable) return h("th", { scope: "col", text: label });
    var params = new URLSearchParams(window.location.search);
    var current = params.get("sort") || RUNS_DEFAULT_SORT;
    var state = current === column ? "ascending" : current === "-" + column ? "descending" : "none";
    params.delete("page");
    params.set("sort", state === "ascending" ? "-" + column : column);
    return h("th", { scope: "col", "aria-sort": state, "data-sort": column },
      h("a", { href: "?" + params.toString() }, label,
        h("span", { "class": "sort-arrow", "aria-hidden": "true", text: state === "ascending" ? "▲" : state === "descending" ? "▼" : "" })));
  }

  function runPager(page, limit, count) {
    var pages = Math.max(1, Math.ceil(count / limit));
    var nav = q("#run-pager");
    if (!nav) return;
    nav.hidden = false;
    q("#runs-page").textContent = "page " + page + " of " + pages + " (" + count + " runs)";
    function link(node, to) {
      var params = new URLSearchParams(window.location.search);
      params.set("page", to);
      node.href = "?" + params.toString();
      node.hidden = to < 1 || to > pages;
    }
    link(q("#runs-previous"), page - 1);
    link(q("#runs-next"), page + 1);
  }

  function runEvent(evt) {
    var run = evt.run;
    var id = run ? runId(run) : evt.run_id;
    if (q("#run-rows")) {
      var row = q("tr" + attrSel("data-run", id), q("#run-rows"));
      if (run) {
        var fresh = runRow(run, !!q("#run-list"));
        // a new run joins the first page of the unfiltered list; a filtered or later page rereads
        if (row) row.replaceWith(fresh);
        else if (!q("#run-list") || !window.location.search || window.location.search === "?sort=" + RUNS_DEFAULT_SORT) q("#run-rows").insertBefore(fresh, q("#run-rows").firstChild);
      } else if (row && evt.event === "run_progress") {
        setProgress(q(".progress", row), num(evt.questions_done) || 0, num(evt.questions_total) || 0, evt.status);
        q(".run-status", row).replaceChildren(badge(evt.status));
      }
    } else if ((q("#recent-runs") || q("#run-list")) && run) {
      loadRunList();
    }
    if (RUN_ID && String(id) === String(RUN_ID)) {
      if (run) renderRun(run);
      else if (evt.event === "run_progress") renderProgress(evt);
      if (evt.event === "question_finished") addResult(evt.result);
      if (evt.event === "run_finished") loadRun();  // its artifacts are in the detail only
    }
  }

  var runState = { run: null, results: {}, metrics: {}, queue: null, status: null };

  function renderProgress(p) {
    var done = num(p.questions_done) || 0, total = num(p.questions_total) || 0;
    setProgress(q("#run-progress"), done, total, p.status);
    q("#run-done").textContent = done;
    q("#run-total").textContent = total || "?";
    if (p.packets !== undefined && p.packets !== null) q("#run-packets").textContent = p.packets;
    if (p.bytes !== undefined && p.bytes !== null) q("#run-bytes").textContent = p.bytes;
    var st = q("#run-status");
    st.className = "badge status-" + p.status;
    st.textContent = p.status;
    show(q("#cancel-form"), p.status === "queued" || p.status === "running");
    runState.status = p.status;
    queueNotice(runState.queue, p.status);
  }

  function selectionText(sel) {
    if (!sel || !sel.mode || sel.mode === "all") return "all";
    if (sel.mode === "first") return "the first " + sel.limit;
    if (sel.mode === "indexes") return "indexes " + (sel.indexes || []).join(", ");
    return JSON.stringify(sel);
  }

  function toolsText(tools) {
    if (!tools || typeof tools !== "object") return String(tools || "");
    var order = ["search", "extract", "triple", "reason"];
    return Object.keys(tools).sort(function (a, b) { return order.indexOf(a) - order.indexOf(b); })
      .map(function (role) { return role + ": " + tools[role]; }).join(", ");
  }

  function artifactUrl(name) {
    return API + "/benchmarks/runs/" + encodeURIComponent(RUN_ID) + "/artifacts/" + name.split("/").map(encodeURIComponent).join("/");
  }

  function renderRun(run) {
    runState.run = run;
    if (run.queue) runState.queue = run.queue;  // the detail has it; feed events do not
    renderNotes(run.notes);
    var prog = run.progress || {};
    renderProgress({ status: run.status, questions_done: runDone(run), questions_total: runTotal(run),
                     packets: prog.packets, bytes: prog.bytes });
    var s = summaryOf(run);
    var TIMES = ["Queued", "Started", "Finished"];
    var pairs = [["Suite", runSuite(run)], ["Protocol", run.protocol], ["Questions", selectionText(run.selection)],
                 ["Tools", toolsText(run.tools)], ["Quality label", run.quality_label],
                 ["Timeout per question (s)", run.question_timeout_s], ["Time limit (s)", run.time_limit_s],
                 ["Submitted by", run.submitted_by], ["Worker", run.worker], ["Attempts", run.attempts],
                 ["Queued", run.queued_at], ["Started", run.started_at], ["Finished", run.finished_at]];
    if (s.mean_exact_match !== undefined) {
      pairs.push(["EM / F1 / ROUGE-L", fixed(s.mean_exact_match) + " / " + fixed(s.mean_f1) + " / " + fixed(s.mean_rouge_l)]);
    }
    var cfg = q("#run-config");
    cfg.replaceChildren.apply(cfg, [].concat.apply([], pairs.filter(function (p) { return p[1] !== undefined && p[1] !== null && p[1] !== ""; })
      .map(function (p) {
        // times read as the rest of the console's ("3 min ago", the full time on hover)
        var when = TIMES.indexOf(p[0]) >= 0;
        return [h("dt", { text: p[0] }), when ? h("dd", null, G.timeNode(p[1])) : h("dd", { text: String(p[1]) })];
      })));
    var err = q("#run-error");
    err.textContent = run.error || "";
    show(err, !!run.error);
    if (run.artifacts) {
      var arts = q("#artifacts");
      var names = run.artifacts.filter(function (n) { return n.indexOf("/") < 0; });
      arts.replaceChildren.apply(arts, names.map(function (name) {
        return h("a", { href: artifactUrl(name), download: name, "class": "artifact", text: "⤓ " + name });
      }));
    }
  }

  function resultIndex(r) { return r.question_index; }

  function addResult(r) {
    if (!r) return;
    runState.results[resultIndex(r)] = r;
    renderResults();
  }

  function renderResults() {
    var tbody = q("#result-rows");
    var rows = Object.keys(runState.results).map(Number).sort(function (a, b) { return a - b; }).map(function (i) {
      var r = runState.results[i];
      return h("tr", { "data-question": i },
        h("td", { "class": "num" }, h("a", { href: artifactUrl("q" + i + "/metrics.json"), title: "metrics.json", text: String(i) })),
        h("td", null, badge(r.status || "")),
        h("td", { text: r.question || "" }),
        h("td", { "class": "prediction", text: r.prediction === null || r.prediction === undefined ? (r.error || "") : r.prediction }),
        h("td", { text: r.gold || "" }),
        h("td", { "class": "num", text: fixed(r.exact_match) }),
        h("td", { "class": "num", text: fixed(r.f1) }),
        h("td", { "class": "num", text: fixed(r.rouge_l) }),
        h("td", { "class": "num", text: orDash((num(r.bytes_tx) || 0) + (num(r.bytes_rx) || 0)) }),
        h("td", { "class": "num", text: orDash(r.packets) }),
        h("td", { "class": "num", text: orDash(r.header_overhead) }),
        h("td", { "class": "num", text: orDash(r.tokens) }),
        h("td", { "class": "num", text: fixed(r.elapsed_ms, 0) }));
    });
    tbody.replaceChildren.apply(tbody, rows);
    loadAgentTimes();
    drawTimeline();
  }

  /* Each finished question's metrics.json (an artifact) says how long each agent was busy. */
  function loadAgentTimes() {
    Object.keys(runState.results).forEach(function (i) {
      if (runState.metrics[i] !== undefined) return;
      runState.metrics[i] = null;  // in flight
      api("GET", artifactUrl("q" + i + "/metrics.json")).then(function (m) {
        runState.metrics[i] = m || {};
        scheduleTimeline();
      }).catch(function () { runState.metrics[i] = {}; });
    });
  }

  var timelineTimer = null;
  function scheduleTimeline() {
    if (timelineTimer) return;
    timelineTimer = setTimeout(function () { timelineTimer = null; drawTimeline(); }, 200);
  }

  /* Per-agent timeline: the questions laid end to end (each takes its elapsed time); within
   * each, every agent's busy time is a segment in its own lane. */
  function drawTimeline() {
    var lanes = {}, order = [], t = 0;
    Object.keys(runState.results).map(Number).sort(function (a, b) { return a - b; }).forEach(function (i) {
      var r = runState.results[i];
      var elapsed = num(r.elapsed_ms) || 0;
      var agents = (runState.metrics[i] && runState.metrics[i].agents) || [];
      agents.forEach(function (a) {
        var name = a.tool || ("node " + a.node_id);
        if (!lanes[name]) { lanes[name] = []; order.push(name); }
        var busy = Math.min(num(a.busy_ms) || 0, elapsed || Infinity);
        lanes[name].push({ start: t, end: t + busy, title: "question " + i + ": " + name + " busy " + Math.round(busy) + " ms, " + (a.pkts_sent || 0) + " packets sent" });
      });
      if (!lanes.question) { lanes.question = []; order.unshift("question"); }
      lanes.question.push({ start: t, end: t + elapsed, title: "question " + i + ": " + Math.round(elapsed) + " ms, " + (r.status || "") });
      t += elapsed;
    });
    var box = q("#timeline");
    if (!order.length) { box.replaceChildren(h("p", { "class": "muted", text: "No question has finished yet." })); return; }
    window.GaiaCharts.timeline(box, { title: "per-agent busy time, question after question",
      lanes: order.map(function (n) { return { label: n, segments: lanes[n] }; }) });
  }

  function loadRun() {
    return api("GET", "benchmarks/runs/" + encodeURIComponent(RUN_ID)).then(renderRun).then(loadResults).catch(fail);
  }

  function loadResults() {
    return api("GET", "benchmarks/runs/" + encodeURIComponent(RUN_ID) + "/results").then(function (data) {
      runState.results = {};
      listOf(data, "results").forEach(function (r) { runState.results[resultIndex(r)] = r; });
      renderResults();
    }).catch(fail);
  }

  /* The submit form: a HotpotQA suite makes a mesh run (protocol, a backend per role), a
   * conversation suite a replay (targets, judge, workers); the other kind's fields are
   * hidden and disabled, so the browser checks only what is sent. */
  function setupRunForm() {
    var form = q("#run-form");
    var sel = q("#run-suite");
    function kind() {
      var opt = sel.options[sel.selectedIndex];
      return opt && opt.dataset.kind === "conversations" ? "replay" : "mesh";
    }
    function toggle() {
      qa(".run-kind", form).forEach(function (box) {
        var on = box.dataset.for === kind();
        show(box, on);
        qa("input, select", box).forEach(function (field) { field.disabled = !on; });
      });
    }
    sel.addEventListener("change", toggle);
    toggle();
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var d = new FormData(form);
      var err = q("#run-form-error");
      var payload = { suite: d.get("suite"), question_timeout_s: Number(d.get("question_timeout_s")),
                      time_limit_s: Number(d.get("time_limit_s")) };
      if (kind() === "replay") {
        payload.agents = d.getAll("agents");
        if (!payload.agents.length) { err.textContent = "Pick one or more targets to replay against."; err.hidden = false; return; }
        if (d.get("judge")) payload.judge = d.get("judge");
        payload.parallel = Number(d.get("parallel"));
        payload.concurrency = Number(d.get("concurrency"));
      } else {
        var tools = {};
        qa("select[data-role]", form).forEach(function (s) { tools[s.dataset.role] = s.value; });
        payload.protocol = d.get("protocol");
        payload.tools = tools;
      }
      if (d.get("selection") === "first") payload.limit = Number(d.get("limit"));
      if (d.get("selection") === "indexes") payload.indexes = String(d.get("indexes")).split(/[\s,]+/).filter(Boolean).map(Number);
      err.hidden = true;
      G.clearFieldErrors(form);
      q("#run-submit").disabled = true;
      api("POST", "benchmarks/runs", payload).then(function (run) {
        window.location.href = "/runs/" + encodeURIComponent(runId(run)) + "/";
      }).catch(function (e2) {
        if (!G.fieldError(form, e2)) { err.textContent = e2.message; err.hidden = false; }
        q("#run-submit").disabled = false;
      });
    });
  }

  function setupCompareForm() {
    var form = q("#compare-form");
    form.addEventListener("submit", function (e) {
      var ids = Object.keys(picked).filter(function (id) { return picked[id]; });
      if (ids.length < 2) { e.preventDefault(); notice("Pick at least two runs.", true); return; }
      q("#compare-runs").value = ids.join(",");
    });
  }

  G.pages.push({
    attach: function (feed) {
      ["run_created", "run_started", "run_progress", "question_finished", "run_finished", "run_requeued"].forEach(function (name) {
        feed.on(name, runEvent);
      });
      feed.on("queue_changed", function (evt) {
        if (PAGE !== "run") return;
        runState.queue = evt.queue;
        queueNotice(runState.queue, runState.status);
      });
    },
    resync: function () {
      if (PAGE === "dashboard" || PAGE === "runs") return loadRunList();
      if (PAGE === "run") return loadRun();
      return null;
    },
    live: PAGE !== "run_new" && PAGE !== "compare"
  });

  if (PAGE === "dashboard" || PAGE === "runs") loadRunList();
  if (PAGE === "runs") setupCompareForm();
  if (PAGE === "run") loadRun();
  if (PAGE === "run_new") setupRunForm();

  G.bench = { runId: runId, progressNode: progressNode, setProgress: setProgress, summaryOf: summaryOf,
              suiteRef: suiteRef, primaryKey: primaryKey, queueNotice: queueNotice, renderNotes: renderNotes };
})();
