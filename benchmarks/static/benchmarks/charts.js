/* Small SVG charts drawn by our own code (no library, works offline). Every label is set with
 * textContent, so run names and questions can never become markup. */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var PALETTE = ["#2f5fd0", "#e0a100", "#1f9d55", "#d23c3c", "#7c5cd6", "#0e9aa7", "#c2561a", "#6b7280"];

  function el(name, attrs, text) {
    var node = document.createElementNS(NS, name);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) node.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function fmt(v) {
    if (v === null || v === undefined || isNaN(v)) return "–";
    var a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (a >= 100) return String(Math.round(v));
    if (a >= 1) return v.toFixed(2).replace(/\.?0+$/, "");
    return v.toFixed(3).replace(/\.?0+$/, "") || "0";
  }

  /* A horizontal bar chart: one bar per item. spec = {title, unit, items: [{label, value}]} */
  function bars(container, spec) {
    var items = spec.items || [];
    var rowH = 22, labelW = 130, valueW = 50, width = 380, top = 26;
    var height = top + rowH * Math.max(items.length, 1) + 10;
    var max = 0;
    items.forEach(function (it) { if (typeof it.value === "number" && it.value > max) max = it.value; });
    var svg = el("svg", { viewBox: "0 0 " + width + " " + height, role: "img", "class": "bar-chart",
                          "data-metric": spec.metric || "" });
    svg.appendChild(el("title", {}, spec.title));
    svg.appendChild(el("text", { x: 0, y: 16, "font-weight": "600" }, spec.title + (spec.unit ? " (" + spec.unit + ")" : "")));
    var span = width - labelW - valueW;
    items.forEach(function (it, i) {
      var y = top + i * rowH;
      var w = max > 0 && typeof it.value === "number" ? Math.max(1, span * it.value / max) : 0;
      // A label longer than its column loses its end, not its start (the run's "#id"); the
      // bar's own title holds it whole.
      var label = String(it.label);
      // (cut to 18 characters first: a font's average glyph keeps that inside the column
      // before the page has laid the chart out and it can be measured)
      var shown = label.length > 18 ? label.slice(0, 17) + "\u2026" : label;
      var text = el("text", { x: labelW - 6, y: y + 15, "text-anchor": "end", "class": "bar-label" }, shown);
      text.appendChild(el("title", {}, label));
      svg.appendChild(text);
      var rect = el("rect", { x: labelW, y: y + 3, width: w, height: rowH - 8, rx: 3,
                              fill: PALETTE[i % PALETTE.length], "class": "bar" });
      rect.appendChild(el("title", {}, it.label + ": " + fmt(it.value)));
      svg.appendChild(rect);
      svg.appendChild(el("text", { x: labelW + w + 6, y: y + 15 }, fmt(it.value)));
    });
    svg.appendChild(el("line", { x1: labelW, x2: labelW, y1: top, y2: height - 6, "class": "axis" }));
    container.replaceChildren(svg);
    fitLabels(svg, labelW - 8);
    return svg;
  }

  /* Shorten each bar's label (its end, keeping the run's "#id") until it fits its column as
   * drawn: a count of characters let wide ones run off the chart's left edge ("‡2" for
   * "#12 …"). A chart not on screen yet measures nothing and keeps its labels. */
  function fitLabels(svg, room, tries) {
    var unmeasured = false;
    svg.querySelectorAll("text.bar-label").forEach(function (text) {
      var node = text.firstChild;  // the words; the <title> after them holds the whole label
      if (!node || node.nodeType !== 3) return;
      if (!text.getComputedTextLength()) { unmeasured = true; return; }
      var words = node.nodeValue.replace(/\u2026$/, "");
      while (text.getComputedTextLength() > room && words.length > 1) {
        words = words.slice(0, -1);
        node.nodeValue = words + "\u2026";
      }
    });
    // drawn before the page laid it out (the charts are drawn as their data comes): once it is
    tries = tries || 0;
    if (unmeasured && tries < 50) {
      window.requestAnimationFrame(function () { fitLabels(svg, room, tries + 1); });
    }
  }

  /* A timeline: one row per lane, segments [start, end) in ms.
   * spec = {title, lanes: [{label, segments: [{start, end, title}]}]} */
  function timeline(container, spec) {
    var lanes = spec.lanes || [];
    var rowH = 26, labelW = 110, width = 900, top = 10, axisH = 22;
    var height = top + rowH * Math.max(lanes.length, 1) + axisH;
    var end = 0;
    lanes.forEach(function (l) { l.segments.forEach(function (s) { if (s.end > end) end = s.end; }); });
    var svg = el("svg", { viewBox: "0 0 " + width + " " + height, role: "img", "class": "timeline-chart" });
    svg.appendChild(el("title", {}, spec.title || "timeline"));
    var span = width - labelW - 20;
    lanes.forEach(function (lane, i) {
      var y = top + i * rowH;
      svg.appendChild(el("text", { x: labelW - 6, y: y + 16, "text-anchor": "end" }, lane.label));
      svg.appendChild(el("line", { x1: labelW, x2: labelW + span, y1: y + rowH - 2, y2: y + rowH - 2, stroke: "#eef0f3" }));
      lane.segments.forEach(function (s, j) {
        var x = labelW + (end > 0 ? span * s.start / end : 0);
        var w = end > 0 ? Math.max(1.5, span * (s.end - s.start) / end) : 0;
        var rect = el("rect", { x: x, y: y + 4, width: w, height: rowH - 10, rx: 2,
                                fill: PALETTE[i % PALETTE.length], opacity: j % 2 ? 0.75 : 1, "class": "segment" });
        rect.appendChild(el("title", {}, s.title || ""));
        svg.appendChild(rect);
      });
    });
    var axisY = top + rowH * Math.max(lanes.length, 1) + 2;
    svg.appendChild(el("line", { x1: labelW, x2: labelW + span, y1: axisY, y2: axisY, "class": "axis" }));
    for (var t = 0; t <= 4; t++) {
      var x = labelW + span * t / 4;
      svg.appendChild(el("text", { x: x, y: axisY + 15, "text-anchor": "middle" }, fmt(end * t / 4 / 1000) + " s"));
    }
    container.replaceChildren(svg);
    return svg;
  }

  /* A line chart over points in order (a suite's runs): one line per series, gaps where a
   * series has no value. spec = {title, metric, x: [label], series: [{label, values}],
   * max (the y axis' top; default: the largest value), dots (false: lines only, for long
   * series)} */
  function lines(container, spec) {
    var x = spec.x || [], series = spec.series || [];
    var width = 760, left = 44, right = 150, top = 28, plotH = 170, bottom = 40;
    var height = top + plotH + bottom;
    var max = spec.max || 0;
    series.forEach(function (s) { s.values.forEach(function (v) { if (typeof v === "number" && v > max) max = v; }); });
    if (!(max > 0)) max = 1;
    var span = width - left - right;
    function px(i) { return left + (x.length > 1 ? span * i / (x.length - 1) : span / 2); }
    function py(v) { return top + plotH - plotH * v / max; }
    var svg = el("svg", { viewBox: "0 0 " + width + " " + height, role: "img", "class": "line-chart",
                          "data-metric": spec.metric || "" });
    svg.appendChild(el("title", {}, spec.title));
    svg.appendChild(el("text", { x: 0, y: 16, "font-weight": "600" }, spec.title));
    for (var t = 0; t <= 4; t++) {
      var y = py(max * t / 4);
      svg.appendChild(el("line", { x1: left, x2: left + span, y1: y, y2: y, stroke: "#eef0f3" }));
      svg.appendChild(el("text", { x: left - 6, y: y + 4, "text-anchor": "end" }, fmt(max * t / 4)));
    }
    svg.appendChild(el("line", { x1: left, x2: left, y1: top, y2: top + plotH, "class": "axis" }));
    svg.appendChild(el("line", { x1: left, x2: left + span, y1: top + plotH, y2: top + plotH, "class": "axis" }));
    var every = Math.max(1, Math.ceil(x.length / 10));  // at most ten labels under the axis
    x.forEach(function (label, i) {
      if (i % every && i !== x.length - 1) return;
      svg.appendChild(el("text", { x: px(i), y: top + plotH + 16, "text-anchor": "middle", "class": "x-label" }, label));
    });
    series.forEach(function (s, k) {
      var color = PALETTE[k % PALETTE.length], d = "", pen = "M";
      s.values.forEach(function (v, i) {
        if (typeof v !== "number") { pen = "M"; return; }
        d += pen + px(i).toFixed(1) + " " + py(v).toFixed(1) + " ";
        pen = "L";
      });
      var g = el("g", { "class": "series", "data-series": s.label });
      if (d) g.appendChild(el("path", { d: d, fill: "none", stroke: color, "stroke-width": 2 }));
      s.values.forEach(function (v, i) {
        if (typeof v !== "number" || spec.dots === false) return;
        var dot = el("circle", { cx: px(i), cy: py(v), r: 3.5, fill: color, "class": "point" });
        dot.appendChild(el("title", {}, s.label + " · " + x[i] + ": " + fmt(v)));
        g.appendChild(dot);
      });
      svg.appendChild(g);
      var ly = top + 6 + k * 18;
      svg.appendChild(el("rect", { x: left + span + 14, y: ly - 8, width: 10, height: 10, rx: 2, fill: color }));
      var name = String(s.label);
      svg.appendChild(el("text", { x: left + span + 30, y: ly + 1, "class": "legend" }, name.length > 18 ? name.slice(0, 17) + "\u2026" : name));
    });
    container.replaceChildren(svg);
    return svg;
  }

  window.GaiaCharts = { bars: bars, timeline: timeline, lines: lines, format: fmt };
})();
