"""End-to-end translation speed (not a test): MarianMTModel's `generate`, ours, and ours exported to CTranslate2.

    python benchmarks/translation_speed.py --model outputs/multi30k    # Multi30k test_2016_flickr from ../shared
    python benchmarks/translation_speed.py --model DIR --source test.en --reference test.de --no-write

Every engine translates the same sentences with `vanilla_transformer.translate.translate`, which tokenises, sorts by
length, decodes in batches of `--batch-size` and detokenises: sentences/s is end to end. The engines:

- `MarianMTModel.generate`: transformers' own model with the checkpoint's weights, as `export marian` makes it
  (`interop.export_marian.marian_model`: our interleaved sinusoids are Marian's concatenated ones up to a
  fixed permutation of the d_model coordinates, applied to every weight); the script checks that Marian and ours
  generate the same tokens before timing anything.
- ours (`generate`), the same checkpoint;
- CTranslate2, the checkpoint exported with `interop.export_ctranslate2.to_ctranslate2` in float32 and int8, and
  bf16 compute where this CPU supports it.

Greedy and beam 4 (the checkpoint's length penalty and maximum length), one run each after a warm-up batch, with
`--threads` threads for torch and CTranslate2 alike. Writes the "Fast translation" section of benchmarks/RESULTS.md.
"""

import argparse
import shutil
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import torch

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401
import transformers  # noqa: E402

from benchmarks.checkout import ROOT  # noqa: E402
from benchmarks.report import RESULTS, machine_description, write_section  # noqa: E402
from vanilla_transformer.interop.ctranslate2_runtime import CTranslate2Translator  # noqa: E402
from vanilla_transformer.interop.export_ctranslate2 import ExportError, to_ctranslate2  # noqa: E402
from vanilla_transformer.interop.export_marian import marian_model  # noqa: E402
from vanilla_transformer.translate import load_model_and_tokenizer, translate  # noqa: E402

SECTION = "## Fast translation: CTranslate2 vs generate"
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"


# ----------------------------------------------------------------------------------------------------------------
# Measurements


def timed_translation(model, tokenizer, sentences, batch_size, num_beams) -> tuple[list[str], float]:
    translate(model, tokenizer, sentences[:batch_size], batch_size=batch_size, num_beams=num_beams)  # warm-up
    start = time.perf_counter()
    outputs = translate(model, tokenizer, sentences, batch_size=batch_size, num_beams=num_beams)
    return outputs, time.perf_counter() - start


def run(args) -> str:
    import ctranslate2
    import sacrebleu

    torch.set_num_threads(args.threads)
    sources = Path(args.source).read_text(encoding="utf-8").splitlines()[: args.limit]
    references = Path(args.reference).read_text(encoding="utf-8").splitlines()[: args.limit]
    model, tokenizer = load_model_and_tokenizer(args.model, "cpu")
    try:
        twin = marian_model(model)
    except ExportError as error:
        raise SystemExit(f"No MarianMTModel twin: {error}") from None
    engines = {"MarianMTModel generate": twin, "ours (generate)": model}

    exports = Path(tempfile.mkdtemp(prefix="ct2-benchmark-"))
    supported = ctranslate2.get_supported_compute_types("cpu")
    for quantization in ("float32", "int8"):
        folder = to_ctranslate2(args.model, exports / quantization, quantization)
        engines[f"ours in CTranslate2, {quantization}"] = CTranslate2Translator(folder, intra_threads=args.threads)
    bf16 = "bfloat16" in supported
    if bf16:
        engines["ours in CTranslate2, bf16 compute"] = CTranslate2Translator(
            exports / "float32", compute_type="bfloat16", intra_threads=args.threads)

    check = sources[:64]  # the twin must be the same function before its speed means anything
    twin = translate(engines["MarianMTModel generate"], tokenizer, check, batch_size=args.batch_size, num_beams=1)
    if twin != translate(model, tokenizer, check, batch_size=args.batch_size, num_beams=1):
        raise SystemExit("MarianMTModel and ours translate differently: the twin's weights are wrong.")

    load_before = _load()
    rows = {}
    for num_beams in (1, 4):
        for name, engine in engines.items():
            outputs, seconds = timed_translation(engine, tokenizer, sources, args.batch_size, num_beams)
            rows[name, num_beams] = dict(outputs=outputs, speed=len(sources) / seconds,
                                         bleu=sacrebleu.corpus_bleu(outputs, [references]).score)
            print(f"{name}, beams {num_beams}: {rows[name, num_beams]['speed']:.1f} sentences/s, "
                  f"BLEU {rows[name, num_beams]['bleu']:.2f}", flush=True)
    load_after = _load()
    shutil.rmtree(exports)

    lines = [SECTION, "",
             f"Measured {date.today().isoformat()} on {machine_description()}; load average {load_before} before "
             f"and {load_after} after (a shared machine: other jobs ran meanwhile); torch {torch.__version__} "
             f"and CTranslate2 {ctranslate2.__version__}, {args.threads} threads each; "
             f"transformers {transformers.__version__}.",
             f"Command: `python benchmarks/translation_speed.py {' '.join(sys.argv[1:])}`", "",
             f"{len(sources):,} sentences of {Path(args.source).name} -> {Path(args.reference).name}, end to end "
             f"(tokenise, decode, detokenise) with `translate()`, batches of {args.batch_size} sorted by length; "
             f"checkpoint {Path(args.model).name} ({model.num_parameters():,} parameters, "
             f"d_model {model.config.d_model}, {model.config.encoder_layers}+{model.config.decoder_layers} layers). "
             "One run after a warm-up batch; "
             "sacreBLEU 13a against the references; ratio = sentences/s over MarianMTModel's; identical = outputs "
             "equal to ours (generate).", ""]
    if not bf16:
        lines += ["bf16 is not measured: CTranslate2 offers no bfloat16 compute on this CPU (supported: "
                  f"{', '.join(sorted(supported))}).", ""]
    lines += ["| engine | greedy sent/s | ratio | BLEU | identical | beam 4 sent/s | ratio | BLEU | identical |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    marian, ours = "MarianMTModel generate", "ours (generate)"
    for name in engines:
        cells = []
        for beams in (1, 4):
            row = rows[name, beams]
            same = sum(a == b for a, b in zip(row["outputs"], rows[ours, beams]["outputs"]))
            cells += [f"{row['speed']:.1f}", f"{row['speed'] / rows[marian, beams]['speed']:.2f}x",
                      f"{row['bleu']:.2f}", f"{same}/{len(sources)}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _load() -> str:
    import os

    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "unknown"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="checkpoint folder (save_pretrained, with its tokenizer)")
    parser.add_argument("--source", default=str(MULTI30K / "test_2016_flickr.en"), help="one sentence per line")
    parser.add_argument("--reference", default=str(MULTI30K / "test_2016_flickr.de"), help="their translations")
    parser.add_argument("--limit", type=int, help="translate only the first N sentences")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="for torch and CTranslate2")
    parser.add_argument("--no-write", action="store_true", help="print the table, do not update RESULTS.md")
    args = parser.parse_args(argv)
    for name in ("source", "reference"):
        if not Path(getattr(args, name)).is_file():
            parser.error(f"--{name} file not found: {getattr(args, name)}")
    text = run(args)
    print(text)
    if not args.no_write:
        write_section(SECTION, text)
        print(f"Wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
