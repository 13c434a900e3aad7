/* Waiting approvals, on every page: the navigation's count (templates/ui/_approvals_count.html)
 * set from the feed's approvals_pending (read again on a resync), and, on the inbox
 * (/approvals/), its rows (templates/ui/_approval_rows.html) drawn again by the server for the
 * page's own query when an approval comes or is decided; a reason being typed stays. */
(function () {
  "use strict";

  var G = window.Gaia;
  var q = G.q, qa = G.qa, attrSel = G.attrSel, PAGE = G.PAGE;

  function setCount(n) {
    var badge = q("#approvals-count");
    if (!badge) return;
    n = Number(n) || 0;
    badge.textContent = String(n);
    badge.setAttribute("aria-label", n + " waiting");
    badge.hidden = n === 0;
  }

  var count = G.refresher(function () {
    return G.fragment("approvals-count", "").then(function (frag) {
      var fresh = q("#approvals-count", frag);
      if (fresh) setCount(fresh.textContent);
    });
  }, 0);

  var tbody = PAGE === "approvals" ? q("#approval-rows") : null;
  var pager = q("#approval-pager");
  var rows = tbody && G.refresher(function () {
    var query = window.location.search.slice(1);
    var counted = G.fragment("approval-pager", query).then(function (frag) { pager.replaceChildren(frag); });
    return Promise.all([counted, G.fragment("approval-rows", query).then(function (frag) {
      var typed = {}, before = {};
      qa("tr[data-approval-id]", tbody).forEach(function (r) {
        before[r.dataset.approvalId] = r.dataset.status;
        var reason = q("input[name=reason]", r);
        if (reason && reason.value) typed[r.dataset.approvalId] = reason.value;
      });
      var focused = document.activeElement && document.activeElement.closest &&
        document.activeElement.closest("tr[data-approval-id]");
      var focusId = focused && document.activeElement.name === "reason" ? focused.dataset.approvalId : null;
      qa("tr[data-approval-id]", frag).forEach(function (r) {
        var id = r.dataset.approvalId;
        if (before[id] !== r.dataset.status) r.classList.add("flash");  // new, or decided
        var reason = q("input[name=reason]", r);
        if (reason && typed[id]) reason.value = typed[id];
      });
      tbody.replaceChildren(frag);
      if (focusId) {
        var input = q("tr" + attrSel("data-approval-id", focusId) + " input[name=reason]", tbody);
        if (input) input.focus();
      }
    })]);
  }, 100);

  if (tbody) {
    document.addEventListener("gaia:done", function (e) {
      if (e.target.dataset && e.target.dataset.kind === "approval") rows.now();
    });
  }

  G.pages.push({
    live: true,
    attach: function (feed) {
      feed.on("approvals_pending", function (evt) { setCount(evt.count); });
      if (rows) {
        feed.on("approval_requested", rows.schedule);
        feed.on("approval_decided", rows.schedule);
      }
    },
    resync: function () { return Promise.all([count.now(), rows ? rows.now() : null]); }
  });
})();
