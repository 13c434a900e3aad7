/* Agents: the rows of the dashboard and the agent list (templates/ui/_agent_rows.html, read
 * again from the server when an agent's state or the list changes), and an agent's own page:
 * its state light, pause and resume, and its latest error (templates/ui/_agent_error.html). */
(function () {
  "use strict";

  var G = window.Gaia;
  var q = G.q, show = G.show, PAGE = G.PAGE, body = document.body;
  var tbody = q("#agent-rows");
  var SLUG = PAGE === "agent" ? body.dataset.agent : null;
  if (!tbody && !SLUG) return;

  var rows = G.refresher(function () {
    return G.fragment("agent-rows", window.location.search.slice(1)).then(function (frag) {
      tbody.replaceChildren(frag);
    });
  }, 150);

  /* The agent page's header: the state as an event or a read says it is now. */
  function applyState(a) {
    q("#agent-light").className = "light state-" + a.state;
    q("#agent-light").title = a.state;
    q("#agent-state").textContent = a.state;
    q("#agent-queue").textContent = a.queue_depth || 0;
    if (a.state === "paused") paused(true);
  }

  function paused(yes) {
    show(q('form[data-kind="pause"]'), !yes);
    show(q('form[data-kind="resume"]'), yes);
  }

  var lastError = G.refresher(function () {
    return G.fragment("agent-error", "agent=" + encodeURIComponent(SLUG)).then(function (frag) {
      var box = q("#agent-error");
      box.replaceChildren(frag);
      show(box, !!box.textContent.trim());
    });
  }, 0);

  function attach(feed) {
    feed.on("agent_state", function (evt) {
      if (tbody) rows.schedule();
      if (evt.agent !== SLUG) return;
      applyState(evt);
      if (evt.state === "processing") show(q("#agent-error"), false);  // a new turn: history
    });
    feed.on("agent_changed", function (evt) {
      if (tbody) rows.schedule();  // paused, resumed, or the list itself changed
      if (evt.agent === SLUG && (evt.change === "paused" || evt.change === "resumed")) {
        applyState({ state: evt.change === "paused" ? "paused" : "idle", queue_depth: 0 });
        paused(evt.change === "paused");
      }
    });
    feed.on("error", function (evt) {
      if (evt.id === undefined && SLUG && evt.agent === SLUG) lastError.schedule();
    });
  }

  document.addEventListener("gaia:done", function (e) {
    var kind = e.target.dataset ? e.target.dataset.kind : null;
    if (SLUG && (kind === "pause" || kind === "resume")) paused(kind === "pause");
  });

  function resync() {
    if (tbody) return rows.now();
    return G.api("GET", "agents").then(function (data) {
      G.listOf(data, "agents").filter(function (a) { return (a.slug || a.name) === SLUG; }).forEach(function (a) {
        applyState(a);
        paused(!!a.paused);
      });
    }).catch(function () {});
  }

  // the editor (templates/ui/_agent_form.html, sent by console.js) opens from "Edit"
  var editor = document.getElementById("agent-edit");
  function openEditor() { if (editor) { editor.open = true; editor.scrollIntoView(); } }
  var edit = document.getElementById("edit");
  if (edit) edit.addEventListener("click", function (e) { e.preventDefault(); openEditor(); });
  if (window.location.hash === "#agent-edit") openEditor();

  G.pages.push({ live: true, attach: attach, resync: resync });
})();
