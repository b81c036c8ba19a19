"""Translate sentences with a saved model folder: `vanilla-transformer translate`.

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
from collections.abc import Iterable

import torch

from .checkpoint import check_checkpoint
from .pipeline_translation import check_generation_parameters

ENGINES = ("auto", "pytorch", "ctranslate2")


def _check_model_folder(path: str, engine: str = "pytorch") -> str:
    """The engine for the folder at `path` ("pytorch" or "ctranslate2"); FileNotFoundError names what is wrong."""
    from .export import is_ctranslate2_folder

    if not os.path.exists(path):
        raise FileNotFoundError(f"model folder not found: {path}")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path} is a file; give the folder written by save_pretrained")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"{path} is not a saved model folder: it has no config.json (save_pretrained) "
                                "and no model.bin (CTranslate2)")
    found = "ctranslate2" if is_ctranslate2_folder(path) else "pytorch"
    if engine == "ctranslate2" and found != engine:
        raise FileNotFoundError(f"{path} is not a CTranslate2 folder (it has no model.bin); make one with "
                                f"`vanilla-transformer export ctranslate2 {path} OUT`")
    if engine == "pytorch" and found != engine:
        raise FileNotFoundError(f"{path} is a CTranslate2 folder: translate it with the ctranslate2 engine")
    return found


def load_model(path: str, device: str | torch.device | None = None):
    """`AutoModelForSeq2SeqLM.from_pretrained(path)` in eval mode on `device` (default: CUDA when available).

    Raises `CheckpointError` (a ValueError) naming the file and the problem if the folder is not whole (see
    `vanilla_transformer.checkpoint`): missing, truncated or mismatched weights, no config.json, ...
    """
    check_checkpoint(path, need_tokenizer=False)
    return _load_model(path, device)


def _load_model(path: str, device: str | torch.device | None):
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(path)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return model.to(device).eval()


def load_model_and_tokenizer(path: str, device: str | torch.device | None = None, *, engine: str = "auto",
                             compute_type: str = "default"):
    """The model and `AutoTokenizer.from_pretrained(path)` of a saved folder.

    The model is our PyTorch model (see `load_model`) for a save_pretrained folder, or an
    `export.CTranslate2Translator` with `compute_type` for a folder written by `vanilla-transformer export
    ctranslate2`; `engine` ("pytorch" or "ctranslate2") insists on one of them. Both `generate` for `translate`.
    """
    from transformers import AutoTokenizer

    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    engine = _check_model_folder(path, engine)
    if engine == "ctranslate2":
        from .export import CTranslate2Translator

        if not any(os.path.isfile(os.path.join(path, name)) for name in ("tokenizer.json", "tokenizer_config.json")):
            raise FileNotFoundError(
                f"{path} has no tokenizer (tokenizer.json); save it there with tokenizer.save_pretrained({path!r})"
            )
        model = CTranslate2Translator(path, device=str(device or "auto"), compute_type=compute_type)
    else:
        if compute_type != "default":
            raise ValueError("compute_type applies to CTranslate2 folders; this one is a PyTorch model")
        check_checkpoint(path, need_tokenizer=True)
        model = _load_model(path, device)
    return model, AutoTokenizer.from_pretrained(path)


def translate(
    model,
    tokenizer,
    texts: Iterable[str],
    *,
    batch_size: int = 32,
    progress: bool = False,
    **generate_kwargs,
) -> list[str]:
    """Translate `texts` in batches of `batch_size` sentences; returns one single-line string per input text.

    Sentences are batched by token length (less padding) and returned in their original order. A blank text gives
    an empty translation without running the model. `generate_kwargs` go to `model.generate` (num_beams,
    max_new_tokens, length_penalty, ...). `progress=True` shows a tqdm bar on stderr. `model` is our model or an
    `export.CTranslate2Translator` (see `load_model_and_tokenizer`).
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    check_generation_parameters(model.generation_config, generate_kwargs)
    texts = list(texts)
    translations = [""] * len(texts)
    todo = [i for i, text in enumerate(texts) if text.strip()]
    input_ids = tokenizer([texts[i] for i in todo])["input_ids"] if todo else []
    ids_of = dict(zip(todo, input_ids))
    todo.sort(key=lambda i: len(ids_of[i]), reverse=True)  # longest first: an out-of-memory shows at once

    with tqdm(total=len(texts), disable=not progress, unit="sent", desc="Translating", file=sys.stderr) as bar:
        bar.update(len(texts) - len(todo))  # blank lines
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            inputs = tokenizer.pad({"input_ids": [ids_of[i] for i in batch]}, return_tensors="pt")
            inputs = {name: inputs[name].to(model.device) for name in ("input_ids", "attention_mask")}
            with torch.inference_mode():
                output_ids = model.generate(**inputs, **generate_kwargs)
            for i, text in zip(batch, tokenizer.batch_decode(output_ids, skip_special_tokens=True)):
                translations[i] = " ".join(text.splitlines())  # one line out per line in
            bar.update(len(batch))
    return translations


# ----------------------------------------------------------------------------------------------------------------
# Command line


def add_subcommand(subparsers) -> None:
    parser = subparsers.add_parser(
        "translate",
        help="translate sentences or a file of sentences with a saved model",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="sentences to translate (or use --input)")
    parser.add_argument("--model", required=True, metavar="DIR", help="folder written by save_pretrained (model + tokenizer)")
    parser.add_argument("--input", metavar="FILE", help="file of sentences, one per line ('-' for stdin)")
    parser.add_argument("--output", metavar="FILE", help="write translations here, one per line (default: stdout)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default 32)")
    parser.add_argument("--num-beams", type=int, help="beam size (default: the model's generation_config)")
    parser.add_argument("--max-new-tokens", type=int, help="longest translation in tokens")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument("--engine", choices=ENGINES, default="auto",
                        help="pytorch or ctranslate2 (default: what the folder holds)")
    parser.add_argument("--compute-type", default="default",
                        help="CTranslate2 only: int8, int8_float32, float32, float16, bfloat16, ... "
                             "(default: the exported weights' type)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar shown for --input")
    parser.set_defaults(func=lambda args: _run(parser, args))


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.texts and args.input:
        parser.error("give sentences as arguments or --input FILE, not both")
    if not args.texts and not args.input:
        parser.error("nothing to translate: give sentences as arguments or --input FILE")
    for name in ("batch_size", "num_beams", "max_new_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    try:
        engine = _check_model_folder(args.model, args.engine)
    except FileNotFoundError as error:
        parser.error(str(error))
    if args.compute_type != "default" and engine != "ctranslate2":
        parser.error("--compute-type applies to CTranslate2 folders (vanilla-transformer export ctranslate2)")
    if args.device is not None:
        try:
            device = torch.device(args.device)
        except RuntimeError:
            parser.error(f"--device {args.device!r} is not a torch device (cpu, cuda, cuda:1, mps, ...)")
        if device.type == "cuda" and not torch.cuda.is_available() and engine == "pytorch":
            parser.error(f"--device {args.device}: CUDA is not available on this machine")
    if args.output and not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        parser.error(f"cannot write --output {args.output}: its folder does not exist")

    if args.input == "-":
        texts = [line.rstrip("\n") for line in sys.stdin]
    elif args.input:
        if not os.path.isfile(args.input):
            parser.error(f"--input file not found: {args.input}")
        with open(args.input, encoding="utf-8-sig") as f:  # without a byte-order mark
            texts = [line.rstrip("\n") for line in f]  # universal newlines: \r\n ends a line too
    else:
        texts = args.texts

    generate_kwargs = {name: getattr(args, name) for name in ("num_beams", "max_new_tokens")
                       if getattr(args, name) is not None}
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bar from from_pretrained; ours counts sentences
    try:
        model, tokenizer = load_model_and_tokenizer(args.model, args.device, engine=engine,
                                                    compute_type=args.compute_type)
        translations = translate(model, tokenizer, texts, batch_size=args.batch_size,
                                 progress=bool(args.input) and not args.no_progress, **generate_kwargs)
    except (OSError, ValueError) as error:
        sys.exit(f"{parser.prog}: error: {error}")

    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in translations)
    else:
        sys.stdout.writelines(t + "\n" for t in translations)
