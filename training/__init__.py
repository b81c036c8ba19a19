"""The training recipe's commands for a checkout: `python -m training.train`, `python -m training.tokenizer` and
`python -m training.average_checkpoints`. The recipe itself is `vanilla_transformer.training`, installed with the
package, so `vanilla-transformer train` runs it whatever a user's own `training` module is; these files only give it
the short names of the paper's recipe."""
