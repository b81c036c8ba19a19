"""The paper's training recipe on Seq2SeqTrainer: options and presets, data and batching, the time budget, the
trainer, scores, checkpoint averaging and the BPE tokenizer. `vanilla-transformer train` and, from a checkout,
`python -m training.train` run `vanilla_transformer.training.train.main`."""
