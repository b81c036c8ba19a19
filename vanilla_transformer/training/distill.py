"""Sequence-level knowledge distillation (Kim & Rush 2016): `vanilla-transformer distill` (`python -m
training.distill`).

A teacher (a trained folder or its CTranslate2 export) translates the training source with its own beam search; a
student, usually smaller and faster (the `multi30k-student` preset: a deep encoder and a one-layer decoder, Kasai et
al. 2021), trains on (source, teacher's translation) instead of the original pairs. The chain runs in one folder
(`--out`), each stage written whole or resumed where it stopped:

1. `teacher/train.LANG`: the teacher's translations of the training source, by the `translate` command
   (`cli/translate.py`, run by `cli/distill.py`): streamed, resumed after a kill from `train.LANG.partial` and
   `train.LANG.progress.json`, no line translated twice; with `--closest-to FILE` (the original translations), each
   line is, of the teacher's beam's best, the one closest to the original by sentence BLEU (Kim & Rush's
   sequence-level interpolation);
2. `student/`: the training recipe (`training/train.py`) on the distilled pairs with the recipe options given after
   `--` (a preset, a time budget, the cleaning of the distilled pairs, ...); with `--with-original`, the original
   pairs too, as a second corpus (`--train-weights`, `--train-tags` after `--` apply to the two in that order); a
   killed run resumes from its last checkpoint;
3. the student's last checkpoints averaged (section 6.1 of the paper) by the recipe as its last step
   (`--average-last-n-checkpoints`; `student/all_results.json` records how many);
4. `student-ct2/`: the student exported to CTranslate2 (`interop/export_ctranslate2.py`), int8 by default;
5. `report.json` and `report.md`: teacher and student side by side, both translated by CTranslate2 in int8 and
   float32 (`report/`: the exports this needs and every translation, as text files): sacreBLEU and chrF on the
   validation and test files, sentences per second with 1 thread and with all threads, size on disk, parameters.

`distill.json` records the arguments and the size and modification time of every input file; a run with other
arguments, or with inputs changed since, in the same folder is refused, so a re-run never mixes two distillations
(except where nothing was done yet: `unstarted`, `open_folder`). Every argument that can be checked without the
teacher's pass is checked before anything is written (`prepare`). What each stage left is its own record of being
done (the translations file appears only when whole, the recipe's finished run, an export folder renamed into place,
report.json), and nothing finished is done again.
"""

import json
import os
import time
from dataclasses import asdict, dataclass, replace

import transformers
from huggingface_hub import ModelCard
from huggingface_hub.errors import StrictDataclassError
from transformers.trainer_utils import get_last_checkpoint

from vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.checkpoints.kinds import check_folder_kind, tokenizer_errors
from vanilla_transformer.checkpoints.load import load_checkpoint
from vanilla_transformer.checkpoints.pytorch import pick_device
from vanilla_transformer.checkpoints.validate import check_checkpoint
from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.files import (
    OutputError,
    RunLock,
    check_output_folder,
    one_line,
    read_text_lines,
    staged_file,
    text_lines,
)
from vanilla_transformer.files.lock import LOCK_NAME
from vanilla_transformer.files.measurements import usable_cpus
from vanilla_transformer.files.resumable import PARTIAL_SUFFIX, PROGRESS_SUFFIX
from vanilla_transformer.interop.ctranslate2_runtime import CTranslate2Translator, ctranslate2_device
from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2
from vanilla_transformer.training import train as recipe
from vanilla_transformer.training.arguments import parse_arguments
from vanilla_transformer.training.build import check_options
from vanilla_transformer.training.data_sources import language_from_extension, read_parallel_files
from vanilla_transformer.training.messages import DataError
from vanilla_transformer.training.metrics import translation_scores
from vanilla_transformer.training.presets import PRESETS
from vanilla_transformer.training.table3 import option_name, option_value, read_json
from vanilla_transformer.translate import TRANSLATION_KINDS, translate

RECORD = "distill.json"
RECORD_FORMAT = "vanilla-transformer distill"
STUDENT_PRESET = "multi30k-student"
TEACHER, STUDENT = "teacher", "student"
COMPUTE_TYPES = ("int8", "float32")  # what the report compares, each model translated by CTranslate2
# The options distill gives the recipe itself (the data, the languages, the run folder); refused after `--`.
MANAGED_OPTIONS = ("output_dir", "train_source", "train_target", "validation_source", "validation_target",
                   "test_source", "test_target", "source_lang", "target_lang", "dataset_name", "dataset_config_name",
                   "resume_from_checkpoint", "overwrite_output_dir")


@dataclass(frozen=True)
class Distillation:
    """The arguments of one distillation (`vanilla-transformer distill --help` describes each)."""

    teacher: str
    out: str
    train_source: str
    validation: tuple[str, str] | None = None  # (source, reference)
    with_original: str | None = None  # the original translations of train_source: a second corpus of the student
    closest_to: str | None = None  # the original translations of train_source: the teacher writes its closest
    test: tuple[str, str] | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    recipe_options: tuple[str, ...] = ()
    quantization: str = "int8"
    teacher_batch_size: int = 32
    teacher_compute_type: str = "default"
    device: str | None = None
    num_beams: int | None = None  # the report's beam; None: each model's own generation_config
    batch_size: int = 32  # the report's batches
    threads: tuple[int, ...] | None = None  # the report's thread counts; None: 1 and every CPU of this machine
    bleu_tokenize: str = "13a"  # the recipe's --bleu-tokenize, settled by `prepare`

    @property
    def teacher_kind(self) -> str:
        return check_folder_kind(self.teacher, TRANSLATION_KINDS, "distill: the teacher")

    @property
    def thread_counts(self) -> tuple[int, ...]:
        return self.threads or tuple(sorted({1, len(usable_cpus())}))

    def path(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    def inputs(self) -> list[str]:
        """Every file and folder the chain reads."""
        return [self.teacher, self.train_source, *self.originals(), *(self.validation or ()), *(self.test or ())]

    def originals(self) -> list[str]:
        """The files of original translations the chain reads (`with_original`, `closest_to`)."""
        return [path for path in (self.with_original, self.closest_to) if path]

    def record(self) -> dict:
        """What distill.json keeps: the arguments that make the results, with absolute paths."""
        values = asdict(self)
        for name in ("teacher", "train_source"):
            values[name] = os.path.realpath(values[name])
        for name in ("with_original", "closest_to"):
            if values[name] is None:  # the record of a distillation without them is as it always was
                del values[name]
            else:
                values[name] = os.path.realpath(values[name])
        for name in ("validation", "test"):
            values[name] = [os.path.realpath(path) for path in values[name]] if values[name] else None
        values["recipe_options"] = list(self.recipe_options)
        values["threads"] = list(self.threads) if self.threads else None
        del values["out"]
        return {"format": RECORD_FORMAT, "arguments": values, "inputs": self.input_files()}

    def input_files(self) -> dict:
        """{absolute path: [size, modification time in ns]} of every file the chain reads: the training (and
        `with_original`), validation and test files and the files of the teacher's folder (not its hidden ones). A folder whose inputs changed
        since (a teacher trained further in its folder, a corpus edited) is refused as other arguments are, so that
        no stage reuses the work of another input."""
        paths = [self.train_source, *self.originals(), *(self.validation or ()), *(self.test or ())]
        if os.path.isdir(self.teacher):
            paths += [entry.path for entry in os.scandir(self.teacher)
                      if not entry.name.startswith(".") and entry.is_file()]
        files = {}
        for path in paths:
            status = os.stat(path)
            files[os.path.realpath(path)] = [status.st_size, status.st_mtime_ns]
        return dict(sorted(files.items()))


# ----------------------------------------------------------------------------------------------------------------
# Before anything is written


def check_recipe_options(recipe_options) -> None:
    for word in recipe_options:
        if option_name(word) in MANAGED_OPTIONS:
            raise UsageError(f"--{option_name(word).replace('_', '-')} is set by distill (the distilled pairs, "
                             "its own options for the languages, the validation and test files, and the student's "
                             "folder); leave it out of the recipe options")


def student_options(d: Distillation, *, resume: bool = False) -> list[str]:
    """The recipe's command line for the student: `multi30k-student` unless the recipe options name a preset, the
    recipe options, then the distilled pairs, the languages, the evaluation files and the run folder."""
    options = [] if option_value(list(d.recipe_options), "preset") else ["--preset", STUDENT_PRESET]
    if d.with_original:  # two corpora: (source, teacher's translation) and the original pairs
        options += [*d.recipe_options, "--train_source", d.train_source, d.train_source, "--train_target",
                    distilled_path(d), d.with_original, "--output_dir", d.path(STUDENT)]
    else:
        options += [*d.recipe_options, "--train_source", d.train_source, "--train_target", distilled_path(d),
                    "--output_dir", d.path(STUDENT)]
    for split, pair in (("validation", d.validation), ("test", d.test)):
        if pair:
            options += [f"--{split}_source", pair[0], f"--{split}_target", pair[1]]
    for name in ("source_lang", "target_lang"):
        if getattr(d, name):
            options += [f"--{name}", getattr(d, name)]
    return options + (["--resume_from_checkpoint", "true"] if resume else [])


def teacher_languages(teacher: str) -> tuple[str, str] | None:
    """(source, target) as the teacher's model card (README.md, written by the recipe and by `save_for_hub`)
    records them in its `language` list, or None where the folder records none (a CTranslate2 export has no card)."""
    card = os.path.join(teacher, "README.md")
    if not os.path.isfile(card):
        return None
    try:
        languages = ModelCard.load(card, ignore_metadata_errors=True).data.to_dict().get("language")
    except Exception:  # a card that cannot be parsed records nothing we can check against
        return None
    if isinstance(languages, list) and len(languages) == 2 and all(isinstance(code, str) for code in languages):
        return languages[0], languages[1]
    return None


def corpus_languages(d: Distillation) -> tuple[str | None, str | None]:
    """The corpus's languages: --source-lang / --target-lang, else the files' extensions (train.en, val.de)."""
    source = d.source_lang or language_from_extension(d.train_source)
    targets = [language_from_extension(pair[1]) for pair in (d.validation, d.test) if pair]
    return source, d.target_lang or next((code for code in targets if code), None)


def settle_languages(d: Distillation) -> Distillation:
    """The languages of the chain: the corpus's and the teacher's must agree where both are known (a teacher of
    another pair would translate into the wrong language, or from one it does not read); where only the teacher's
    card knows them, its languages."""
    teacher = teacher_languages(d.teacher)
    source, target = corpus_languages(d)
    if teacher is not None:
        for side, ours, theirs in (("source", source, teacher[0]), ("target", target, teacher[1])):
            if ours is not None and ours != theirs:
                raise UsageError(f"the teacher {d.teacher} translates {teacher[0]} -> {teacher[1]} (its README.md), "
                                 f"but the corpus's {side} language is {ours}; give a teacher of {source or '?'} -> "
                                 f"{target or '?'}, or the corpus it translates (--source-lang / --target-lang "
                                 "name the corpus's languages when its file names do not)")
        source, target = source or teacher[0], target or teacher[1]
    return replace(d, source_lang=source, target_lang=target)


def check_teacher(d: Distillation) -> str:
    """The teacher's kind: a translation model folder (checked whole, its tokenizer loaded as the teacher's pass
    loads it) or a CTranslate2 folder (loaded on the CPU as the teacher's pass loads it: its weights, vocabulary,
    tokenizer and their fingerprint, in the compute type asked for); `CheckpointError` (one line) for anything else.
    Then --device, as the teacher's pass will use it (`check_device`)."""
    kind = d.teacher_kind
    if kind != "ctranslate2":
        if d.teacher_compute_type != "default":
            raise UsageError(f"--teacher-compute-type applies to a teacher exported to CTranslate2; {d.teacher} holds "
                             "a PyTorch model")
        check_checkpoint(d.teacher, need_tokenizer=True)
        check_teacher_tokenizer(d.teacher)
    else:
        load_checkpoint(d.teacher, kinds=("ctranslate2",), engine="ctranslate2", device="cpu",
                        compute_type=d.teacher_compute_type)
    check_device(d, kind)
    return kind


def check_teacher_tokenizer(teacher: str) -> None:
    """The PyTorch teacher's tokenizer loaded as its pass loads it (`AutoTokenizer`): a damaged tokenizer.json is one
    line naming the file (`tokenizer_errors`), not the tokenizers library's traceback after distill.json is
    written."""
    with tokenizer_errors(teacher):
        transformers.AutoTokenizer.from_pretrained(teacher)


def check_device(d: Distillation, kind: str) -> None:
    """--device, as the teacher's pass will use it: a torch device this machine has (a PyTorch teacher), or one
    CTranslate2 runs on (a CTranslate2 teacher); a `UsageError` otherwise."""
    if d.device is None:
        return
    try:
        if kind == "ctranslate2":
            ctranslate2_device(d.device)
        else:
            pick_device(d.device)
    except ValueError as error:  # "device 'bogus' is not a torch device (...)", "... CUDA is not available ..."
        raise UsageError(f"--{error}") from None


def check_corpus(d: Distillation) -> None:
    """The files the chain reads, as the recipe will read them, before hours of translation: the training source
    read whole (its encoding, as the teacher's pass and the recipe read it) and holding a sentence, the files of
    original translations (--closest-to, --with-original) read whole with a line for each of its lines, and each
    evaluation pair pairing up line for line (`DataError`, `TextFileError`: one line naming the file)."""
    count, sentences = 0, False
    for line in text_lines(d.train_source, "train source file"):
        count, sentences = count + 1, sentences or bool(line.strip())
    if not sentences:
        raise DataError(f"The train source file {d.train_source} is empty.")
    for option, path in (("--closest-to", d.closest_to), ("--with-original", d.with_original)):
        if path:  # the teacher's pass reads a line of --closest-to for each line; the recipe pairs --with-original
            originals = sum(1 for _ in text_lines(path, f"{option} file"))
            if originals != count:
                raise DataError(f"{option} {path} has {originals:,} lines and --train-source {d.train_source} "
                                f"{count:,}: it needs the original translation of each line.")
    for split, pair in (("validation", d.validation), ("test", d.test)):
        if pair:
            read_parallel_files(pair[0], pair[1], split)


def check_out(d: Distillation) -> None:
    """--out: not an input, not inside one, containing none; new, empty, or a distillation of these arguments."""
    try:
        check_output_folder(d.out, inputs=d.inputs(), allow_existing=True, overwrite_flag="")
    except OutputError as error:
        raise UsageError(f"--out {error}") from None
    record = d.path(RECORD)
    if not os.path.isfile(record):
        if os.path.isdir(d.out) and os.listdir(d.out):
            raise UsageError(f"--out {d.out} is not empty and holds no distillation (no {RECORD}); choose a new or "
                             "empty folder")
        return
    try:
        saved = read_json(record)
    except (OSError, ValueError) as error:
        raise UsageError(f"--out {record} cannot be read ({error}); choose another folder") from None
    if not isinstance(saved, dict) or saved.get("format") != RECORD_FORMAT:
        raise UsageError(f"--out {record} is not a record of vanilla-transformer distill; choose another folder")
    ours = d.record()
    if saved != ours and unstarted(d) is not None:
        return  # nothing done there yet: `open_folder` starts it over with these arguments
    if saved.get("arguments") != ours["arguments"]:
        before = saved.get("arguments") if isinstance(saved.get("arguments"), dict) else {}
        changed = sorted(name for name, value in ours["arguments"].items() if before.get(name) != value)
        raise UsageError(f"--out {d.out} holds a distillation of other arguments ({', '.join(changed)} differ); "
                         "give the same ones to continue it, or choose another folder")
    if saved.get("inputs") != ours["inputs"]:
        before = saved.get("inputs") if isinstance(saved.get("inputs"), dict) else {}
        changed = sorted(path for path in {*before, *ours["inputs"]}
                         if before.get(path) != ours["inputs"].get(path))
        raise UsageError(f"--out {d.out} holds a distillation of these files as they were; "
                         f"{', '.join(changed)} changed since (size or modification time): put them back as they "
                         "were to continue it, or choose another folder")


def check_student_recipe(data_args, model_args) -> None:
    """The student's recipe as the recipe will check it when it starts, hours later: its options that can be checked
    alone (`build.check_options`) and the model configuration it will build (`build.build_model`: the preset, the
    architecture options, --config_overrides), with the BPE vocabulary's size standing in for the tokenizer it has
    not trained yet; a `UsageError` (one line) for a configuration that cannot be."""


    check_options(data_args, model_args)
    check_student_sources(data_args, model_args)
    if model_args.model_name_or_path is not None:  # a finished architecture, loaded by the recipe
        return
    try:
        VanillaTransformerConfig(**{**PRESETS[data_args.preset].model, **model_args.config_values(),
                                    "vocab_size": data_args.vocab_size})
    except (TypeError, ValueError, StrictDataclassError) as error:  # @strict wraps the ValueError of the checks
        raise UsageError(str(error.__cause__ or error)) from None


def check_student_sources(data_args, model_args) -> None:
    """What the recipe loads instead of building it (`build.build_tokenizer`, `build.build_model`): the tokenizer of
    --tokenizer_name (else of --model_name_or_path) and the model of --model_name_or_path, loaded or checked now; a
    `UsageError` (one line) naming the option when one cannot be."""

    name, path = data_args.tokenizer_name, model_args.model_name_or_path
    if path is not None:
        if model_args.config_values():
            raise UsageError(f"--model_name_or_path loads a finished architecture; drop "
                             f"{', '.join(model_args.config_values())}.")
        try:
            if os.path.isdir(path):
                check_checkpoint(path, need_tokenizer=name is None)
            else:
                transformers.AutoConfig.from_pretrained(path)
        except Exception as error:  # noqa: BLE001  (CheckpointError, the Hub's errors for a name that is none)
            raise UsageError(f"--model_name_or_path {path} cannot be loaded: {one_line(error)}") from None
    source, option = (name, "--tokenizer_name") if name is not None else (path, "--model_name_or_path")
    if source is not None:
        try:
            transformers.AutoTokenizer.from_pretrained(source)
        except Exception as error:  # noqa: BLE001  (the tokenizers library raises bare Exceptions)
            raise UsageError(f"{option} {source}: its tokenizer cannot be loaded ({one_line(error)})") from None


def prepare(d: Distillation) -> Distillation:
    """Every check before anything is written: the recipe options, the teacher (its folder, tokenizer and --device),
    the corpus (read whole), the languages, --out, and the recipe's own parse and checks of the student's options
    with the model configuration they build (its usage errors, before hours of translation). Returns the
    distillation with its languages and BLEU tokenization settled."""
    check_recipe_options(d.recipe_options)
    check_teacher(d)
    check_corpus(d)
    d = settle_languages(d)
    data_args, model_args, _, _ = parse_arguments(student_options(d))
    check_student_recipe(data_args, model_args)
    d = replace(d, bleu_tokenize=data_args.bleu_tokenize)
    check_out(d)
    return d


def unstarted(d: Distillation) -> list[str] | None:
    """The files of a distillation in --out that never got past the start of the teacher's pass (it failed or was
    stopped before translating a line: a CUDA device out of memory, a Ctrl-C while loading), all of them written by
    distill itself: distill.json, the lock, and in teacher/ nothing or the translate command's empty `.partial`
    with its record of 0 lines. None when --out holds anything else (a line translated, a finished stage, a file of
    someone else's): such a folder is continued with its own arguments or refused, never cleared."""

    if not os.path.isdir(d.out) or os.path.islink(d.out):
        return None
    ours = []
    for entry in os.scandir(d.out):
        if entry.name in (RECORD, LOCK_NAME) and entry.is_file(follow_symlinks=False):
            ours.append(entry.path)
        elif entry.name != TEACHER or not entry.is_dir(follow_symlinks=False):
            return None
    teacher = d.path(TEACHER)
    if os.path.isdir(teacher):
        for entry in os.scandir(teacher):
            if not entry.is_file(follow_symlinks=False):
                return None
            if entry.name.endswith(PARTIAL_SUFFIX) and entry.stat().st_size == 0:
                ours.append(entry.path)
            elif entry.name.endswith(PROGRESS_SUFFIX) and os.path.isfile(entry.path.removesuffix(PROGRESS_SUFFIX) +
                                                                         PARTIAL_SUFFIX):
                try:
                    progress = read_json(entry.path)
                except (OSError, ValueError):
                    return None
                if not (isinstance(progress, dict) and progress.get("lines") == 0 and progress.get("bytes") == 0):
                    return None
                ours.append(entry.path)
            else:
                return None
    return ours


def open_folder(d: Distillation) -> None:
    """--out with its record, and the teacher's folder for the translations. A record of other arguments (or other
    inputs) that `check_out` let through is that of a distillation that never started (`unstarted`): its files, all
    distill's, are removed under --out's lock (looked at again there, in case another run started it since), and the
    distillation starts over with these arguments."""
    record = d.path(RECORD)
    if os.path.isfile(record):
        try:
            saved = read_json(record)
        except (OSError, ValueError):
            saved = None
        if saved != d.record():
            with RunLock(d.out, what="--out"):
                leftovers = unstarted(d)
                if leftovers is None:
                    check_out(d)  # its own message for what is there now
                    raise UsageError(f"--out {d.out} holds a distillation of other arguments; give the same ones "
                                     "to continue it, or choose another folder")
                for path in leftovers:
                    if os.path.basename(path) != LOCK_NAME:  # the lock is ours now, and goes with it
                        os.remove(path)
            print(f"Starting over in {d.out}: the distillation there had not translated a line", flush=True)
    os.makedirs(d.path(TEACHER), exist_ok=True)
    if not os.path.isfile(record):
        write_json(record, d.record())


def write_json(path: str, value) -> None:
    """Whole or not at all (a staged file renamed into place); replaces the file this module wrote."""
    with staged_file(path, overwrite=True, what="") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def write_text(path: str, text: str) -> None:
    with staged_file(path, overwrite=True, what="") as f:
        f.write(text)


# ----------------------------------------------------------------------------------------------------------------
# Stage 1: the teacher's translations (run by the translate command, cli/distill.py)


def distilled_path(d: Distillation) -> str:
    """teacher/train.LANG (.gz when the source is): the extension names the target language for the recipe."""
    name = f"train.{d.target_lang or 'target'}" + (".gz" if d.train_source.endswith(".gz") else "")
    return d.path(TEACHER, name)


def teacher_pass_options(d: Distillation) -> list[str]:
    """`vanilla-transformer translate` options of the teacher's pass: its own decoding (generation_config), the
    training source streamed into teacher/train.LANG, resumable."""
    options = ["--model", d.teacher, "--input", d.train_source, "--output", distilled_path(d),
               "--batch-size", str(d.teacher_batch_size)]
    if d.teacher_compute_type != "default":
        options += ["--compute-type", d.teacher_compute_type]
    if d.closest_to:
        options += ["--closest-to", d.closest_to]
    if d.device:
        options += ["--device", d.device]
    return options


# ----------------------------------------------------------------------------------------------------------------
# Stages 2 and 3: the student trained on the distilled pairs, its last checkpoints averaged (by the recipe)


def student_finished(d: Distillation) -> dict | None:
    """all_results.json of the finished student, else None: the recipe writes it with the final (averaged) model,
    moved in weights last."""
    folder = d.path(STUDENT)
    results = os.path.join(folder, "all_results.json")
    if not (os.path.isfile(results) and os.path.isfile(os.path.join(folder, "model.safetensors"))):
        return None
    try:
        return read_json(results)
    except (OSError, ValueError):
        return None


def train_student(d: Distillation) -> dict:
    """Train the student (resuming its last checkpoint when a run was stopped), or read the finished run's
    results."""
    finished = student_finished(d)
    if finished is not None:
        print(f"Student: finished ({d.path(STUDENT)})", flush=True)
        return finished
    folder = d.path(STUDENT)
    resume = os.path.isdir(folder) and get_last_checkpoint(folder) is not None
    print(f"Student: {'resuming' if resume else 'training'} in {folder}", flush=True)
    recipe.main(student_options(d, resume=resume))
    finished = student_finished(d)
    if finished is None:
        raise RuntimeError(f"the student's run in {folder} did not finish; run distill again to continue it")
    return finished


# ----------------------------------------------------------------------------------------------------------------
# Stage 4: the CTranslate2 export


def export(checkpoint: str, folder: str, quantization: str) -> str:
    """`checkpoint` exported to CTranslate2 in `folder`, unless an earlier run did (the export is renamed into place
    only when whole)."""
    if not os.path.isdir(folder):
        print(f"Exporting {checkpoint} to CTranslate2 ({quantization}): {folder}", flush=True)
        to_ctranslate2(checkpoint, folder, quantization)
    return folder


def export_student(d: Distillation) -> str:
    return export(d.path(STUDENT), d.path("student-ct2"), d.quantization)


# ----------------------------------------------------------------------------------------------------------------
# Stage 5: the report


def ct2_folder(d: Distillation, role: str, compute_type: str) -> tuple[str, str]:
    """(CTranslate2 folder, how its weights were exported) that the report translates `role` with in `compute_type`:
    the student's export when it is of that type, else an export made for the report; a CTranslate2 teacher's own
    folder (CTranslate2 converts its weights to `compute_type` as it loads them)."""
    if role == TEACHER and d.teacher_kind == "ctranslate2":
        return d.teacher, "as given"
    if role == STUDENT and d.quantization == compute_type:
        return d.path("student-ct2"), compute_type
    checkpoint = d.teacher if role == TEACHER else d.path(STUDENT)
    return export(checkpoint, d.path("report", "exports", f"{role}-{compute_type}"), compute_type), compute_type


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)


def parameters(folder: str) -> int | None:
    """The model's parameters, counted on its PyTorch folder (None for a CTranslate2 folder)."""
    if check_folder_kind(folder, TRANSLATION_KINDS) == "ctranslate2":
        return None
    return load_checkpoint(folder, kinds=("seq2seq",), device="cpu", need_tokenizer=False).model.num_parameters()


def splits(d: Distillation) -> dict:
    """{split: (sources, references, file name)} of the report: validation and test, as given."""
    found = {}
    for split, pair in (("validation", d.validation), ("test", d.test)):
        if pair:
            found[split] = (read_text_lines(pair[0], f"--{split}-source file"),
                            read_text_lines(pair[1], f"--{split}-target file"), os.path.basename(pair[0]))
            if len(found[split][0]) != len(found[split][1]):
                raise ValueError(f"--{split}-source {pair[0]} has {len(found[split][0])} lines but --{split}-target "
                                 f"{pair[1]} has {len(found[split][1])}; line i of one must translate line i of the "
                                 "other")
    return found


class Measurements:
    """report/measurements.json: every translation and timing done so far, saved after each, so that a report
    stopped midway continues with what is missing."""

    def __init__(self, path: str):
        self.path = path
        self.values = read_json(path) if os.path.isfile(path) else {}

    def get(self, key: str, measure):
        if key not in self.values:
            self.values[key] = measure()
            write_json(self.path, self.values)
        return self.values[key]


def translator(folder: str, compute_type: str, threads: int):
    """CTranslate2 on `folder` with `threads` threads in `compute_type`, and its tokenizer (checked by the loader)."""
    tokenizer = load_checkpoint(folder, kinds=("ctranslate2",), engine="ctranslate2", device="cpu",
                                compute_type=compute_type).tokenizer
    return CTranslate2Translator(folder, compute_type=compute_type, intra_threads=threads), tokenizer


def timed(d: Distillation, folder: str, compute_type: str, threads: int, sources: list[str], output: str) -> dict:
    """Translate `sources` (after a warm-up batch), write the translations to `output`, and return the sentences per
    second."""
    model, tokenizer = translator(folder, compute_type, threads)
    options = {"batch_size": d.batch_size, **({"num_beams": d.num_beams} if d.num_beams else {})}
    translate(model, tokenizer, sources[:d.batch_size], **options)  # warm-up
    start = time.perf_counter()
    translations = translate(model, tokenizer, sources, **options)
    seconds = time.perf_counter() - start
    if not os.path.isfile(output):
        write_text(output, "".join(line + "\n" for line in translations))
    return {"sentences": len(sources), "seconds": seconds, "sentences_per_second": len(sources) / seconds,
            "beams": d.num_beams or model.generation_config.num_beams}


def measure(d: Distillation, measurements: Measurements) -> dict:
    """Per model and compute type: every split translated (the test split, else the validation split, once per
    thread count, timed), scored against its references."""
    data = splits(d)
    timed_split = "test" if "test" in data else "validation"
    os.makedirs(d.path("report", "translations"), exist_ok=True)
    results = {}
    for role in (TEACHER, STUDENT):
        for compute_type in COMPUTE_TYPES:
            folder, exported = ct2_folder(d, role, compute_type)
            entry = results.setdefault(role, {}).setdefault(compute_type, {"folder": folder, "exported_as": exported,
                                                                           "speed": {}, "scores": {}})
            for split, (sources, references, _) in data.items():
                output = d.path("report", "translations", f"{role}.{compute_type}.{split}.txt")
                runs = d.thread_counts if split == timed_split else d.thread_counts[-1:]
                for threads in runs:
                    key = f"{role}/{compute_type}/{split}/{threads}"
                    speed = measurements.get(key, lambda: timed(d, folder, compute_type, threads, sources, output))
                    if split == timed_split:
                        entry["speed"][str(threads)] = speed
                predictions = read_text_lines(output, "translations file")
                scores = translation_scores(predictions, references, d.bleu_tokenize)
                entry["scores"][split] = {**scores, "translations": os.path.relpath(output, d.out)}
    return {"timed_split": timed_split, "models": results}


def model_facts(d: Distillation, role: str, measured: dict) -> dict:
    folder = d.teacher if role == TEACHER else d.path(STUDENT)
    sizes = {f"ctranslate2 {compute_type}": folder_bytes(entry["folder"])
             for compute_type, entry in measured["models"][role].items() if entry["exported_as"] != "as given"}
    if role == TEACHER and d.teacher_kind == "ctranslate2":
        sizes["ctranslate2 (as given)"] = folder_bytes(d.teacher)
    else:
        sizes["pytorch weights"] = folder_bytes_of(folder, ("model.safetensors", "pytorch_model.bin"))
    config = read_json(os.path.join(folder, "config.json"))
    layers = (f"{config['encoder_layers']}+{config['decoder_layers']}" if "encoder_layers" in config else None)
    return {"folder": os.path.abspath(folder), "parameters": parameters(folder), "layers": layers,
            "size_bytes": sizes}


def folder_bytes_of(folder: str, names) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for name in names
               if os.path.isfile(os.path.join(folder, name)))


def write_report(d: Distillation, student_results: dict) -> dict:
    """report.json and report.md in --out (report.json last: its presence says the chain is finished)."""
    if os.path.isfile(d.path("report.json")):
        print(f"Report: finished ({d.path('report.json')})", flush=True)
        return read_json(d.path("report.json"))
    print("Report: translating the validation and test files with teacher and student (CTranslate2)", flush=True)
    measured = measure(d, Measurements(d.path("report", "measurements.json")))
    report = {"teacher": model_facts(d, TEACHER, measured), "student": model_facts(d, STUDENT, measured),
              **measured, "threads": list(d.thread_counts), "batch_size": d.batch_size, "num_beams": d.num_beams,
              "bleu_tokenize": d.bleu_tokenize, "quantization": d.quantization,
              "student_training": {name: student_results[name] for name in
                                   ("averaged_checkpoints", "train_runtime", "train_pairs_read", "train_pairs_used",
                                    "cleaning") if name in student_results}}
    write_text(d.path("report.md"), markdown(report))
    write_json(d.path("report.json"), report)
    return report


def _size(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e5 else f"{count / 1e3:.0f} kB"


def _compared(label: str, teacher, student) -> str:
    """Scores as a difference in points, counts and speeds as a ratio."""
    if not (isinstance(student, (int, float)) and isinstance(teacher, (int, float))):
        return ""
    if label.startswith(("BLEU", "chrF")):
        return f"{student - teacher:+.2f}"
    return f"{student / teacher:.2f}x" if teacher else ""


def _layers(facts: dict) -> str:
    return f"{facts['layers']} layers" if facts["layers"] else "a CTranslate2 folder"


def markdown(report: dict) -> str:
    """The side-by-side table of report.json."""
    teacher, student, models = report["teacher"], report["student"], report["models"]
    rows = [("parameters", teacher["parameters"], student["parameters"], lambda n: f"{n:,}")]
    for name in dict.fromkeys([*teacher["size_bytes"], *student["size_bytes"]]):
        rows.append((f"size on disk, {name}", teacher["size_bytes"].get(name), student["size_bytes"].get(name), _size))
    for compute_type in COMPUTE_TYPES:
        for split in models[TEACHER][compute_type]["scores"]:
            for metric in ("bleu", "chrf"):
                rows.append((f"{'BLEU' if metric == 'bleu' else 'chrF'} {split}, {compute_type}",
                             models[TEACHER][compute_type]["scores"][split][metric],
                             models[STUDENT][compute_type]["scores"][split][metric], lambda x: f"{x:.2f}"))
    for compute_type in COMPUTE_TYPES:
        for threads in report["threads"]:
            speeds = [models[role][compute_type]["speed"][str(threads)]["sentences_per_second"]
                      for role in (TEACHER, STUDENT)]
            rows.append((f"sentences/s, {compute_type}, {threads} thread{'s' if threads > 1 else ''}", *speeds,
                         lambda x: f"{x:.1f}"))
    averaged = report["student_training"].get("averaged_checkpoints")
    signature = models[STUDENT]["int8"]["scores"][report["timed_split"]]["bleu_signature"]
    lines = ["# Distillation: teacher and student", "",
             f"Teacher `{teacher['folder']}` ({_layers(teacher)}); student `{student['folder']}` "
             f"({_layers(student)}), trained on the teacher's translations"
             + (f", the average of its last {averaged} checkpoints." if averaged else "."),
             f"Both translated by CTranslate2 ({report['batch_size']} sentences a batch, "
             + (f"beam {report['num_beams']}" if report["num_beams"] else "each model's own beam search")
             + f"); speed on the {report['timed_split']} file; BLEU {signature}.",
             "", "| | teacher | student | student vs teacher |", "| --- | ---: | ---: | ---: |"]
    for label, ours, theirs, show in rows:
        cells = [show(v) if v is not None else "unknown" for v in (ours, theirs)]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {_compared(label, ours, theirs)} |")
    return "\n".join(lines) + "\n"


def finish(d: Distillation) -> dict:
    """Stages 2 to 5, each skipped when an earlier run finished it; returns the report."""
    student_results = train_student(d)
    print(f"Student exported: {export_student(d)}", flush=True)
    report = write_report(d, student_results)
    print("\n" + markdown(report) + f"\nWrote {d.path('report.md')} and report.json", flush=True)
    return report
