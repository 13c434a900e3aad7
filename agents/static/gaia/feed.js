/* Gaia's live feed client: one WebSocket to /ws with the staff session cookie.
 *
 * - Events are dispatched to handlers registered with feed.on(name, fn) ("*" for all).
 * - Every event carries a per-connection `seq`: a jump means events were lost, and so does a
 *   `lagged` event or a reconnect; then the page resyncs from REST (feed.onResync(fn)),
 *   coalesced so a burst of triggers costs one resync.
 * - It reconnects with exponential backoff (with jitter) and shows "offline" meanwhile.
 * - Commands (subscribe, inject, kill, pause, resume) carry an `id`; feed.command() returns a
 *   promise settled by the matching `ack` or `error` event.
 * Nothing here touches innerHTML: pages render text with textContent.
 */
(function () {
  "use strict";

  var BACKOFF_MIN_MS = 500, BACKOFF_MAX_MS = 15000, COMMAND_TIMEOUT_MS = 15000;

  function Feed(options) {
    options = options || {};
    var loc = window.location;
    // ?batch=1: the server may send several events as one JSON array (at most one message per
    // 100 ms per socket), far cheaper for it than a message per event. Pages that watch
    // everything ask for it; a page that follows one thread does not (its events are few, and
    // a growing reply shows up to 100 ms sooner).
    var batch = options.batch === undefined ? true : !!options.batch;
    this.url = options.url || ((loc.protocol === "https:" ? "wss://" : "ws://") + loc.host + "/ws" +
                               (batch ? "?batch=1" : ""));
    this.subscription = options.subscription || null;
    this.statusEl = options.statusEl || document.getElementById("feed-status");
    this.handlers = {};
    this.resyncers = [];
    this.pending = {};
    this.nextId = 1;
    this.ws = null;
    this.attempt = 0;
    this.lastSeq = null;
    this.connectedOnce = false;
    this.stopped = false;
    this.resyncTimer = null;
    this.reconnectTimer = null;
    this.holding = 0;  // resyncs reading the state now
    this.held = [];
  }

  Feed.prototype.on = function (name, fn) {
    (this.handlers[name] = this.handlers[name] || []).push(fn);
    return this;
  };

  Feed.prototype.onResync = function (fn) { this.resyncers.push(fn); return this; };

  Feed.prototype.setStatus = function (state, text) {
    this.state = state;
    if (this.statusEl) {
      this.statusEl.dataset.state = state;
      this.statusEl.textContent = text || state;
    }
    document.documentElement.dataset.feed = state;
  };

  Feed.prototype.start = function () {
    this.stopped = false;
    this.connect();
    var self = this;
    window.addEventListener("online", function () { if (self.state === "offline") self.reconnectNow(); });
    return this;
  };

  Feed.prototype.stop = function () {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    if (this.ws) this.ws.close(1000);
  };

  Feed.prototype.connect = function () {
    var self = this;
    this.setStatus("connecting", this.connectedOnce ? "reconnecting…" : "connecting…");
    var ws;
    try {
      ws = new WebSocket(this.url);
    } catch (e) {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    this.lastSeq = null;  // seq numbers are per connection
    ws.onmessage = function (msg) {
      var evt;
      try { evt = JSON.parse(msg.data); } catch (e) { return; }
      if (Array.isArray(evt)) evt.forEach(function (one) { self.receive(one); });
      else self.receive(evt);
    };
    ws.onclose = function (e) {
      if (self.ws !== ws) return;
      self.ws = null;
      self.failPending("the feed connection closed");
      if (self.stopped) { self.setStatus("offline", "offline"); return; }
      self.setStatus("offline", e.code === 4401 || e.code === 4403 || e.code === 4001 || e.code === 4003
        ? "offline (not authorised)" : "offline");
      self.scheduleReconnect();
    };
    ws.onerror = function () { /* onclose follows and reconnects */ };
  };

  Feed.prototype.scheduleReconnect = function () {
    if (this.stopped) return;
    var delay = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * Math.pow(2, this.attempt));
    delay = delay / 2 + Math.random() * delay / 2;
    this.attempt += 1;
    var self = this;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(function () { self.connect(); }, delay);
  };

  Feed.prototype.reconnectNow = function () {
    clearTimeout(this.reconnectTimer);
    this.attempt = 0;
    if (!this.ws) this.connect();
  };

  Feed.prototype.receive = function (evt) {
    if (typeof evt.seq === "number") {
      if (this.lastSeq !== null && evt.seq !== this.lastSeq + 1) this.resync("gap");
      this.lastSeq = evt.seq;
    }
    var name = evt.event;
    if (name === "connected") {
      this.attempt = 0;
      this.setStatus("live", "live");
      if (this.subscription) this.command("subscribe", this.subscription).catch(function () {});
      // Whatever happened between the page's render (or the last connection) and now is
      // in no event we will get: read it again.
      this.resync(this.connectedOnce ? "reconnect" : "connect");
      this.connectedOnce = true;
    } else if (name === "lagged") {
      this.resync("lagged");
    } else if (name === "ack" && evt.id !== undefined && this.pending[evt.id]) {
      this.settle(evt.id, null, evt);
      return;
    } else if (name === "error" && evt.id !== undefined && this.pending[evt.id]) {
      this.settle(evt.id, evt, null);
      return;
    }
    this.dispatch(name, evt);
  };

  Feed.prototype.dispatch = function (name, evt) {
    if (this.holding > 0) {  // a resync is reading the state: apply what happens after it, after it
      this.held.push([name, evt]);
      return;
    }
    this.deliver(name, evt);
  };

  Feed.prototype.deliver = function (name, evt) {
    var lists = [this.handlers[name] || [], this.handlers["*"] || []];
    for (var i = 0; i < lists.length; i++) {
      for (var j = 0; j < lists[i].length; j++) {
        try { lists[i][j](evt); } catch (e) { if (window.console) console.error(e); }
      }
    }
  };

  Feed.prototype.resync = function (reason) {
    var self = this;
    if (this.resyncTimer) return;
    this.resyncTimer = setTimeout(function () {
      self.resyncTimer = null;
      self.lastResync = reason;
      // Events that arrive while the pages reread the state are held and applied afterwards,
      // so a read that started before them can never undo them.
      self.holding += 1;
      var reads = [];
      for (var i = 0; i < self.resyncers.length; i++) {
        try { reads.push(self.resyncers[i](reason)); } catch (e) { if (window.console) console.error(e); }
      }
      Promise.all(reads.map(function (r) { return Promise.resolve(r).catch(function () {}); })).then(function () {
        self.holding -= 1;
        if (self.holding > 0) return;  // a later resync is still reading: it flushes
        var held = self.held;
        self.held = [];
        for (var j = 0; j < held.length; j++) self.deliver(held[j][0], held[j][1]);
      });
    }, 150);
  };

  Feed.prototype.command = function (cmd, fields) {
    var self = this;
    return new Promise(function (resolve, reject) {
      if (!self.ws || self.ws.readyState !== WebSocket.OPEN) {
        reject(new Error("the live feed is offline"));
        return;
      }
      var id = "c" + (self.nextId++);
      var msg = Object.assign({}, fields || {}, { cmd: cmd, id: id });
      var timer = setTimeout(function () { self.settle(id, { error: "no answer from the feed" }, null); },
                             COMMAND_TIMEOUT_MS);
      self.pending[id] = { resolve: resolve, reject: reject, timer: timer };
      self.ws.send(JSON.stringify(msg));
    });
  };

  Feed.prototype.settle = function (id, error, ack) {
    var p = this.pending[id];
    if (!p) return;
    delete this.pending[id];
    clearTimeout(p.timer);
    if (error) {
      var text = error.error;
      if (text && typeof text === "object") text = text.message || JSON.stringify(text);
      p.reject(new Error(text || error.message || "the command failed"));
    } else {
      p.resolve(ack);
    }
  };

  Feed.prototype.failPending = function (why) {
    var ids = Object.keys(this.pending);
    for (var i = 0; i < ids.length; i++) this.settle(ids[i], { error: why }, null);
  };

  window.GaiaFeed = Feed;
})();
