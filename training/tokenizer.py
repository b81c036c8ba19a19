"""Train the byte-level BPE tokenizer: `python -m training.tokenizer --help` lists the options."""

from vanilla_transformer.training.tokenizer import main

if __name__ == "__main__":
    main()
