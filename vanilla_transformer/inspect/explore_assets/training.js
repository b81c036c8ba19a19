/* Training, watched: the explorer's training view, drawn from the JSON in <script id="attention-data"> (the
   recordings of training/watch.py, as inspect/training_view.py embeds them). Used as is by the static page and,
   inside an iframe, by the live app. A step slider replays the run: the encoder-decoder attention of the chosen
   sentence over its reference, the model's greedy translation at that step, the loss curve with the step marked, and
   each layer's gradient norm. Every drawn cell carries its numbers as attributes (data-query, data-key, data-value);
   moving the slider recolours the cells in place (the grid of tokens is the same at every step). Nothing is fetched. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var DATA = JSON.parse(document.getElementById("attention-data").textContent);
  var root = document.getElementById("explorer");
  var recordings = DATA.recordings;
  var state = { sentence: 0, layer: DATA.layers - 1, head: "mean", index: recordings.length - 1 };
  var cache = {};  // "recording/sentence" -> Float32Array of [layer][head][target][source]
  var cells = [], lossMarker = null, lossScale = null;

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
  // white -> dark blue for weights in [0, 1]: one scale at every step, so uniform rows stay pale
  function blues(v) {
    var t = Math.max(0, Math.min(1, v));
    var a = [247, 251, 255], b = [8, 48, 107];
    return "rgb(" + a.map(function (x, i) { return Math.round(x + (b[i] - x) * Math.pow(t, 0.7)); }).join(",") + ")";
  }

  // the weights of one recording and sentence: round(w * 65535) as little-endian uint16, base64
  function weights(index, sentence) {
    var key = index + "/" + sentence;
    if (!cache[key]) {
      var packed = recordings[index].cross[sentence], text = atob(packed.uint16);
      var view = new DataView(new ArrayBuffer(text.length)), values = new Float32Array(text.length / 2);
      for (var i = 0; i < text.length; i++) view.setUint8(i, text.charCodeAt(i));
      for (var j = 0; j < values.length; j++) values[j] = view.getUint16(2 * j, true) / 65535;
      cache[key] = { values: values, shape: packed.shape };
    }
    return cache[key];
  }
  // the drawn matrix: one head, or the mean of the heads, of the chosen layer
  function matrix(index) {
    var w = weights(index, state.sentence), s = w.shape, heads = s[1], nq = s[2], nk = s[3];
    var list = state.head === "mean" ? Array.from({ length: heads }, function (_, h) { return h; }) : [state.head];
    var out = new Float64Array(nq * nk);
    list.forEach(function (h) {
      var base = ((state.layer * heads) + h) * nq * nk;
      for (var i = 0; i < nq * nk; i++) out[i] += w.values[base + i];
    });
    if (list.length > 1) for (var i = 0; i < nq * nk; i++) out[i] /= list.length;
    return out;
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

  function header() {
    var box = el("section", { id: "header" });
    box.appendChild(el("h1", {}, "Training, watched" + (DATA.run ? ": " + DATA.run : "")));
    box.appendChild(el("div", { class: "meta" }, recordings.length + " recorded steps of " + (DATA.max_steps || "?") +
      "; " + DATA.sentences.length + " validation sentence(s); " + DATA.layers + " decoder layers of " + DATA.heads +
      " heads. The attention is over the reference translation (the same rows at every step); the translation is " +
      "the model's own, greedy, at that step."));
    return box;
  }

  function controls() {
    var box = el("div", { class: "controls", id: "controls" });
    box.appendChild(select("sentence", "Sentence", DATA.sentences.map(function (s, i) {
      return [i, (i + 1) + ". " + s.source.slice(0, 60)];
    }), state.sentence, function (v) { state.sentence = +v; draw(); }));
    var layers = [];
    for (var l = 0; l < DATA.layers; l++) layers.push([l, "layer " + l]);
    box.appendChild(select("layer", "Layer", layers, state.layer, function (v) { state.layer = +v; draw(); }));
    var heads = [["mean", "mean of heads"]];
    for (var h = 0; h < DATA.heads; h++) heads.push([h, "head " + h]);
    box.appendChild(select("head", "Head", heads, state.head, function (v) {
      state.head = v === "mean" ? "mean" : +v; draw();
    }));
    return box;
  }

  function stepControl() {
    var box = el("div", { class: "controls" });
    var slider = el("input", { type: "range", id: "training-step", min: 0, max: recordings.length - 1,
                               value: state.index, "aria-label": "recorded step" });
    slider.addEventListener("input", function () { showStep(+slider.value); });
    box.appendChild(slider);
    box.appendChild(el("span", { id: "training-step-label" }));
    return box;
  }

  function heatmap() {
    var s = DATA.sentences[state.sentence], queries = s.target_tokens, keys = s.source_tokens;
    var nq = queries.length, nk = keys.length;
    var cell = Math.max(10, Math.min(28, Math.floor(520 / Math.max(nq, nk))));
    var longest = function (list) { return Math.min(14, Math.max.apply(null, list.map(function (t) { return t.length; }))); };
    var labelW = 8 + 7 * longest(queries), labelH = 8 + 6 * longest(keys);
    var node = svg("svg", { width: labelW + nk * cell + 2, height: labelH + nq * cell + 2, class: "heatmap",
                            id: "training-heatmap", role: "img",
                            "aria-label": "encoder-decoder attention, layer " + state.layer + ", " +
                                          (state.head === "mean" ? "mean of heads" : "head " + state.head) });
    cells = [];
    for (var q = 0; q < nq; q++) {
      for (var k = 0; k < nk; k++) {
        var rect = svg("rect", { x: labelW + k * cell, y: labelH + q * cell, width: cell, height: cell, class: "cell",
                                 "data-query": q, "data-key": k });
        rect.appendChild(svg("title"));
        cells.push(rect);
        node.appendChild(rect);
      }
    }
    queries.forEach(function (tok, i) {
      node.appendChild(svg("text", { x: labelW - 4, y: labelH + i * cell + cell / 2 + 4, "text-anchor": "end",
                                     class: "tok q-tok" }, tok.slice(0, 14)));
    });
    keys.forEach(function (tok, j) {
      var x = labelW + j * cell + cell / 2 + 4, y = labelH - 4;
      node.appendChild(svg("text", { x: x, y: y, transform: "rotate(-60 " + x + " " + y + ")", class: "tok k-tok" },
                           tok.slice(0, 14)));
    });
    return node;
  }

  function lossCurve() {
    var box = el("div", { class: "panel" });
    box.appendChild(el("div", { class: "panel-title" }, "training loss (the Trainer's log), the step marked"));
    var points = DATA.loss || [];
    if (!points.length) {
      box.appendChild(el("div", { class: "legend", id: "loss-none" }, "no loss logged yet"));
      lossMarker = null;
      return box;
    }
    var width = 420, height = 200, pad = 36;
    var last = Math.max(DATA.max_steps || 0, points[points.length - 1][0], recordings[recordings.length - 1].step, 1);
    var values = points.map(function (p) { return p[1]; });
    var low = Math.min.apply(null, values), high = Math.max.apply(null, values);
    if (high === low) { high += 1; low -= 1; }
    lossScale = function (step) { return pad + (width - pad - 8) * step / last; };
    var y = function (v) { return 8 + (height - pad - 8) * (high - v) / (high - low); };
    var node = svg("svg", { width: width, height: height, id: "loss-curve" });
    node.appendChild(svg("line", { x1: pad, y1: height - pad, x2: width - 8, y2: height - pad, stroke: "#9aa3b5" }));
    node.appendChild(svg("line", { x1: pad, y1: 8, x2: pad, y2: height - pad, stroke: "#9aa3b5" }));
    node.appendChild(svg("text", { x: pad - 4, y: 14, "text-anchor": "end" }, fmt(high, 2)));
    node.appendChild(svg("text", { x: pad - 4, y: height - pad, "text-anchor": "end" }, fmt(low, 2)));
    node.appendChild(svg("text", { x: pad, y: height - pad + 14 }, "0"));
    node.appendChild(svg("text", { x: width - 8, y: height - pad + 14, "text-anchor": "end" }, "step " + last));
    node.appendChild(svg("polyline", { points: points.map(function (p) { return lossScale(p[0]) + "," + y(p[1]); }).join(" "),
                                       fill: "none", stroke: "#2357c6", "stroke-width": 1.5, id: "loss-line",
                                       "data-points": points.length }));
    lossMarker = svg("line", { y1: 8, y2: height - pad, stroke: "#f2a03d", "stroke-width": 2, id: "loss-marker" });
    node.appendChild(lossMarker);
    box.appendChild(node);
    return box;
  }

  function gradientBars(norms) {
    var box = el("div", { class: "bars", id: "grad-norms" });
    if (!norms) {
      box.appendChild(el("span", { class: "legend" }, "none at step 0 (no update yet)"));
      return box;
    }
    var names = Object.keys(norms);
    var top = Math.max.apply(null, names.map(function (n) { return norms[n]; }).concat([1e-12]));
    names.forEach(function (name) {
      box.appendChild(el("span", { class: "tokname" }, name));
      var track = el("div", { class: "track" });
      track.appendChild(el("div", { class: "bar", style: "width:" + (100 * norms[name] / top) + "%",
                                    "data-label": name, "data-value": String(norms[name]) }));
      box.appendChild(track);
      box.appendChild(el("span", { class: "val" }, norms[name].toPrecision(3)));
    });
    return box;
  }

  // one step: recolour the cells, the translation, the loss marker and the gradient norms
  function showStep(index) {
    var started = performance.now();
    state.index = index;
    var rec = recordings[index], m = matrix(index), s = DATA.sentences[state.sentence];
    var nk = s.source_tokens.length;
    cells.forEach(function (rect, i) {
      var q = Math.floor(i / nk), k = i % nk, v = m[i];
      rect.setAttribute("fill", blues(v));
      rect.setAttribute("data-value", String(v));
      rect.firstChild.textContent = s.target_tokens[q] + " \u2192 " + s.source_tokens[k] + ": " + fmt(v, 4);
    });
    document.getElementById("training-step-label").textContent =
      "step " + rec.step + " (" + (index + 1) + " of " + recordings.length + " recordings)";
    var translation = document.getElementById("training-translation");
    translation.textContent = rec.translations[state.sentence];
    translation.className = rec.translations[state.sentence].trim() === s.reference.trim() ? "same" : "";
    if (lossMarker) {
      lossMarker.setAttribute("x1", lossScale(rec.step));
      lossMarker.setAttribute("x2", lossScale(rec.step));
      lossMarker.setAttribute("data-step", rec.step);
    }
    var bars = document.getElementById("grad-norms");
    bars.parentNode.replaceChild(gradientBars(rec.grad_norms), bars);
    root.setAttribute("data-step", rec.step);
    root.setAttribute("data-draw-ms", String(performance.now() - started));
  }

  function draw() {
    root.innerHTML = "";
    root.appendChild(header());
    root.appendChild(controls());
    root.appendChild(stepControl());
    var s = DATA.sentences[state.sentence];
    var text = el("section", { id: "training-text" });
    var line = el("div", { class: "sentence" });
    line.appendChild(el("span", { id: "training-source" }, s.source));
    line.appendChild(el("span", { class: "arrow" }, "\u2192"));
    line.appendChild(el("strong", { id: "training-translation" }));
    text.appendChild(line);
    text.appendChild(el("div", { class: "meta" }, "reference: ")).appendChild(
      el("span", { id: "training-reference" }, s.reference));
    root.appendChild(text);
    var grid = el("div", { class: "grid" });
    var att = el("div", { class: "panel" });
    att.appendChild(el("div", { class: "panel-title" }, "encoder-decoder attention over the reference, layer " +
      state.layer + ", " + (state.head === "mean" ? "mean of heads" : "head " + state.head) +
      " (rows: target tokens; columns: source tokens; white 0, dark blue 1)"));
    att.appendChild(heatmap());
    grid.appendChild(att);
    var side = el("div");
    side.appendChild(lossCurve());
    var norms = el("div", { class: "panel" });
    norms.appendChild(el("div", { class: "panel-title" }, "gradient norm of each layer (before the step's update)"));
    norms.appendChild(el("div", { id: "grad-norms" }));
    side.appendChild(norms);
    grid.appendChild(side);
    root.appendChild(grid);
    showStep(state.index);
    root.setAttribute("data-ready", "true");
    tellHeight();
  }

  // inside the live app the page is an iframe: tell the app how tall it is
  function tellHeight() {
    if (window.parent !== window) {
      var height = Math.max(document.body.scrollHeight, root.offsetTop + root.offsetHeight) + 24;
      window.parent.postMessage({ "vanilla-transformer-explorer-height": height }, "*");
    }
  }

  draw();
})();
