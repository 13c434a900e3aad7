/* The dashboard's figures (the organism's), read again a second after a change. */
(function () {
  "use strict";

  var G = window.Gaia;
  if (G.PAGE !== "dashboard") return;

  var stats = G.refresher(function () {
    return G.api("GET", "organism").then(function (o) {
      G.qa("[data-stat]").forEach(function (n) {
        if (o[n.dataset.stat] !== undefined) G.formatStat(n, o[n.dataset.stat]);
      });
    });
  }, 1000);

  G.pages.push({
    live: true,
    attach: function (feed) {
      ["thread_created", "thread_updated", "message"].forEach(function (name) { feed.on(name, stats.schedule); });
    },
    resync: function () { stats.schedule(); return null; }
  });
})();
