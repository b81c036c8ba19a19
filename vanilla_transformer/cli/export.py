"""`vanilla-transformer export ctranslate2|marian CHECKPOINT OUT`: export a checkpoint for other runtimes.

    vanilla-transformer export ctranslate2 outputs/multi30k multi30k-ct2 --quantization int8
    vanilla-transformer translate --model multi30k-ct2 --input test.en --output test.de
    vanilla-transformer export marian outputs/multi30k multi30k-marian   # a plain MarianMTModel, no remote code

The exporters are `interop.export_ctranslate2.to_ctranslate2` (pip install "vanilla-transformer[fast]") and
`interop.export_marian.to_marian`.
"""

import argparse
import warnings


def add_parser(subparsers) -> argparse.ArgumentParser:
    from vanilla_transformer.interop import QUANTIZATIONS

    parser = subparsers.add_parser(
        "export",
        help="export a checkpoint to CTranslate2 (fast translation) or to a plain MarianMTModel (no remote code)",
        description="Export a saved checkpoint folder: to CTranslate2 (weights, vocabularies, tokenizer and decoding "
                    "defaults; `vanilla-transformer translate --model OUT` then translates with it), or to a plain "
                    "MarianMTModel folder that transformers 4.x and 5.x load without trust_remote_code.",
    )
    formats = parser.add_subparsers(dest="format", required=True)
    ct2 = formats.add_parser("ctranslate2", help="a CTranslate2 model folder (pip install vanilla-transformer[fast])")
    ct2.add_argument("checkpoint", help="folder written by save_pretrained, with its tokenizer")
    ct2.add_argument("out", help="folder to write the CTranslate2 model to")
    ct2.add_argument("--quantization", choices=QUANTIZATIONS, default="float32",
                     help="weight type (default float32); int8 is the fastest on CPUs")
    ct2.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    ct2.set_defaults(command_parser=ct2)
    marian = formats.add_parser(
        "marian", help="a plain MarianMTModel folder (no remote code; transformers 4.x and 5.x)",
        description="Export a saved checkpoint folder to a plain MarianMTModel folder (config, weights, tokenizer, "
                    "decoding defaults, model card) that transformers 4.x and 5.x load without trust_remote_code "
                    "or this package.")
    marian.add_argument("checkpoint", help="folder written by save_pretrained, with its tokenizer")
    marian.add_argument("out", help="folder to write the MarianMTModel to")
    marian.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    marian.set_defaults(command_parser=marian)
    return parser


def run(args: argparse.Namespace) -> None:
    if args.format == "marian":
        from vanilla_transformer.interop.export_marian import to_marian

        out = to_marian(args.checkpoint, args.out, overwrite=args.overwrite)
        print(f"Exported {args.checkpoint} to the MarianMTModel folder {out}.")
        return
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CTranslate2's converter warns about numpy details a user cannot act on
        out = to_ctranslate2(args.checkpoint, args.out, args.quantization, overwrite=args.overwrite)
    print(f"Exported {args.checkpoint} to the CTranslate2 folder {out} ({args.quantization}).")
