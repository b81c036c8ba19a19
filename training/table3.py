"""Re-run Table 3 of the paper on your data: `python -m training.table3 --help`, which is
`vanilla-transformer study table3 --help`."""

import sys

from vanilla_transformer.cli.main import main

if __name__ == "__main__":
    main(["study", "table3", *sys.argv[1:]])
