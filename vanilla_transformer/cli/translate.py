"""`vanilla-transformer translate`: translate sentences or a file of sentences with a saved model folder.

    vanilla-transformer translate --model DIR "Two hundred and five." "Seventeen."
    vanilla-transformer translate --model DIR --input test.en --output test.de --batch-size 64 --num-beams 4
    vanilla-transformer translate --model DIR-ct2 --input test.en --compute-type int8   # a CTranslate2 export

A file is read as one sentence per line and written as one translation per line (blank lines stay blank), so the
output lines up with the input. Decoding follows the model's `generation_config` (the paper's beam 4, length
penalty 0.6) unless `--num-beams` / `--max-new-tokens` say otherwise. A folder written by
`vanilla-transformer export ctranslate2` is translated by CTranslate2 (`--engine` chooses explicitly).
"""

import argparse
import os
import sys

from vanilla_transformer.cli.options import UsageError, checked, positive_int, torch_device, writable_file


def add_parser(subparsers) -> argparse.ArgumentParser:
    from vanilla_transformer.checkpoints import ENGINES

    parser = subparsers.add_parser(
        "translate",
        help="translate sentences or a file of sentences with a saved model",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="sentences to translate (or use --input)")
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="folder written by save_pretrained (model + tokenizer), or by export ctranslate2")
    parser.add_argument("--input", metavar="FILE", help="file of sentences, one per line ('-' for stdin)")
    parser.add_argument("--output", metavar="FILE", action=checked(writable_file),
                        help="write translations here, one per line (default: stdout)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.add_argument("--batch-size", action=checked(positive_int), default=32,
                        help="sentences per batch (default 32)")
    parser.add_argument("--num-beams", action=checked(positive_int),
                        help="beam size (default: the model's generation_config)")
    parser.add_argument("--max-new-tokens", action=checked(positive_int), help="longest translation in tokens")
    parser.add_argument("--device", action=checked(torch_device),
                        help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument("--engine", choices=ENGINES, default="auto",
                        help="pytorch or ctranslate2 (default: what the folder holds)")
    parser.add_argument("--compute-type", default="default",
                        help="CTranslate2 only: int8, int8_float32, float32, float16, bfloat16, ... "
                             "(default: the exported weights' type)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar shown for --input")
    return parser


def _read_texts(args: argparse.Namespace) -> list[str]:
    """The sentences to translate: the arguments, or the lines of --input (a file, or "-": standard input) read by
    `files.read_text_lines` (split on "\\n" only, "\\r\\n" too, byte-order mark removed; not UTF-8: one line naming
    the byte)."""
    from vanilla_transformer.files.errors import TextFileError
    from vanilla_transformer.files.text import read_text_lines

    if not args.input:
        return args.texts
    try:
        return read_text_lines(sys.stdin if args.input == "-" else args.input, "--input file")
    except TextFileError as error:
        raise ValueError(str(error).replace("--input file standard input", "standard input (--input -)")) from None


def _inputs(args: argparse.Namespace) -> list[str | None]:
    """What this command reads: the --model folder and the --input file."""
    return [args.model, None if args.input in (None, "-") else args.input]


def _check_output(args: argparse.Namespace) -> None:
    """--output must not replace what this command reads (--input, the --model folder or a place inside it), nor an
    existing file without --overwrite."""
    from vanilla_transformer.files.errors import OutputError
    from vanilla_transformer.files.paths import check_output_file

    if args.output:
        try:
            check_output_file(args.output, inputs=_inputs(args), overwrite=args.overwrite)
        except OutputError as error:
            raise UsageError(str(error)) from None


def check(args: argparse.Namespace) -> None:
    """The sentences come from the arguments or --input, and --output replaces nothing it must not."""
    if args.texts and args.input:
        raise UsageError("give sentences as arguments or --input FILE, not both")
    if not args.texts and not args.input:
        raise UsageError("nothing to translate: give sentences as arguments or --input FILE")
    if args.input and args.input != "-" and not os.path.isfile(args.input):
        raise UsageError(f"--input file not found: {args.input}")
    _check_output(args)


def run(args: argparse.Namespace) -> None:
    from vanilla_transformer.checkpoints.load import load_checkpoint
    from vanilla_transformer.files.staging import staged_file
    from vanilla_transformer.translate import TRANSLATION_KINDS, translate

    texts = _read_texts(args)
    loaded = load_checkpoint(args.model, kinds=TRANSLATION_KINDS, device=args.device, engine=args.engine,
                             compute_type=args.compute_type, purpose="translate")
    generate_kwargs = {name: getattr(args, name) for name in ("num_beams", "max_new_tokens")
                       if getattr(args, name) is not None}
    translations = translate(loaded.model, loaded.tokenizer, texts, batch_size=args.batch_size,
                             progress=bool(args.input) and not args.no_progress, **generate_kwargs)
    if args.output:
        # checked again (another program may have made the file meanwhile); atomic: the old file or the new one
        with staged_file(args.output, inputs=_inputs(args), overwrite=args.overwrite) as f:
            f.writelines(t + "\n" for t in translations)
    else:
        sys.stdout.writelines(t + "\n" for t in translations)
