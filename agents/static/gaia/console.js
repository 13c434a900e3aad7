/* The console's forms that send JSON to the operator API (keys, providers, budgets): a form.json-form
 * is read into a JSON body (checkbox groups and multiple selects with data-list as arrays,
 * data-type int|float|bool|json|datetime converted; an empty field left out unless
 * data-send-empty) and sent with its method; the API's 400 names the field, and its message
 * shows next to that field. Then: data-then="secret" shows a new key's secret once, "reload"
 * reloads, "goto" opens data-goto with {name} filled from the answer's data-goto-key (default
 * name), and every form sends the event gaia:saved with the answer (data-then="event": only
 * that); data-confirm asks first. */
(function () {
  "use strict";

  var G = window.Gaia;
  var q = G.q, qa = G.qa, api = G.api, notice = G.notice;

  function localIso(value) {  // datetime-local has no zone: the browser's own
    if (!value) return null;
    var d = new Date(value);
    return isNaN(d) ? value : d.toISOString();
  }

  function fieldValue(field) {
    var type = field.dataset.type;
    if (type === "bool") return field.checked;
    var v = field.value;
    if (type === "int") return v === "" ? null : parseInt(v, 10);
    if (type === "float") return v === "" ? null : Number(v);
    if (type === "datetime") return localIso(v);
    if (type === "json") {
      try { return v.trim() ? JSON.parse(v) : {}; } catch (e) {
        var err = new Error(field.name + ": not valid JSON (" + e.message + ").");
        err.data = { param: field.name };
        throw err;
      }
    }
    return v;
  }

  function formBody(form) {
    var body = {};
    qa("input[name], select[name], textarea[name]", form).forEach(function (field) {
      var name = field.name;
      if (name === "csrfmiddlewaretoken") return;
      if (field.hasAttribute("data-list")) {
        if (!(name in body)) body[name] = [];
        if (field.tagName === "SELECT") {
          qa("option", field).forEach(function (o) { if (o.selected) body[name].push(o.value); });
        } else if (field.checked) body[name].push(field.value);
        return;
      }
      if (field.type === "checkbox" && field.dataset.type !== "bool") { if (field.checked) body[name] = field.value; return; }
      var v = fieldValue(field);
      var empty = v === "" || v === null || (field.dataset.type === "bool" && v === false);
      if (empty && !field.hasAttribute("data-send-empty")) return;
      body[name] = v === "" && field.dataset.type === "datetime" ? null : v;
    });
    qa("select[data-list]:not([data-send-empty])", form).forEach(function (s) {
      if (body[s.name] && !body[s.name].length) delete body[s.name];
    });
    return body;
  }

  function clearErrors(form) {
    G.clearFieldErrors(form);
    var top = q(".form-error", form);
    if (top) top.hidden = true;
  }

  /* The API's error next to the field it names, or above the button when it names none. */
  function showError(form, err) {
    if (G.fieldError(form, err)) return;
    var top = q(".form-error", form);
    if (top) { top.textContent = err.message; top.hidden = false; } else G.fail(err);
  }

  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form.classList || !form.classList.contains("json-form")) return;
    e.preventDefault();
    if (form.dataset.confirm && !form.dataset.confirmed) {  // a delete asks first
      G.confirmAction(form.dataset.confirm, form.dataset.confirmYes, form.dataset.confirmNo).then(function (yes) {
        if (!yes) return;
        form.dataset.confirmed = "1";
        try { form.requestSubmit(); } finally { delete form.dataset.confirmed; }
      });
      return;
    }
    clearErrors(form);
    var body;
    try { body = formBody(form); } catch (err) { showError(form, err); return; }
    var button = q("button[type=submit]", form);
    button.disabled = true;
    var method = (form.getAttribute("method") || "post").toUpperCase();
    api(method, form.getAttribute("action"), body).then(function (data) {
      var then = form.dataset.then;
      if (then === "secret") {
        q("#key-secret-value").textContent = data.secret;
        q("#key-secret").hidden = false;
        q("#key-copied").hidden = true;
        form.reset();
        addKeyRow();
        notice("Key " + data.name + " made: copy its secret now.");
      } else if (then === "goto") {
        var named = data ? data[form.dataset.gotoKey || "name"] : "";  // a 204: no answer
        window.location.assign(form.dataset.goto.replace("{name}", encodeURIComponent(named)));
      } else if (then === "reload") {
        window.location.reload();
      }
      // data-then="event": the page's own script takes the answer (webhooks.js)
      form.dispatchEvent(new CustomEvent("gaia:saved", { detail: data, bubbles: true }));
    }).catch(function (err) { showError(form, err); })
      .then(function () { button.disabled = false; });
  });

  /* The key just made, in the list as the server draws it (templates/ui/_key_rows.html, for
   * the page's own filters and sort: the newest first unless sorted otherwise). */
  function addKeyRow() {
    var rows = q("#key-rows");
    if (!rows) return;
    G.fragment("key-rows", window.location.search.slice(1)).then(function (frag) {
      rows.replaceChildren(frag);
    }).catch(G.fail);
  }

  var copy = q("#key-copy");
  if (copy) copy.addEventListener("click", function () {
    var text = q("#key-secret-value").textContent;
    var done = function () { q("#key-copied").hidden = false; };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, function () { selectSecret(); });
    else { selectSecret(); try { if (document.execCommand("copy")) done(); } catch (err) { /* selected: ctrl-c */ } }
  });
  function selectSecret() {
    var range = document.createRange();
    range.selectNodeContents(q("#key-secret-value"));
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }

  // datetime-local inputs show a stored time in the browser's zone
  qa('input[type="datetime-local"][data-value]').forEach(function (input) {
    var d = new Date(input.dataset.value);
    if (!input.dataset.value || isNaN(d)) return;
    var local = new Date(d.getTime() - d.getTimezoneOffset() * 60000);
    input.value = local.toISOString().slice(0, 16);
  });

  // a provider's "test connection" answer
  document.addEventListener("gaia:done", function (e) {
    if (!e.target.dataset || e.target.dataset.kind !== "probe") return;
    var r = e.detail || {};
    var out = q("#probe-result");
    out.className = r.ok ? "ok" : "error";
    out.textContent = r.ok ? "Answered in " + r.elapsed_ms + " ms (first token " + r.ttft_ms + " ms)" + (r.reply ? ": " + r.reply : ".")
                           : "Failed after " + r.elapsed_ms + " ms: " + r.error;
  });
  document.addEventListener("gaia:done", function (e) {
    if (e.target.dataset && e.target.dataset.kind === "revoke") window.location.reload();
  });
})();
