"""Seeing inside a model: the pictures of the classic explanations (`plots`) and the interactive explorer.

The explorer, by job:

- `attention_run`: one run of the model on one text (`run_with_attentions`): the translation or continuation, and
  every attention weight from one teacher-forced forward pass with `output_attentions=True`.
- `data`: `attention_data(model, tokenizer, text, **generate_kwargs)`, every number the views draw as JSON-ready
  lists: the tokens, every layer and head of every attention (`[layer][head][query][key]`), the top-k next-token
  probabilities and the beams at each decoding step, the positional encoding (section 3.5), and the walk-through.
- `walkthrough`: every intermediate value of the paper's equations for one text (embeddings, Q/K/V per head, scores,
  mask, weights, the heads concatenated, W^O, Add & Norm, the FFN, each layer's output, the top logits), read by
  forward hooks on the model's own modules.
- `page`: `write_html(path, data_list)`, one self-contained page (inline JS, CSS and data from `explore_assets/`; no
  network) with the views of each text; `render_page` gives its text, `page_data` the data as it embeds them (the
  walk-through's matrices packed).
- `app`: `build_app(model, tokenizer)`, the live Gradio app, which shows the same page for the current sentence (one
  renderer for both); its API endpoint `/translate` returns the translation and the attention data.
- `space`: `write_space(model_folder_or_id, out_dir)`, a folder that `huggingface_hub.upload_folder(...,
  repo_type="space")` publishes as a live demo.

Gradio is an optional extra: `pip install "vanilla-transformer[demo]"`.

The attentions a picture can show are named here, in a module without torch, for the command line's options.
"""

ATTENTION_KINDS = ("cross", "encoder", "decoder")  # decoder over source, and the two self-attentions
