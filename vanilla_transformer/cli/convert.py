"""`vanilla-transformer convert KIND SRC OUT`: convert a Marian (OPUS-MT) or FSMT checkpoint folder into this model.

    vanilla-transformer convert marian path/to/opus-mt-en-de opus-mt-en-de-vanilla

The conversion is `vanilla_transformer.interop.convert.convert`.
"""

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    from vanilla_transformer.interop import FAMILIES

    parser = subparsers.add_parser(
        "convert",
        help="convert a Marian (OPUS-MT) or FSMT checkpoint folder into this model",
        description="Convert a saved Marian (OPUS-MT) or FSMT (fairseq WMT19) checkpoint folder into a folder of "
                    "this model, with its tokenizer, generation settings and a model card naming the origin.",
    )
    parser.add_argument("kind", choices=sorted(FAMILIES), help="the source's model type")
    parser.add_argument("src", help="folder of the saved source checkpoint (config.json, weights, tokenizer files)")
    parser.add_argument("out", help="folder to write the converted model to")
    parser.add_argument("--base-model", help="Hub id of the source, for the model card (read off a Hub cache path "
                                             "when left out)")
    parser.add_argument("--no-tokenizer", action="store_true", help="convert the model without its tokenizer")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier model folder at OUT")
    return parser


def run(args: argparse.Namespace) -> None:
    from vanilla_transformer.interop import FAMILIES
    from vanilla_transformer.interop.convert import convert

    convert(args.kind, args.src, args.out, base_model=args.base_model, tokenizer=not args.no_tokenizer,
            overwrite=args.overwrite)
    print(f"Converted the {FAMILIES[args.kind].title} checkpoint {args.src} into {args.out}.")
