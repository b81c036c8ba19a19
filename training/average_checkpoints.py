"""Average the weights of saved checkpoints: `python -m training.average_checkpoints --help` lists the options."""

from vanilla_transformer.training.average_checkpoints import main

if __name__ == "__main__":
    main()
