"""How fast each model shape decodes with CTranslate2 on this CPU, before any training: the speed side of choosing a
distillation student (the quality side is a training run each, `benchmarks/distill.py`).

    python -m benchmarks.student_speed                      # the default shapes against multi30k-pre-ln
    python -m benchmarks.student_speed --shape "6+1 d192" encoder_layers=6 decoder_layers=1 d_model=192
    python -m benchmarks.student_speed --write              # replace its section of RESULTS.md

Each shape is `--reference`'s preset (default `multi30k-pre-ln`) with some config values changed, and a BPE vocabulary
of its `vocab_size` trained on Multi30k's training text (both sides, as the recipe trains one): a smaller vocabulary
makes the output layer cheaper and the sentences longer, and both count. The model has random weights (seeded) and
is exported to CTranslate2 in `--compute-type` (default int8); every shape translates the same test2016 sources with
beam 4, the preset's length penalty, `--batch-size` sentences a batch, one thread, every output exactly as many
tokens as the test2016 references have on average under that shape's vocabulary (`min_decoding_length` =
`max_decoding_length`): what a trained model of that shape costs at the references' length, without training it.
Rounds alternate between the shapes; reported are the medians and the ratio to the reference shape.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401

from benchmarks.checkout import ROOT  # noqa: E402
from benchmarks.report import machine_description, publish, software_versions  # noqa: E402

SECTION = "## Student shapes: CTranslate2 decoding speed by architecture"
DATA = next((folder / "shared" / "data" / "multi30k" for folder in (ROOT.parent, ROOT.parent.parent)
             if (folder / "shared" / "data" / "multi30k").is_dir()), ROOT.parent / "shared" / "data" / "multi30k")
REFERENCE = "reference"
# (name, config values over the reference preset's): the reference itself, the shallow decoders of Kasai et al. 2021
# at its width, narrower students and smaller vocabularies.
DEFAULT_SHAPES = (
    ("6+1", dict(encoder_layers=6, decoder_layers=1)),
    ("6+2", dict(encoder_layers=6, decoder_layers=2)),
    ("6+1, 3,000 tokens", dict(encoder_layers=6, decoder_layers=1, vocab_size=3000)),
    ("6+1, d_model 192", dict(encoder_layers=6, decoder_layers=1, d_model=192)),
    ("6+1, d_model 192, 3,000 tokens", dict(encoder_layers=6, decoder_layers=1, d_model=192, vocab_size=3000)),
    ("6+1, d_model 128", dict(encoder_layers=6, decoder_layers=1, d_model=128)),
)


def parse_value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def build(reference: str, shapes, data: Path, folder: Path, compute_type: str) -> dict:
    """{name: (CTranslate2 folder, source tokens of test2016, output length, parameters)} for every shape."""
    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2
    from vanilla_transformer.training.presets import PRESETS
    from vanilla_transformer.training.tokenizer import train_tokenizer

    def lines(name):
        return (data / name).read_text(encoding="utf-8").splitlines()

    preset = PRESETS[reference]
    train_text = lines("train.en") + lines("train.de")
    sources, references = lines("test_2016_flickr.en"), lines("test_2016_flickr.de")
    tokenizers, built = {}, {}
    for name, values in ((REFERENCE, {}), *shapes):
        values = {**preset.model, "vocab_size": preset.data["vocab_size"], **values}
        vocab_size = values["vocab_size"]
        if vocab_size not in tokenizers:
            tokenizers[vocab_size] = train_tokenizer(train_text, vocab_size=vocab_size, model_max_length=256)
        tokenizer = tokenizers[vocab_size]
        config = VanillaTransformerConfig(**{**values, "vocab_size": len(tokenizer)})
        torch.manual_seed(0)
        model = VanillaTransformerForConditionalGeneration(config)
        checkpoint, exported = folder / f"shape{len(built)}", folder / f"shape{len(built)}-ct2"
        model.save_pretrained(checkpoint)
        tokenizer.save_pretrained(checkpoint)
        to_ctranslate2(str(checkpoint), str(exported), compute_type)
        length = round(statistics.mean(len(tokenizer(text)["input_ids"]) for text in references))
        tokens = [tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"]) for text in sources]
        built[name] = (str(exported), tokens, length, model.num_parameters(), values)
    return built


def measure(reference: str = "multi30k-pre-ln", shapes=DEFAULT_SHAPES, data: Path = DATA, rounds: int = 3,
            batch_size: int = 32, compute_type: str = "int8") -> dict:
    import ctranslate2

    from vanilla_transformer.training.presets import PRESETS

    length_penalty = PRESETS[reference].generation.get("length_penalty", 1.0)
    with tempfile.TemporaryDirectory() as folder:
        built = build(reference, shapes, Path(data), Path(folder), compute_type)
        translators = {name: ctranslate2.Translator(path, device="cpu", compute_type=compute_type, intra_threads=1)
                       for name, (path, *_) in built.items()}
        seconds = {name: [] for name in built}
        for index in range(rounds + 1):  # the first round warms up and is not counted
            order = list(built) if index % 2 == 0 else list(reversed(built))
            for name in order:
                _, tokens, length, *_ = built[name]
                start = time.perf_counter()
                translators[name].translate_batch(tokens, max_batch_size=batch_size, beam_size=4,
                                                  length_penalty=length_penalty, min_decoding_length=length,
                                                  max_decoding_length=length)
                if index:
                    seconds[name].append(time.perf_counter() - start)
    rows = []
    for name, (_, tokens, length, parameters, values) in built.items():
        rows.append({"shape": name, "parameters": parameters, "output_tokens": length,
                     "layers": f"{values['encoder_layers']}+{values['decoder_layers']}", "d_model": values["d_model"],
                     "ffn": values["decoder_ffn_dim"], "vocab_size": values["vocab_size"],
                     "sentences_per_second": len(tokens) / statistics.median(seconds[name])})
    base = rows[0]["sentences_per_second"]
    for row in rows:
        row["ratio"] = row["sentences_per_second"] / base
    return {"reference": reference, "rows": rows, "rounds": rounds, "batch_size": batch_size,
            "compute_type": compute_type, "sentences": len(built[REFERENCE][1]),
            "machine": machine_description(), "software": software_versions()}


def render(result: dict, command: str) -> str:
    lines = [SECTION, "", f"`{command}`; {result['machine']}; {result['software']}.", "",
             f"Random weights, CTranslate2 {result['compute_type']}, 1 thread, beam 4, {result['batch_size']} "
             f"sentences a batch, the {result['sentences']} test2016 sources, every output as long as the "
             f"references are on average in that vocabulary; medians of {result['rounds']} alternating rounds. "
             f"The reference is `{result['reference']}` as it trains.", "",
             "| shape | layers | d_model | d_ff | vocabulary | parameters | output tokens | sent/s | x reference |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in result["rows"]:
        lines.append(f"| {row['shape']} | {row['layers']} | {row['d_model']} | {row['ffn']} | {row['vocab_size']:,} | "
                     f"{row['parameters']:,} | {row['output_tokens']} | {row['sentences_per_second']:.1f} | "
                     f"{row['ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--reference", default="multi30k-pre-ln", help="the preset every shape starts from")
    parser.add_argument("--shape", nargs="+", action="append", metavar=("NAME", "KEY=VALUE"),
                        help="a shape to time instead of the defaults: a name, then config values (repeatable)")
    parser.add_argument("--data", default=str(DATA), help=f"the Multi30k folder (default {DATA})")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--compute-type", default="int8")
    parser.add_argument("--write", action="store_true", help="replace this benchmark's section of RESULTS.md")
    args = parser.parse_args(argv)
    from vanilla_transformer.training.presets import PRESETS

    if args.reference not in PRESETS:
        parser.error(f"--reference: no preset {args.reference!r} (one of {', '.join(PRESETS)})")
    shapes = DEFAULT_SHAPES
    if args.shape:
        shapes = []
        for name, *values in args.shape:
            pairs = [value.split("=", 1) for value in values]
            if any(len(pair) != 2 for pair in pairs):
                parser.error(f"--shape {name}: config values are KEY=VALUE, got {' '.join(values)}")
            shapes.append((name, {key: parse_value(value) for key, value in pairs}))
    if args.rounds < 1 or args.batch_size < 1:
        parser.error("--rounds and --batch-size must be at least 1")
    if not all((Path(args.data) / name).is_file() for name in ("train.en", "train.de", "test_2016_flickr.en")):
        parser.error(f"--data {args.data}: Multi30k's train.en, train.de and test_2016_flickr.{{en,de}} not found")
    result = measure(args.reference, shapes, Path(args.data), args.rounds, args.batch_size, args.compute_type)
    publish(SECTION, render, result, "benchmarks.student_speed", argv, args.write)


if __name__ == "__main__":
    main()
