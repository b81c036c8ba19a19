/* The walk-through's steps: one per equation of the paper, in the order the model computes them, for each stack;
   `VTWalkthrough.mount(section, data, helpers)` draws the current step with its controls (previous / next, the
   arrow keys, the step, layer, head and token). */
(function (W) {
  "use strict";

  var STACK_TITLES = { encoder: "Encoder", decoder: "Decoder" };
  var KIND_TITLES = { self_attention: "self-attention", cross_attention: "encoder-decoder attention" };

  function queries(d, stack) { return stack === "encoder" ? d.source_tokens : d.decoder_input_tokens; }
  function keys(d, stack, kind) { return kind === "cross_attention" ? d.source_tokens : queries(d, stack); }
  function layers(ctx) { return ctx.w[ctx.stack]; }
  function layerData(ctx) { return layers(ctx)[ctx.layer]; }
  function attention(ctx) { return layerData(ctx)[ctx.kind]; }
  function weightsView(ctx) {
    var kind = ctx.kind === "cross_attention" ? "cross" : ctx.stack;
    return W.plain(ctx.d[kind + "_attentions"][ctx.layer][ctx.head]);
  }
  function heads(ctx) { return ctx.d[(ctx.stack === "encoder" ? "encoder" : "decoder") + "_attentions"][0].length; }
  function headDim(ctx) { return W.matrix(attention(ctx), "q").shape[2]; }
  function dims(n) { var out = []; for (var i = 0; i < n; i++) out.push(String(i)); return out; }

  function equation(ctx, box, section, formula, text) {
    box.appendChild(ctx.h.el("div", { class: "wt-section" }, section));
    box.appendChild(ctx.h.el("div", { class: "wt-equation" }, formula));
    if (text) box.appendChild(ctx.h.el("p", { class: "wt-text" }, text));
  }
  function row(ctx) { var f = ctx.h.el("div", { class: "wt-row" }); return f; }
  function who(ctx) { return "\u201c" + queries(ctx.d, ctx.stack)[ctx.token] + "\u201d (position " + ctx.token + ")"; }

  // ---------------------------------------------------------------------------------------------------------
  // The steps

  function embeddings(ctx, box) {
    var side = ctx.w.embeddings[ctx.stack === "encoder" ? "source" : "target"], h = ctx.h;
    var tokens = queries(ctx.d, ctx.stack);
    equation(ctx, box, "\u00a73.4 Embeddings, \u00a73.5 Positional encoding",
      "x = Embedding(token) \u00b7 \u221ad_model + PE(pos),   PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),   " +
      "PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))",
      "Each token of the " + (ctx.stack === "encoder" ? "source" : "decoder input (the translation shifted right)") +
      " is looked up in the embedding matrix and scaled by \u221ad_model; the positional encoding is added.");
    var figures = row(ctx);
    [["token", "Embedding \u00b7 \u221ad_model"], ["position", "PE"], ["sum", "x = sum"]].forEach(function (p) {
      figures.appendChild(W.heat(h, p[0], W.matrix(side, p[0]).head(0), { rowLabels: tokens, mark: ctx.token,
                                                                          title: p[1], width: 260 }));
    });
    box.appendChild(figures);
    ["token", "position", "sum"].forEach(function (name) {
      box.appendChild(W.vector(h, name, W.matrix(side, name).row(ctx.token), name + " of " + who(ctx)));
    });
  }

  function projections(ctx, box) {
    var h = ctx.h, a = attention(ctx), cross = ctx.kind === "cross_attention";
    equation(ctx, box, "\u00a73.2.2 Multi-head attention" + (cross ? ", \u00a73.2.3 encoder-decoder attention" : ""),
      "Q = X W_" + ctx.head + "^Q,   K = " + (cross ? "E" : "X") + " W_" + ctx.head + "^K,   V = " + (cross ? "E" : "X") +
      " W_" + ctx.head + "^V     (d_k = d_model / h = " + headDim(ctx) + ")",
      (ctx.w.normalize_before ? "X is LayerNorm(x) of the residual stream (pre-LN). " : "X is the layer's input. ") +
      (cross ? "The queries come from the decoder, the keys and values from the encoder's output E. " : "") +
      "Head " + ctx.head + " of " + heads(ctx) + ": each head has its own projections, here the model's q_proj, k_proj " +
      "and v_proj split into heads.");
    var figures = row(ctx);
    var q = queries(ctx.d, ctx.stack), k = keys(ctx.d, ctx.stack, ctx.kind);
    figures.appendChild(W.heat(h, "q", W.matrix(a, "q").head(ctx.head), { rowLabels: q, mark: ctx.token, title: "Q", width: 200 }));
    figures.appendChild(W.heat(h, "k", W.matrix(a, "k").head(ctx.head), { rowLabels: k, title: "K", width: 200 }));
    figures.appendChild(W.heat(h, "v", W.matrix(a, "v").head(ctx.head), { rowLabels: k, title: "V", width: 200 }));
    box.appendChild(figures);
    box.appendChild(W.vector(h, "q", W.matrix(a, "q").row(ctx.head, ctx.token), "the query of " + who(ctx)));
  }

  function scores(ctx, box) {
    var h = ctx.h, a = attention(ctx), k = keys(ctx.d, ctx.stack, ctx.kind);
    equation(ctx, box, "\u00a73.2.1 Scaled dot-product attention, equation (1)", "S = Q K\u1d40 / \u221ad_k",
      "The query of " + who(ctx) + " against every key: dot products, divided by \u221ad_k = " +
      h.fmt(Math.sqrt(headDim(ctx)), 2) + " so that their size does not grow with d_k.");
    var figures = row(ctx);
    figures.appendChild(W.heat(h, "scores", W.matrix(a, "scores").head(ctx.head),
                               { rowLabels: queries(ctx.d, ctx.stack), mark: ctx.token, title: "S = QK\u1d40/\u221ad_k" }));
    box.appendChild(figures);
    box.appendChild(W.vector(h, "scores", W.matrix(a, "scores").row(ctx.head, ctx.token),
                             "the scores of " + who(ctx), k));
  }

  function softmax(ctx, box) {
    var h = ctx.h, a = attention(ctx), k = keys(ctx.d, ctx.stack, ctx.kind);
    var masked = function (i, j) { return a.mask[i][j] === 0; };
    var causal = ctx.stack === "decoder" && ctx.kind === "self_attention";
    equation(ctx, box, "\u00a73.2.1 equation (1), \u00a73.2.3 masking", "A = softmax(mask(S))",
      (causal ? "Masked: a position may not attend to later positions; their scores are set to \u2212\u221e before " +
       "the softmax, which gives them weight 0. " : "Nothing is masked here. ") +
      "Each row of A sums to 1: these are the weights the model returns as output_attentions.");
    var scoresRow = W.matrix(a, "scores").row(ctx.head, ctx.token).map(function (v, j) {
      return masked(ctx.token, j) ? -Infinity : v;
    });
    box.appendChild(W.vector(h, "masked", scoresRow, "the masked scores of " + who(ctx), k));
    var figures = row(ctx);
    figures.appendChild(W.heat(h, "weights", weightsView(ctx), { rowLabels: queries(ctx.d, ctx.stack), mark: ctx.token,
                                                                  weights: true, masked: masked, title: "A" }));
    box.appendChild(figures);
    box.appendChild(W.vector(h, "weights", weightsView(ctx).row(ctx.token), "the weights of " + who(ctx), k));
  }

  function weightedSum(ctx, box) {
    var h = ctx.h, a = attention(ctx), d = headDim(ctx);
    equation(ctx, box, "\u00a73.2.1 equation (1)", "head_" + ctx.head + " = A V",
      "The output of head " + ctx.head + " for " + who(ctx) + " is the sum of the value vectors weighted by its row " +
      "of A.");
    var figures = row(ctx);
    figures.appendChild(W.heat(h, "weights", weightsView(ctx), { rowLabels: queries(ctx.d, ctx.stack), mark: ctx.token,
                                                                  weights: true, title: "A", width: 200 }));
    figures.appendChild(W.heat(h, "v", W.matrix(a, "v").head(ctx.head), { rowLabels: keys(ctx.d, ctx.stack, ctx.kind),
                                                                          title: "V", width: 200 }));
    box.appendChild(figures);
    var context = W.matrix(a, "context").row(ctx.token).slice(ctx.head * d, (ctx.head + 1) * d);
    box.appendChild(W.vector(h, "head", context, "head " + ctx.head + " of " + who(ctx) +
      " (columns " + ctx.head * d + "\u2013" + ((ctx.head + 1) * d - 1) + " of the concatenation)"));
  }

  function concat(ctx, box) {
    var h = ctx.h, a = attention(ctx), q = queries(ctx.d, ctx.stack);
    equation(ctx, box, "\u00a73.2.2 Multi-head attention", "MultiHead(Q, K, V) = Concat(head_1, \u2026, head_h) W^O",
      "The " + heads(ctx) + " heads side by side (the input of out_proj), then projected by W^O.");
    var figures = row(ctx);
    figures.appendChild(W.heat(h, "context", W.matrix(a, "context").head(0), { rowLabels: q, mark: ctx.token,
                                                                               title: "Concat(heads)", width: 300 }));
    figures.appendChild(W.heat(h, "output", W.matrix(a, "output").head(0), { rowLabels: q, mark: ctx.token,
                                                                             title: "\u00d7 W^O", width: 300 }));
    box.appendChild(figures);
    box.appendChild(W.vector(h, "output", W.matrix(a, "output").row(ctx.token), "the attention output of " + who(ctx)));
  }

  function addNorm(ctx, box) {
    var h = ctx.h, layer = layerData(ctx), name = "add_norm_" + ctx.sub, q = queries(ctx.d, ctx.stack);
    equation(ctx, box, "\u00a73.1 Residual connection and layer normalization",
      ctx.w.normalize_before ? "x + Sublayer(LayerNorm(x))   (pre-LN)" : "LayerNorm(x + Sublayer(x))",
      "The sub-layer's output is added to its input (the residual stream)" +
      (ctx.w.normalize_before ? "; the stream is normalised before each sub-layer instead of after it." :
       " and the sum is normalised: mean 0 and variance 1 over d_model, then scaled and shifted."));
    var figures = row(ctx);
    figures.appendChild(W.heat(h, name, W.matrix(layer, name).head(0), { rowLabels: q, mark: ctx.token,
                                                                         title: "Add & Norm " + ctx.sub, width: 360 }));
    box.appendChild(figures);
    box.appendChild(W.vector(h, "sublayer", W.matrix(attention(ctx), "output").row(ctx.token),
                             "Sublayer(x) of " + who(ctx)));
    box.appendChild(W.vector(h, name, W.matrix(layer, name).row(ctx.token), "the stream after it, " + who(ctx)));
  }

  function ffn(ctx, box) {
    var h = ctx.h, layer = layerData(ctx), q = queries(ctx.d, ctx.stack), hidden = W.matrix(layer, "ffn_hidden");
    equation(ctx, box, "\u00a73.3 Position-wise feed-forward network, equation (2)",
      "FFN(x) = max(0, x W_1 + b_1) W_2 + b_2",
      "The same two linear layers at every position: d_model \u2192 d_ff = " + hidden.cols + " \u2192 d_model" +
      (ctx.w.normalize_before ? ", applied to LayerNorm(x)" : "") + ".");
    var figures = row(ctx);
    figures.appendChild(W.heat(h, "ffn_hidden", hidden.head(0), { rowLabels: q, mark: ctx.token, width: 520,
                                                                   title: "max(0, x W_1 + b_1): " + hidden.cols + " columns" }));
    figures.appendChild(W.heat(h, "ffn_output", W.matrix(layer, "ffn_output").head(0),
                               { rowLabels: q, mark: ctx.token, title: "FFN(x)", width: 260 }));
    box.appendChild(figures);
    var values = hidden.row(ctx.token);
    box.appendChild(W.ffnSummary(h, values));
    box.appendChild(W.vector(h, "ffn_hidden", values, "the hidden units of " + who(ctx)));
    box.appendChild(W.vector(h, "ffn_output", W.matrix(layer, "ffn_output").row(ctx.token), "FFN(x) of " + who(ctx)));
  }

  function layerOutput(ctx, box) {
    var h = ctx.h, layer = layerData(ctx), q = queries(ctx.d, ctx.stack), n = layers(ctx).length;
    equation(ctx, box, "\u00a73.1 Encoder and decoder stacks",
      (ctx.w.normalize_before ? "x + FFN(LayerNorm(x))" : "LayerNorm(x + FFN(x))") + "  =  the output of layer " +
      ctx.layer + (ctx.layer + 1 < n ? " = the input of layer " + (ctx.layer + 1) : ", the last of N = " + n),
      "The second residual connection, after the feed-forward network. The " + n + " layers are identical in " +
      "shape, each with its own weights." + (ctx.layer + 1 === n && ctx.stack === "encoder" && ctx.w.decoder.length ?
      " The last encoder layer's output" + (ctx.w.normalize_before ? " (after a final LayerNorm)" : "") +
      " gives the keys and values of every decoder layer's encoder-decoder attention." : ""));
    var figures = row(ctx);
    figures.appendChild(W.heat(h, "layer_output", W.matrix(layer, "layer_output").head(0),
                               { rowLabels: q, mark: ctx.token, title: "layer " + ctx.layer + " output", width: 360 }));
    box.appendChild(figures);
    box.appendChild(W.vector(h, "layer_output", W.matrix(layer, "layer_output").row(ctx.token),
                             "the output of " + who(ctx)));
  }

  function output(ctx, box) {
    var h = ctx.h, d = ctx.d, top = ctx.w.logits[ctx.token] || [];
    var next = d.configuration === "encoder-decoder" ? d.target_tokens[ctx.token] :
      d.configuration === "decoder-only" ? d.decoder_input_tokens[ctx.token + 1] : d.source_tokens[ctx.token];
    equation(ctx, box, "\u00a73.4 Embeddings and softmax", "P(next token) = softmax(x W\u1d40)",
      "The decoder's output at " + who(ctx) + (ctx.w.normalize_before ? " (after the final LayerNorm)" : "") +
      " times the output matrix (shared with the embeddings, section 3.4) gives one logit per vocabulary token; " +
      "the softmax turns them into probabilities. The " + top.length + " most probable:");
    var bars = h.el("div", { class: "bars wt-logits", id: "wt-logits" });
    top.forEach(function (c) {
      var chosen = next !== undefined && c.token === next;
      bars.appendChild(h.el("span", { class: "tokname" + (chosen ? " chosen" : "") }, c.token));
      var track = h.el("div", { class: "track" });
      track.appendChild(h.el("div", { class: "bar", style: "width:" + 100 * c.probability / (top[0].probability || 1) + "%",
                                      "data-value": String(c.probability), "data-logit": String(c.logit),
                                      "data-id": String(c.id) }));
      bars.appendChild(track);
      bars.appendChild(h.el("span", { class: "val" }, h.fmt(c.probability, 3) + "  (logit " + h.fmt(c.logit, 2) + ")"));
    });
    box.appendChild(bars);
    if (next !== undefined) box.appendChild(h.el("p", { class: "wt-text" }, d.configuration === "encoder-only" ?
      "The token at this position: \u201c" + next + "\u201d." : "The token that came next: \u201c" + next + "\u201d."));
  }

  var ATTENTION_STEPS = [
    [projections, "queries, keys and values"], [scores, "scaled dot products"], [softmax, "mask and softmax"],
    [weightedSum, "weighted sum of the values"], [concat, "heads concatenated, W^O"]];

  function stepsOf(d) {
    var w = d.walkthrough, list = [];
    ["encoder", "decoder"].filter(function (s) { return w[s].length; }).forEach(function (stack) {
      var name = STACK_TITLES[stack];
      list.push({ stack: stack, draw: embeddings, title: name + ": embeddings and positions" });
      var kinds = ["self_attention"].concat(w[stack][0].cross_attention ? ["cross_attention"] : []);
      kinds.forEach(function (kind, i) {
        ATTENTION_STEPS.forEach(function (s) {
          list.push({ stack: stack, kind: kind, draw: s[0], title: name + " " + KIND_TITLES[kind] + ": " + s[1] });
        });
        list.push({ stack: stack, kind: kind, sub: i + 1, draw: addNorm, title: name + ": Add & Norm " + (i + 1) });
      });
      list.push({ stack: stack, kind: "self_attention", draw: ffn, title: name + ": feed-forward network" });
      list.push({ stack: stack, kind: "self_attention", draw: layerOutput, title: name + ": Add & Norm, layer output" });
    });
    if (w.logits.length) {
      var stack = w.decoder.length ? "decoder" : "encoder";
      list.push({ stack: stack, draw: output, title: "Output: linear layer and softmax" });
    }
    return list;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Controls and drawing

  function clamp(value, count) { return Math.max(0, Math.min(value, count - 1)); }

  function controls(section, d, steps, step, h, redraw) {
    var st = W.state, box = h.el("div", { class: "controls wt-controls", id: "wt-controls" });
    var prev = h.el("button", { id: "wt-prev", type: "button" }, "\u2190 previous");
    var next = h.el("button", { id: "wt-next", type: "button" }, "next \u2192");
    if (st.step === 0) prev.disabled = true;
    if (st.step === steps.length - 1) next.disabled = true;
    prev.addEventListener("click", function () { go(-1); });
    next.addEventListener("click", function () { go(1); });
    function go(delta) { st.step = clamp(st.step + delta, steps.length); redraw(); }
    box.appendChild(prev);
    box.appendChild(h.select("wt-step", "Step", steps.map(function (s, i) { return [i, (i + 1) + ". " + s.title]; }),
                             st.step, function (v) { st.step = +v; redraw(); }));
    box.appendChild(next);
    var n = d.walkthrough[step.stack].length, layerOptions = [];
    for (var l = 0; l < n; l++) layerOptions.push([l, "layer " + l]);
    box.appendChild(h.select("wt-layer", "Layer", layerOptions, st.layer, function (v) { st.layer = +v; redraw(); }));
    var headCount = d[(step.stack === "encoder" ? "encoder" : "decoder") + "_attentions"][0].length, headOptions = [];
    for (var hh = 0; hh < headCount; hh++) headOptions.push([hh, "head " + hh]);
    box.appendChild(h.select("wt-head", "Head", headOptions, st.head, function (v) { st.head = +v; redraw(); }));
    var tokens = queries(d, step.stack);
    box.appendChild(h.select("wt-token", "Token", tokens.map(function (t, i) { return [i, i + ": " + t]; }),
                             st.token[step.stack], function (v) { st.token[step.stack] = +v; redraw(); }));
    return box;
  }

  function mount(section, d, h) {
    var st = W.state;
    if (!d.walkthrough || !d.walkthrough.packed) return Promise.resolve();
    if (W.cache.data !== d) {  // another sentence: its buffer, and the walk-through from its first step
      W.cache.data = d; W.cache.buffer = null;
      st.step = 0; st.layer = 0; st.head = 0; st.token = { encoder: 0, decoder: 0 };
    }
    var steps = stepsOf(d);
    function redraw() {
      var step = steps[st.step = clamp(st.step, steps.length)];
      st.layer = clamp(st.layer, d.walkthrough[step.stack].length);
      st.head = clamp(st.head, d[(step.stack === "encoder" ? "encoder" : "decoder") + "_attentions"][0].length);
      st.token[step.stack] = clamp(st.token[step.stack], queries(d, step.stack).length);
      section.innerHTML = "";
      section.appendChild(h.el("h2", {}, "The paper, step by step, on this sentence"));
      section.appendChild(h.el("div", { class: "legend" }, "Every number below is the model's own, read from its " +
        "modules while it read this sentence" + (d.configuration === "encoder-decoder" ? " and its translation" : "") +
        " (" + (d.walkthrough.normalize_before ? "pre-LN" : "post-LN, the paper's order") + "). Use the buttons or " +
        "the \u2190 \u2192 keys; the layer, head and token can be changed at any step. Values to 3 significant " +
        "digits of each row's largest."));
      section.appendChild(controls(section, d, steps, step, h, redraw));
      var box = h.el("div", { class: "wt-step", id: "wt-body", "data-step": st.step, "data-stack": step.stack,
                               "data-kind": step.kind || "", "data-layer": st.layer, "data-head": st.head,
                               "data-token": st.token[step.stack] });
      box.appendChild(h.el("h3", {}, (st.step + 1) + " / " + steps.length + ". " + step.title +
        (step.draw === embeddings || step.draw === output ? "" : ", layer " + st.layer)));
      step.draw({ d: d, w: d.walkthrough, h: h, stack: step.stack, kind: step.kind, sub: step.sub, layer: st.layer,
                  head: st.head, token: st.token[step.stack] }, box);
      section.appendChild(box);
      section.setAttribute("data-ready", "true");
      h.tellHeight();
    }
    W.redraw = redraw;
    var ready = W.cache.buffer ? Promise.resolve() : W.inflate(d.walkthrough.packed).then(function (buffer) {
      if (W.cache.data === d) W.cache.buffer = buffer;
    });
    return ready.then(function () { if (W.cache.data === d) redraw(); });
  }

  // the arrow keys step through (not while a menu or a text field has the focus: they have their own use there)
  document.addEventListener("keydown", function (e) {
    var tag = e.target && e.target.tagName;
    if (!W.redraw || tag === "SELECT" || tag === "INPUT" || tag === "TEXTAREA") return;
    if (e.key !== "ArrowRight" && e.key !== "ArrowLeft") return;
    var next = document.getElementById(e.key === "ArrowRight" ? "wt-next" : "wt-prev");
    if (next && !next.disabled) { e.preventDefault(); next.click(); }
  });

  W.mount = mount;
  W.stepsOf = stepsOf;
})(VTWalkthrough);
