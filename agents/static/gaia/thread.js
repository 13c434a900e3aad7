/* The thread page: its messages (templates/ui/_messages.html) and approvals
 * (templates/ui/_approvals.html) read again from the server when the feed says they changed,
 * the reply still streaming grown from the feed's deltas in the page's own
 * <template id="streaming-reply">, and the header (status, counts, tokens, error) kept current. */
(function () {
  "use strict";

  var G = window.Gaia;
  var q = G.q, qa = G.qa, attrSel = G.attrSel, show = G.show, PAGE = G.PAGE, body = document.body;
  if (PAGE !== "thread" || !q("#messages")) return;  // a turn's trace page: no messages
  var THREAD_ID = body.dataset.thread;
  var box = q("#messages");
  // A page of earlier messages (?before=): new ones belong to the latest page, not here.
  var OLDER_PAGE = !!box.dataset.olderPage;
  G.subscription = { threads: [THREAD_ID], agents: [], events: [] };

  // ------------------------------------------------------------------------------------------
  // Messages

  /* The call a result of ``callId`` joins: the latest of that id on the page, unless a stored
   * result joined it already (as the server pairs them). */
  function callFor(callId) {
    var found = qa("details.tool-call:not(.alone)" + attrSel("data-call-id", callId), box)
      .filter(function (c) { return !q(".tool-result[data-message-id]", c); });
    return found[found.length - 1] || null;
  }

  /* What the feed said of a call still without its stored result ("running…"). */
  function setToolState(call, text) {
    var state = call ? q(".tool-state", call) : null;
    if (state) state.textContent = text;
  }

  var messages = G.refresher(function () {
    var query = "thread=" + encodeURIComponent(THREAD_ID) + (OLDER_PAGE ? "&" + window.location.search.slice(1) : "");
    return G.fragment("messages", query).then(function (frag) {
      var stored = {};
      qa("article[data-message-id][data-response-id]", frag).forEach(function (a) { stored[a.dataset.responseId] = true; });
      // what the operator opened stays open; what the feed said of a running call stays said
      var opened = qa("details.tool-call[open]", box).map(function (d) { return d.dataset.callId; });
      var traced = qa("details.turn-trace[open]", box).map(function (d) { return d.dataset.turn; });
      var said = {};
      qa("details.tool-call .tool-state", box).forEach(function (s) { said[s.closest("details").dataset.callId] = s.textContent; });
      // a reply still growing stays (until its stored message is here), after the stored ones
      var growing = qa("article[data-response-id]:not([data-message-id])", box)
        .filter(function (n) { return !stored[n.dataset.responseId]; });
      box.replaceChildren(frag);
      growing.forEach(function (n) { box.appendChild(n); });
      opened.forEach(function (id) {
        qa("details.tool-call" + attrSel("data-call-id", id), box).forEach(function (d) { d.open = true; });
      });
      traced.forEach(function (n) {
        qa("details.turn-trace" + attrSel("data-turn", n), box).forEach(function (d) { d.open = true; });
      });
      Object.keys(said).forEach(function (id) {
        var call = callFor(id);
        if (call && said[id] === "running…") setToolState(call, said[id]);
      });
    });
  }, 50);

  /* A turn's "Trace" toggle: its tree (templates/ui/_trace.html), read from the server each
   * time it opens (a turn still running grows). Toggle events do not bubble: caught on the way
   * down. */
  box.addEventListener("toggle", function (evt) {
    var d = evt.target;
    if (!d.matches || !d.matches("details.turn-trace") || !d.open) return;
    var target = q(".turn-trace-body", d);
    fetch(d.dataset.src, { credentials: "same-origin", headers: { "Accept": "text/html" } }).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status + " for " + d.dataset.src);
      return r.text();
    }).then(function (html) {
      var t = document.createElement("template");
      t.innerHTML = html;  // our server's template, escaped by Django; scripts never run here
      G.humanTimes(t.content);
      target.replaceChildren(t.content);
      d.dataset.loaded = "1";
    }).catch(G.fail);
  }, true);

  /* The thread header's token totals: the thread's own (a read), plus each new message's. */
  var counted = {};
  qa("[data-message-id]", box).forEach(function (n) { counted[n.dataset.messageId] = true; });
  function setTokens(tin, tout) {
    q("#thread-tokens-in").textContent = tin || 0;
    q("#thread-tokens-out").textContent = tout || 0;
  }
  function addTokens(m) {
    if (counted[m.id]) return;
    counted[m.id] = true;
    if (!m.input_tokens && !m.output_tokens) return;
    setTokens(Number(q("#thread-tokens-in").textContent) + (m.input_tokens || 0),
              Number(q("#thread-tokens-out").textContent) + (m.output_tokens || 0));
  }

  function threadUpdated(evt) {
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

  // ------------------------------------------------------------------------------------------
  // The reply still streaming

  /* Its bubble (made on its first delta or snapshot), or null once its stored message is
   * drawn (the stored text is whole). A delta sent before a stop (kill, error) can arrive
   * after the thread_updated that stopped the bubble. */
  function streamingNode(evt) {
    var node = q("article" + attrSel("data-response-id", evt.response_id), box);
    if (node && node.dataset.messageId) return null;
    if (!node) {
      node = q("#streaming-reply").content.firstElementChild.cloneNode(true);
      node.dataset.responseId = evt.response_id;
      q(".replier", node).textContent = evt.agent;
      box.appendChild(node);
    }
    var status = q("#thread-status").textContent;
    if (status === "active" || status === "waiting") show(q("#kill-form"), true);
    return node;
  }

  function setReasoning(node, text, add) {
    if (!text) return;
    var det = q("details.reasoning", node);
    det.hidden = false;
    q("pre", det).textContent = (add ? q("pre", det).textContent : "") + text;
  }

  function setChars(node, n) {
    node.dataset.chars = n;
    q('[data-meta="chars"]', node).textContent = n;
  }

  /* A delta continues the text at output_chars - its length: what the bubble holds already
   * (from a snapshot, say) is not added twice. */
  function messageDelta(evt) {
    var node = streamingNode(evt);
    if (!node) return;
    setReasoning(node, evt.reasoning, true);
    var text = evt.text || "";
    var have = Number(node.dataset.chars) || 0;
    var start = (Number(evt.output_chars) || 0) - text.length;
    if (start < have) text = text.slice(Math.min(text.length, have - start));
    if (text) q(".body", node).textContent += text;
    setChars(node, Math.max(have, Number(evt.output_chars) || 0));
  }

  /* A reply that was streaming before this page subscribed, whole so far (message_snapshot):
   * the page starts from it; the deltas after it continue it. */
  function messageSnapshot(evt) {
    var node = streamingNode(evt);
    if (!node || (Number(node.dataset.chars) || 0) > evt.output_chars) return;
    q(".body", node).textContent = evt.text || "";
    setReasoning(node, evt.reasoning, false);
    setChars(node, evt.output_chars);
  }

  // ------------------------------------------------------------------------------------------
  // Approvals: a card new to the page is added (decided ones stay, with their outcome); a
  // waiting one shows its outcome once decided (never undone by a late word that it waits);
  // what is typed in one stays.

  var list = q("#approval-list");
  var approvals = G.refresher(function () {
    return G.fragment("approvals", "status=any&thread=" + encodeURIComponent(THREAD_ID)).then(function (frag) {
      qa("article.approval", frag).forEach(function (card) {
        var shown = q("article" + attrSel("data-approval-id", card.dataset.approvalId), list);
        if (!shown) {
          list.appendChild(card);
          show(q("#approvals"), true);
        } else if (shown && shown.dataset.status === "pending" && card.dataset.status !== "pending") {
          shown.replaceWith(card);
        }
      });
    });
  }, 0);

  /* The call an approval event is about: the latest unanswered call of its id (ids repeat
   * from one turn to the next). */
  function waitingCall(callId) {
    var found = qa("details.tool-call:not(.alone)" + attrSel("data-call-id", callId), box)
      .filter(function (c) { return !!q(".tool-state", c); });
    return found[found.length - 1] || null;
  }

  document.addEventListener("gaia:done", function (e) {
    if (e.target.dataset && e.target.dataset.kind === "approval") approvals.now();
  });

  // ------------------------------------------------------------------------------------------
  // Wiring

  function ours(evt) { return evt.thread_id === THREAD_ID; }

  function attach(feed) {
    feed.on("thread_updated", function (evt) { if (ours(evt)) threadUpdated(evt); });
    feed.on("message", function (evt) {
      if (evt.message.thread_id !== THREAD_ID) return;
      addTokens(evt.message);
      if (!OLDER_PAGE) messages.schedule();
    });
    feed.on("message_delta", function (evt) { if (ours(evt) && !OLDER_PAGE) messageDelta(evt); });
    feed.on("message_snapshot", function (evt) { if (ours(evt) && !OLDER_PAGE) messageSnapshot(evt); });
    feed.on("tool_call", function (evt) { if (ours(evt)) setToolState(callFor(evt.call_id), "running…"); });
    feed.on("tool_result", function (evt) {
      if (ours(evt)) setToolState(callFor(evt.call_id), evt.status === "failed" ? "failed" : "done");
    });
    feed.on("approval_requested", function (evt) {
      if (!ours(evt)) return;
      approvals.schedule();
      setToolState(waitingCall(evt.call_id), "waiting for approval");
    });
    feed.on("approval_decided", function (evt) {
      if (!ours(evt)) return;
      approvals.schedule();
      var call = waitingCall(evt.call_id);
      if (call && q(".tool-state", call).textContent === "waiting for approval") {
        setToolState(call, evt.decision === "approved" ? "running…" : evt.decision);
      }
    });
    feed.on("error", function (evt) {
      if (evt.id !== undefined || !ours(evt)) return;  // a command's error: feed.command's
      var err = q("#thread-error");
      err.textContent = typeof evt.error === "string" ? evt.error : JSON.stringify(evt.error);
      err.hidden = false;
    });
  }

  function resync() {
    var header = G.api("GET", "threads/" + encodeURIComponent(THREAD_ID) + "?limit=100").then(function (t) {
      setTokens(t.input_tokens, t.output_tokens);  // the totals of the messages it lists
      G.listOf(t.messages, "messages").forEach(function (m) { counted[m.id] = true; });
      threadUpdated({ status: t.status, message_count: t.message_count, error: t.error });
    }).catch(G.fail);
    return Promise.all([header, messages.now(), approvals.now()]);
  }

  G.pages.push({ live: true, attach: attach, resync: resync });
})();
