/* The webhooks pages (templates/ui/webhooks.html, webhook.html). Every write is a json-form
 * calling /api/v1/webhooks (console.js); here only what follows an answer: a new endpoint's
 * secret shown this once (never stored, so a reload shows it no more) and the list redrawn
 * from the server's partial; on an endpoint's page, its delivery log redrawn after a
 * redelivery and while a delivery waits or is being sent. */
(function () {
  "use strict";

  var G = window.Gaia;
  var q = G.q;
  if (G.PAGE !== "webhooks" && G.PAGE !== "webhook") return;

  // ---- the list: a new endpoint's secret, once
  document.addEventListener("gaia:saved", function (e) {
    if (e.target.id !== "webhook-form" || !e.detail) return;
    var form = e.target;
    q("#webhook-secret-value").textContent = e.detail.secret;
    q("#webhook-secret").hidden = false;
    q("#webhook-copied").hidden = true;
    form.reset();
    G.notice("Endpoint " + e.detail.url + " added: copy its secret now.");
    var table = q("#webhook-table");  // the rows and the pager's count
    G.fragment("webhook-table", window.location.search.slice(1)).then(function (frag) {
      table.replaceChildren(frag);
    }).catch(G.fail);
  });

  var copy = q("#webhook-copy");
  if (copy) copy.addEventListener("click", function () {
    var value = q("#webhook-secret-value");
    var done = function () { q("#webhook-copied").hidden = false; };
    function select() {
      var range = document.createRange();
      range.selectNodeContents(value);
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
    }
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(value.textContent).then(done, select);
    else { select(); try { if (document.execCommand("copy")) done(); } catch (err) { /* selected: ctrl-c */ } }
  });

  // ---- an endpoint's page: its delivery log, redrawn as the server draws it
  var log = q("#deliveries");
  if (!log) return;
  var rows = q("#delivery-rows", log);
  var WAIT_MS = 1500;

  function busy() { return !!q('tr[data-state="pending"], tr[data-state="sending"]', rows); }

  var refresh = G.refresher(function () {
    var query = new URLSearchParams(window.location.search);
    query.set("endpoint", log.dataset.endpoint);
    return G.fragment("delivery-rows", query.toString()).then(function (frag) {
      rows.replaceChildren(frag);
      if (busy()) refresh.schedule();  // until each attempt under way has its outcome
    });
  }, WAIT_MS);

  document.addEventListener("gaia:saved", function (e) {
    if (!e.target.classList.contains("redeliver")) return;
    G.notice("Redelivery queued: the same event id is sent again.");
    refresh.now();
  });
  if (busy()) refresh.schedule();
})();
