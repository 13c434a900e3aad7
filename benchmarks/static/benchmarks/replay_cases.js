/* A replay's cases side by side (GET /runs/{id}/cases): what the conversation asked (the whole
 * conversation on demand), the reference, and each target's reply with its word-level diff
 * against the reference, its scores, cost and latency and its replayed thread; largest
 * regression first, against another target of the run or against each target in another
 * replay of the suite; paged. The choices live in the address (?baseline, ?against, ?page). */
(function () {
  "use strict";

  var G = window.Gaia;
  var h = G.h, q = G.q, fixed = G.fixed, api = G.api, listOf = G.listOf;
  var body = document.body;
  var RUN = body.dataset.replay;
  var PER_PAGE = 10;
  var state = { baseline: "", against: "", page: 1 };

  function deltaNode(delta) {
    if (delta === null || delta === undefined) return null;
    var cls = delta < 0 ? "neg" : (delta > 0 ? "pos" : "zero");
    return h("span", { "class": "delta " + cls, title: "primary score against the baseline",
                       text: (delta > 0 ? "+" : delta < 0 ? "\u2212" : "\u00b1") + Math.abs(delta).toFixed(2) });
  }

  /* The diff's words: kept (=), only in the reference (-, struck) and only in the reply (+). */
  function diffNode(diff) {
    var pre = h("pre", { "class": "text diff" });
    (diff || []).forEach(function (part, i) {
      if (i) pre.appendChild(document.createTextNode(" "));
      var op = part[0], text = part[1];
      if (op === "-") pre.appendChild(h("del", { title: "only in the reference", text: text }));
      else if (op === "+") pre.appendChild(h("ins", { title: "only in this reply", text: text }));
      else pre.appendChild(h("span", { text: text }));
    });
    return pre;
  }

  function candidateNode(c) {
    var scores = "EM " + fixed(c.exact_match) + " · F1 " + fixed(c.f1) + " · ROUGE-L " + fixed(c.rouge_l) +
                 " · similarity " + fixed(c.similarity);
    if (c.judge_score !== null && c.judge_score !== undefined) scores += " · judge " + fixed(c.judge_score) + (c.judge_verdict ? " (" + c.judge_verdict + ")" : "");
    return h("div", { "class": "cand", "data-agent": c.agent, "data-status": c.status },
      h("h4", null, h("span", { "class": "agent", text: c.agent }),
        h("span", { "class": "score", title: "primary score", text: fixed(c.score) }), deltaNode(c.delta)),
      c.status === "completed" ? diffNode(c.diff) : h("p", { "class": "error", text: c.status + (c.error ? ": " + c.error : "") }),
      h("p", { "class": "small muted scores", text: scores }),
      h("p", { "class": "small muted cost" },
        (c.tokens || 0) + " tokens · TTFT " + (c.ttft_ms === null || c.ttft_ms === undefined ? "–" : c.ttft_ms + " ms") +
        " · " + fixed(c.elapsed_ms, 0) + " ms · " + (c.tool_calls || 0) + " tool call" + (c.tool_calls === 1 ? "" : "s"),
        c.thread_id ? [" · ", h("a", { "class": "thread-link", href: "/threads/" + encodeURIComponent(c.thread_id) + "/", text: "replayed thread" })] : null),
      c.judge_reason ? h("p", { "class": "small judge-reason", text: "Judge: " + c.judge_reason }) : null,
      c.judge_error ? h("p", { "class": "small error judge-error", text: "Judge error: " + c.judge_error }) : null);
  }

  function caseNode(c) {
    var conversation = null;
    if ((c.input || []).length > 1) {
      conversation = h("details", { "class": "conversation" },
        h("summary", { text: "the whole conversation (" + c.input.length + " messages)" }),
        c.input.map(function (m) {
          return h("p", { "class": "turn role-" + m.role }, h("span", { "class": "label", text: m.role }), h("span", { "class": "text", text: m.content }));
        }));
    }
    return h("article", { "class": "case", "data-case": c.index },
      h("header", null, h("strong", { text: "Case #" + c.index }), " ", deltaNode(c.worst_delta),
        c.source_agent ? h("span", { "class": "muted", text: " from " + c.source_agent }) : null,
        c.source_thread ? [" · ", h("a", { href: "/threads/" + encodeURIComponent(c.source_thread) + "/", text: "original thread" })] : null),
      h("div", { "class": "case-ask" }, h("span", { "class": "label", text: "Asked" }), h("pre", { "class": "text question", text: c.question || "" }), conversation),
      h("div", { "class": "case-columns" },
        h("div", { "class": "cand reference" }, h("h4", null, h("span", { "class": "agent", text: "Reference" })),
          h("pre", { "class": "text", text: c.reference || "" }), h("p", { "class": "small muted", text: "the reply the conversation had" })),
        (c.candidates || []).map(candidateNode)));
  }

  function readAddress() {
    var params = new URLSearchParams(window.location.search);
    state.baseline = params.get("baseline") || "";
    state.against = params.get("against") || "";
    state.page = Math.max(1, Number(params.get("page")) || 1);
  }

  function writeAddress() {
    var params = new URLSearchParams();
    if (state.against) params.set("against", state.against);
    else if (state.baseline) params.set("baseline", state.baseline);
    if (state.page > 1) params.set("page", state.page);
    var search = params.toString();
    window.history.replaceState(null, "", window.location.pathname + (search ? "?" + search : ""));
  }

  function load() {
    var box = q("#cases");
    var query = new URLSearchParams({ limit: PER_PAGE, offset: PER_PAGE * (state.page - 1) });
    if (state.against) query.set("against", state.against);
    else if (state.baseline) query.set("baseline", state.baseline);
    box.setAttribute("aria-busy", "true");
    return api("GET", "benchmarks/runs/" + encodeURIComponent(RUN) + "/cases?" + query.toString()).then(function (data) {
      var cases = listOf(data, "cases");
      box.removeAttribute("aria-busy");
      box.dataset.loaded = query.toString();
      if (!cases.length) box.replaceChildren(h("p", { "class": "muted", text: "No case has a reply yet." }));
      else box.replaceChildren.apply(box, cases.map(caseNode));
      pager(data.count || 0);
    }).catch(function (err) {
      box.removeAttribute("aria-busy");
      box.replaceChildren(h("p", { "class": "error", text: err.message }));
    });
  }

  function pager(count) {
    var nav = q("#cases-pager");
    var pages = Math.max(1, Math.ceil(count / PER_PAGE));
    var from = count ? PER_PAGE * (state.page - 1) + 1 : 0, to = Math.min(count, PER_PAGE * state.page);
    function go(page) { return function () { state.page = page; writeAddress(); load(); }; }
    var prev = h("button", { type: "button", id: "cases-prev", disabled: state.page <= 1 }, "previous");
    var next = h("button", { type: "button", id: "cases-next", disabled: state.page >= pages }, "next");
    prev.addEventListener("click", go(state.page - 1));
    next.addEventListener("click", go(state.page + 1));
    nav.replaceChildren(prev, h("span", { id: "cases-range", text: "cases " + from + "–" + to + " of " + count + " (page " + state.page + " of " + pages + ")" }), next);
  }

  /* Other replays of the same suite (any version): what "against run" may name. */
  function fillAgainst() {
    var sel = q("#cases-against");
    return api("GET", "benchmarks/runs?limit=100&suite=" + encodeURIComponent(body.dataset.suiteName)).then(function (data) {
      listOf(data, "runs").filter(function (r) { return r.kind === "replay" && String(r.id) !== String(RUN); }).forEach(function (r) {
        sel.appendChild(h("option", { value: r.id, text: "#" + r.id + " v" + r.suite_version + " · " + (r.agents || []).join(", ") + " · " + r.status }));
      });
      sel.value = state.against;
    }).catch(function () {});
  }

  function setup() {
    readAddress();
    var baseline = q("#cases-baseline"), against = q("#cases-against");
    if (state.baseline) baseline.value = state.baseline;
    baseline.disabled = !!state.against;
    baseline.addEventListener("change", function () { state.baseline = baseline.value; state.page = 1; writeAddress(); load(); });
    against.addEventListener("change", function () {
      state.against = against.value;
      baseline.disabled = !!state.against;
      state.page = 1;
      writeAddress();
      load();
    });
    fillAgainst();
  }

  G.replayCases = { load: load };
  if (G.PAGE === "replay_run") setup();
})();
