/* What every operator page shares: DOM and HTTP helpers (the REST API with the session and its
 * CSRF token), notices, the forms that call the API, the fragments a live update swaps in, and
 * the hooks (Gaia.pages) through which each page's script joins the live feed that live.js
 * starts. A row, a message or an approval is never drawn here: its markup is the partial
 * template the page includes, fetched from /fragments/<name>/ (agents/pages/views.py) and rendered by
 * Django, which escapes it. Anything else from a model, an agent or a user is set with
 * textContent: never as markup. */
(function () {
  "use strict";

  var body = document.body;
  var API = "/api/v1";

  function h(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      for (var k in attrs) {
        if (!Object.prototype.hasOwnProperty.call(attrs, k) || attrs[k] === null || attrs[k] === undefined || attrs[k] === false) continue;
        if (k === "text") node.textContent = String(attrs[k]);
        else if (k === "class") node.className = attrs[k];
        else node.setAttribute(k, attrs[k] === true ? "" : String(attrs[k]));
      }
    }
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) child.forEach(function (c) { if (c) node.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
      else node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
    }
    return node;
  }

  function q(sel, root) { return (root || document).querySelector(sel); }
  function qa(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }
  function attrSel(name, value) { return "[" + name + '="' + CSS.escape(String(value)) + '"]'; }
  function csrf() { var m = q('meta[name="csrf-token"]'); return m ? m.content : ""; }
  function show(node, visible) { if (node) node.hidden = !visible; }
  function orDash(v) { return v === null || v === undefined || v === "" ? "?" : String(v); }
  function num(v) { return typeof v === "number" ? v : (v === null || v === undefined || v === "" ? null : Number(v)); }
  function fixed(v, d) { v = num(v); return v === null || isNaN(v) ? "–" : v.toFixed(d === undefined ? 2 : d); }
  function listOf(data, key) {
    if (Array.isArray(data)) return data;
    if (!data) return [];
    return data.results || data[key] || data.items || data.data || [];
  }

  var noticeTimer = null;
  function notice(text, bad) {
    var n = q("#notice");
    if (!n) return;
    n.textContent = text;
    n.className = "notice" + (bad ? " bad" : "");
    n.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(function () { n.hidden = true; }, bad ? 8000 : 3000);
  }

  function errorText(status, data) {
    if (data && typeof data === "object") {
      if (data.error) return typeof data.error === "string" ? data.error : (data.error.message || JSON.stringify(data.error));
      if (data.detail) return String(data.detail);
      if (data.message) return String(data.message);
      var keys = Object.keys(data);
      if (keys.length) return keys.map(function (k) { return k + ": " + [].concat(data[k]).join(" "); }).join("; ");
    }
    return "HTTP " + status;
  }

  /* A call of the REST API; ``payload`` goes as JSON, or as it is with ``contentType``. */
  function api(method, path, payload, contentType) {
    var init = { method: method, credentials: "same-origin",
                 headers: { "Accept": "application/json", "X-CSRFToken": csrf(),
                            // the audit trail says an action came from the console's pages
                            "X-Gaia-Channel": "page" } };
    if (payload !== undefined) {
      init.headers["Content-Type"] = contentType || "application/json";
      init.body = contentType ? payload : JSON.stringify(payload);
    }
    return fetch(path.indexOf("/") === 0 ? path : API + "/" + path, init).catch(function () {
      // fetch rejects only when no answer came: the network, not Gaia, said no
      var err = new Error(navigator.onLine === false
        ? "You are offline: nothing was sent. Try again when the connection is back."
        : "Gaia could not be reached: nothing was changed. Check the server and try again.");
      err.offline = true;
      throw err;
    }).then(function (r) {
      return r.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
        if (!r.ok) {
          var err = new Error(errorText(r.status, data));
          err.status = r.status; err.data = data;
          throw err;
        }
        return data;
      });
    });
  }

  function fail(err) { notice(err.message || String(err), true); }

  /* The partial template ``name`` of this page, rendered by the server from the page's own
   * context builder for ``query`` (a query string): a DocumentFragment, its times humanised. */
  function fragment(name, query) {
    var url = "/fragments/" + encodeURIComponent(name) + "/" + (query ? "?" + query : "");
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } }).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status + " for " + url);
      return r.text();
    }).then(function (html) {
      var t = document.createElement("template");
      t.innerHTML = html;  // our server's template, escaped by Django; scripts never run here
      humanTimes(t.content);
      return t.content;
    });
  }

  /* ``load`` (returns a promise) run at most once at a time: schedule() runs it after
   * ``delay`` ms (a burst of events costs one load), now() at once; a call while it runs
   * makes it run once more after. */
  function refresher(load, delay) {
    var timer = null, running = null, again = false;
    function run() {
      clearTimeout(timer);
      timer = null;
      if (running) { again = true; return running; }
      running = Promise.resolve().then(load).catch(function () { /* the next load mends it */ })
        .then(function () {
          running = null;
          if (again) { again = false; schedule(); }
        });
      return running;
    }
    function schedule() {
      if (running) again = true;
      else if (!timer) timer = setTimeout(run, delay);
    }
    return { schedule: schedule, now: run };
  }

  function badge(status, id) {
    return h("span", { "class": "badge status-" + status, id: id, text: status });
  }

  // ------------------------------------------------------------------------------------------
  // Forms that call the API (they also work without JavaScript: DRF takes form posts)

  function formJson(form, submitter) {
    var kind = form.dataset.kind;
    var data = new FormData(form);
    if (kind === "inject") {
      var out = { to: data.get("to"), payload: data.get("payload") };
      if (data.get("thread_id")) out.thread_id = data.get("thread_id");
      return out;
    }
    if (kind === "approval") {  // the button says which decision (approve, deny)
      var decision = { decision: submitter ? submitter.value : "" };
      if (data.get("reason")) decision.reason = data.get("reason");
      return decision;
    }
    return {};
  }

  /* A destructive action asks first: a form with data-confirm opens this dialog, and is sent
   * only on "Yes" (data-confirm-yes names it). Its way back says "Cancel" unless
   * data-confirm-no names it: where the action is itself a cancelling, "Cancel" beside
   * "Cancel the run" reads as either. Resolves true or false. */
  function confirmAction(text, yes, no) {
    var dialog = q("#confirm-dialog");
    if (!dialog) {
      dialog = h("dialog", { id: "confirm-dialog", "aria-labelledby": "confirm-text" },
        h("form", { method: "dialog" },
          h("p", { id: "confirm-text" }),
          h("menu", null,
            h("button", { value: "no", id: "confirm-no", type: "submit" }, "Cancel"),
            h("button", { value: "yes", id: "confirm-yes", "class": "danger", type: "submit" }, "Yes"))));
      body.appendChild(dialog);
    }
    q("#confirm-text", dialog).textContent = text;
    q("#confirm-yes", dialog).textContent = yes || "Yes";
    q("#confirm-no", dialog).textContent = no || "Cancel";
    return new Promise(function (resolve) {
      dialog.addEventListener("close", function closed() {
        dialog.removeEventListener("close", closed);
        resolve(dialog.returnValue === "yes");
      });
      dialog.returnValue = "";
      dialog.showModal();
      q("#confirm-no", dialog).focus();
    });
  }

  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form.classList || !form.classList.contains("api-form")) return;
    e.preventDefault();
    if (form.dataset.confirm && !form.dataset.confirmed) {
      var submitter = e.submitter;
      confirmAction(form.dataset.confirm, form.dataset.confirmYes, form.dataset.confirmNo).then(function (yes) {
        if (!yes) return;
        form.dataset.confirmed = "1";
        try { form.requestSubmit(submitter || undefined); } finally { delete form.dataset.confirmed; }
      });
      return;
    }
    var buttons = qa("button[type=submit]", form);
    buttons.forEach(function (b) { b.disabled = true; });
    api("POST", form.getAttribute("action"), formJson(form, e.submitter)).then(function (data) {
      var kind = form.dataset.kind;
      if (kind === "inject") { q("textarea", form).value = ""; notice("Message stored; the agent is replying."); }
      else if (kind === "kill") notice("Kill sent.");
      else if (kind === "pause" || kind === "resume") notice("Agent " + kind + "d.");
      else if (kind === "cancel") notice("Cancel sent.");
      else if (kind === "resume") notice("Resumed: the run is queued again.");
      else if (kind === "approval") notice("The tool call is " + (data && data.status) + ".");
      else if (kind === "revoke") notice("Key revoked.");
      else if (kind === "reload") notice("Configuration reloaded.");
      else if (kind === "start" || kind === "stop") window.location.reload();
      form.dispatchEvent(new CustomEvent("gaia:done", { detail: data, bubbles: true }));
    }).catch(fail).then(function () { buttons.forEach(function (b) { b.disabled = false; }); });
  });

  // ------------------------------------------------------------------------------------------
  // Times as people read them ("3 min ago"; the exact time on hover), kept current

  function ago(iso, now) {
    var t = new Date(iso).getTime();
    if (isNaN(t)) return iso;
    var s = Math.round(((now || Date.now()) - t) / 1000);
    var future = s < 0;
    s = Math.abs(s);
    var text = s < 45 ? "just now" : s < 90 ? "1 min" : s < 3600 ? Math.round(s / 60) + " min"
      : s < 5400 ? "1 hour" : s < 86400 ? Math.round(s / 3600) + " hours"
      : s < 172800 ? "1 day" : s < 30 * 86400 ? Math.round(s / 86400) + " days" : null;
    if (text === null) return new Date(t).toLocaleDateString(undefined, { year: "numeric", month: "short", day: "numeric" });
    if (text === "just now") return text;
    return future ? "in " + text : text + " ago";
  }

  function humanTimes(root) {
    var now = Date.now();
    qa("time[datetime]:not([data-raw])", root).forEach(function (node) {
      var iso = node.getAttribute("datetime");
      node.textContent = ago(iso, now);
      if (!node.title) node.title = new Date(iso).toLocaleString();
    });
  }
  /* A <time> for an ISO time (the templates' ui/_time.html), or a dash. */
  function timeNode(iso, none) {
    if (!iso) return h("span", { "class": "muted", text: none || "–" });
    var t = h("time", { datetime: iso, title: new Date(iso).toLocaleString() });
    t.textContent = ago(iso);
    return t;
  }

  /* Stats with a unit ([data-format=duration-s]: seconds shown as "3 h 5 min"); those with
   * data-ticks count up each second between reads (the uptime). */
  function formatStat(node, value) {
    node.dataset.value = value;
    node.dataset.readAt = Date.now();
    node.textContent = node.dataset.format === "duration-s" ? duration(Number(value) * 1000) : value;
  }
  function tickStats() {
    qa("[data-format][data-ticks]").forEach(function (n) {
      if (n.dataset.value === undefined) formatStat(n, Number(n.textContent));
      var v = Number(n.dataset.value) + (Date.now() - Number(n.dataset.readAt)) / 1000;
      n.textContent = duration(Math.floor(v) * 1000);
    });
  }
  humanTimes();
  setInterval(humanTimes, 30000);

  // On a narrow screen the navigation folds behind its "Menu" button.
  var navToggle = q("#nav-toggle");
  if (navToggle) navToggle.addEventListener("click", function () {
    var open = navToggle.getAttribute("aria-expanded") !== "true";
    navToggle.setAttribute("aria-expanded", String(open));
    q("header.top").classList.toggle("nav-open", open);
  });
  qa("[data-format]").forEach(function (n) { formatStat(n, n.textContent.trim()); });
  setInterval(tickStats, 1000);

  /* Durations and sizes with their units: 950 ms, 1.2 s, 3 min 5 s; 512 B, 1.4 KB. */
  function duration(ms) {
    ms = num(ms);
    if (ms === null || isNaN(ms)) return "–";
    if (ms < 60000 && ms % 1000 === 0) return ms / 1000 + " s";  // whole seconds (uptime)
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " s";
    var s = Math.round(ms / 1000);
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }
  function bytes(n) {
    n = num(n);
    if (n === null || isNaN(n)) return "–";
    var units = ["B", "KB", "MB", "GB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(n < 10 ? 1 : 0) : String(Math.round(n))) + " " + units[i];
  }

  /* The API's 400 next to the field it names (``param``; "agents" for "agents[2]" or
   * "scopes.0"): the form's .field-error[data-for] slot, else one made after the field.
   * Returns whether a field took it (else the caller shows it for the whole form). */
  function fieldError(form, err) {
    var param = err.data && err.data.param ? String(err.data.param).split(/[.[]/)[0] : null;
    if (!param) return false;
    var field = q('[name="' + CSS.escape(param) + '"]', form);
    var slot = q('.field-error[data-for="' + CSS.escape(param) + '"]', form);
    if (!slot && field) {
      slot = h("span", { "class": "field-error", "data-for": param, role: "alert" });
      (field.closest("label") || field).insertAdjacentElement("afterend", slot);
    }
    if (!slot) return false;
    slot.textContent = err.message;
    slot.hidden = false;
    if (field) { field.setAttribute("aria-invalid", "true"); field.focus(); }
    return true;
  }
  function clearFieldErrors(form) {
    qa(".field-error", form).forEach(function (e) { e.hidden = true; e.textContent = ""; });
    qa("[aria-invalid]", form).forEach(function (f) { f.removeAttribute("aria-invalid"); });
  }

  window.Gaia = {
    API: API, PAGE: body.dataset.page, h: h, q: q, qa: qa, attrSel: attrSel, show: show,
    orDash: orDash, num: num, fixed: fixed, listOf: listOf, notice: notice, api: api,
    fail: fail, badge: badge, confirmAction: confirmAction, ago: ago, humanTimes: humanTimes,
    duration: duration, bytes: bytes, timeNode: timeNode, formatStat: formatStat,
    fieldError: fieldError, clearFieldErrors: clearFieldErrors, fragment: fragment,
    refresher: refresher,
    // Each page's script: {attach(feed), resync() -> promise|null, live: bool}, called by
    // live.js before it starts the feed; a page that follows one thread sets subscription.
    pages: [], subscription: null
  };
})();
