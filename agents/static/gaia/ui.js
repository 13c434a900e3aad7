/* The operator pages' behaviour: agents, threads and the dashboard, patched in place by the
 * live feed (feed.js), which this script starts; the benchmark pages join it through
 * Gaia.pages (benchmarks/runs.js). Helpers and the API forms are in base.js. */
(function () {
  "use strict";

  var G = window.Gaia;
  var h = G.h, q = G.q, qa = G.qa, attrSel = G.attrSel, show = G.show, orDash = G.orDash;
  var listOf = G.listOf, api = G.api, fail = G.fail, badge = G.badge;
  var body = document.body;
  var PAGE = G.PAGE;
  var SELECTABLE = PAGE === "threads" && body.dataset.selectable === "1";

  // ------------------------------------------------------------------------------------------
  // Renderers (the JS twins of the templates in templates/ui/)

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
      h("td", { "class": "last-activity" }, G.timeNode(a.last_activity, "never")));
  }

  function threadRow(t) {
    var title = t.title || t.id;
    if (title.length > 60) title = title.slice(0, 59) + "…";
    return h("tr", { "data-thread": t.id },
      // the thread list's picks for a suite (benchmarks/static/benchmarks/suites.js) survive redraws
      SELECTABLE ? h("td", null, h("input", { type: "checkbox", "class": "thread-pick", value: t.id, checked: !!(G.pickedThreads || {})[t.id], "aria-label": "pick thread " + t.id })) : null,
      h("td", null, badge(t.status)),
      h("td", null, threadLink(t.id, title)),
      h("td", { text: t.agent || "" }),
      h("td", { text: (t.participants && t.participants[0]) || "" }),
      h("td", { "class": "num message-count", text: t.message_count || 0 }),
      h("td", { "class": "last-activity" }, G.timeNode(t.last_activity)));
  }

  function messageNode(m) {
    var p = m.payload || {};
    var calls = (p.tool_calls || []).map(function (c) { return toolCallNode(c, p.origin, null); });
    if (p.tool_call_id) calls = [toolCallNode({ id: p.tool_call_id, name: m.internal ? m.from : "tool result" }, p.origin, m)];
    var art = h("article", { "class": "msg role-" + m.role + (m.internal ? " internal" : "") + (calls.length ? " tools" : ""),
                             "data-message-id": m.id, "data-response-id": m.response_id || null },
      h("header", null, h("strong", { text: m.from }), " → " + m.to + " ",
        h("span", { "class": "muted" }, m.payload_type + (m.internal ? " · internal" : "") + " · ", G.timeNode(m.timestamp))));
    if (p.reasoning) art.appendChild(h("details", { "class": "reasoning" }, h("summary", { text: "reasoning" }),
                                       h("pre", { "class": "text", text: p.reasoning })));
    if (!calls.length || (p.tool_calls && p.content)) art.appendChild(h("pre", { "class": "text body", text: p.content || "" }));
    calls.forEach(function (c) { art.appendChild(c); });
    if (m.role === "assistant" && (!m.internal || !calls.length)) {
      art.appendChild(h("footer", { "class": "meta" },
        h("span", { "data-meta": "tokens", text: orDash(m.input_tokens) + " in / " + orDash(m.output_tokens) + " out" + (m.usage_estimated ? " (estimated)" : "") }),
        " · TTFT ", h("span", { "data-meta": "ttft", text: orDash(m.ttft_ms) }), " ms",
        " · ", h("span", { "data-meta": "latency", text: orDash(m.latency_ms) }), " ms",
        " · finish ", h("span", { "class": "finish", "data-meta": "finish", text: m.finish_reason || "?" }),
        m.provider ? " · via " + m.provider : null));
    }
    return art;
  }

  /* One tool call and its result, collapsed (templates/ui/_tool_call.html). ``call``: {id, name,
   * arguments} (no arguments: a result whose call is not in the thread); ``result``: the public
   * result message, or null while there is none. */
  function toolCallNode(call, origin, result) {
    var args = call.arguments;
    var alone = args === null || args === undefined;
    if (!alone && typeof args !== "string") args = JSON.stringify(args);
    return h("details", { "class": "tool-call" + (alone ? " alone" : "") + (result && result.error ? " failed" : ""),
                          "data-call-id": call.id, "data-tool": call.name, "data-origin": origin },
      toolSummary(call.name, origin, result),
      alone ? null : h("div", { "class": "tool-args" }, h("span", { "class": "label", text: "arguments" }),
                       h("pre", { "class": "text", text: args })),
      result ? toolResultNode(result) : null);
  }

  function toolSummary(name, origin, result) {
    var ms = result ? result.latency_ms : null;
    return h("summary", null,
      h("code", { "class": "tool-name", text: name }), " ",
      h("span", { "class": "tool-origin", title: origin === "agent" ? "run by Gaia" : "run by the client", text: origin }),
      result && ms !== null && ms !== undefined ? [" ", h("span", { "class": "tool-duration", text: ms + " ms" })] : null,
      result && result.error ? [" ", h("span", { "class": "tool-failed", text: "failed" })] : null,
      result ? null : [" ", h("span", { "class": "tool-state", text: origin === "client" ? "sent to the client" : "no result yet" })]);
  }

  function toolResultNode(result) {
    return h("div", { "class": "tool-result", "data-message-id": result.id === undefined ? null : result.id },
      h("span", { "class": "label", text: "result" }), h("pre", { "class": "text", text: (result.payload || {}).content || "" }));
  }

  /* The call a result of ``callId`` joins: the latest of that id on the page, unless a stored
   * result joined it already (as the view pairs them). */
  function callFor(box, callId) {
    var found = qa("details.tool-call:not(.alone)" + attrSel("data-call-id", callId), box);
    var call = found[found.length - 1];
    return call && !q(".tool-result[data-message-id]", call) ? call : null;
  }

  function setToolResult(call, result) {
    call.classList.toggle("failed", !!result.error);
    q("summary", call).replaceWith(toolSummary(call.dataset.tool, call.dataset.origin, result));
    var old = q(".tool-result", call);
    if (old) old.replaceWith(toolResultNode(result));
    else call.appendChild(toolResultNode(result));
  }

  function setToolState(call, text) {
    var state = call ? q(".tool-state", call) : null;
    if (state) state.textContent = text;
  }

  /* Where a message goes: a tool result into its call, anything else at the end. */
  function placeMessage(box, m, before) {
    var call = m.payload && m.payload.tool_call_id ? callFor(box, m.payload.tool_call_id) : null;
    if (call) setToolResult(call, m);
    else box.insertBefore(messageNode(m), before || null);
  }

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
      if (evt.timestamp) q(".last-activity", row).replaceChildren(G.timeNode(evt.timestamp));
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
  // A page of earlier messages (?before=): new ones belong to the latest page, not here.
  var OLDER_PAGE = !!(document.getElementById("messages") || {dataset: {}}).dataset.olderPage;

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
    // The lists leave a benchmark run's threads out unless they are filtered by run.
    if (PAGE === "threads" && !window.location.search && !t.run) upsertThreadRow(t);
    if (PAGE === "threads" && window.location.search) resyncThreadList();
    if (PAGE === "agent" && t.agent === body.dataset.agent && !t.run) upsertThreadRow(t);
    if (PAGE === "dashboard") scheduleOrganism();
  }

  function threadUpdated(evt) {
    qa("tr" + attrSel("data-thread", evt.thread_id)).forEach(function (row) {
      var cell = row.children[0];
      cell.replaceChildren(badge(evt.status));
      q(".message-count", row).textContent = evt.message_count;
      q(".last-activity", row).replaceChildren(G.timeNode(evt.last_activity));
      if (PAGE === "dashboard" && evt.status !== "active") setTimeout(function () { row.remove(); }, 1500);
    });
    if (PAGE === "dashboard") scheduleOrganism();
    if (THREAD_ID && evt.thread_id === THREAD_ID) {
      var st = q("#thread-status");
      st.className = "badge status-" + evt.status;
      st.textContent = evt.status;
      q("#thread-count").textContent = evt.message_count;
      var running = evt.status === "active" || evt.status === "waiting";  // waiting: for an approval
      show(q("#kill-form"), running);
      var err = q("#thread-error");
      err.textContent = evt.error || "";
      show(err, !!evt.error);
      if (!running) qa(".msg.streaming").forEach(function (n) { n.classList.remove("streaming"); });
    }
  }

  /* The thread header's token totals: the thread's own (a read), plus each new message's. */
  function setTokens(tin, tout) {
    var a = q("#thread-tokens-in"), b = q("#thread-tokens-out");
    if (!a || !b) return;
    a.textContent = tin || 0;
    b.textContent = tout || 0;
  }
  function addTokens(tin, tout) {
    var a = q("#thread-tokens-in"), b = q("#thread-tokens-out");
    if (!a || !b || (!tin && !tout)) return;
    setTokens(Number(a.textContent) + (tin || 0), Number(b.textContent) + (tout || 0));
  }

  function appendMessage(m) {
    var box = q("#messages");
    if (q(attrSel("data-message-id", m.id), box)) return;  // an article, or a result in its call
    addTokens(m.input_tokens, m.output_tokens);
    // the reply that grew here (still streaming, or stopped by a thread_updated that came first)
    var grown = m.response_id ? qa("article" + attrSel("data-response-id", m.response_id) + ":not([data-message-id])", box) : [];
    if (grown.length) {
      grown[0].replaceWith(messageNode(m));
      grown.slice(1).forEach(function (n) { n.remove(); });
    } else {
      // the agent's own work was stored before the reply that is still growing
      placeMessage(box, m, m.internal ? q("article.streaming:not([data-message-id])", box) : null);
    }
  }

  /* A tool call of this thread starts or ends (tool_call, tool_result events): its call shows
   * it until the stored result replaces what the event said. */
  function toolEvent(evt) {
    var call = callFor(q("#messages"), evt.call_id);
    if (!call) return;
    if (evt.event === "tool_call") setToolState(call, "running…");
    else setToolResult(call, { payload: { content: evt.output }, latency_ms: evt.duration_ms,
                               error: evt.status === "failed" ? evt.output : null });
  }

  // ------------------------------------------------------------------------------------------
  // Approvals: this thread's tool calls that wait for an operator (templates/ui/_approval.html)

  function approvalNode(a) {
    return h("article", { "class": "approval", "data-approval-id": a.id, "data-status": a.status },
      h("header", null, h("strong", { "class": "approval-tool", text: a.tool }), " ",
        h("span", { "class": "muted" }, (a.server ? "on " + a.server + " · " : "") + "asked by " + a.agent + " · expires ", G.timeNode(a.expires_at))),
      h("pre", { "class": "text approval-args", text: a.arguments || "" }),
      h("form", { "class": "api-form approval-form", method: "post", action: "/api/v1/approvals/" + encodeURIComponent(a.id),
                  "data-kind": "approval", hidden: a.status !== "pending" },
        h("label", null, "Reason (optional) ", h("input", { type: "text", name: "reason", maxlength: 2000, "class": "approval-reason" })), " ",
        h("button", { type: "submit", name: "decision", value: "approve", "class": "approve", text: "Approve" }), " ",
        h("button", { type: "submit", name: "decision", value: "deny", "class": "danger deny", text: "Deny" })),
      approvalOutcome(a));
  }

  function approvalOutcome(a) {
    return h("p", { "class": "approval-outcome", hidden: a.status === "pending" }, badge(a.status),
      a.status === "expired" ? " (nobody decided in time)" : [" by ", h("span", { "class": "decided-by", text: a.decided_by || "?" })],
      a.reason ? [": ", h("q", { "class": "reason", text: a.reason })] : null);
  }

  /* An approval as the API or an event says it is now. A pending one not shown yet is added; a
   * decided one shows its outcome (never undone by a late word that it is pending). */
  function applyApproval(a) {
    var list = q("#approval-list");
    if (!list) return;
    if (a.status === "pending" && a.call_id) setToolState(callFor(q("#messages"), a.call_id), "waiting for approval");
    var card = q("article" + attrSel("data-approval-id", a.id), list);
    if (!card) {
      if (a.status !== "pending") return;  // not one this page was waiting for
      list.appendChild(approvalNode(a));
      show(q("#approvals"), true);
      return;
    }
    if (a.status === "pending" || card.dataset.status !== "pending") return;  // keeps what is typed
    card.dataset.status = a.status;
    show(q("form", card), false);
    q(".approval-outcome", card).replaceWith(approvalOutcome(a));
  }

  /* The call an approval is about, while it waits: the latest of that tool without a result. */
  /* The call an approval event is about: the latest unanswered call of its id (ids repeat
     from one turn to the next). */
  function waitingCall(callId) {
    var found = qa("details.tool-call:not(.alone)" + attrSel("data-call-id", callId), q("#messages"))
      .filter(function (c) { return !!q(".tool-state", c); });
    return found[found.length - 1] || null;
  }

  function resyncApprovals() {
    return api("GET", "approvals?status=any&limit=50&thread=" + encodeURIComponent(THREAD_ID)).then(function (data) {
      listOf(data, "approvals").slice().reverse().forEach(applyApproval);  // oldest first
    }).catch(fail);
  }

  /* The bubble of a reply still streaming (made on its first delta or snapshot), or null once
   * its stored message is drawn (the stored text is whole). A delta sent before a stop
   * (kill, error) can arrive after the thread_updated that stopped the bubble. */
  function streamingNode(evt) {
    var box = q("#messages");
    var node = q("article" + attrSel("data-response-id", evt.response_id), box);
    if (node && node.dataset.messageId) return null;
    if (!node) {
      node = h("article", { "class": "msg role-assistant streaming", "data-response-id": evt.response_id, "data-chars": "0" },
        h("header", null, h("strong", { text: evt.agent }), " ", h("span", { "class": "muted", text: "replying…" })),
        h("details", { "class": "reasoning", hidden: true }, h("summary", { text: "reasoning" }), h("pre", { "class": "text" })),
        h("pre", { "class": "text body" }),
        h("footer", { "class": "meta" }, h("span", { "data-meta": "chars", text: "0" }), " characters so far"));
      box.appendChild(node);
    }
    var status = q("#thread-status").textContent;
    if (status === "active" || status === "waiting") show(q("#kill-form"), true);
    return node;
  }

  /* A delta continues the text at output_chars - its length: what the bubble holds already
   * (from a snapshot, say) is not added twice. */
  function messageDelta(evt) {
    var node = streamingNode(evt);
    if (!node) return;
    if (evt.reasoning) {
      var det = q("details.reasoning", node);
      det.hidden = false;
      q("pre", det).textContent += evt.reasoning;
    }
    var text = evt.text || "";
    var have = Number(node.dataset.chars) || 0;
    var start = (Number(evt.output_chars) || 0) - text.length;
    if (start < have) text = text.slice(Math.min(text.length, have - start));
    if (text) q(".body", node).textContent += text;
    node.dataset.chars = Math.max(have, Number(evt.output_chars) || 0);
    q('[data-meta="chars"]', node).textContent = node.dataset.chars;
  }

  /* A reply that was streaming before this page subscribed, whole so far (message_snapshot):
   * the page starts from it; the deltas after it continue it. */
  function messageSnapshot(evt) {
    var node = streamingNode(evt);
    if (!node || (Number(node.dataset.chars) || 0) > evt.output_chars) return;
    q(".body", node).textContent = evt.text || "";
    if (evt.reasoning) {
      var det = q("details.reasoning", node);
      det.hidden = false;
      q("pre", det).textContent = evt.reasoning;
    }
    node.dataset.chars = evt.output_chars;
    q('[data-meta="chars"]', node).textContent = evt.output_chars;
  }

  function resyncThread() {
    var path = "threads/" + encodeURIComponent(THREAD_ID) + "?limit=100" + (OLDER_PAGE ? window.location.search.replace("?", "&") : "");
    return api("GET", path).then(function (t) {
      var messages = listOf(t.messages, "messages");
      var box = q("#messages");
      var streaming = qa("article.streaming", box);
      // what the operator opened stays open (a resync follows every page load and reconnect)
      var opened = qa("details.tool-call[open]", box).map(function (d) { return d.dataset.callId; });
      box.replaceChildren();
      messages.forEach(function (m) { placeMessage(box, m); });
      opened.forEach(function (id) {
        if (id) qa("details.tool-call" + attrSel("data-call-id", id), box).forEach(function (d) { d.open = true; });
      });
      // A reply still growing stays (the thread read may predate its turn) unless it is stored.
      streaming.forEach(function (n) {
        if (!q("article" + attrSel("data-response-id", n.dataset.responseId) + "[data-message-id]", box)) box.appendChild(n);
      });
      setTokens(t.input_tokens, t.output_tokens);
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
          if (o[n.dataset.stat] !== undefined) G.formatStat(n, o[n.dataset.stat]);
        });
      }).catch(function () { /* the stats stay as they were */ });
    }, 1000);
  }

  document.addEventListener("gaia:done", function (e) {
    var kind = e.target.dataset ? e.target.dataset.kind : null;
    if (kind === "pause" || kind === "resume") agentPaused(kind === "pause");
    if (kind === "approval" && e.detail) applyApproval(e.detail);
  });

  // ------------------------------------------------------------------------------------------
  // Wiring: what each page listens to, and how it resyncs

  var subscription = null;
  if (PAGE === "thread") subscription = { threads: [THREAD_ID], agents: [], events: [] };
  var feed = new window.GaiaFeed({ subscription: subscription, batch: PAGE !== "thread" });
  window.gaiaFeed = feed;

  feed.on("agent_state", applyAgentState);
  feed.on("agent_state", function (evt) {  // a new turn: the last error is history
    if (PAGE === "agent" && body.dataset.agent === evt.agent && evt.state === "processing" && q("#agent-error")) q("#agent-error").hidden = true;
  });
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
    if (THREAD_ID && !OLDER_PAGE && evt.message.thread_id === THREAD_ID) appendMessage(evt.message);
    if (PAGE === "dashboard") scheduleOrganism();
  });
  feed.on("message_delta", function (evt) { if (THREAD_ID && !OLDER_PAGE && evt.thread_id === THREAD_ID) messageDelta(evt); });
  feed.on("message_snapshot", function (evt) { if (THREAD_ID && !OLDER_PAGE && evt.thread_id === THREAD_ID) messageSnapshot(evt); });
  feed.on("tool_call", function (evt) { if (THREAD_ID && evt.thread_id === THREAD_ID) toolEvent(evt); });
  feed.on("tool_result", function (evt) { if (THREAD_ID && evt.thread_id === THREAD_ID) toolEvent(evt); });
  feed.on("approval_requested", function (evt) {
    if (!THREAD_ID || evt.thread_id !== THREAD_ID) return;
    applyApproval({ id: evt.approval_id, status: "pending", agent: evt.agent, tool: evt.tool,
                    server: evt.server, arguments: evt.arguments, expires_at: evt.expires_at });
    setToolState(waitingCall(evt.call_id), "waiting for approval");
  });
  feed.on("approval_decided", function (evt) {
    if (!THREAD_ID || evt.thread_id !== THREAD_ID) return;
    applyApproval({ id: evt.approval_id, status: evt.decision, agent: evt.agent, tool: evt.tool,
                    decided_by: evt.decided_by, reason: evt.reason });
    var call = waitingCall(evt.call_id);
    if (call && q(".tool-state", call).textContent === "waiting for approval") {
      setToolState(call, evt.decision === "approved" ? "running…" : evt.decision);
    }
  });
  feed.on("error", function (evt) {
    if (evt.id !== undefined) return;  // a command's error (feed.command handles it)
    var text = typeof evt.error === "string" ? evt.error : JSON.stringify(evt.error);
    if (THREAD_ID && evt.thread_id === THREAD_ID) {
      var e = q("#thread-error"); e.textContent = text; e.hidden = false;
    }
    if (PAGE === "agent" && body.dataset.agent === evt.agent && q("#agent-error")) {
      var box = q("#agent-error");
      box.replaceChildren("Its latest turn failed ", h("time", { datetime: new Date().toISOString(), text: "just now" }), " in ",
                          h("a", { href: "/threads/" + encodeURIComponent(evt.thread_id) + "/", text: "this thread" }), ": " + text);
      box.hidden = false;
    }
  });
  G.pages.forEach(function (page) { page.attach(feed); });

  function resyncAgents() {
    if (PAGE !== "dashboard" && PAGE !== "agents" && PAGE !== "agent") return null;
    var sort = PAGE === "agents" ? new URLSearchParams(window.location.search).get("sort") : null;
    return api("GET", "agents" + (sort ? "?sort=" + encodeURIComponent(sort) : "")).then(function (data) {
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
    if (PAGE === "thread") reads.push(resyncThread().then(resyncApprovals));  // approvals mark calls
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
    G.pages.forEach(function (page) { reads.push(page.resync()); });
    return Promise.all(reads);
  });

  /* The thread list as the server rendered it (same filters, same page), read again: the
   * filters as the server resolved them (#suite-filter: dates made times), or a run's. */
  function resyncThreadList() {
    var params = new URLSearchParams(window.location.search);
    var per = Number(body.dataset.perPage) || 50;
    var query = new URLSearchParams({ limit: per, offset: per * ((Number(params.get("page")) || 1) - 1) });
    var resolved = q("#suite-filter") ? JSON.parse(q("#suite-filter").textContent) : {};
    Object.keys(resolved).forEach(function (k) { query.set(k, resolved[k]); });
    if (params.get("run")) query.set("run", params.get("run"));
    if (params.get("sort")) query.set("sort", params.get("sort"));  // the order the page shows
    return api("GET", "threads?" + query.toString()).then(function (data) {
      var tbody = q("#thread-rows");
      var threads = listOf(data, "threads");
      if (threads.length) tbody.replaceChildren.apply(tbody, threads.map(threadRow));
      else tbody.replaceChildren(h("tr", { "class": "empty" }, h("td", { colspan: SELECTABLE ? 7 : 6, text: "No thread matches." })));
    }).catch(function () {});
  }

  var live = PAGE !== "login" && G.pages.every(function (page) { return page.live; });
  if (live) feed.start();
  else feed.setStatus("static", "no live feed");

  window.gaiaUI = { api: api, h: h, messageNode: messageNode, toolCallNode: toolCallNode, approvalNode: approvalNode };
})();
