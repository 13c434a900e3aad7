/* Thread rows wherever a page lists threads (the dashboard's active ones, the thread list, an
 * agent's recent ones): a thread made or changed makes the page read its rows again, drawn by
 * the server from templates/ui/_thread_rows.html with the page's own query. */
(function () {
  "use strict";

  var G = window.Gaia;
  var q = G.q, qa = G.qa, PAGE = G.PAGE, body = document.body;
  var tbody = q("#thread-rows");
  if (!tbody || (PAGE !== "dashboard" && PAGE !== "threads" && PAGE !== "agent")) return;
  var search = new URLSearchParams(window.location.search);

  /* The fragment's query: the page's own (the thread list: its filters, sort and page). */
  function query() {
    if (PAGE === "dashboard") return "of=dashboard";
    if (PAGE === "agent") return "of=agent&agent=" + encodeURIComponent(body.dataset.agent);
    return search.toString();
  }

  var rows = G.refresher(function () {
    return G.fragment("thread-rows", query()).then(function (frag) {
      var before = {};
      qa("tr[data-thread]", tbody).forEach(function (r) { before[r.dataset.thread] = r.textContent; });
      // the thread list's picks for a suite (benchmarks/static/benchmarks/suites.js) survive
      qa("input.thread-pick", frag).forEach(function (box) { box.checked = !!(G.pickedThreads || {})[box.value]; });
      qa("tr[data-thread]", frag).forEach(function (r) {
        if (before[r.dataset.thread] !== r.textContent) r.classList.add("flash");  // new or changed
      });
      tbody.replaceChildren(frag);
    });
  }, 250);

  /* A thread at work: its turn runs, or waits for an approval (models.Thread.RUNNING). */
  function running(status) { return status === "active" || status === "waiting"; }

  /* Whether a change to a thread of ``agent`` (of benchmark run ``run``) may change the rows. */
  function concerns(threadId, agent, run) {
    if (q("tr[data-thread=\"" + CSS.escape(String(threadId)) + "\"]", tbody)) return true;
    if (PAGE === "agent") return agent === body.dataset.agent && !run;
    if (PAGE === "threads") return !run || String(run) === search.get("run");
    return true;
  }

  G.pages.push({
    live: true,
    attach: function (feed) {
      feed.on("thread_created", function (evt) {
        var t = evt.thread;
        if (PAGE === "dashboard" ? running(t.status) : concerns(t.id, t.agent, t.run)) rows.schedule();
      });
      feed.on("thread_updated", function (evt) {
        if (concerns(evt.thread_id, evt.agent, null) && (PAGE !== "dashboard" || running(evt.status) ||
            q("tr[data-thread=\"" + CSS.escape(String(evt.thread_id)) + "\"]", tbody))) rows.schedule();
      });
    },
    resync: function () { return rows.now(); }
  });
})();
