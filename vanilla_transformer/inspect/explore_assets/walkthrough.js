/* The walk-through: the paper's equations in order, each drawn with the model's own numbers for this sentence
   (data.walkthrough, read by forward hooks on the model's modules), one chosen token followed through.
   explore.js calls VTWalkthrough.mount(section, data, helpers) for the current sentence.

   Drawn values carry their numbers for checking: a followed token's vector is a .wt-vector with data-name and
   data-values (JSON); a heatmap is a canvas.wt-heat (data-name, data-rows, data-cols) whose hover readout
   (.wt-readout) holds data-row, data-col and data-value; the output layer's bars hold data-value. */
var VTWalkthrough = (function () {
  "use strict";

  var state = { step: 0, layer: 0, head: 0, token: { encoder: 0, decoder: 0 } };
  var cache = { data: null, buffer: null };

  // ---------------------------------------------------------------------------------------------------------
  // The packed matrices (page.py's Packer): int8/int16 rows times a float32 scale per row, in one gzip buffer

  function inflate(base64) {
    var text = atob(base64), bytes = new Uint8Array(text.length);
    for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).arrayBuffer();
  }

  function Matrix(desc, buffer) {
    this.shape = desc.shape;
    var cols = desc.shape[desc.shape.length - 1], count = desc.shape.reduce(function (a, b) { return a * b; }, 1);
    this.cols = cols;
    this.rows = count / cols;
    this.ints = desc.bits === 16 ? new Int16Array(buffer, desc.data, count) : new Int8Array(buffer, desc.data, count);
    this.scale = new Float32Array(buffer, desc.scale, this.rows);
  }
  // the value at [i][j] of a 2-D matrix, or [h][i][j] of a 3-D one (row-major, as numpy wrote it)
  Matrix.prototype.at = function () {
    var index = 0, shape = this.shape;
    for (var a = 0; a < arguments.length; a++) index = index * shape[a] + arguments[a];
    return this.ints[index] * this.scale[Math.floor(index / this.cols)];
  };
  Matrix.prototype.row = function () {  // row (i) of a 2-D or (h, i) of a 3-D matrix, as an array
    var r = arguments.length === 2 ? arguments[0] * this.shape[1] + arguments[1] : arguments[0];
    var out = new Array(this.cols), s = this.scale[r];
    for (var j = 0; j < this.cols; j++) out[j] = this.ints[r * this.cols + j] * s;
    return out;
  };
  // one head (a 2-D view [i][j]) of a 3-D matrix, or the matrix itself
  Matrix.prototype.head = function (h) {
    var m = this;
    if (m.shape.length === 2) return { rows: m.shape[0], cols: m.shape[1], at: function (i, j) { return m.at(i, j); },
                                       row: function (i) { return m.row(i); } };
    return { rows: m.shape[1], cols: m.shape[2], at: function (i, j) { return m.at(h, i, j); },
             row: function (i) { return m.row(h, i); } };
  };
  // a plain [i][j] array as the same kind of view
  function plain(array) {
    return { rows: array.length, cols: array.length ? array[0].length : 0, at: function (i, j) { return array[i][j]; },
             row: function (i) { return array[i].slice(); } };
  }

  function matrix(layer, name) {
    var desc = layer[name];
    if (desc && desc.same_as) desc = layer[desc.same_as];
    return new Matrix(desc, cache.buffer);
  }

  // ---------------------------------------------------------------------------------------------------------
  // Drawing: heatmaps on canvas with a hover readout, vectors as strips with their values one click away

  function signedColour(v) {
    var t = Math.max(-1, Math.min(1, v)), end = t < 0 ? [33, 102, 172] : [178, 24, 43], s = Math.abs(t);
    return [255 + (end[0] - 255) * s, 255 + (end[1] - 255) * s, 255 + (end[2] - 255) * s];
  }
  function weightColour(v) {
    var t = Math.pow(Math.max(0, Math.min(1, v)), 0.7), a = [247, 251, 255], b = [8, 48, 107];
    return [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t];
  }
  function limitOf(view) {
    var top = 0;
    for (var i = 0; i < view.rows; i++) for (var j = 0; j < view.cols; j++) {
      var v = view.at(i, j);
      if (isFinite(v)) top = Math.max(top, Math.abs(v));
    }
    return top || 1;
  }

  // options: rowLabels, colLabels, mark (the followed row), weights (0..1 colours), masked(i, j), width (pixels)
  function heat(h, name, view, options) {
    options = options || {};
    var box = h.el("div", { class: "wt-heat-box" });
    var rows = view.rows, cols = view.cols;
    var cellW = Math.max(1, Math.min(18, Math.floor((options.width || 420) / cols)));
    var cellH = Math.max(4, Math.min(18, Math.floor(300 / rows)));
    var canvas = h.el("canvas", { class: "wt-heat", "data-name": name, "data-rows": rows, "data-cols": cols,
                                  width: cols * cellW, height: rows * cellH });
    var ctx = canvas.getContext("2d"), image = ctx.createImageData(cols * cellW, rows * cellH);
    var top = options.weights ? 1 : limitOf(view);
    for (var i = 0; i < rows; i++) for (var j = 0; j < cols; j++) {
      var masked = options.masked && options.masked(i, j);
      var c = masked ? [225, 228, 235] : options.weights ? weightColour(view.at(i, j)) : signedColour(view.at(i, j) / top);
      for (var y = i * cellH; y < (i + 1) * cellH; y++) for (var x = j * cellW; x < (j + 1) * cellW; x++) {
        var o = 4 * (y * cols * cellW + x);
        image.data[o] = c[0]; image.data[o + 1] = c[1]; image.data[o + 2] = c[2]; image.data[o + 3] = 255;
      }
    }
    ctx.putImageData(image, 0, 0);
    if (options.mark !== undefined && options.mark < rows) {  // the followed token's row
      ctx.strokeStyle = "#f2a03d"; ctx.lineWidth = 2;
      ctx.strokeRect(1, options.mark * cellH + 1, cols * cellW - 2, cellH - 2);
    }
    var readout = h.el("div", { class: "wt-readout legend", "data-name": name },
      rows + " \u00d7 " + cols + (options.weights ? "" : "; blue < 0 < red (\u00b1" + h.fmt(top, 2) + ")") +
      ". Hover for a value.");
    canvas.addEventListener("mousemove", function (e) {
      var r = canvas.getBoundingClientRect();
      var j = Math.floor((e.clientX - r.left) / r.width * cols), i = Math.floor((e.clientY - r.top) / r.height * rows);
      if (i < 0 || i >= rows || j < 0 || j >= cols) return;
      var v = view.at(i, j), masked = options.masked && options.masked(i, j);
      readout.setAttribute("data-row", i); readout.setAttribute("data-col", j); readout.setAttribute("data-value", String(v));
      readout.textContent = (options.rowLabels ? options.rowLabels[i] : "row " + i) + " \u00d7 " +
        (options.colLabels ? options.colLabels[j] : "column " + j) + ": " + (masked ? "masked" : h.fmt(v, 4));
    });
    var wrap = h.el("div", { class: "wt-heat-wrap" });
    if (options.rowLabels) {
      var labels = h.el("div", { class: "wt-row-labels" });
      options.rowLabels.forEach(function (t, i) {
        var label = h.el("div", { class: "wt-row-label" + (i === options.mark ? " marked" : "") }, t.slice(0, 12));
        label.style.height = cellH + "px"; label.style.lineHeight = cellH + "px";
        label.style.fontSize = Math.min(11, cellH) + "px";
        labels.appendChild(label);
      });
      wrap.appendChild(labels);
    }
    wrap.appendChild(canvas);
    box.appendChild(h.el("div", { class: "panel-title" }, options.title || name));
    box.appendChild(wrap);
    box.appendChild(readout);
    return box;
  }

  // one vector of the followed token: a strip of colours, its first values, all of them one click away
  function vector(h, name, values, title, labels) {
    var box = h.el("div", { class: "wt-vector", "data-name": name, "data-values": JSON.stringify(values) });
    box.appendChild(h.el("div", { class: "panel-title" }, title + " (" + values.length + " values)"));
    var top = 0;
    values.forEach(function (v) { if (isFinite(v)) top = Math.max(top, Math.abs(v)); });
    var strip = h.el("div", { class: "wt-strip" });
    var width = Math.max(2, Math.min(24, Math.floor(480 / values.length)));
    values.forEach(function (v, i) {
      var c = isFinite(v) ? signedColour(v / (top || 1)).map(Math.round) : [225, 228, 235];
      var cell = h.el("span", { title: (labels ? labels[i] : i) + ": " + (isFinite(v) ? h.fmt(v, 4) : "\u2212\u221e") });
      cell.style.width = width + "px";
      cell.style.background = "rgb(" + c.join(",") + ")";
      strip.appendChild(cell);
    });
    box.appendChild(strip);
    var shown = values.length <= 24 ? values.length : 8;
    var text = values.slice(0, shown).map(function (v, i) {
      return (labels ? labels[i] + " " : "") + (isFinite(v) ? h.fmt(v, 3) : "\u2212\u221e");
    }).join(labels ? ",  " : ", ");
    box.appendChild(h.el("div", { class: "wt-values" }, "[" + text + (shown < values.length ? ", \u2026]" : "]")));
    if (shown < values.length) {
      var details = h.el("details", { class: "wt-all" });
      details.appendChild(h.el("summary", {}, "all " + values.length + " values"));
      details.addEventListener("toggle", function () {
        if (!details.open || details.childNodes.length > 1) return;
        var grid = h.el("div", { class: "wt-grid" });
        values.forEach(function (v, i) { grid.appendChild(h.el("span", {}, i + ": " + h.fmt(v, 4))); });
        details.appendChild(grid);
        h.tellHeight();
      });
      box.appendChild(details);
    }
    return box;
  }

  // a summary of a d_ff-wide vector: how many units the activation let through, and the largest
  function ffnSummary(h, values) {
    var active = values.filter(function (v) { return v > 0; }).length;
    var order = values.map(function (v, i) { return i; }).sort(function (a, b) { return values[b] - values[a]; });
    return h.el("div", { class: "wt-note" }, active + " of " + values.length + " units are positive after the " +
      "activation; the largest: " + order.slice(0, 6).map(function (i) { return "#" + i + " " + h.fmt(values[i], 3); })
      .join(", ") + ".");
  }

  return { state: state, cache: cache, inflate: inflate, Matrix: Matrix, matrix: matrix, plain: plain, heat: heat,
           vector: vector, ffnSummary: ffnSummary };
})();
