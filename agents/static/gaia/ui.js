/* The operator pages' behaviour: forms call the REST API (/api/v1) with the session and its
 * CSRF token, and the live feed (feed.js) patches the server-rendered page in place.
 * Everything from a model, an agent or a user is set with textContent: never as markup. */
(function () {
  "use strict";

  var body = document.body;
  var PAGE = body.dataset.page;
  var API = "/api/v1";

  // ------------------------------------------------------------------------------------------
  // DOM and HTTP helpers

  function h(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      for (var k in attrs) {
        if (!Object.prototype.hasOwnProperty.call(attrs, k) || attrs[k] === null || attrs[k] === undefined || attrs[k] === false) continue;
        if (k === "text") node.textContent = String(attrs[k]);
        else if (k === "class") node.className = attrs[k];
        else node.setAttribute(k, attrs[k] === true ? "" : String(attrs[k]));
      }
    }
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) child.forEach(function (c) { if (c) node.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
      else node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
    }
    return node;
  }

  function q(sel, root) { return (root || document).querySelector(sel); }
  function qa(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }
  function attrSel(name, value) { return "[" + name + '="' + CSS.escape(String(value)) + '"]'; }
  function csrf() { var m = q('meta[name="csrf-token"]'); return m ? m.content : ""; }
  function show(node, visible) { if (node) node.hidden = !visible; }
  function orDash(v) { return v === null || v === undefined || v === "" ? "?" : String(v); }
  function num(v) { return typeof v === "number" ? v : (v === null || v === undefined || v === "" ? null : Number(v)); }
  function fixed(v, d) { v = num(v); return v === null || isNaN(v) ? "–" : v.toFixed(d === undefined ? 2 : d); }
  function listOf(data, key) {
    if (Array.isArray(data)) return data;
    if (!data) return [];
    return data.results || data[key] || data.items || data.data || [];
  }

  var noticeTimer = null;
  function notice(text, bad) {
    var n = q("#notice");
    if (!n) return;
    n.textContent = text;
    n.className = "notice" + (bad ? " bad" : "");
    n.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(function () { n.hidden = true; }, bad ? 8000 : 3000);
  }

  function errorText(status, data) {
    if (data && typeof data === "object") {
      if (data.error) return typeof data.error === "string" ? data.error : (data.error.message || JSON.stringify(data.error));
      if (data.detail) return String(data.detail);
      if (data.message) return String(data.message);
      var keys = Object.keys(data);
      if (keys.length) return keys.map(function (k) { return k + ": " + [].concat(data[k]).join(" "); }).join("; ");
    }
    return "HTTP " + status;
  }

  function api(method, path, payload) {
    var init = { method: method, credentials: "same-origin",
                 headers: { "Accept": "application/json", "X-CSRFToken": csrf() } };
    if (payload !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    return fetch(path.indexOf("/") === 0 ? path : API + "/" + path, init).then(function (r) {
      return r.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
        if (!r.ok) {
          var err = new Error(errorText(r.status, data));
          err.status = r.status; err.data = data;
          throw err;
        }
        return data;
      });
    });
  }

  function fail(err) { notice(err.message || String(err), true); }

  // ------------------------------------------------------------------------------------------
  // Renderers (the JS twins of the templates in templates/ui/)

  function badge(status, id) {
    return h("span", { "class": "badge status-" + status, id: id, text: status });
  }

  function threadLink(id, text) {
    return h("a", { href: "/threads/" + encodeURIComponent(id) + "/", text: text || id });
  }

  function agentRow(a) {
    return h("tr", { "data-agent": a.slug || a.name },
      h("td", null, h("span", { "class": "light state-" + a.state, title: a.state }), " ",
        h("span", { "class": "state-label", text: a.state })),
      h("td", null, h("a", { href: "/agents/" + encodeURIComponent(a.slug || a.name) + "/", text: a.slug || a.name })),
      h("td", { text: a.display_name || "" }),
      h("td", { "class": "num queue-depth", text: a.queue_depth || 0 }),
      h("td", { "class": "current-thread" }, a.current_thread ? threadLink(a.current_thread, a.current_thread.slice(0, 12) + "…") : null),
      h("td", { text: (a.provider || "") + " / " + (a.model || "") }),
      h("td", { "class": "last-activity", text: a.last_activity || "" }));
  }

  function threadRow(t) {
    var title = t.title || t.id;
    if (title.length > 60) title = title.slice(0, 59) + "…";
    return h("tr", { "data-thread": t.id },
      h("td", null, badge(t.status)),
      h("td", null, threadLink(t.id, title)),
      h("td", { text: t.agent || "" }),
      h("td", { text: (t.participants && t.participants[0]) || "" }),
      h("td", { "class": "num message-count", text: t.message_count || 0 }),
      h("td", { "class": "last-activity", text: t.last_activity || "" }));
  }

  function messageNode(m) {
    var p = m.payload || {};
    var art = h("article", { "class": "msg role-" + m.role + (m.internal ? " internal" : ""), "data-message-id": m.id,
                             "data-response-id": m.response_id || null },
      h("header", null, h("strong", { text: m.from }), " → " + m.to + " ",
        h("span", { "class": "muted", text: m.payload_type + (m.internal ? " · internal" : "") + " · " + m.timestamp })));
    if (p.reasoning) art.appendChild(h("details", { "class": "reasoning" }, h("summary", { text: "reasoning" }),
                                       h("pre", { "class": "text", text: p.reasoning })));
    art.appendChild(h("pre", { "class": "text body", text: p.content || "" }));
    if (p.tool_calls) art.appendChild(h("pre", { "class": "text tool-calls", text: JSON.stringify(p.tool_calls, null, 1) }));
    if (m.role === "assistant") {
      art.appendChild(h("footer", { "class": "meta" },
        h("span", { "data-meta": "tokens", text: orDash(m.input_tokens) + " in / " + orDash(m.output_tokens) + " out" + (m.usage_estimated ? " (estimated)" : "") }),
        " · TTFT ", h("span", { "data-meta": "ttft", text: orDash(m.ttft_ms) }), " ms",
        " · ", h("span", { "data-meta": "latency", text: orDash(m.latency_ms) }), " ms",
        " · finish ", h("span", { "class": "finish", "data-meta": "finish", text: m.finish_reason || "?" }),
        m.provider ? " · via " + m.provider : null));
    }
    return art;
  }

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

  var picked = {};  // the runs ticked for comparison survive rows being redrawn
  document.addEventListener("change", function (e) {
    if (e.target.classList && e.target.classList.contains("run-pick")) picked[e.target.value] = e.target.checked;
  });

  function runRow(run, selectable) {
    var id = runId(run);
    var s = summaryOf(run);
    return h("tr", { "data-run": id },
      selectable ? h("td", null, h("input", { type: "checkbox", "class": "run-pick", value: id, checked: !!picked[id], "aria-label": "compare run " + id })) : null,
      h("td", null, h("a", { href: "/runs/" + encodeURIComponent(id) + "/", text: "#" + id })),
      h("td", { text: runSuite(run) }),
      h("td", { text: run.protocol || "" }),
      h("td", { "class": "run-status" }, badge(run.status)),
      h("td", { "class": "run-progress" }, progressNode(runDone(run), runTotal(run), run.status)),
      h("td", { "class": "num", text: fixed(s.mean_exact_match) }),
      h("td", { "class": "num", text: fixed(s.mean_f1) }),
      h("td", { text: run.queued_at || run.created_at || "" }));
  }

  // ------------------------------------------------------------------------------------------
  // Forms that call the API (they also work without JavaScript: DRF takes form posts)

  function formJson(form) {
    var kind = form.dataset.kind;
    var data = new FormData(form);
    if (kind === "inject") {
      var out = { to: data.get("to"), payload: data.get("payload") };
      if (data.get("thread_id")) out.thread_id = data.get("thread_id");
      return out;
    }
    return {};
  }

  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form.classList || !form.classList.contains("api-form")) return;
    e.preventDefault();
    var button = q("button[type=submit]", form);
    if (button) button.disabled = true;
    api("POST", form.getAttribute("action"), formJson(form)).then(function (data) {
      var kind = form.dataset.kind;
      if (kind === "inject") { q("textarea", form).value = ""; notice("Message stored; the agent is replying."); }
      else if (kind === "kill") notice("Kill sent.");
      else if (kind === "pause" || kind === "resume") { notice("Agent " + kind + "d."); agentPaused(kind === "pause"); }
      else if (kind === "cancel") notice("Cancel sent.");
      form.dispatchEvent(new CustomEvent("gaia:done", { detail: data, bubbles: true }));
    }).catch(fail).then(function () { if (button) button.disabled = false; });
  });

  // ------------------------------------------------------------------------------------------
  // Agents: state lights everywhere an agent is shown

  function applyAgentState(evt) {
    qa("tr" + attrSel("data-agent", evt.agent)).forEach(function (row) {
      var light = q(".light", row);
      light.className = "light state-" + evt.state;
      light.title = evt.state;
      q(".state-label", row).textContent = evt.state;
      q(".queue-depth", row).textContent = evt.queue_depth || 0;
      var cell = q(".current-thread", row);
      cell.replaceChildren();
      if (evt.current_thread) cell.appendChild(threadLink(evt.current_thread, evt.current_thread.slice(0, 12) + "…"));
      if (evt.timestamp) q(".last-activity", row).textContent = evt.timestamp;
    });
    if (PAGE === "agent" && body.dataset.agent === evt.agent) {
      var light = q("#agent-light");
      light.className = "light state-" + evt.state;
      q("#agent-state").textContent = evt.state;
      q("#agent-queue").textContent = evt.queue_depth || 0;
      if (evt.state === "paused") agentPaused(true);
    }
  }

  function agentPaused(paused) {
    if (PAGE !== "agent") return;
    show(q('form[data-kind="pause"]'), !paused);
    show(q('form[data-kind="resume"]'), paused);
  }

  function replaceAgents(agents) {
    var tbody = q("#agent-rows");
    if (!tbody) return;
    tbody.replaceChildren.apply(tbody, agents.map(agentRow));
  }

  // ------------------------------------------------------------------------------------------
  // Threads: rows in lists, and the thread page

  var THREAD_ID = body.dataset.thread;

  function upsertThreadRow(t) {
    var tbody = q("#thread-rows");
    if (!tbody) return;
    var old = q("tr" + attrSel("data-thread", t.id), tbody);
    var row = threadRow(t);
    if (old) old.replaceWith(row);
    else {
      var empty = q("tr.empty", tbody);
      if (empty) empty.remove();
      tbody.insertBefore(row, tbody.firstChild);
    }
    row.classList.add("flash");
  }

  function threadCreated(evt) {
    var t = evt.thread;
    if (PAGE === "dashboard" && t.status === "active") upsertThreadRow(t);
    if (PAGE === "threads" && !window.location.search) upsertThreadRow(t);
    if (PAGE === "threads" && window.location.search) resyncThreadList();
    if (PAGE === "agent" && t.agent === body.dataset.agent) upsertThreadRow(t);
    if (PAGE === "dashboard") scheduleOrganism();
  }

  function threadUpdated(evt) {
    qa("tr" + attrSel("data-thread", evt.thread_id)).forEach(function (row) {
      var cell = row.children[0];
      cell.replaceChildren(badge(evt.status));
      q(".message-count", row).textContent = evt.message_count;
      q(".last-activity", row).textContent = evt.last_activity || "";
      if (PAGE === "dashboard" && evt.status !== "active") setTimeout(function () { row.remove(); }, 1500);
    });
    if (PAGE === "dashboard") scheduleOrganism();
    if (THREAD_ID && evt.thread_id === THREAD_ID) {
      var st = q("#thread-status");
      st.className = "badge status-" + evt.status;
      st.textContent = evt.status;
      q("#thread-count").textContent = evt.message_count;
      show(q("#kill-form"), evt.status === "active");
      var err = q("#thread-error");
      err.textContent = evt.error || "";
      show(err, !!evt.error);
      if (evt.status !== "active") qa(".msg.streaming").forEach(function (n) { n.classList.remove("streaming"); });
    }
  }

  function appendMessage(m) {
    var box = q("#messages");
    if (q("article" + attrSel("data-message-id", m.id), box)) return;
    var node = messageNode(m);
    // the reply that grew here (still streaming, or stopped by a thread_updated that came first)
    var grown = m.response_id ? qa("article" + attrSel("data-response-id", m.response_id) + ":not([data-message-id])", box) : [];
    if (grown.length) {
      grown[0].replaceWith(node);
      grown.slice(1).forEach(function (n) { n.remove(); });
    } else {
      box.appendChild(node);
    }
  }

  function messageDelta(evt) {
    var box = q("#messages");
    // The reply's bubble, even one a thread_updated (kill, error) already stopped: a delta sent
    // before the stop can arrive after it.
    var node = q("article" + attrSel("data-response-id", evt.response_id), box);
    if (node && node.dataset.messageId) return;  // already stored: the stored text is whole
    if (!node) {
      node = h("article", { "class": "msg role-assistant streaming", "data-response-id": evt.response_id },
        h("header", null, h("strong", { text: evt.agent }), " ", h("span", { "class": "muted", text: "replying…" })),
        h("details", { "class": "reasoning", hidden: true }, h("summary", { text: "reasoning" }), h("pre", { "class": "text" })),
        h("pre", { "class": "text body" }),
        h("footer", { "class": "meta" }, h("span", { "data-meta": "chars", text: "0" }), " characters so far"));
      box.appendChild(node);
    }
    if (evt.reasoning) {
      var det = q("details.reasoning", node);
      det.hidden = false;
      q("pre", det).textContent += evt.reasoning;
    }
    if (evt.text) q(".body", node).textContent += evt.text;
    q('[data-meta="chars"]', node).textContent = evt.output_chars;
    if (q("#thread-status").textContent === "active") show(q("#kill-form"), true);
  }

  function resyncThread() {
    return api("GET", "threads/" + encodeURIComponent(THREAD_ID)).then(function (t) {
      var messages = listOf(t.messages, "messages");
      var box = q("#messages");
      var streaming = qa("article.streaming", box);
      box.replaceChildren.apply(box, messages.map(messageNode));
      // A reply still growing stays (the thread read may predate its turn) unless it is stored.
      streaming.forEach(function (n) {
        if (!q("article" + attrSel("data-response-id", n.dataset.responseId) + "[data-message-id]", box)) box.appendChild(n);
      });
      threadUpdated({ thread_id: t.id, status: t.status, message_count: t.message_count,
                      last_activity: t.last_activity, error: t.error });
    }).catch(fail);
  }

  // ------------------------------------------------------------------------------------------
  // Dashboard stats

  var organismTimer = null;
  function scheduleOrganism() {
    if (organismTimer) return;
    organismTimer = setTimeout(function () {
      organismTimer = null;
      api("GET", "organism").then(function (o) {
        qa("[data-stat]").forEach(function (n) {
          if (o[n.dataset.stat] !== undefined) n.textContent = o[n.dataset.stat];
        });
      }).catch(function () { /* the stats stay as they were */ });
    }, 1000);
  }

  // ------------------------------------------------------------------------------------------
  // Benchmark runs: lists with progress bars, the run page, the compare page

  var RUN_ID = body.dataset.run;

  function loadRunList() {
    var box = q("#recent-runs") || q("#run-list");
    if (!box) return;
    var selectable = box.id === "run-list";
    return api("GET", "benchmarks/runs?limit=" + (box.dataset.limit || 20)).then(function (data) {
      var runs = listOf(data, "runs");
      if (!runs.length) { box.replaceChildren(h("p", { "class": "muted", text: "No runs yet." })); return; }
      box.replaceChildren(h("table", { "class": "runs" },
        h("thead", null, h("tr", null, selectable ? h("th", { text: "" }) : null, h("th", { text: "Run" }), h("th", { text: "Suite" }),
          h("th", { text: "Protocol" }), h("th", { text: "Status" }), h("th", { text: "Progress" }),
          h("th", { "class": "num", text: "EM" }), h("th", { "class": "num", text: "F1" }), h("th", { text: "Queued" }))),
        h("tbody", { id: "run-rows" }, runs.map(function (r) { return runRow(r, selectable); }))));
    }).catch(function (err) {
      box.replaceChildren(h("p", { "class": "muted", text: "Runs are not available: " + err.message }));
    });
  }

  function runEvent(evt) {
    var run = evt.run;
    var id = run ? runId(run) : evt.run_id;
    if (q("#run-rows")) {
      var row = q("tr" + attrSel("data-run", id), q("#run-rows"));
      if (run) {
        var fresh = runRow(run, !!q("#run-list"));
        if (row) row.replaceWith(fresh); else q("#run-rows").insertBefore(fresh, q("#run-rows").firstChild);
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

  var runState = { run: null, results: {}, metrics: {} };

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
    var prog = run.progress || {};
    renderProgress({ status: run.status, questions_done: runDone(run), questions_total: runTotal(run),
                     packets: prog.packets, bytes: prog.bytes });
    var s = summaryOf(run);
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
      .map(function (p) { return [h("dt", { text: p[0] }), h("dd", { text: String(p[1]) })]; })));
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

  var COMPARE_METRICS = [
    ["exact_match", "Exact match", ""], ["f1", "F1", ""], ["rouge_l", "ROUGE-L", ""],
    ["bytes", "Bytes per question", "B"], ["packets", "Packets per question", ""],
    ["header_overhead", "Header overhead per question", "B"], ["elapsed_ms", "Mean elapsed per question", "ms"]];

  function compareValue(run, key) {
    var m = run.metrics || run.summary || run;
    var candidates = {
      exact_match: [m.exact_match, m.mean_exact_match, m.em],
      f1: [m.f1, m.mean_f1],
      rouge_l: [m.rouge_l, m.mean_rouge_l],
      bytes: [m.bytes, m.bytes_per_question && m.bytes_per_question.total, m.bytes_per_question],
      packets: [m.packets, m.pkt_cnt_per_question, m.packets_per_question],
      header_overhead: [m.header_overhead, m.header_overhead_per_question],
      elapsed_ms: [m.elapsed_ms && typeof m.elapsed_ms === "object" ? m.elapsed_ms.mean : m.elapsed_ms, m.elapsed]
    }[key];
    for (var i = 0; i < candidates.length; i++) {
      var v = num(candidates[i]);
      if (v !== null && !isNaN(v) && typeof candidates[i] !== "object") return v;
    }
    return null;
  }

  function runLabel(run) { return "#" + runId(run) + " " + (run.protocol || "") + (runSuite(run) ? " · " + runSuite(run) : ""); }

  function loadCompare() {
    var ids = (body.dataset.runs || "").split(",").map(function (s) { return s.trim(); }).filter(Boolean);
    if (ids.length < 1) { q("#differences").replaceChildren(h("p", { "class": "muted", text: "Pick runs to compare on the runs page." })); return; }
    api("GET", "benchmarks/compare?runs=" + encodeURIComponent(ids.join(","))).then(function (data) {
      var runs = listOf(data.runs || data, "runs");
      q("#compare-head").replaceChildren(h("tr", null, h("th", { text: "Run" }), COMPARE_METRICS.map(function (c) { return h("th", { "class": "num", text: c[1] }); })));
      q("#compare-rows").replaceChildren.apply(q("#compare-rows"), runs.map(function (r) {
        return h("tr", { "data-run": runId(r) }, h("td", null, h("a", { href: "/runs/" + encodeURIComponent(runId(r)) + "/", text: runLabel(r) })),
          COMPARE_METRICS.map(function (c) { return h("td", { "class": "num", text: window.GaiaCharts.format(compareValue(r, c[0])) }); }));
      }));
      var charts = q("#charts");
      charts.replaceChildren.apply(charts, COMPARE_METRICS.map(function (c) {
        var box = h("div", { "class": "card chart", "data-metric": c[0] });
        window.GaiaCharts.bars(box, { title: c[1], unit: c[2], metric: c[0],
          items: runs.map(function (r) { return { label: runLabel(r), value: compareValue(r, c[0]) }; }) });
        return box;
      }));
      renderDifferences(data.questions || [], runs);
    }).catch(function (err) {
      var e = q("#compare-error");
      e.textContent = err.message;
      e.hidden = false;
    });
  }

  function renderDifferences(questions, runs) {
    var box = q("#differences");
    var diffs = questions.filter(function (x) { return x.differs; });
    if (!diffs.length) { box.replaceChildren(h("p", { "class": "muted", text: "Every run gave the same answers." })); return; }
    box.replaceChildren(h("table", { "class": "diff" },
      h("thead", null, h("tr", null, h("th", { text: "#" }), h("th", { text: "Question" }), h("th", { text: "Gold" }),
        runs.map(function (r) { return h("th", { text: runLabel(r) }); }))),
      h("tbody", null, diffs.map(function (d) {
        return h("tr", { "data-question": d.question_index }, h("td", { "class": "num", text: d.question_index }),
          h("td", { text: d.question || "" }), h("td", { text: d.gold || "" }),
          runs.map(function (r) {
            var a = (d.runs || {})[String(runId(r))];
            if (!a) return h("td", { "class": "muted", text: "not run" });
            return h("td", { "class": a.exact_match ? "em" : "" }, h("span", { text: a.prediction === null || a.prediction === undefined ? "(" + a.status + ")" : a.prediction }),
              h("span", { "class": "muted small", text: " EM " + fixed(a.exact_match) + " · F1 " + fixed(a.f1) }));
          }));
      }))));
  }

  function setupRunForm() {
    var form = q("#run-form");
    api("GET", "benchmarks/suites").then(function (data) {
      var suites = listOf(data, "suites");
      var sel = q("#run-suite");
      sel.replaceChildren.apply(sel, suites.map(function (s) {
        var count = s.question_count !== undefined ? s.question_count : (s.questions ? s.questions.length : null);
        return h("option", { value: s.name || s.id, text: (s.name || s.id) + (count !== null ? " (" + count + " questions)" : "") });
      }));
    }).catch(fail);
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var d = new FormData(form);
      var tools = {};
      qa("select[data-role]", form).forEach(function (s) { tools[s.dataset.role] = s.value; });
      var payload = { suite: d.get("suite"), protocol: d.get("protocol"), tools: tools,
                      question_timeout_s: Number(d.get("question_timeout_s")),
                      time_limit_s: Number(d.get("time_limit_s")) };
      if (d.get("selection") === "first") payload.limit = Number(d.get("limit"));
      if (d.get("selection") === "indexes") payload.indexes = String(d.get("indexes")).split(/[\s,]+/).filter(Boolean).map(Number);
      var err = q("#run-form-error");
      err.hidden = true;
      q("#run-submit").disabled = true;
      api("POST", "benchmarks/runs", payload).then(function (run) {
        window.location.href = "/runs/" + encodeURIComponent(runId(run)) + "/";
      }).catch(function (e2) {
        err.textContent = e2.message;
        err.hidden = false;
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

  // ------------------------------------------------------------------------------------------
  // Wiring: what each page listens to, and how it resyncs

  var subscription = null;
  if (PAGE === "thread") subscription = { threads: [THREAD_ID], agents: [], events: [] };
  var feed = new window.GaiaFeed({ subscription: subscription, batch: PAGE !== "thread" });
  window.gaiaFeed = feed;

  feed.on("agent_state", applyAgentState);
  feed.on("agent_changed", function (evt) {
    if (evt.change === "paused" || evt.change === "resumed") {
      applyAgentState({ agent: evt.agent, state: evt.change === "paused" ? "paused" : "idle", queue_depth: 0 });
      if (PAGE === "agent" && body.dataset.agent === evt.agent) agentPaused(evt.change === "paused");
    } else {
      resyncAgents();  // created, updated or deleted: the list itself changed
    }
  });
  feed.on("thread_created", threadCreated);
  feed.on("thread_updated", threadUpdated);
  feed.on("message", function (evt) {
    if (THREAD_ID && evt.message.thread_id === THREAD_ID) appendMessage(evt.message);
    if (PAGE === "dashboard") scheduleOrganism();
  });
  feed.on("message_delta", function (evt) { if (THREAD_ID && evt.thread_id === THREAD_ID) messageDelta(evt); });
  feed.on("error", function (evt) {
    if (evt.id !== undefined) return;  // a command's error (feed.command handles it)
    if (THREAD_ID && evt.thread_id === THREAD_ID) {
      var e = q("#thread-error"); e.textContent = typeof evt.error === "string" ? evt.error : JSON.stringify(evt.error); e.hidden = false;
    }
  });
  ["run_created", "run_started", "run_progress", "question_finished", "run_finished"].forEach(function (name) {
    feed.on(name, runEvent);
  });

  function resyncAgents() {
    if (PAGE !== "dashboard" && PAGE !== "agents" && PAGE !== "agent") return null;
    return api("GET", "agents").then(function (data) {
      var agents = listOf(data, "agents");
      if (PAGE === "agent") agents.filter(function (a) { return (a.slug || a.name) === body.dataset.agent; }).forEach(function (a) {
        applyAgentState({ agent: a.slug || a.name, state: a.state, queue_depth: a.queue_depth, current_thread: a.current_thread });
        agentPaused(!!a.paused);
      });
      else replaceAgents(agents);
    }).catch(function () {});
  }

  feed.onResync(function () {
    var reads = [];
    if (PAGE === "thread") reads.push(resyncThread());
    reads.push(resyncAgents());
    if (PAGE === "dashboard") {
      scheduleOrganism();
      reads.push(api("GET", "threads?status=active&limit=20").then(function (data) {
        var tbody = q("#thread-rows");
        var threads = listOf(data, "threads");
        if (threads.length) tbody.replaceChildren.apply(tbody, threads.map(threadRow));
        else tbody.replaceChildren(h("tr", { "class": "empty" }, h("td", { colspan: 6, text: "No thread is active." })));
      }).catch(function () {}));
    }
    if (PAGE === "threads") reads.push(resyncThreadList());
    if (PAGE === "dashboard" || PAGE === "runs") reads.push(loadRunList());
    if (PAGE === "run") reads.push(loadRun());
    return Promise.all(reads);
  });

  /* The thread list as the server rendered it (same filters, same page), read again. */
  function resyncThreadList() {
    var params = new URLSearchParams(window.location.search);
    var per = Number(body.dataset.perPage) || 50;
    var query = new URLSearchParams({ limit: per, offset: per * ((Number(params.get("page")) || 1) - 1) });
    ["status", "agent", "q"].forEach(function (k) { if (params.get(k)) query.set(k, params.get(k)); });
    return api("GET", "threads?" + query.toString()).then(function (data) {
      var tbody = q("#thread-rows");
      var threads = listOf(data, "threads");
      if (threads.length) tbody.replaceChildren.apply(tbody, threads.map(threadRow));
      else tbody.replaceChildren(h("tr", { "class": "empty" }, h("td", { colspan: 6, text: "No thread matches." })));
    }).catch(function () {});
  }

  if (PAGE === "dashboard" || PAGE === "runs") loadRunList();
  if (PAGE === "runs") setupCompareForm();
  if (PAGE === "run") loadRun();
  if (PAGE === "run_new") setupRunForm();
  if (PAGE === "compare") loadCompare();
  if (PAGE !== "login" && PAGE !== "run_new" && PAGE !== "compare") feed.start();
  else feed.setStatus("static", "no live feed");

  window.gaiaUI = { api: api, h: h, messageNode: messageNode };
})();
