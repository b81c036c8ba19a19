"""Train a translation Transformer: `python -m training.train --help` lists the options."""

from vanilla_transformer.training.train import main

if __name__ == "__main__":
    main()
