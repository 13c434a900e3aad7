/* Starts the live feed (feed.js) for the page, loaded after every page's script: each one that
 * pushed itself to Gaia.pages (agents.js, threads.js, thread.js, dashboard.js, the benchmark
 * pages' scripts) attaches its handlers, and every resync rereads what each shows. */
(function () {
  "use strict";

  var G = window.Gaia;
  // A page that follows one thread subscribes to it and takes events one by one (a growing
  // reply shows up to 100 ms sooner); pages that watch everything take them batched.
  var feed = new window.GaiaFeed({ subscription: G.subscription, batch: !G.subscription });
  window.gaiaFeed = feed;
  G.pages.forEach(function (page) { page.attach(feed); });
  feed.onResync(function () {
    return Promise.all(G.pages.map(function (page) { return page.resync(); }));
  });
  var live = G.PAGE !== "login" && G.pages.every(function (page) { return page.live; });
  if (live) feed.start();
  else feed.setStatus("static", "no live feed");
})();
