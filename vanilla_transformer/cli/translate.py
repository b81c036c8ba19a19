"""`vanilla-transformer translate`: translate sentences or a file of sentences with a saved model folder.

    vanilla-transformer translate --model DIR "Two hundred and five." "Seventeen."
    vanilla-transformer translate --model DIR --input test.en --output test.de --batch-size 64 --num-beams 4
    vanilla-transformer translate --model DIR-ct2 --input big.en.gz --output big.de.gz   # a CTranslate2 export

A file is read as one sentence per line and written as one translation per line (blank lines stay blank), so the
output lines up with the input. It is streamed: read a few thousand lines at a time, sorted by length into batches,
written in order, in the memory of one chunk whatever the file's size. With --input FILE --output OUT the lines
go to OUT.partial, and OUT.progress.json records what is done after each chunk: a run killed midway continues where
it stopped when run again with the same arguments, and OUT appears only when whole. Files named *.gz are
gzip'd (an input is recognised by its content). Decoding follows the model's `generation_config` (the paper's
beam 4, length penalty 0.6) unless `--num-beams` / `--max-new-tokens` say otherwise; a translation takes at most
A * n + B tokens for a source of n (--max-length-a, --max-length-b; by default the folder's generation config's
`max_length_a` / `max_length_b`), so that no output runs away. A line longer than the model reads (its tokenizer's
`model_max_length`, else its positions) is translated as its first that many tokens, with a warning naming it. An
ALL-CAPS or Title Case sentence is translated as the model knows it, recased, and its translation given its case
(vanilla_transformer/casing.py); --no-recase translates every sentence as it is written. A folder written
by `vanilla-transformer export ctranslate2` is translated by CTranslate2 (`--engine` chooses explicitly).

--closest-to REF (a file with one line per --input line, e.g. the original translations of a training corpus)
writes, of each sentence's beam's best translations (as many as the beam is wide), the one closest to its line of
REF by sentence BLEU: sequence-level interpolation for distillation (Kim & Rush 2016), as `distill --closest-to`
uses it.

A corpus (--input with at least 2000 lines, standard input or a pipe, or any --input with --compute-type) given
with a PyTorch folder is translated by CTranslate2 when it is installed: the folder is exported once into a cache
($HF_HOME/vanilla-transformer/ct2), reused while its files stay the same, and one line says so. A folder CTranslate2
cannot express is translated by PyTorch, with one line saying why; --engine pytorch keeps PyTorch. A run resumed
with an output half written by the other engine is refused: one file is never translated by two engines.
"""

import argparse
import gzip
import os
import sys
from itertools import islice

from vanilla_transformer.cli.options import (
    UsageError,
    checked,
    in_range,
    torch_device,
    writable_file,
)

# the model is registered with transformers by the loader, for a PyTorch folder only (`checkpoints.load`): a
# CTranslate2 folder is translated without torch and transformers' model code
REGISTERS_WHEN_NEEDED = True
# what changes no translation: a run may resume with other values of these
# (--engine is not: the engine that translates is, as `engine_used`)
NOT_IN_THE_RECORD = ("no_progress", "overwrite", "output", "input", "texts", "command", "command_check",
                     "command_run", "command_parser", "command_registers", "engine", "engine_note",
                     "resumable_output")
# A PyTorch folder is exported to CTranslate2 automatically (`--engine auto`) for an --input of at least this many
# lines: an export loads and writes the weights once (it is cached), and CTranslate2 translates several times faster
# (docs/fast-translation.md's table), which a corpus of thousands of lines repays; a handful of sentences would wait
# longer for the export than for PyTorch.
AUTO_EXPORT_LINES = 2000
# the largest values the options take: past them a run would fail deep in an engine (an integer overflow, a NaN from
# a temperature near 0, a beam search that never ends), so they are one usage line before anything is loaded
MOST_BEAMS = 64
MOST_TOKENS = 100_000  # --batch-size, --max-new-tokens, --max-length-b
MOST_LENGTH_FACTOR = 1000.0
MOST_TOPK = 1_000_000  # and at most the model's vocabulary, checked when it is loaded
LEAST_TEMPERATURE, MOST_TEMPERATURE = 0.001, 1000.0
MOST_SEED = 2**32 - 1  # CTranslate2's sampling seed is 32 bits
ENGINE_NAMES = {"pytorch": "PyTorch", "ctranslate2": "CTranslate2"}


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
    parser.add_argument("--input", metavar="FILE", help="file of sentences, one per line, plain or gzip'd "
                                                        "('-' for stdin)")
    parser.add_argument("--output", metavar="FILE", action=checked(writable_file),
                        help="write translations here, one per line, gzip'd if it ends in .gz (default: stdout)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --output file (or start an interrupted one again)")
    parser.add_argument("--batch-size", action=checked(in_range(int, 1, MOST_TOKENS)), default=32,
                        help="sentences per batch (default 32)")
    parser.add_argument("--num-beams", action=checked(in_range(int, 1, MOST_BEAMS)),
                        help="beam size (default: the model's generation_config)")
    parser.add_argument("--max-new-tokens", action=checked(in_range(int, 1, MOST_TOKENS)),
                        help="longest translation in tokens, whatever the source's length (no --max-length-a/b)")
    parser.add_argument("--max-length-a", action=checked(in_range(float, 0.0, MOST_LENGTH_FACTOR)),
                        help="a translation takes at most A * (source tokens) + B tokens (default: the model's "
                             "generation config, max_length_a)")
    parser.add_argument("--max-length-b", action=checked(in_range(int, 0, MOST_TOKENS)),
                        help="... + B tokens (default: the model's generation config, max_length_b)")
    parser.add_argument("--sampling-topk", action=checked(in_range(int, 0, MOST_TOPK)), metavar="K",
                        help="sample each token from the K likeliest (0: all) instead of searching, e.g. for "
                             "back-translation")
    parser.add_argument("--sampling-temperature", action=checked(in_range(float, LEAST_TEMPERATURE, MOST_TEMPERATURE)),
                        metavar="T",
                        help="sample at temperature T (default 1 when sampling)")
    parser.add_argument("--seed", action=checked(in_range(int, 0, MOST_SEED)), default=0,
                        help="random seed of sampling (default 0)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument("--engine", choices=ENGINES, default="auto",
                        help="pytorch or ctranslate2 (default: what the folder holds; a corpus given with a PyTorch "
                             "folder goes to CTranslate2, exported into a cache, when it is installed)")
    parser.add_argument("--compute-type", default="default",
                        help="CTranslate2 only: int8, int8_float32, float32, float16, bfloat16, ... "
                             "(default: the exported weights' type; float32 for an automatic export)")
    parser.add_argument("--no-recase", action="store_true",
                        help="translate ALL-CAPS and Title Case sentences as written (by default they are recased "
                             "for the model and their translations given their case)")
    parser.add_argument("--closest-to", metavar="FILE",
                        help="of each sentence's beam's best translations, write the one closest (sentence BLEU) to "
                             "its line of FILE, which has one line per --input line (sequence-level interpolation "
                             "for distillation)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar shown for --input")
    return parser


def _inputs(args: argparse.Namespace) -> list[str | None]:
    """What this command reads: the --model folder, the --input file and the --closest-to file."""
    return [args.model, None if args.input in (None, "-") else args.input, getattr(args, "closest_to", None)]


def _resumable(args: argparse.Namespace) -> bool:
    """A run from an --input file into an --output file continues where a killed one stopped; one that reads a pipe
    (read once: nothing to continue from) or writes into a device or pipe (`--output /dev/stdout`) does not."""
    from vanilla_transformer.files import is_stream, reads_once

    return bool(args.input and args.input != "-" and args.output and not reads_once(args.input)
                and not is_stream(args.output))


def _record_options(args: argparse.Namespace) -> dict:
    """What makes the translations of a resumable run: every option that may change them, and the model folder's
    files (names, sizes, times)."""
    options = {name: value for name, value in sorted(vars(args).items()) if name not in NOT_IN_THE_RECORD}
    if getattr(args, "closest_to", None):  # its contents choose the translations: an edited file is another run
        info = os.stat(args.closest_to)
        options["closest_to"] = [os.path.realpath(args.closest_to), info.st_size, info.st_mtime_ns]
    folder = os.path.realpath(args.model)
    files = {}
    for entry in sorted(os.scandir(folder), key=lambda entry: entry.name) if os.path.isdir(folder) else []:
        if entry.is_file():
            info = entry.stat()
            files[entry.name] = [info.st_size, info.st_mtime_ns]
    return {**options, "model": folder, "model_files": files}


def _resumable_output(args: argparse.Namespace):
    from vanilla_transformer.files.resumable import ResumableOutput

    return ResumableOutput(args.output, source=args.input, options=_record_options(args), overwrite=args.overwrite,
                           inputs=[args.model, *([args.closest_to] if getattr(args, "closest_to", None) else [])])


def _check_output(args: argparse.Namespace, output=None) -> int:
    """--output must not replace what this command reads (--input, the --model folder or a place inside it), nor an
    existing file without --overwrite; a resumable one must match its interrupted run's input and options, its
    engine too. Returns the lines an interrupted run did (0 for none)."""
    from vanilla_transformer.files import is_stream
    from vanilla_transformer.files.errors import OutputError
    from vanilla_transformer.files.paths import check_output_file

    if not args.output:
        return 0
    try:
        if _resumable(args):
            output = output or _resumable_output(args)
            args.resumable_output = output  # `run` checks it again, reading back only what changed since
            try:
                return output.check()
            except OutputError:
                _check_engine_of_record(args, output)
                raise
        if not is_stream(args.output):  # a device or pipe is written into, replacing nothing
            check_output_file(args.output, inputs=_inputs(args), overwrite=args.overwrite)
        return 0
    except OutputError as error:
        raise UsageError(str(error)) from None


def _check_device(args: argparse.Namespace) -> None:
    """--device names a torch device (`options.torch_device`, which imports torch) for a PyTorch folder; a
    CTranslate2 folder's device is CTranslate2's question, asked when it loads."""
    from vanilla_transformer.checkpoints.kinds import is_ctranslate2_folder

    if args.device is None or is_ctranslate2_folder(args.model):
        return
    try:
        torch_device(args.device)
    except argparse.ArgumentTypeError as error:
        raise UsageError(f"--device {error}") from None


def _check_engine_of_record(args: argparse.Namespace, output) -> None:
    """A refused resume whose record matches these options translated by the other engine: say so (one line)."""
    from vanilla_transformer.files.errors import OutputError
    from vanilla_transformer.files.resumable import options_digest

    if args.overwrite:
        return
    other = "pytorch" if args.engine_used == "ctranslate2" else "ctranslate2"
    record = output._read_record()
    if record is None or record["options"] != options_digest({**_record_options(args), "engine_used": other}):
        return
    how = ("--engine pytorch" if other == "pytorch" else
           "--engine auto (with CTranslate2 installed)" if _folder_kind(args.model) != "ctranslate2" else
           "the same --model")
    raise OutputError(f"--output {args.output}: an interrupted run translated its first {record['lines']} lines with "
                      f"{ENGINE_NAMES[other]}, and this run would translate with {ENGINE_NAMES[args.engine_used]}; "
                      f"one file is never translated by two engines: continue with {how}, or give --overwrite to "
                      "start again.")


def _folder_kind(path: str) -> str | None:
    from vanilla_transformer.checkpoints.kinds import folder_kind

    try:
        return folder_kind(path)
    except (OSError, ValueError):
        return None


def _a_corpus(args: argparse.Namespace) -> bool:
    """Is --input worth an export (`AUTO_EXPORT_LINES` lines or more; standard input and pipes, read once, are
    taken for corpora)? --compute-type asks for CTranslate2 whatever the size."""
    from vanilla_transformer.files.errors import TextFileError
    from vanilla_transformer.files.text import reads_once, text_lines

    if not args.input:
        return False
    if args.compute_type != "default" or args.input == "-" or reads_once(args.input):
        return True
    lines = text_lines(args.input, "--input file")
    try:
        return sum(1 for _ in islice(lines, AUTO_EXPORT_LINES)) >= AUTO_EXPORT_LINES
    except (TextFileError, OSError):
        return False  # the translation reads it again and says what is wrong with it, in one line
    finally:
        lines.close()


def plan_engine(args: argparse.Namespace) -> tuple[str, str | None]:
    """(the engine that will translate, the line to print about it or None), decided before anything is loaded:
    CTranslate2 for a CTranslate2 folder; for a PyTorch folder with `--engine auto` and a corpus (`_a_corpus`) on the
    CPU or CUDA, CTranslate2 through the cached export when CTranslate2 is installed and the folder's config is one
    it can express; PyTorch otherwise."""
    kind = _folder_kind(args.model)
    if kind == "ctranslate2" or args.engine == "ctranslate2":
        return "ctranslate2", None
    if args.engine == "pytorch" or kind != "seq2seq" or not _a_corpus(args):
        return "pytorch", None
    if (args.sampling_topk is not None or args.sampling_temperature is not None) and args.compute_type == "default":
        # CTranslate2 draws other tokens from the same seed: the input's size must not choose the translations
        return "pytorch", ("Translating with PyTorch: sampling draws other tokens with CTranslate2, so --engine auto "
                           "keeps PyTorch whatever the input's size (to sample with CTranslate2, export the folder: "
                           "vanilla-transformer export ctranslate2).")
    if args.device is not None and args.device.split(":")[0] not in ("cpu", "cuda"):
        return "pytorch", f"Translating with PyTorch: CTranslate2 does not run on {args.device}."
    try:
        from vanilla_transformer.interop.ctranslate2_runtime import import_ctranslate2

        ctranslate2 = import_ctranslate2()
    except ImportError:
        return "pytorch", ("Translating with PyTorch (install CTranslate2, pip install 'vanilla-transformer[fast]', "
                           "to translate a corpus several times faster).")
    if args.device is not None and args.device.startswith("cuda") and ctranslate2.get_cuda_device_count() == 0:
        return "pytorch", f"Translating with PyTorch: this CTranslate2 finds no CUDA device for --device {args.device}."
    reason = _not_exportable(args.model)
    if reason is not None:
        return "pytorch", f"Translating with PyTorch: {args.model} cannot be exported to CTranslate2 ({reason})."
    return "ctranslate2", None


def _not_exportable(folder: str) -> str | None:
    """Why CTranslate2 cannot express the model of `folder` (read from its config alone), or None. The config is
    read by this package's class, never through `AutoConfig`: a folder saved with remote code (`auto_map`) would
    make transformers ask on stdin whether to run it, reading the sentences of `--input -` as the answer."""
    from vanilla_transformer.checkpoints.kinds import read_json_object
    from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig
    from vanilla_transformer.interop.export_ctranslate2 import ExportError, check_exportable

    try:
        model_type = read_json_object(os.path.join(folder, "config.json")).get("model_type")
        if model_type != VanillaTransformerConfig.model_type:
            return f"it holds a {model_type!r} model"
        config = VanillaTransformerConfig.from_pretrained(folder)
    except (OSError, ValueError) as error:  # CheckpointError is a ValueError
        return str(error).splitlines()[0]
    try:
        check_exportable(config)
    except ExportError as error:
        return str(error).rstrip(".")
    return None


def check(args: argparse.Namespace) -> None:
    """The sentences come from the arguments or --input, the options go together, and --output replaces nothing it
    must not."""
    if args.texts and args.input:
        raise UsageError("give sentences as arguments or --input FILE, not both")
    if not args.texts and not args.input:
        raise UsageError("nothing to translate: give sentences as arguments or --input FILE")
    if args.input and args.input != "-":
        from vanilla_transformer.files import reads_once

        if os.path.isdir(args.input):
            raise UsageError(f"--input {args.input} is a folder: give a file")
        if not os.path.isfile(args.input) and not reads_once(args.input):  # a pipe (<(zcat a.gz), a FIFO) is read once
            raise UsageError(f"--input file not found: {args.input}")
    if args.max_new_tokens is not None and (args.max_length_a is not None or args.max_length_b is not None):
        raise UsageError("give --max-new-tokens (one length for all) or --max-length-a / --max-length-b (a length "
                         "from the source's), not both")
    _check_device(args)
    sampling = args.sampling_topk is not None or args.sampling_temperature is not None
    if sampling and (args.num_beams or 1) > 1:
        raise UsageError("sampling (--sampling-topk, --sampling-temperature) draws one token at a time: it takes no "
                         "--num-beams above 1")
    if getattr(args, "closest_to", None):
        _check_closest_to(args, sampling)
    args.engine_used, args.engine_note = plan_engine(args)
    _check_output(args)


def _check_closest_to(args: argparse.Namespace, sampling: bool) -> None:
    """--closest-to goes with an --input file of as many lines, and with beam search."""
    from vanilla_transformer.files.errors import TextFileError
    from vanilla_transformer.files.text import count_text_lines

    if not args.input or args.input == "-":
        raise UsageError("--closest-to gives a line for each line of an --input file: give --input FILE")
    if sampling:
        raise UsageError("--closest-to chooses among the beam's best translations: it takes no sampling "
                         "(--sampling-topk, --sampling-temperature)")
    if not os.path.isfile(args.closest_to):
        raise UsageError(f"--closest-to file not found: {args.closest_to}")
    try:
        counts = count_text_lines(args.input, "--input file"), count_text_lines(args.closest_to, "--closest-to file")
    except TextFileError as error:
        raise UsageError(str(error)) from None
    if None not in counts and counts[0] != counts[1]:  # a pipe is counted as it is read (`translate_chunks`)
        raise UsageError(f"--closest-to {args.closest_to} has {counts[1]:,} lines and --input {args.input} "
                         f"{counts[0]:,}: it needs one line for each line to translate")


def _translate_options(args: argparse.Namespace) -> dict:
    """The keywords of `translate.translate_chunks` the options give."""
    options = {"batch_size": args.batch_size, "seed": args.seed, "recase": not args.no_recase}
    options.update({name: getattr(args, name) for name in ("num_beams", "max_new_tokens", "max_length_a",
                                                           "max_length_b") if getattr(args, name) is not None})
    if args.max_new_tokens is not None:
        options["max_length_a"] = None  # one length for all: the source's length bounds nothing
    if args.sampling_topk is not None or args.sampling_temperature is not None:
        options.update(do_sample=True, num_beams=1, top_k=args.sampling_topk or 0,
                       temperature=args.sampling_temperature or 1.0)
    return options


def _encode(lines, gzipped: bool) -> bytes:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    return gzip.compress(data, mtime=0) if gzipped else data


def run(args: argparse.Namespace) -> None:
    from vanilla_transformer.checkpoints.load import load_checkpoint
    from vanilla_transformer.files.errors import TextFileError
    from vanilla_transformer.files.text import count_text_lines, text_lines
    from vanilla_transformer.translate import (
        CHUNK_SIZE,
        TRANSLATION_KINDS,
        progress_bar,
        translate_chunks,
        warnings_above_the_bar,
    )

    if not hasattr(args, "engine_used"):
        args.engine_used, args.engine_note = plan_engine(args)
    model, engine = _engine_folder(args)
    loaded = load_checkpoint(model, kinds=TRANSLATION_KINDS, device=args.device, engine=engine,
                             compute_type=args.compute_type, purpose="translate")
    vocabulary = len(loaded.tokenizer)
    if args.sampling_topk is not None and args.sampling_topk > vocabulary:  # CTranslate2 refuses it, generate not
        raise UsageError(f"--sampling-topk {args.sampling_topk} is more than the {vocabulary:,} tokens of the "
                         f"model's vocabulary")
    output = _resumable_output(args) if _resumable(args) else None
    earlier = getattr(args, "resumable_output", None)  # what `check` read back, if the same options still make it
    if output is not None and earlier is not None and (earlier.path, earlier.digest) == (output.path, output.digest):
        output = earlier
    done = _check_output(args, output)  # again: another program may have changed things meanwhile, or the export failed
    lines, references = args.texts, None
    if args.input:
        lines = text_lines(sys.stdin if args.input == "-" else args.input, "--input file")
        for _ in zip(range(done), lines):  # what the interrupted run did
            pass
    if getattr(args, "closest_to", None):
        references = text_lines(args.closest_to, "--closest-to file")
        for _ in zip(range(done), references):
            pass
    progress = bool(args.input) and not args.no_progress
    total = count_text_lines(args.input) if progress and args.input != "-" else None
    # the warnings of lines cut to the length the model reads, one line each, above the bar rather than through it
    with progress_bar(total, initial=done, show=progress) as bar, warnings_above_the_bar():
        chunks = translate_chunks(loaded.model, loaded.tokenizer, lines, chunk_size=CHUNK_SIZE,
                                  first_chunk=done // CHUNK_SIZE, bar=bar, closest_to=references,
                                  **_translate_options(args))
        try:
            _write(args, chunks, output)
        except TextFileError as error:
            raise ValueError(str(error).replace("--input file standard input", "standard input (--input -)")) from None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _engine_folder(args: argparse.Namespace) -> tuple[str, str]:
    """(the folder to load, the engine to load it with): for a PyTorch folder planned for CTranslate2
    (`plan_engine`), its cached export, exported now if need be; PyTorch with one line saying why when it cannot be
    exported or cached after all. Prints the line of `plan_engine`, or which engine translates."""
    from vanilla_transformer.files.errors import OutputError

    if args.engine_used != "ctranslate2" or _folder_kind(args.model) == "ctranslate2" or args.engine != "auto":
        if args.engine_note:
            _say(args.engine_note)
        return args.model, args.engine
    from vanilla_transformer.interop.ctranslate2_cache import cached_export, export_quantization
    from vanilla_transformer.interop.export_ctranslate2 import ExportError

    try:
        entry, exported = cached_export(args.model, export_quantization(args.compute_type), log=_say)
    except (ExportError, OutputError) as error:
        if args.compute_type != "default":
            raise UsageError(f"--compute-type needs CTranslate2, and {args.model} cannot be exported to it: "
                             f"{error}") from None
        args.engine_used = "pytorch"
        _say(f"Translating with PyTorch: {args.model} cannot be exported to CTranslate2 ({str(error).rstrip('.')}).")
        return args.model, "pytorch"
    _say(f"Translating with CTranslate2: {args.model} {'exported now to' if exported else 'exported in'} the "
         f"cache {entry} (--engine pytorch translates with PyTorch).")
    return entry, "ctranslate2"


def _write(args: argparse.Namespace, chunks, output) -> None:
    """Write the translated chunks: to a `ResumableOutput`, a staged --output (atomic: the old file or the new one),
    or standard output as each chunk is done."""
    from vanilla_transformer.files.staging import staged_file

    if output is not None:
        with output:
            for chunk in chunks:
                output.append(chunk)
            output.finish()
    elif args.output:
        gzipped = args.output.endswith(".gz")
        with staged_file(args.output, inputs=_inputs(args), overwrite=args.overwrite, encoding=None) as f:
            for chunk in chunks:
                f.write(_encode(chunk, gzipped))
    else:
        for chunk in chunks:
            sys.stdout.writelines(line + "\n" for line in chunk)
            sys.stdout.flush()
