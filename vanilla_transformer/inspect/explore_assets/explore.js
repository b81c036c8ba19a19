/* The attention explorer's one renderer: draws the views from the JSON in <script id="attention-data">.
   Used as is by the static page and, inside an iframe, by the live app. Vanilla JS + SVG/canvas; nothing is fetched.
   Every drawn attention cell carries its numbers as attributes (data-layer, data-head, data-query, data-key,
   data-value) so that what is drawn can be checked against the data. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var DATA = JSON.parse(document.getElementById("attention-data").textContent);
  var root = document.getElementById("explorer");
  var state = { sentence: 0, kind: null, layer: 0, head: 0, step: 0 };

  var KIND_TITLES = {
    encoder: "Encoder self-attention",
    decoder: "Decoder self-attention (masked: a position sees only itself and earlier ones)",
    cross: "Encoder-decoder attention (each target token over the source)"
  };

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    for (var name in (attrs || {})) node.setAttribute(name, attrs[name]);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    for (var name in (attrs || {})) node.setAttribute(name, attrs[name]);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function fmt(value, digits) { return Number(value).toFixed(digits === undefined ? 3 : digits); }

  // white -> dark blue (sequential) for weights in [0, 1]
  function blues(v) {
    var t = Math.max(0, Math.min(1, v));
    var a = [247, 251, 255], b = [8, 48, 107];
    var c = a.map(function (x, i) { return Math.round(x + (b[i] - x) * Math.pow(t, 0.7)); });
    return "rgb(" + c.join(",") + ")";
  }
  // blue - white - red (diverging) for values in [-1, 1]
  function diverging(v) {
    var t = Math.max(-1, Math.min(1, v));
    var end = t < 0 ? [33, 102, 172] : [178, 24, 43];
    var s = Math.abs(t);
    return [255 + (end[0] - 255) * s, 255 + (end[1] - 255) * s, 255 + (end[2] - 255) * s].map(Math.round);
  }

  function data() { return DATA[state.sentence]; }
  function weights(kind) { return data()[kind + "_attentions"] || []; }
  function kinds() {
    return ["cross", "encoder", "decoder"].filter(function (k) { return weights(k).length > 0; });
  }
  function tokens(kind) {
    var d = data();
    if (kind === "encoder") return { queries: d.source_tokens, keys: d.source_tokens };
    if (kind === "decoder") return { queries: d.decoder_input_tokens, keys: d.decoder_input_tokens };
    return { queries: d.target_tokens, keys: d.source_tokens };
  }
  function headMatrix(kind, layer, head) { return weights(kind)[layer][head]; }

  // ---------------------------------------------------------------------------------------------------------
  // Header, controls

  function header() {
    var d = data(), box = el("section", { id: "header" });
    box.appendChild(el("h1", {}, "Attention explorer"));
    if (DATA.length > 1) {
      var pick = el("select", { id: "sentence", "aria-label": "sentence" });
      DATA.forEach(function (item, i) {
        var option = el("option", { value: i }, (i + 1) + ". " + item.text.slice(0, 60));
        if (i === state.sentence) option.selected = true;
        pick.appendChild(option);
      });
      pick.addEventListener("change", function () { state.sentence = +pick.value; reset(); draw(); });
      box.appendChild(pick);
    }
    var line = el("div", { class: "sentence", id: "sentence-text" });
    line.appendChild(el("span", { id: "source-text" }, d.text));
    if (d.configuration !== "encoder-only") {
      line.appendChild(el("span", { class: "arrow" }, d.configuration === "encoder-decoder" ? "\u2192" : "+"));
      line.appendChild(el("strong", { id: "translation-text" }, d.translation));
    }
    box.appendChild(line);
    var meta = d.model + " (" + d.configuration + ")";
    if (d.decoding) {
      meta += ", " + d.decoding.strategy;
      if (d.decoding.strategy === "beam search") meta += " with " + d.decoding.num_beams + " beams";
      if (d.decoding.strategy === "sampling") meta += " at temperature " + d.decoding.temperature;
    }
    meta += "; tokens as the tokenizer cut them";
    box.appendChild(el("div", { class: "meta" }, meta));
    (d.notes || []).forEach(function (note) { box.appendChild(el("div", { class: "note", role: "note" }, note)); });
    return box;
  }

  function select(id, label, options, value, onChange) {
    var wrap = el("label", {}, label + " ");
    var node = el("select", { id: id });
    options.forEach(function (o) {
      var option = el("option", { value: String(o[0]) }, o[1]);
      if (String(o[0]) === String(value)) option.selected = true;
      node.appendChild(option);
    });
    node.addEventListener("change", function () { onChange(node.value); });
    wrap.appendChild(node);
    return wrap;
  }

  function controls() {
    var box = el("div", { class: "controls", id: "controls" });
    var ks = kinds();
    box.appendChild(select("kind", "Attention", ks.map(function (k) { return [k, KIND_TITLES[k].split(" (")[0]]; }),
      state.kind, function (v) { state.kind = v; clampLayer(); draw(); }));
    var layers = weights(state.kind).length, heads = weights(state.kind)[0].length;
    var layerOptions = [];
    for (var l = 0; l < layers; l++) layerOptions.push([l, "layer " + l]);
    box.appendChild(select("layer", "Layer", layerOptions, state.layer, function (v) { state.layer = +v; draw(); }));
    var headOptions = [];
    for (var h = 0; h < heads; h++) headOptions.push([h, "head " + h]);
    headOptions.push(["all", "all heads (grid)"]);
    box.appendChild(select("head", "Head", headOptions, state.head, function (v) {
      state.head = v === "all" ? "all" : +v; draw();
    }));
    return box;
  }

  function clampLayer() {
    var w = weights(state.kind);
    state.layer = Math.min(state.layer, w.length - 1);
    if (state.head !== "all") state.head = Math.min(state.head, w[0].length - 1);
  }

  function reset() {
    var ks = kinds();
    state.kind = ks[0];
    state.layer = weights(state.kind).length - 1;
    state.head = 0;
    state.step = 0;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Heatmaps: one head, or all heads of a layer as a grid

  function heatmap(kind, layer, head, small) {
    var m = headMatrix(kind, layer, head), t = tokens(kind);
    var nq = t.queries.length, nk = t.keys.length;
    var cell = small ? Math.max(6, Math.min(16, Math.floor(260 / Math.max(nq, nk)))) :
      Math.max(10, Math.min(28, Math.floor(520 / Math.max(nq, nk))));
    var labelW = small ? 0 : 8 + 7 * Math.min(14, Math.max.apply(null, t.queries.map(function (s) { return s.length; })));
    var labelH = small ? 0 : 8 + 6 * Math.min(14, Math.max.apply(null, t.keys.map(function (s) { return s.length; })));
    var width = labelW + nk * cell + 2, height = labelH + nq * cell + 2;
    var root = svg("svg", { width: width, height: height, class: "heatmap", "data-kind": kind, "data-layer": layer,
                            "data-head": head, role: "img",
                            "aria-label": KIND_TITLES[kind] + ", layer " + layer + ", head " + head });
    var defs = svg("defs");
    var pattern = svg("pattern", { id: "mask-hatch", width: 4, height: 4, patternUnits: "userSpaceOnUse",
                                   patternTransform: "rotate(45)" });
    pattern.appendChild(svg("rect", { width: 4, height: 4, fill: "#eceef2" }));
    pattern.appendChild(svg("line", { x1: 0, y1: 0, x2: 0, y2: 4, stroke: "#b9bfcc", "stroke-width": 1.5 }));
    defs.appendChild(pattern);
    root.appendChild(defs);
    var causal = kind === "decoder";
    var top = 0;  // colours run from 0 to the largest weight of the layer (all heads on one scale)
    weights(kind)[layer].forEach(function (hm) { hm.forEach(function (r) { r.forEach(function (v) { top = Math.max(top, v); }); }); });
    var cells = [];
    for (var q = 0; q < nq; q++) {
      var row = [];
      for (var k = 0; k < nk; k++) {
        var value = m[q][k], masked = causal && k > q;
        var rect = svg("rect", { x: labelW + k * cell, y: labelH + q * cell, width: cell, height: cell,
                                 class: "cell" + (masked ? " masked" : ""), "data-kind": kind, "data-layer": layer,
                                 "data-head": head, "data-query": q, "data-key": k, "data-value": String(value) });
        if (!masked) rect.setAttribute("fill", blues(value / (top || 1)));
        else rect.setAttribute("data-masked", "true");
        rect.appendChild(svg("title", {}, masked ?
          t.queries[q] + " \u2192 " + t.keys[k] + ": masked (a later position; weight " + fmt(value) + ")" :
          t.queries[q] + " \u2192 " + t.keys[k] + ": " + fmt(value, 4)));
        row.push(rect);
        root.appendChild(rect);
      }
      cells.push(row);
    }
    var qLabels = [], kLabels = [];
    if (!small) {
      t.queries.forEach(function (tok, i) {
        var label = svg("text", { x: labelW - 4, y: labelH + i * cell + cell / 2 + 4, "text-anchor": "end",
                                  class: "tok q-tok", "data-index": i }, tok.slice(0, 14));
        qLabels.push(label); root.appendChild(label);
      });
      t.keys.forEach(function (tok, j) {
        var x = labelW + j * cell + cell / 2 + 4, y = labelH - 4;
        var label = svg("text", { x: x, y: y, transform: "rotate(-60 " + x + " " + y + ")", class: "tok k-tok",
                                  "data-index": j }, tok.slice(0, 14));
        kLabels.push(label); root.appendChild(label);
      });
    }
    // hover a cell or a token: its row (what the query attends to) and its column (what attends to the key)
    function highlight(q, k, on) {
      if (q !== null) cells[q].forEach(function (c) { c.classList.toggle("hl", on); });
      if (k !== null) cells.forEach(function (r) { r[k].classList.toggle("hl", on); });
      if (q !== null && qLabels[q]) qLabels[q].classList.toggle("hl", on);
      if (k !== null && kLabels[k]) kLabels[k].classList.toggle("hl", on);
    }
    root.addEventListener("mouseover", function (e) {
      var n = e.target;
      if (n.classList.contains("cell")) highlight(+n.getAttribute("data-query"), +n.getAttribute("data-key"), true);
      else if (n.classList.contains("q-tok")) highlight(+n.getAttribute("data-index"), null, true);
      else if (n.classList.contains("k-tok")) highlight(null, +n.getAttribute("data-index"), true);
    });
    root.addEventListener("mouseout", function (e) {
      var n = e.target;
      if (n.classList.contains("cell")) highlight(+n.getAttribute("data-query"), +n.getAttribute("data-key"), false);
      else if (n.classList.contains("q-tok")) highlight(+n.getAttribute("data-index"), null, false);
      else if (n.classList.contains("k-tok")) highlight(null, +n.getAttribute("data-index"), false);
    });
    return root;
  }

  // bertviz-style lines: queries on the left, keys on the right; hover a token to keep only its lines
  function flow(kind, layer, head) {
    var m = headMatrix(kind, layer, head), t = tokens(kind);
    var rowH = 18, colW = 120, gap = 160;
    var n = Math.max(t.queries.length, t.keys.length);
    var root = svg("svg", { width: 2 * colW + gap, height: n * rowH + 24, class: "flow", id: "flow" });
    root.appendChild(svg("text", { x: colW - 4, y: 12, "text-anchor": "end", class: "legend" }, "query"));
    root.appendChild(svg("text", { x: colW + gap + 4, y: 12, class: "legend" }, "key"));
    var lines = [];
    for (var q = 0; q < t.queries.length; q++) {
      for (var k = 0; k < t.keys.length; k++) {
        var v = m[q][k];
        if (v < 0.02) continue;
        var line = svg("line", { x1: colW, y1: 24 + q * rowH + rowH / 2 - 4, x2: colW + gap, y2: 24 + k * rowH + rowH / 2 - 4,
                                 class: "link", "stroke-opacity": v, "stroke-width": 1 + 2 * v,
                                 "data-query": q, "data-key": k, "data-value": String(v) });
        lines.push(line); root.appendChild(line);
      }
    }
    function show(attr, index) {
      lines.forEach(function (l) {
        l.style.display = attr === null || +l.getAttribute(attr) === index ? "" : "none";
      });
    }
    t.queries.forEach(function (tok, i) {
      var label = svg("text", { x: colW - 4, y: 24 + i * rowH + rowH / 2, "text-anchor": "end", class: "tok q-tok",
                                "data-index": i }, tok.slice(0, 16));
      label.addEventListener("mouseenter", function () { label.classList.add("hl"); show("data-query", i); });
      label.addEventListener("mouseleave", function () { label.classList.remove("hl"); show(null); });
      root.appendChild(label);
    });
    t.keys.forEach(function (tok, j) {
      var label = svg("text", { x: colW + gap + 4, y: 24 + j * rowH + rowH / 2, class: "tok k-tok", "data-index": j },
                      tok.slice(0, 16));
      label.addEventListener("mouseenter", function () { label.classList.add("hl"); show("data-key", j); });
      label.addEventListener("mouseleave", function () { label.classList.remove("hl"); show(null); });
      root.appendChild(label);
    });
    return root;
  }

  function attentionView() {
    var box = el("section", { id: "attention" });
    box.appendChild(el("h2", {}, KIND_TITLES[state.kind] + ", layer " + state.layer +
      (state.head === "all" ? ", all heads" : ", head " + state.head)));
    box.appendChild(el("div", { class: "legend" }, "Rows: queries; columns: keys; each row sums to 1. Hover a cell " +
      "or a token: its row is what the query attends to, its column what attends to the key." +
      (state.kind === "decoder" ? " Hatched cells are masked: a position cannot attend to later positions." : "")));
    var grid = el("div", { class: "grid", id: "heatmaps" });
    var heads = weights(state.kind)[state.layer].length;
    var list = state.head === "all" ? Array.from({ length: heads }, function (_, h) { return h; }) : [state.head];
    list.forEach(function (h) {
      var panel = el("div", { class: "panel" });
      if (state.head === "all") panel.appendChild(el("div", { class: "panel-title" }, "head " + h));
      panel.appendChild(heatmap(state.kind, state.layer, h, state.head === "all"));
      grid.appendChild(panel);
    });
    if (state.head !== "all") {
      var panel = el("div", { class: "panel" });
      panel.appendChild(el("div", { class: "panel-title" }, "hover a token: what it attends to / what attends to it"));
      panel.appendChild(flow(state.kind, state.layer, state.head));
      grid.appendChild(panel);
    }
    box.appendChild(grid);
    return box;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Step by step: top-k probabilities, that step's attention row, the beams

  function bars(items, id) {
    var box = el("div", { class: "bars", id: id });
    var top = Math.max.apply(null, items.map(function (item) { return item.value; }).concat([1e-9]));
    items.forEach(function (item) {
      box.appendChild(el("span", { class: "tokname" + (item.chosen ? " chosen" : "") }, item.label));
      var track = el("div", { class: "track" });
      track.appendChild(el("div", { class: "bar", style: "width:" + (100 * Math.max(0, Math.min(1, item.value / top))) + "%",
                                    "data-value": String(item.value), "data-label": item.label }));
      box.appendChild(track);
      box.appendChild(el("span", { class: "val" }, fmt(item.value, 3)));
    });
    return box;
  }

  function stepView() {
    var d = data(), steps = d.steps || [];
    var box = el("section", { id: "steps" });
    if (d.label_scores) {
      box.appendChild(el("h2", {}, "Classifier: label scores"));
      box.appendChild(bars(d.label_scores.map(function (s) { return { label: s.label, value: s.score }; }),
                           "label-scores"));
    }
    if (!steps.length) return box;
    var what = d.configuration === "encoder-decoder" ? "Decoding step by step" :
      d.configuration === "decoder-only" ? "Next-token distribution at each position" : "Masked-language-model: top tokens";
    box.appendChild(el("h2", {}, what));
    state.step = Math.min(state.step, steps.length - 1);
    var slider = el("input", { type: "range", id: "step", min: 0, max: steps.length - 1, value: state.step,
                               "aria-label": "step" });
    var label = el("span", { id: "step-label" });
    var body = el("div", { id: "step-body" });
    function render() {
      var s = steps[state.step], kind = d.step_attention;
      label.textContent = d.configuration === "encoder-decoder" ?
        "step " + state.step + " of " + (steps.length - 1) + ": produced \u201c" + s.token + "\u201d" :
        d.configuration === "decoder-only" ? "position " + s.query + ": next token \u201c" + s.token + "\u201d" :
        "position " + s.query + " (\u201c" + s.token + "\u201d)";
      body.innerHTML = "";
      var cols = el("div", { class: "step-cols" });
      var top = el("div");
      top.appendChild(el("div", { class: "panel-title" }, "top " + s.top_k.length + " probabilities (softmax)"));
      top.appendChild(bars(s.top_k.map(function (c) {
        return { label: c.token, value: c.probability, chosen: c.token === s.token };
      }), "top-k"));
      cols.appendChild(top);
      // that step's attention row, in the layer and head picked above (all heads: their mean)
      var w = weights(kind), layer = Math.min(state.layer, w.length - 1);
      var heads = state.head === "all" || kind !== state.kind ? w[layer].map(function (_, h) { return h; }) :
        [state.head];
      var keys = tokens(kind).keys, row = keys.map(function (_, k) {
        return heads.reduce(function (sum, h) { return sum + w[layer][h][s.query][k]; }, 0) / heads.length;
      });
      var att = el("div");
      att.appendChild(el("div", { class: "panel-title" }, (kind === "cross" ? "cross-attention" : kind +
        " self-attention") + " row, layer " + layer + ", " + (heads.length > 1 ? "mean of heads" : "head " + heads[0])));
      var strip = el("div", { class: "step-row", id: "step-attention" });
      var rowTop = Math.max.apply(null, row.concat([1e-9]));
      keys.forEach(function (tok, k) {
        var masked = kind === "decoder" && k > s.query;
        var span = el("span", { "data-key": k, "data-value": String(row[k]), title: fmt(row[k], 4) }, tok);
        span.style.background = masked ? "#eceef2" : blues(row[k] / rowTop);
        if (!masked && row[k] / rowTop > 0.6) span.style.color = "#fff";
        strip.appendChild(span);
      });
      att.appendChild(strip);
      cols.appendChild(att);
      if (s.beams) {
        var beams = el("div");
        beams.appendChild(el("div", { class: "panel-title" }, "beams extended at this step (score: sum of log-probabilities)"));
        var table = el("table", { class: "beams", id: "beams" });
        var head = el("tr");
        head.appendChild(el("th", {}, "hypothesis"));
        head.appendChild(el("th", {}, "score"));
        table.appendChild(head);
        s.beams.forEach(function (b) {
          var tr = el("tr", { class: b.chosen ? "chosen" : "", "data-score": String(b.score) });
          tr.appendChild(el("td", { class: "toks" }, b.tokens.length ? b.tokens.join(" ") : "(start)"));
          tr.appendChild(el("td", { class: "score" }, fmt(b.score, 3)));
          table.appendChild(tr);
        });
        beams.appendChild(table);
        cols.appendChild(beams);
      }
      body.appendChild(cols);
    }
    slider.addEventListener("input", function () { state.step = +slider.value; render(); tellHeight(); });
    var row = el("div", { class: "controls" });
    row.appendChild(slider);
    row.appendChild(label);
    box.appendChild(row);
    box.appendChild(body);
    render();
    return box;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Positional encoding (section 3.5)

  function positionsView() {
    var pe = data().positional_encoding;
    var box = el("section", { id: "positions-view" });
    if (!pe || !pe.values || !pe.values.length) return box;
    var rows = pe.values.length, cols = pe.values[0].length;
    box.appendChild(el("h2", {}, "Positional encoding added to the embeddings (" + pe.description + ")"));
    var limit = 0;
    pe.values.forEach(function (r) { r.forEach(function (v) { limit = Math.max(limit, Math.abs(v)); }); });
    var scale = Math.max(1, Math.min(12, Math.floor(900 / cols)));
    var canvas = el("canvas", { id: "positions", width: cols, height: rows, "data-rows": rows, "data-cols": cols,
                                title: "rows: positions 0.." + (rows - 1) + "; columns: dimensions 0.." + (cols - 1) });
    canvas.style.width = cols * scale + "px";
    canvas.style.height = rows * Math.max(4, Math.min(8, scale)) + "px";
    var ctx = canvas.getContext("2d"), image = ctx.createImageData(cols, rows);
    for (var p = 0; p < rows; p++) {
      for (var i = 0; i < cols; i++) {
        var c = diverging(pe.values[p][i] / (limit || 1)), o = 4 * (p * cols + i);
        image.data[o] = c[0]; image.data[o + 1] = c[1]; image.data[o + 2] = c[2]; image.data[o + 3] = 255;
      }
    }
    ctx.putImageData(image, 0, 0);
    var readout = el("div", { class: "legend", id: "positions-readout" },
      "rows: positions 0.." + (rows - 1) + ", columns: dimensions 0.." + (cols - 1) + "; blue < 0 < red (\u00b1" +
      fmt(limit, 2) + "). Hover for a value.");
    canvas.addEventListener("mousemove", function (e) {
      var r = canvas.getBoundingClientRect();
      var i = Math.floor((e.clientX - r.left) / r.width * cols), p = Math.floor((e.clientY - r.top) / r.height * rows);
      if (p >= 0 && p < rows && i >= 0 && i < cols)
        readout.textContent = "position " + p + ", dimension " + i + ": " + fmt(pe.values[p][i], 4);
    });
    box.appendChild(canvas);
    box.appendChild(readout);
    return box;
  }

  // ---------------------------------------------------------------------------------------------------------

  // the walk-through (walkthrough.js, walkthrough_steps.js) draws with these
  var HELPERS = { el: el, fmt: fmt, select: select, tellHeight: function () { tellHeight(); } };

  function walkthroughView() {
    var box = el("section", { id: "walkthrough" });
    if (data().walkthrough) VTWalkthrough.mount(box, data(), HELPERS);
    return box;
  }

  function draw() {
    root.innerHTML = "";
    root.appendChild(header());
    root.appendChild(controls());
    root.appendChild(attentionView());
    root.appendChild(stepView());
    root.appendChild(walkthroughView());
    root.appendChild(positionsView());
    root.setAttribute("data-ready", "true");
    tellHeight();
  }

  // inside the live app the page is an iframe: tell the app how tall it is, so that it shows all of it
  function tellHeight() {
    if (window.parent !== window) {
      // the content, not the viewport (documentElement.scrollHeight never shrinks below the frame)
      var height = Math.max(document.body.scrollHeight, root.offsetTop + root.offsetHeight) + 24;
      window.parent.postMessage({ "vanilla-transformer-explorer-height": height }, "*");
    }
  }

  reset();
  draw();
})();
