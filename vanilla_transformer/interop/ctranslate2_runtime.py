"""The CTranslate2 runtime engine: translating with a folder written by `vanilla-transformer export ctranslate2`.

`CTranslate2Translator` wraps a `ctranslate2.Translator` so that it can be driven like our PyTorch model: its
`generate(input_ids, attention_mask, **kwargs)` takes the tokenizer's padded ids and returns generated ids, decoded
with the folder's generation config (beam size, length penalty, maximum length, tokens never to generate) unless told
otherwise, each translation bounded by its source's length as the model's `generate` bounds it; `translate_ids` takes
the ids of each sentence unpadded, as `translate.translate` hands them over. The folder's vocabularies list the
tokenizer's token strings by id; the translator maps ids to those strings and back, so the tokenizer's own
special-token handling and decoding apply. The exporter is `export_ctranslate2.to_ctranslate2`. Nothing here needs
torch or transformers' model code: translating with an exported folder imports neither.

Threads on a CPU are measured, not assumed (`intra_threads=None`, the default): a small model's matrices are too
small for several threads to share, and on some machines CTranslate2's default of up to 4 threads translates
slower than one thread does (benchmarks/RESULTS.md "Corpus translation": its third row).
The translator is loaded with one thread and with CTranslate2's default (`min(4, cores)`), each times the same
batch of the folder's own tokens (`THREAD_PROBE`: beam search as the folder's generation config, a few short
rows, the best of a few rounds), and the faster is kept (`thread_choice` records both times). The choice is kept in
`$HF_HOME/vanilla-transformer/ctranslate2-threads.json`, keyed by the CPU model, the cores, CTranslate2's version,
the compute type, the size of model.bin, the beam and any instruction limit set in the environment
(`CT2_FORCE_CPU_ISA` and the like), so a machine measures a model's shape once (about 0.5 s), and
a later load only reads it. A given `intra_threads` is used as it is (0 is CTranslate2's default), and so is a
positive `OMP_NUM_THREADS` in the environment: the user's own choice of threads.
"""

import json
import os
import random
import sys
import time
import warnings
from pathlib import Path

from transformers import GenerationConfig

from vanilla_transformer.checkpoints.kinds import CheckpointError, is_ctranslate2_folder
from vanilla_transformer.decoding import (
    LENGTH_BOUND,
    check_generation_parameters,
    length_bound_setting,
    max_target_lengths,
)
from vanilla_transformer.extras import import_extra
from vanilla_transformer.files.errors import one_line
from vanilla_transformer.files.hashing import sha256_of_file
from vanilla_transformer.files.measurements import (
    machine_key,
    measurements_path,
    read_measurements,
    usable_cpus,
    write_json_atomically,
)

VOCABULARY_FILES = ("shared_vocabulary.json", "source_vocabulary.json", "target_vocabulary.json")
# Written by the export beside the tokenizer files: {"sha256": {file name: SHA-256 of its bytes}} of the tokenizer
# the vocabularies were made from, so that a folder whose tokenizer files were replaced is refused, not misread.
TOKENIZER_FINGERPRINT = "tokenizer_fingerprint.json"
# The key of config.json under which the export records how many positions its encoding tables hold: the longest
# input (and output) in tokens the folder can translate. CTranslate2 itself ignores the key.
MAX_POSITIONS = "max_positions"
# The key of config.json under which the export records the checkpoint's [source, target] language codes (from its
# model card), where the server finds the language pair of a CTranslate2 folder. CTranslate2 ignores it too.
LANGUAGES = "languages"
# The batch that times each thread count: rows of source tokens drawn from the vocabulary (seeded), decoded up to
# `length` steps with the folder's beam; the best of `rounds` timings after a warm-up.
THREAD_PROBE = {"rows": 8, "length": 12, "rounds": 3, "seed": 0}
DEFAULT_INTRA_THREADS = 4  # CTranslate2's own default (intra_threads=0), at most the cores


EXPORT_AGAIN = "export it again with: vanilla-transformer export ctranslate2 CHECKPOINT OUT --overwrite"


def import_ctranslate2():
    """The `ctranslate2` module, or an ImportError that says how to install it."""
    return import_extra("ctranslate2", "fast", "Translating with CTranslate2")


def write_tokenizer_fingerprint(folder: str | os.PathLike, names) -> None:
    """Record the SHA-256 of the tokenizer files `names` (in `folder`) in `folder`/TOKENIZER_FINGERPRINT."""
    folder = Path(folder)
    digests = {name: sha256_of_file(folder / name) for name in sorted(set(names)) if (folder / name).is_file()}
    (folder / TOKENIZER_FINGERPRINT).write_text(json.dumps({"sha256": digests}, indent=2) + "\n", encoding="utf-8")


def recorded_max_positions(folder: str | os.PathLike) -> int | None:
    """The positions the export's encoding tables hold (config.json's `MAX_POSITIONS`), or None for a folder that does
    not record them (CTranslate2 then refuses a longer input itself, with an error naming the length)."""
    try:
        value = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")).get(MAX_POSITIONS)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def recorded_languages(folder: str | os.PathLike) -> tuple[str, str] | None:
    """The (source, target) codes the export recorded in config.json (`LANGUAGES`), or None where it did not."""
    try:
        value = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")).get(LANGUAGES)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(code, str) for code in value):
        return value[0], value[1]
    return None


def check_tokenizer_fingerprint(folder: str | os.PathLike) -> None:
    """Raise `CheckpointError` (one line) when the tokenizer files of the CTranslate2 folder are not those it was
    exported with (another run's tokenizer copied in, a file removed): its vocabularies would map the tokenizer's ids
    to other tokens, and the translations would be garbage. A folder without a fingerprint file (no
    TOKENIZER_FINGERPRINT, as earlier versions exported) is not checked."""
    folder = Path(folder)
    path = folder / TOKENIZER_FINGERPRINT
    if not path.exists():
        return
    try:
        digests = json.loads(path.read_text(encoding="utf-8"))["sha256"]
        if not isinstance(digests, dict) or not digests:
            raise ValueError("no files listed")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path} cannot be read ({one_line(error)}); the folder is damaged: "
                              f"{EXPORT_AGAIN}") from None
    for name, expected in sorted(digests.items()):
        file = folder / name
        if not file.is_file():
            raise CheckpointError(f"{file} is missing: {folder} was exported with a tokenizer that had it "
                                  f"({TOKENIZER_FINGERPRINT}); put the exported tokenizer back or {EXPORT_AGAIN}")
        actual = sha256_of_file(file)
        if actual != expected:
            raise CheckpointError(f"{file} is not the tokenizer {folder} was exported with (sha256 {actual[:12]}..., "
                                  f"exported {str(expected)[:12]}... in {TOKENIZER_FINGERPRINT}): its vocabulary "
                                  f"would not match the model's; put the exported tokenizer back or {EXPORT_AGAIN}")


def ctranslate2_device(device: str) -> tuple[str, str, str]:
    """(the device, its type, its index or "") CTranslate2 runs on for `device` ("cpu", "cuda", "cuda:1", "auto":
    CUDA when CTranslate2 finds it); a ValueError (one line) for one it cannot run on on this machine."""
    ctranslate2 = import_ctranslate2()
    if device == "auto":
        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    device_type, _, index = str(device).partition(":")
    if device_type not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise ValueError(f"device {device!r} is not one CTranslate2 runs on (cpu, cuda, cuda:1, ...)")
    if device_type == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise ValueError(f"device {device!r}: CTranslate2 finds no CUDA device on this machine")
    return device, device_type, index


class CTranslate2Translator:
    """A `ctranslate2.Translator` over an exported folder that `translate.translate` drives like our model: its
    `generate(input_ids, attention_mask, num_beams=..., max_new_tokens=...)` takes the tokenizer's padded ids and
    returns the generated ids, decoded with the folder's generation config unless told otherwise.

    `device` ("cpu", "cuda", "cuda:1", "auto": CUDA when CTranslate2 finds it), `compute_type` ("default": as
    exported; "int8", "float32", ...) and the thread counts go to `ctranslate2.Translator`. `max_positions` is the
    longest input in tokens the folder can translate, as its export recorded it (None where it did not).
    """

    # generate() keyword -> translate_batch() keyword, for the options both have with the same meaning
    OPTIONS = {"num_beams": "beam_size", "length_penalty": "length_penalty", "repetition_penalty": "repetition_penalty",
               "no_repeat_ngram_size": "no_repeat_ngram_size"}
    # generate's sampling keywords, applied when do_sample=True (CTranslate2's sampling_topk, sampling_temperature)
    SAMPLING = ("do_sample", "top_k", "temperature")
    # generation_config.json settings applied here (early_stopping=True is how CTranslate2's beam search stops)
    APPLIED_SETTINGS = {*OPTIONS, *LENGTH_BOUND, "max_length", "max_new_tokens", "bad_words_ids", "eos_token_id",
                        "forced_eos_token_id", "early_stopping", "bos_token_id", "pad_token_id",
                        "decoder_start_token_id", "use_cache",
                        "output_attentions", "output_hidden_states", "transformers_version", "_from_model_config"}
    # the values at which the other settings change nothing here (transformers >= 5.24 writes every default into
    # generation_config.json); None: a setting that never changes the tokens greedy or beam search picks
    NEUTRAL_SETTINGS = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "typical_p": 1.0,
                        "min_length": 0, "num_beam_groups": 1, "diversity_penalty": 0.0, "num_return_sequences": 1,
                        "encoder_no_repeat_ngram_size": 0, "encoder_repetition_penalty": 1.0, "epsilon_cutoff": 0.0,
                        "eta_cutoff": 0.0, "output_scores": None, "return_dict_in_generate": None,
                        "remove_invalid_values": None, "assistant_confidence_threshold": None,
                        "assistant_lookbehind": None, "num_assistant_tokens": None,
                        "num_assistant_tokens_schedule": None, "target_lookbehind": None}

    def __init__(self, folder: str | os.PathLike, device: str = "cpu", compute_type: str = "default",
                 inter_threads: int = 1, intra_threads: int | None = None):
        ctranslate2 = import_ctranslate2()
        folder = Path(folder)
        if not is_ctranslate2_folder(folder):
            raise FileNotFoundError(f"{folder} is not a CTranslate2 folder (it has no model.bin and config.json); "
                                    "make one with: vanilla-transformer export ctranslate2 CHECKPOINT OUT")
        device, device_type, index = ctranslate2_device(device)
        supported = ctranslate2.get_supported_compute_types(device_type, int(index or 0))
        if compute_type not in ("default", "auto") and compute_type not in supported:
            raise ValueError(f"compute_type {compute_type!r} is not supported on {device} by this machine "
                             f"(supported: {', '.join(sorted(supported))})")
        self.source_tokens, self.target_tokens = self._read_vocabularies(folder)  # checked before CTranslate2 reads
        self.generation_config = (GenerationConfig.from_pretrained(folder)
                                  if (folder / "generation_config.json").is_file() else GenerationConfig())

        def load(threads: int):
            # Loading sets the calling thread's OpenMP thread count to `threads`, and torch, where it shares the
            # OpenMP runtime, would then train or translate on that many threads for the rest of the process (a
            # student trained after the teacher's CTranslate2 pass ran on one): torch's count is put back.
            torch = sys.modules.get("torch")
            torch_threads = torch.get_num_threads() if torch is not None else None
            try:
                return ctranslate2.Translator(str(folder), device=device_type, device_index=int(index or 0),
                                              compute_type=compute_type, inter_threads=inter_threads,
                                              intra_threads=threads)
            except (RuntimeError, ValueError) as error:  # e.g. "Variable '...' has an invalid payload size"
                raise CheckpointError(f"CTranslate2 cannot load {folder} ({one_line(error)}): model.bin or "
                                      f"config.json is damaged (cut short?); {EXPORT_AGAIN}") from None
            finally:
                if torch_threads is not None and torch.get_num_threads() != torch_threads:
                    torch.set_num_threads(torch_threads)

        self.thread_choice: dict[int, float] = {}  # threads -> seconds of the probe batch, where measured
        cores = min(DEFAULT_INTRA_THREADS, len(usable_cpus()))
        if intra_threads is None and os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
            intra_threads = int(os.environ["OMP_NUM_THREADS"])  # the user's choice
        if intra_threads is None and device_type == "cpu" and cores > 1:
            self.translator, self.intra_threads = self._fastest_threads(load, (1, cores), folder, compute_type,
                                                                        ctranslate2.__version__)
        else:
            self.intra_threads = intra_threads or 0
            self.translator = load(self.intra_threads)
        self.max_positions = recorded_max_positions(folder)
        self.device = "cpu"  # where generate() takes its inputs
        self.target_ids = {token: i for i, token in enumerate(self.target_tokens)}
        ignored = sorted(name for name, value in self.generation_config.to_diff_dict().items()
                         if name not in self.APPLIED_SETTINGS
                         and not (name in self.NEUTRAL_SETTINGS and self.NEUTRAL_SETTINGS[name] in (None, value)))
        if ignored:
            warnings.warn(f"{folder}/generation_config.json sets {', '.join(ignored)}, which the CTranslate2 engine "
                          "does not apply; its translations may differ from generate's.", stacklevel=2)

    def _fastest_threads(self, load, counts: tuple[int, ...], folder: Path, compute_type: str, version: str,
                         cache_path: str | None = None):
        """(translator, threads) of the thread count in `counts` that translates `THREAD_PROBE`'s batch fastest, as
        the cache says or as measured now (and then cached); the timings go to `thread_choice`."""
        beam = max(1, int(self.generation_config.num_beams or 1))
        cache_path = cache_path or measurements_path("ctranslate2-threads")
        key = machine_key(f"{len(usable_cpus())} cores", f"ctranslate2 {version}", compute_type,
                          f"model.bin {(folder / 'model.bin').stat().st_size} bytes", f"beam {beam}",
                          f"threads {'/'.join(map(str, counts))}")
        entry = read_measurements(cache_path).get(key)
        if (isinstance(entry, dict) and entry.get("choice") in counts and isinstance(entry.get("seconds"), dict)
                and all(isinstance(entry["seconds"].get(str(n)), (int, float)) for n in counts)):  # else measured
            self.thread_choice = {n: float(entry["seconds"][str(n)]) for n in counts}
            return load(entry["choice"]), entry["choice"]
        translator, threads = self._measure_threads(load, counts, beam)
        cache = read_measurements(cache_path)
        cache[key] = {"choice": threads, "seconds": {str(n): round(t, 6) for n, t in self.thread_choice.items()}}
        write_json_atomically(cache_path, cache)
        return translator, threads

    def _measure_threads(self, load, counts: tuple[int, ...], beam: int):
        rng = random.Random(THREAD_PROBE["seed"])
        words = self.source_tokens[4:] or self.source_tokens  # past the special tokens
        rows = [[rng.choice(words) for _ in range(THREAD_PROBE["length"])] for _ in range(THREAD_PROBE["rows"])]
        options = {"beam_size": beam, "max_decoding_length": THREAD_PROBE["length"], "max_input_length": 0}
        best = None
        for threads in counts:
            translator = load(threads)
            translator.translate_batch(rows, **options)  # warm-up
            timings = []
            for _ in range(THREAD_PROBE["rounds"]):
                start = time.perf_counter()
                translator.translate_batch(rows, **options)
                timings.append(time.perf_counter() - start)
            self.thread_choice[threads] = min(timings)
            if best is None or self.thread_choice[threads] < self.thread_choice[best[1]]:
                best = (translator, threads)
            del translator
        return best

    @staticmethod
    def _read_vocabularies(folder: Path) -> tuple[list[str], list[str]]:
        def read(name):
            try:
                tokens = json.loads((folder / name).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError) as error:
                raise CheckpointError(f"{folder / name} cannot be read ({one_line(error)}); the folder "
                                      f"is damaged: {EXPORT_AGAIN}") from None
            if not (isinstance(tokens, list) and tokens and all(isinstance(token, str) for token in tokens)):
                raise CheckpointError(f"{folder / name} is not a list of token strings; the folder is damaged: "
                                      f"{EXPORT_AGAIN}")
            return tokens

        if (folder / "shared_vocabulary.json").is_file():
            source = target = read("shared_vocabulary.json")
        elif (folder / "source_vocabulary.json").is_file() and (folder / "target_vocabulary.json").is_file():
            source, target = read("source_vocabulary.json"), read("target_vocabulary.json")
        else:
            raise CheckpointError(f"{folder} has no CTranslate2 vocabulary ({VOCABULARY_FILES[0]}, or "
                                  f"{VOCABULARY_FILES[1]} and {VOCABULARY_FILES[2]}); the folder is damaged: "
                                  f"{EXPORT_AGAIN}")
        return source, target

    def translate_options(self, **kwargs) -> dict:
        """`translate_batch` keywords for `generate` keywords, on top of the generation config's."""
        taken = [*self.OPTIONS, "max_new_tokens", "max_length", "bad_words_ids", *self.SAMPLING]
        unknown = sorted(set(kwargs) - set(taken))
        if unknown:
            raise ValueError(f"The CTranslate2 engine does not take {', '.join(unknown)}; it takes "
                             f"{', '.join([*taken, *LENGTH_BOUND])}, and logits_processor=[SourceLengthBound(...)].")
        sampling = {name: kwargs.pop(name) for name in self.SAMPLING if name in kwargs}
        config = self.generation_config
        settings = {name: getattr(config, name, None) for name in
                    (*self.OPTIONS, "max_new_tokens", "max_length", "bad_words_ids")}
        if "max_new_tokens" in kwargs or "max_length" in kwargs:
            settings.update(max_new_tokens=None, max_length=None)
        settings.update({name: value for name, value in kwargs.items() if value is not None})

        options = {self.OPTIONS[name]: settings[name] for name in self.OPTIONS if settings[name] is not None}
        # generate's max_length counts the decoder start token; max_new_tokens and CTranslate2's length do not
        new_tokens = settings["max_new_tokens"] or (settings["max_length"] or 20) - 1
        if config.forced_eos_token_id is not None:  # generate spends the last step on </s>, CTranslate2 ends there
            new_tokens -= 1
        options["max_decoding_length"] = max(new_tokens, 1)
        options["min_decoding_length"] = 0  # as generate: </s> may come first (CTranslate2's default is 1)
        eos = config.eos_token_id if config.eos_token_id is not None else []
        options["end_token"] = [self.target_tokens[i] for i in (eos if isinstance(eos, list) else [eos])] or None
        if settings["bad_words_ids"]:
            options["suppress_sequences"] = [[self.target_tokens[i] for i in ids] for ids in settings["bad_words_ids"]]
        if sampling.get("do_sample"):  # generate's top_k 0 and CTranslate2's sampling_topk 0: the whole vocabulary
            options.update(beam_size=1, sampling_topk=int(sampling.get("top_k") or 0),
                           sampling_temperature=float(sampling.get("temperature") or 1.0))
        return options

    def generate(self, input_ids, attention_mask=None, **kwargs) -> list[list[int]]:
        """Translate a padded batch of source ids (a tensor or lists); returns the generated target ids of each row
        (no start token), or with `num_return_sequences=n` the n best of each row's beam, row after row, as generate
        returns them. `translate_ids` does the work, on each row's ids without its padding."""
        rows = input_ids.tolist() if hasattr(input_ids, "tolist") else [list(row) for row in input_ids]
        if attention_mask is not None:
            masks = attention_mask.tolist() if hasattr(attention_mask, "tolist") else attention_mask
            rows = [[i for i, keep in zip(ids, mask) if keep] for ids, mask in zip(rows, masks)]
        return self.translate_ids(rows, **kwargs)

    def translate_ids(self, rows: list[list[int]], **kwargs) -> list[list[int]]:
        """Translate the source ids of each sentence (no padding); returns the target ids of each (no start token),
        or with `num_return_sequences=n` the n best of each row's beam, row after row. `kwargs` are `generate`'s
        (num_beams, max_new_tokens, max_length_a, ...).

        Each row is bounded by its source's length as our model's `generate` bounds it: at most
        `int(max_length_a * n + max_length_b)` tokens, </s> included, for a source of n tokens, the settings taken
        from the keywords, else the folder's generation config, else the model's defaults (None turns the bound off);
        `logits_processor=[SourceLengthBound(bounds, ...)]` bounds the rows too (the </s> that generate forces as its
        last token is no token of the result here). CTranslate2 has one maximum length per call, so each row is
        decoded with the longest row's and then held to its own (`_bounded`)."""
        # what generate refuses is refused here too (max_new_tokens=0 would otherwise fall back to max_length)
        check_generation_parameters(self.generation_config, kwargs)
        bound = length_bound_setting({name: kwargs.pop(name) for name in LENGTH_BOUND if name in kwargs},
                                     self.generation_config)
        bounds = [] if bound is None else [max_target_lengths([len(ids) for ids in rows], *bound)]
        limits = self._row_limits(kwargs.pop("logits_processor", None), bounds)
        hypotheses = int(kwargs.pop("num_return_sequences", None) or 1)
        options = self.translate_options(**kwargs)
        if hypotheses > 1:  # as generate: each row's best `hypotheses` of its beam, one after the other
            options["num_hypotheses"] = hypotheses
        rows = [[self.source_tokens[i] for i in ids] for ids in rows]
        if limits is None:
            return [ids for row in self._translate(rows, options) for ids in row]
        return [ids for row in self._bounded(rows, limits, options) for ids in row]

    def _bounded(self, rows: list[list[str]], limits: list[int], options: dict) -> list[list[list[int]]]:
        """The hypotheses of each row as a call of its own with `max_decoding_length` = its limit would give them, from
        as few calls as that allows.

        Greedy search and sampling pick each row's tokens alone: one call at the longest limit, each row cut to its
        own. Beam search differs at a row's last step, where CTranslate2 ends every live hypothesis of the row, so a
        longer allowance may let another hypothesis win. Before that step nothing in CTranslate2's beam search
        depends on the maximum length: a row that stopped earlier in the longer call (it had `beam_size` finished
        hypotheses; `patience` is not used here) stopped at the same step with the same hypotheses as it would have
        alone. The call asks for all `beam_size` of them, so the longest one tells the step the row stopped at (a
        hypothesis ended at step t has t tokens, and the step that filled the row leaves at least one of its own
        among the best `beam_size`); it keeps the requested best few of those, in CTranslate2's order. The rows that
        reached their own last step are decoded again, with their own limit, one call per limit. Without a length
        penalty CTranslate2 stops a row when its best beam ends instead, which the hypotheses do not tell: one call
        per limit there."""
        width = options.get("beam_size", 1)
        lengths = [max(1, min(options["max_decoding_length"], limit)) for limit in limits]
        if width <= 1:
            return [[ids[: limits[i]] for ids in row]
                    for i, row in enumerate(self._translate(rows, {**options, "max_decoding_length": max(lengths)}))]
        outputs: list = [None] * len(rows)
        again = list(range(len(rows)))
        if options.get("length_penalty", 1.0) != 0:  # CTranslate2's default length penalty is 1
            longest, wanted = max(lengths), options.get("num_hypotheses", 1)
            results = self._tokens(rows, {**options, "max_decoding_length": longest, "num_hypotheses": width})
            again = []
            for i, hypotheses in enumerate(results):
                if lengths[i] == longest or max(map(len, hypotheses)) < lengths[i] - 1:
                    outputs[i] = [self._ids(tokens[: limits[i]]) for tokens in hypotheses[:wanted]]
                else:
                    again.append(i)
        groups: dict[int, list[int]] = {}
        for i in again:
            groups.setdefault(lengths[i], []).append(i)
        for length, indices in groups.items():
            results = self._translate([rows[i] for i in indices], {**options, "max_decoding_length": length})
            for i, hypotheses in zip(indices, results):
                outputs[i] = [ids[: limits[i]] for ids in hypotheses]
        return outputs

    def _translate(self, rows: list[list[str]], options: dict) -> list[list[list[int]]]:
        """The target ids of each hypothesis asked for (`num_hypotheses`, default 1) of each row."""
        return [[self._ids(hypothesis) for hypothesis in hypotheses] for hypotheses in self._tokens(rows, options)]

    def _tokens(self, rows: list[list[str]], options: dict) -> list[list[list[str]]]:
        """The target tokens of each hypothesis asked for (`num_hypotheses`, default 1) of each row."""
        try:
            results = self.translator.translate_batch(rows, max_input_length=0, **options)
        except RuntimeError as error:  # e.g. "No position encodings are defined for positions >= 1024, ..."
            raise ValueError(f"CTranslate2 cannot translate this batch: {error}") from None
        return [result.hypotheses[: options.get("num_hypotheses", 1)] for result in results]

    def _ids(self, tokens: list[str]) -> list[int]:
        return [self.target_ids[token] for token in tokens]

    @staticmethod
    def _row_limits(processors, bounds: list[list[int]]) -> list[int] | None:
        """The most tokens each row's result may have (its bound less the </s>), from the `bounds` lists and the
        `SourceLengthBound`s among `processors` (the model's, or the copy a saved folder's remote code holds, told by
        its name and its `bounds`), the smallest of each row's; None when nothing bounds the rows."""
        if processors and not all(type(processor).__name__ == "SourceLengthBound" and hasattr(processor, "bounds")
                                  for processor in processors):
            raise ValueError("The CTranslate2 engine takes no logits_processor but a SourceLengthBound.")
        every = [*bounds, *(processor.bounds.tolist() if hasattr(processor.bounds, "tolist") else processor.bounds
                            for processor in processors or [])]
        if not every:
            return None
        return [min(int(row[i]) for row in every) - 1 for i in range(len(every[0]))]


__all__ = ["LANGUAGES", "MAX_POSITIONS", "TOKENIZER_FINGERPRINT", "CTranslate2Translator",
           "check_tokenizer_fingerprint", "import_ctranslate2", "recorded_languages", "recorded_max_positions",
           "write_tokenizer_fingerprint"]
