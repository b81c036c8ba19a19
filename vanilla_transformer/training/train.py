"""Train a translation Transformer with the recipe of "Attention Is All You Need" on Seq2SeqTrainer.

    python -m training.train                        # demo: English -> German number words, offline, minutes on a CPU
    python -m vanilla_transformer.training.train --preset multi30k --train_source train.en --train_target train.de \\
        --validation_source val.en --validation_target val.de --test_source test.en --test_target test.de
    python -m vanilla_transformer.training.train --preset base --dataset_name wmt14 --dataset_config_name de-en \\
        --source_lang en --target_lang de                       # under accelerate launch / torchrun

Arguments come in three groups parsed by HfArgumentParser: data (`DataArguments`), model (`ModelArguments`) and
every Seq2SeqTrainingArguments flag plus `--max_tokens`, `--max_train_minutes`, `--average_last_n_checkpoints`
(`TranslationTrainingArguments`). `--preset` (see training/presets.py) sets the defaults; any flag overrides them.
Without `--learning_rate`, the peak learning rate is the paper's (d_model * warmup_steps)^-0.5.

The output folder is a Hub-ready checkpoint: model, tokenizer, generation config and README.md model card (with the
test-set BLEU), plus the Trainer's checkpoints and `trainer_state.json`.
"""

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

# OpenMP threads that spin while waiting for work make a CPU run several times slower as soon as another process
# shares the cores. Passive waiting costs little when the cores are free. Set before torch is imported; an explicit
# OMP_WAIT_POLICY wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from vanilla_transformer.training.arguments import DataArguments, ModelArguments, parse_arguments  # noqa: F401  (the options of this command)
from vanilla_transformer.training.budget import BudgetPlan
from vanilla_transformer.training.data import (
    SPLITS,
    DataError,
    SubwordDropout,
    demo_splits,
    language_from_extension,
    load_hub_dataset,
    load_text_files,
    tokenize_splits,
)
from vanilla_transformer.training.presets import PRESETS


class UsageError(Exception):
    """A problem with the command line or the data, reported without a traceback."""


def _log(training_args, message: str) -> None:
    if training_args.process_index == 0:
        print(message, flush=True)


def load_splits(data_args, training_args):
    """-> ({split: Dataset(source, target)}, source_lang, target_lang, description for the card)."""
    files = {split: (getattr(data_args, f"{split}_source"), getattr(data_args, f"{split}_target")) for split in SPLITS}
    any_files = any(path is not None for pair in files.values() for path in pair)
    if data_args.dataset_name and any_files:
        raise UsageError("Give either --dataset_name or text files (--train_source ...), not both.")
    if data_args.dataset_name:
        if not (data_args.source_lang and data_args.target_lang):
            raise UsageError("--dataset_name needs --source_lang and --target_lang (e.g. --source_lang en "
                             "--target_lang de).")
        splits = load_hub_dataset(data_args.dataset_name, data_args.dataset_config_name, data_args.source_lang,
                                  data_args.target_lang)
        name = data_args.dataset_name  # a Hub id names the data set in the card's metadata; a folder its basename
        if os.path.isdir(name):
            name = os.path.basename(os.path.abspath(name))
        return splits, data_args.source_lang, data_args.target_lang, name
    if any_files:
        if files["train"] == (None, None):
            raise UsageError("Text files need a training pair: --train_source and --train_target.")
        splits = load_text_files(files)
        source_lang = data_args.source_lang or language_from_extension(data_args.train_source)
        target_lang = data_args.target_lang or language_from_extension(data_args.train_target)
        folder = os.path.basename(os.path.dirname(os.path.abspath(data_args.train_source)))
        return splits, source_lang, target_lang, folder or os.path.basename(data_args.train_source)
    if data_args.preset != "demo":
        raise UsageError(f"--preset {data_args.preset} needs data: text files (--train_source/--train_target, "
                         "...) or --dataset_name. Only the demo preset generates its own corpus.")
    source_lang, target_lang = data_args.source_lang or "en", data_args.target_lang or "de"
    from num2words import CONVERTER_CLASSES

    unknown = [lang for lang in (source_lang, target_lang) if lang not in CONVERTER_CLASSES]
    if unknown:
        raise UsageError(f"num2words has no language {', '.join(unknown)} to generate the demo corpus.")
    splits = demo_splits(data_args.demo_train_size, training_args.seed, source_lang, target_lang)
    return splits, source_lang, target_lang, "number words generated with num2words"


def resolve_resume_checkpoint(training_args) -> str | None:
    """`--resume_from_checkpoint PATH`, or `true`/`last` for the newest whole checkpoint of --output_dir (an
    incomplete one, e.g. written by a run killed while saving it, is skipped with a message)."""
    value = training_args.resume_from_checkpoint
    if value is None or str(value).lower() in ("", "false", "none"):
        return None
    if str(value).lower() in ("true", "last"):
        last = last_whole_checkpoint(training_args) if os.path.isdir(training_args.output_dir) else None
        if last is None:
            raise UsageError(f"--resume_from_checkpoint {value}: {training_args.output_dir} holds no checkpoint-STEP "
                             "folder to resume from.")
        return last
    if not os.path.isdir(value):
        raise UsageError(f"--resume_from_checkpoint {value}: no such checkpoint folder.")
    return value


def checkpoint_problem(folder: str, save_only_model: bool = False) -> str | None:
    """Why the Trainer checkpoint `folder` cannot be resumed from (a missing or unreadable file), else None."""
    from vanilla_transformer.checkpoints.validate import CheckpointError, check_checkpoint

    try:
        check_checkpoint(folder, need_tokenizer=False)
    except CheckpointError as error:
        return str(error)
    needed = ["trainer_state.json"] + ([] if save_only_model else ["optimizer.pt", "scheduler.pt"])
    missing = [name for name in needed if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        return f"no {' or '.join(missing)}"
    try:
        with open(os.path.join(folder, "trainer_state.json"), encoding="utf-8") as f:
            json.load(f)
    except (OSError, ValueError) as error:
        return f"trainer_state.json cannot be read ({error})"
    return None


def last_whole_checkpoint(training_args) -> str | None:
    """The checkpoint-STEP folder of --output_dir with the highest step that is whole."""
    from vanilla_transformer.training.average_checkpoints import CHECKPOINT_PATTERN

    output_dir = training_args.output_dir
    found = sorted(((int(m.group(1)), name) for name in os.listdir(output_dir)
                    if (m := CHECKPOINT_PATTERN.match(name)) and os.path.isdir(os.path.join(output_dir, name))),
                   reverse=True)
    skipped = []
    for _, name in found:
        path = os.path.join(output_dir, name)
        problem = checkpoint_problem(path, training_args.save_only_model)
        if problem is None:
            for line in skipped:
                _log(training_args, f"Skipping {line}; resuming from {path}.")
            return path
        skipped.append(f"{path}: incomplete ({problem})")
    if skipped:
        raise UsageError(f"--resume_from_checkpoint {training_args.resume_from_checkpoint}: {output_dir} holds no "
                         f"whole checkpoint to resume from (the newest, {skipped[0]})")
    return None


def check_checkpoints(resume: str | None, model_args, data_args) -> None:
    """A local checkpoint to resume from or to start from (`--model_name_or_path`; a Hub id is left to transformers)
    must be whole: readable weights that match its config, and its tokenizer unless `--tokenizer_name` gives one."""
    from vanilla_transformer.checkpoints.kinds import check_folder_kind
    from vanilla_transformer.checkpoints.validate import CheckpointError, check_checkpoint

    for folder, option in ((resume, "--resume_from_checkpoint"), (model_args.model_name_or_path,
                                                                   "--model_name_or_path")):
        if folder is not None and os.path.isdir(folder):
            try:  # the recipe trains the translation model: a decoder-only or encoder-only folder is refused
                check_folder_kind(folder, ("seq2seq",), option)
                check_checkpoint(folder, need_tokenizer=data_args.tokenizer_name is None)
            except CheckpointError as error:
                raise UsageError(str(error)) from None


def model_inputs(data_args, model_args) -> list[str]:
    """The local folders a run reads a model or tokenizer from (--model_name_or_path, --tokenizer_name)."""
    return [path for path in (model_args.model_name_or_path, data_args.tokenizer_name)
            if path is not None and os.path.isdir(path)]


def check_output_dir(training_args, resume: str | None, inputs=()) -> None:
    """Before any work: --output_dir must be (or become) a writable folder that is not one of the model `inputs` nor
    inside one (with --overwrite_output_dir, none of them may lie in it: its checkpoints are deleted), and must not
    hold an earlier run's checkpoints or finished model unless this run resumes it or --overwrite_output_dir
    replaces them."""
    from transformers.trainer_utils import get_last_checkpoint

    from vanilla_transformer.files import OutputError, check_output_folder, has_model, is_within

    output_dir = training_args.output_dir
    try:
        check_output_folder(output_dir, allow_existing=True)
    except OutputError as error:
        raise UsageError(f"--output_dir: {error}") from None
    for source in inputs:
        if is_within(output_dir, source):
            raise UsageError(f"--output_dir {output_dir} is or lies inside {source}, which this run reads its model "
                             "or tokenizer from; choose another --output_dir.")
        if training_args.overwrite_output_dir and is_within(source, output_dir):
            raise UsageError(f"--overwrite_output_dir would delete {source}, which this run reads its model or "
                             "tokenizer from; copy it elsewhere or choose another --output_dir.")
    if resume is not None or training_args.overwrite_output_dir or not os.path.isdir(output_dir):
        return only_ours(output_dir, resume)
    if get_last_checkpoint(output_dir) is not None:
        raise UsageError(f"{output_dir} already holds checkpoints of an earlier run. Continue it with "
                         "--resume_from_checkpoint true, start over with --overwrite_output_dir true (deletes them), "
                         "or choose another --output_dir.")
    if has_model(output_dir):
        raise UsageError(f"{output_dir} already holds a finished model. Continue its run with "
                         "--resume_from_checkpoint true, replace it with --overwrite_output_dir true, or choose "
                         "another --output_dir.")
    only_ours(output_dir, resume)


def only_ours(output_dir: str, resume: str | None) -> None:
    """--output_dir holds nothing the user saved that this run could replace (`files.lock.check_run_folder`)."""
    from vanilla_transformer.files import OutputError, check_run_folder

    try:
        check_run_folder(output_dir, resuming=resume is not None)
    except OutputError as error:
        raise UsageError(str(error)) from None


def steps_wanted(training_args, saved_max_steps: int) -> int:
    """The step a run ends at: --max_steps, else (none given, or a time budget whose plan set it) the max_steps that
    the saved trainer_state.json records."""
    if training_args.max_steps and training_args.max_steps > 0 and not training_args.plans_time_budget:
        return training_args.max_steps
    return saved_max_steps


def finished_run(training_args) -> dict | None:
    """The saved metrics when --output_dir holds the finished model of a run that reached --max_steps (its
    trainer_state.json says so), else None. Resuming such a run has nothing left to do."""
    from vanilla_transformer.files import has_model

    output_dir = training_args.output_dir
    state_path = os.path.join(output_dir, "trainer_state.json")
    if not (os.path.isfile(state_path) and has_model(output_dir)):
        return None
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
        step, max_steps = int(state["global_step"]), int(state.get("max_steps") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    wanted = steps_wanted(training_args, max_steps)
    if not wanted or step < wanted:
        return None
    _log(training_args, f"{output_dir} holds the finished run (step {step} of {wanted}); nothing to train. Give a "
         "larger --max_steps to train on, or --overwrite_output_dir true to start over.")
    if training_args.process_index == 0:  # a run killed after its final save left its staging folder
        from vanilla_transformer.files import clean_stale_staging

        for line in clean_stale_staging(output_dir):
            _log(training_args, line)
    try:
        with open(os.path.join(output_dir, "all_results.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def prepare_output_dir(training_args, resume: str | None, inputs=()) -> None:
    """Under the run's lock, once every option and the data are known to be good: check --output_dir again (another
    run may have written there meanwhile) and, with --overwrite_output_dir, delete the old run's checkpoints."""
    check_output_dir(training_args, resume, inputs)
    output_dir = training_args.output_dir
    os.makedirs(output_dir, exist_ok=True)
    if resume is not None or not training_args.overwrite_output_dir:
        return
    if training_args.process_index == 0:  # the old run's checkpoints, each known by its manifest
        from vanilla_transformer.files import remove_ours

        remove_ours(output_dir, [name for name in os.listdir(output_dir) if name.startswith("checkpoint-")],
                    overwrite_flag="--overwrite_output_dir")


def output_dir_lock(training_args):
    """The lock that keeps a second run out of --output_dir (taken by the main process)."""
    import contextlib

    from vanilla_transformer.files import RunLock

    return RunLock(training_args.output_dir) if training_args.process_index == 0 else contextlib.nullcontext()


def build_tokenizer(data_args, model_args, training_args, splits, resume: str | None):
    """The tokenizer of --tokenizer_name, --model_name_or_path or the resumed checkpoint; otherwise a shared BPE
    vocabulary trained on both sides of the training data (by the main process; the others load its copy)."""
    from transformers import AutoTokenizer

    from vanilla_transformer.training.tokenizer import train_tokenizer

    source = data_args.tokenizer_name or resume or model_args.model_name_or_path
    if source is not None:
        return AutoTokenizer.from_pretrained(source)
    # nothing is written into --output_dir before every option is checked: other processes read a hidden copy
    shared = os.path.join(training_args.output_dir, ".tokenizer-for-other-processes")
    with training_args.main_process_first(desc="training the BPE tokenizer"):
        if training_args.local_process_index == 0:
            train = splits["train"]

            def texts():
                for start in range(0, len(train), 10_000):
                    batch = train[start:start + 10_000]
                    yield from batch["source"]
                    yield from batch["target"]

            tokenizer = train_tokenizer(texts(), vocab_size=data_args.vocab_size,
                                        model_max_length=max(data_args.max_source_length, data_args.max_target_length))
            if training_args.world_size > 1:  # for the other processes; the checkpoints and final save hold it
                tokenizer.save_pretrained(shared)
        else:
            tokenizer = AutoTokenizer.from_pretrained(shared)
    if training_args.world_size > 1:
        with training_args.main_process_first(desc="sharing the tokenizer"):
            pass  # the main process waits here until every other one has loaded it
        if training_args.local_process_index == 0:
            shutil.rmtree(shared, ignore_errors=True)
    return tokenizer


def build_model(model_args, preset, tokenizer, resume: str | None):
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

    try:
        overrides = model_args.config_values()
        decoding = model_args.generation_values()
    except ValueError as error:
        raise UsageError(str(error)) from None
    if model_args.model_name_or_path is not None:
        if overrides:
            raise UsageError(f"--model_name_or_path loads a finished architecture; drop {', '.join(overrides)}.")
        model = AutoModelForSeq2SeqLM.from_pretrained(model_args.model_name_or_path)
        model.generation_config.update(**decoding)  # the checkpoint's own decoding, unless an option sets it
        return model
    if resume is not None:  # the Trainer loads the weights; the architecture is the checkpoint's
        config = AutoConfig.from_pretrained(resume)
        check_resume_options(config, overrides, resume)
    else:
        special = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id)
        missing = [name for name, value in special.items() if value is None]
        if missing:
            raise UsageError(f"The tokenizer defines no {', '.join(missing)}; a translation model needs padding, "
                             "start and end-of-sentence tokens.")
        try:
            config = VanillaTransformerConfig(**{**preset.model, **overrides, "vocab_size": len(tokenizer), **special})
        except (TypeError, ValueError, StrictDataclassError) as error:  # @strict wraps the ValueError of our checks
            raise UsageError(str(error.__cause__ or error)) from None
    model = VanillaTransformerForConditionalGeneration(config)
    model.generation_config.update(**{**preset.generation, **decoding})  # the preset's decoding, e.g. length penalty
    return model


# config keys set by options of their own (the rest come from --config_overrides KEY=VALUE)
OPTION_OF_CONFIG_KEY = {"encoder_attention_heads": "--attention_heads", "decoder_attention_heads": "--attention_heads",
                        "encoder_ffn_dim": "--ffn_dim", "decoder_ffn_dim": "--ffn_dim", "d_model": "--d_model",
                        "encoder_layers": "--encoder_layers", "decoder_layers": "--decoder_layers",
                        "dropout": "--dropout", "attention_dropout": "--attention_dropout",
                        "activation_dropout": "--activation_dropout"}


def check_resume_options(config, overrides: dict, resume: str) -> None:
    """A resumed run has the checkpoint's architecture: an option that gives another value is refused in one line
    naming the option and the checkpoint's value (the weights would not fit it, or it would be ignored)."""
    for key, value in overrides.items():
        saved = getattr(config, key, None)
        if saved != value:
            given = (f"{OPTION_OF_CONFIG_KEY[key]} {value}" if key in OPTION_OF_CONFIG_KEY
                     else f"--config_overrides {key}={value}")
            raise UsageError(f"{given} disagrees with the checkpoint {resume}, which has {key}={saved!r}; "
                             "a resumed run keeps the checkpoint's architecture: drop the option, or start a new run "
                             "in another --output_dir.")


def _first(dataset, n: int | None):
    return dataset if n is None or n >= len(dataset) else dataset.select(range(n))


def sample_translations(output_dir: str, sources: list[str], references: list[str], source_lang, target_lang) -> None:
    """Load the saved folder the way a user would and translate a few test sentences with it."""
    from transformers import pipeline

    import vanilla_transformer  # noqa: F401  (registers the model and its translation pipeline)

    translator = pipeline("translation", model=output_dir)
    outputs = translator(sources)
    print(f"\nTranslations by pipeline('translation', model={output_dir!r}) ({source_lang} -> {target_lang}):")
    for source, output, reference in zip(sources, outputs, references):
        hypothesis = output["translation_text"]
        mark = "=" if hypothesis.strip() == reference.strip() else "≠"
        print(f"  {source}\n    -> {hypothesis}   [{mark} {reference}]")


def example_sentences(texts: dict, count: int = 2) -> list[str] | None:
    """The first `count` non-empty source sentences of the test (else validation) split, in file order: the model
    card's usage snippet shows text from the model's own domain."""
    for split in ("test", "validation"):
        if split in texts:
            in_file_order = sorted(zip(texts[split]["index"], texts[split]["source"]))
            picked = [source.strip() for _, source in in_file_order if source.strip()][:count]
            if picked:
                return picked
    return None


def check_options(data_args, model_args) -> None:
    """Fail before any work on options that can be checked alone: the BLEU tokenizer and --config_overrides keys."""
    import sacrebleu

    try:
        sacrebleu.BLEU(tokenize=data_args.bleu_tokenize)
    except Exception as error:  # sacrebleu raises a bare error for an unknown or uninstalled tokenizer
        raise UsageError(f"--bleu_tokenize {data_args.bleu_tokenize}: {error}") from None
    try:
        model_args.config_values()
        model_args.generation_values()
    except ValueError as error:
        raise UsageError(str(error)) from None


def load_data(data_args, training_args):
    """-> (splits cut to --max_*_samples, source_lang, target_lang, data set name for the card)."""
    splits, source_lang, target_lang, dataset_name = load_splits(data_args, training_args)
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_test_samples}
    splits = {split: _first(dataset, limits[split]) for split, dataset in splits.items()}
    _log(training_args, "Data: " + ", ".join(f"{split} {len(d):,} pairs" for split, d in splits.items())
         + f" ({source_lang or '?'} -> {target_lang or '?'})")
    return splits, source_lang, target_lang, dataset_name


def prepare_model(model, tokenizer, data_args, model_args, training_args) -> None:
    """Check that the tokenizer fits the model and cap the decoding length of a new model."""
    if len(tokenizer) > model.config.vocab_size:
        raise UsageError(f"The tokenizer has {len(tokenizer)} tokens but the model only {model.config.vocab_size}.")
    if model_args.model_name_or_path is None:
        # Decode at most as long as the longest target trained on (+ the start token): a half-trained model that
        # loops would otherwise run its beams to 256 tokens. The paper caps at input length + 50 (section 6.1).
        model.generation_config.max_length = min(model.generation_config.max_length, data_args.max_target_length + 1)
    _log(training_args, describe_model(model, tokenizer, training_args, bpe_dropout=data_args.bpe_dropout))


def describe_model(model, tokenizer, training_args, bpe_dropout: float = 0.0) -> str:
    """The `Model:` line printed once at the start: the shape, regularisation, schedule, decoding and precision."""
    from vanilla_transformer.training.precision import precision_in_use

    config = model.config
    warmup = (f"{training_args.warmup_steps:g} of the steps" if training_args.warmup_steps < 1
              else f"{int(training_args.warmup_steps)} steps")
    extra_dropout = [f"{name} {value:g}" for name, value in (("attention", config.attention_dropout),
                                                             ("activation", config.activation_dropout)) if value]
    return (f"Model: {model.num_parameters():,} parameters, d_model {config.d_model}, "
            f"{config.encoder_layers}+{config.decoder_layers} layers, "
            f"{'pre' if config.normalize_before else 'post'}-LayerNorm, dropout {config.dropout:g}"
            f"{' (' + ', '.join(extra_dropout) + ')' if extra_dropout else ''}, "
            f"label smoothing {training_args.label_smoothing_factor:g}, vocabulary {len(tokenizer):,}"
            f"{f' (BPE-dropout {bpe_dropout:g})' if bpe_dropout else ''}; "
            f"peak learning rate {training_args.learning_rate:.3g} after a warmup of {warmup}; "
            f"decoding: beam {model.generation_config.num_beams}, "
            f"length penalty {model.generation_config.length_penalty:g}; "
            f"{precision_in_use(training_args)}")


def build_trainer(model, tokenizer, splits, data_args, training_args, state: "RunState", callbacks=None):
    """-> (TranslationTrainer, tokenized splits, their texts). Validation BLEU is computed only with a split."""
    from transformers import DataCollatorForSeq2Seq

    from vanilla_transformer.training.metrics import bleu_metric
    from vanilla_transformer.training.trainer import TranslationTrainer

    tokenized, texts = tokenize_splits(splits, tokenizer, data_args.max_source_length, data_args.max_target_length,
                                       keep_train_text=data_args.bpe_dropout > 0)
    train_dataset = tokenized["train"]
    if data_args.bpe_dropout > 0:
        try:
            train_dataset = SubwordDropout(train_dataset, tokenizer, data_args.bpe_dropout,
                                           data_args.max_source_length, data_args.max_target_length)
        except DataError as error:
            raise UsageError(f"--bpe_dropout {data_args.bpe_dropout:g}: {error}") from None
    eval_dataset = tokenized.get("validation")
    if training_args.eval_strategy != "no" and eval_dataset is None:
        raise UsageError(f"--eval_strategy {training_args.eval_strategy} needs a validation split "
                         "(--validation_source/--validation_target, or a dataset with one).")

    compute_metrics = None
    if eval_dataset is not None:
        compute_metrics = bleu_metric(tokenizer, texts["validation"]["target"], data_args.bleu_tokenize)
    state.examples = example_sentences(texts)
    trainer = TranslationTrainer(
        model=model,
        args=training_args,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=callbacks,
        run_state=state,
    )
    return trainer, tokenized, texts


def reached_max_steps(checkpoint: str, training_args) -> int | None:
    """The step of a checkpoint that already reached --max_steps (or the max_steps its run had), else None."""
    try:
        with open(os.path.join(checkpoint, "trainer_state.json"), encoding="utf-8") as f:
            state = json.load(f)
        step, max_steps = int(state["global_step"]), int(state.get("max_steps") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    wanted = steps_wanted(training_args, max_steps)
    return step if wanted and step >= wanted else None


def train(trainer, training_args, resume: str | None) -> dict:
    """Train (or resume) and return the training metrics, each named train_*. A checkpoint that already reached
    --max_steps is only loaded (the Trainer would train one step past it)."""
    from transformers import TrainerState

    if resume is not None and (step := reached_max_steps(resume, training_args)) is not None:
        _log(training_args, f"{resume} already reached step {step}; finishing the run without training further.")
        trainer._load_from_checkpoint(resume)  # private API, the same in transformers 5.18-5.24
        trainer.state = TrainerState.load_from_json(os.path.join(resume, "trainer_state.json"))
        return {}
    train_result = trainer.train(resume_from_checkpoint=resume)
    # One write with its newline: processes sharing a pipe cannot split the line.
    sys.stdout.write(f"Finished training on rank {training_args.process_index} of {training_args.world_size} "
                     f"(step {trainer.state.global_step})\n")
    sys.stdout.flush()
    return {f"train_{k}" if not k.startswith("train_") else k: v for k, v in train_result.metrics.items()}


def average_last_checkpoints(trainer, training_args) -> int:
    """Load the mean of the last --average_last_n_checkpoints checkpoints into the model (section 6.1 of the
    paper); returns how many were averaged (0: none). A time-budget run that the clock stopped before its plan
    averages the checkpoints it saved."""
    if training_args.average_last_n_checkpoints <= 1:
        return 0
    from vanilla_transformer.training.average_checkpoints import (
        CHECKPOINT_PATTERN,
        average_state_dicts,
        last_checkpoints,
    )

    trainer.accelerator.wait_for_everyone()
    saved = sum(bool(CHECKPOINT_PATTERN.match(name)) for name in os.listdir(training_args.output_dir))
    wanted = training_args.average_last_n_checkpoints
    plan = trainer.time_budget.plan if trainer.time_budget is not None else None
    if plan is not None and len(plan.checkpoint_steps) < wanted:  # a short budget: as many as fit (the plan's note)
        wanted = len(plan.checkpoint_steps)
    if training_args.max_train_minutes and saved < wanted:  # the clock stopped the run before its last checkpoints
        _log(training_args, f"The time ran out before the last checkpoints: averaging {saved}, not {wanted}")
        wanted = saved
    if wanted <= 1:
        return 0
    checkpoints = last_checkpoints(training_args.output_dir, wanted)
    trainer.model.load_state_dict(average_state_dicts(checkpoints))
    _log(training_args, f"Averaged the weights of {', '.join(os.path.basename(c) for c in checkpoints)}")
    return len(checkpoints)


def evaluate(trainer, tokenizer, tokenized, texts, data_args, training_args, target_lang,
             folder: str | None = None) -> tuple[str | None, dict]:
    """Translate the test split (else the validation split) with beam search, write the translations to
    {split}_predictions.txt in input order (in `folder`, default --output_dir) and score them
    (training/metrics.py). -> (split or None, scores)."""
    from vanilla_transformer.training.metrics import decode_predictions, translation_scores

    split = "test" if "test" in tokenized else "validation" if "validation" in tokenized else None
    if split is None:
        return None, {}
    trainer.compute_metrics = None  # scored below against this split's references
    output = trainer.predict(tokenized[split], metric_key_prefix=split)
    predictions = decode_predictions(tokenizer, output.predictions, len(tokenized[split]))
    scores = translation_scores(predictions, texts[split]["target"], data_args.bleu_tokenize,
                                target_lang=target_lang if data_args.literature_bleu else None)
    if trainer.is_world_process_zero():  # in the order of the input, one line per sentence
        in_order = [""] * len(predictions)
        for index, prediction in zip(texts[split]["index"], predictions):
            in_order[index] = prediction.replace("\n", " ")
        with open(os.path.join(folder or training_args.output_dir, f"{split}_predictions.txt"), "w",
                  encoding="utf-8") as f:
            f.write("\n".join(in_order) + "\n")
    literature = (f", literature BLEU (lowercased, Moses-tokenised) {scores['literature_bleu']:.2f}"
                  if "literature_bleu" in scores else "")
    _log(training_args, f"{split.capitalize()} set ({len(predictions)} sentences): BLEU {scores['bleu']:.2f} "
         f"({scores['bleu_signature']}), chrF {scores['chrf']:.2f}{literature}, exact match "
         f"{100 * scores['exact_match']:.1f}%")
    return split, scores


def training_summary(data_args, training_args, model, trainer, state: "RunState", *, training_pairs: int,
                     metrics: dict) -> dict:
    """The "Training" table of the model card: recipe, data, batch, optimizer, schedule, averaging, time."""
    lr = training_args.learning_rate
    schedule = getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)
    from vanilla_transformer.training.precision import precision_in_use

    summary = {
        "recipe": "Vaswani et al. (2017), section 5",
        "preset": data_args.preset,
        "data": (f"{data_args.dataset_name} {data_args.dataset_config_name or ''} (Hugging Face datasets)"
                 if data_args.dataset_name else
                 f"text files {os.path.basename(data_args.train_source)} / {os.path.basename(data_args.train_target)}"
                 if data_args.train_source else
                 f"number words generated with num2words, {state.source_lang} -> {state.target_lang}"),
        "training pairs": training_pairs,
        "optimizer steps": trainer.state.global_step,
        "batch": (f"~{training_args.max_tokens} tokens per device (sentences of similar length)"
                  if training_args.max_tokens else f"{training_args.per_device_train_batch_size} sentences per device"),
        "devices": training_args.world_size,
        "precision": precision_in_use(training_args),
        "gradient accumulation": training_args.gradient_accumulation_steps,
        "optimizer": f"Adam(beta1={training_args.adam_beta1}, beta2={training_args.adam_beta2}, "
                     f"eps={training_args.adam_epsilon}), weight decay {training_args.weight_decay}",
        "learning rate": (f"{schedule}, peak {lr:.3g} after {state.budget.warmup_steps} warmup steps" if state.budget
                          else f"{schedule}, peak {lr:.3g} after {training_args.warmup_steps} warmup steps"),
        "label smoothing": training_args.label_smoothing_factor,
        "BLEU": f"sacreBLEU corpus BLEU, {data_args.bleu_tokenize} tokenization, beam search as in "
                "generation_config.json" + (f" (signature {state.signatures['bleu']}; chrF {state.signatures['chrf']})"
                                             if state.signatures else ""),
        "dropout": model.config.dropout,
        "checkpoint averaging": f"last {state.averaged} checkpoints" if state.averaged else "none",
        "training time": f"{metrics.get('train_runtime', 0) / 60:.1f} min",
    }
    if data_args.bpe_dropout:
        summary["BPE-dropout"] = f"{data_args.bpe_dropout:g} (Provilkov et al. 2020; training only)"
    if state.budget:
        summary["time budget"] = state.budget.describe()
    return summary


def final_staging_folder(training_args) -> str:
    """A hidden folder inside --output_dir for the final model, moved in by `commit_final_save` once whole."""
    from vanilla_transformer.files import clean_stale_staging, staging_name

    if training_args.process_index == 0:
        for line in clean_stale_staging(training_args.output_dir):
            _log(training_args, line)
    folder = os.path.join(training_args.output_dir, staging_name("final-model"))
    if training_args.process_index == 0:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    return folder


def save(trainer, training_args, metrics: dict, folder: str | None = None) -> None:
    """Model, tokenizer and model card, plus the trainer state and all metrics, into `folder` (default
    --output_dir; `commit_final_save` moves a staging folder's files into --output_dir)."""
    folder = folder or training_args.output_dir
    trainer.save_model(folder, _internal_call=True)  # pushed after the commit
    if trainer.is_world_process_zero():
        trainer.state.save_to_json(os.path.join(folder, "trainer_state.json"))
        with open(os.path.join(folder, "all_results.json"), "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=4, sort_keys=True)  # as Trainer.save_metrics("all", combined=False)
        if not training_args.push_to_hub:
            from vanilla_transformer.training.trainer import write_model_card

            write_model_card(trainer.model, folder, **(trainer.run_state.card_fields() if trainer.run_state else {}))


def commit_final_save(trainer, training_args, staging: str) -> None:
    """Move the finished final save into --output_dir, weights last: a kill leaves either no model (and the run
    resumable) or the whole new one, never new settings beside old weights. Then push it if asked."""
    from vanilla_transformer.files import commit_files

    if trainer.is_world_process_zero():
        commit_files(staging, training_args.output_dir)
    trainer.accelerator.wait_for_everyone()
    if training_args.push_to_hub:
        trainer.push_to_hub(commit_message="Model save", revision=training_args.hub_revision)


@dataclass
class RunState:
    """What one run learns about itself on the way, owned by `run`; the model card is written from it."""

    source_lang: str | None
    target_lang: str | None
    dataset_name: str | None
    examples: list[str] | None = None  # source sentences for the card's usage snippet
    budget: BudgetPlan | None = None  # the plan of a --max_train_minutes run (training/budget.py)
    averaged: int = 0  # checkpoints averaged into the final weights
    metrics: dict | None = None  # numeric scores and the split they were measured on
    signatures: dict = field(default_factory=dict)  # sacreBLEU's signatures of those scores
    training_summary: dict | None = None

    def card_fields(self) -> dict:
        """The keyword arguments of `render_model_card`."""
        return dict(source_lang=self.source_lang, target_lang=self.target_lang, dataset_name=self.dataset_name,
                    examples=self.examples, metrics=self.metrics, training_summary=self.training_summary)


def run(data_args, model_args, training_args, explicit: set[str] = frozenset(), callbacks=None) -> dict:
    """The whole run, step by step: check the options, load the data, build tokenizer, model and trainer, train,
    average the last checkpoints, translate and score the test set, save a Hub-ready folder. The options are
    settled (`training.arguments.parse_arguments`); `explicit` names those given on the command line."""
    from transformers import set_seed

    started = time.monotonic()
    check_options(data_args, model_args)
    set_seed(training_args.seed)
    resume = resolve_resume_checkpoint(training_args)
    check_checkpoints(resume, model_args, data_args)
    inputs = model_inputs(data_args, model_args)
    check_output_dir(training_args, resume, inputs)
    if resume is not None and (saved := finished_run(training_args)) is not None:
        return saved

    # Nothing is written before the lock: data, tokenizer, model and trainer are built and checked first (only the
    # processes of a distributed run share the new tokenizer through a hidden folder).
    splits, source_lang, target_lang, dataset_name = load_data(data_args, training_args)
    tokenizer = build_tokenizer(data_args, model_args, training_args, splits, resume)
    model = build_model(model_args, PRESETS[data_args.preset], tokenizer, resume)
    prepare_model(model, tokenizer, data_args, model_args, training_args)
    state = RunState(source_lang, target_lang, data_args.dataset_card_name or dataset_name)
    trainer, tokenized, texts = build_trainer(model, tokenizer, splits, data_args, training_args, state, callbacks)

    from vanilla_transformer.files import writing_errors

    with output_dir_lock(training_args), writing_errors(training_args.output_dir):
        prepare_output_dir(training_args, resume, inputs)
        metrics = train(trainer, training_args, resume)
        if trainer.time_budget is not None:
            state.budget = trainer.time_budget.plan
        state.averaged = average_last_checkpoints(trainer, training_args)
        staging = final_staging_folder(training_args)
        evaluated_split, scores = evaluate(trainer, tokenizer, tokenized, texts, data_args, training_args,
                                           target_lang, staging)
        if evaluated_split is not None:
            metrics.update({f"{evaluated_split}_{k}": v for k, v in scores.items()})
            state.signatures = {k.removesuffix("_signature"): v for k, v in scores.items()
                                if k.endswith("_signature")}
            state.metrics = {**{k: v for k, v in scores.items() if not k.endswith("_signature")},
                             "split": evaluated_split}
        if state.budget is not None:
            metrics["time_budget"] = state.budget.card_entry()
        state.training_summary = training_summary(data_args, training_args, model, trainer, state,
                                                  training_pairs=len(tokenized["train"]), metrics=metrics)
        save(trainer, training_args, metrics, staging)
        commit_final_save(trainer, training_args, staging)
    metrics["total_seconds"] = round(time.monotonic() - started, 1)

    if data_args.num_sample_translations and evaluated_split is not None and trainer.is_world_process_zero():
        sources, targets = texts[evaluated_split]["source"], texts[evaluated_split]["target"]
        step = max(len(sources) // data_args.num_sample_translations, 1)
        picks = list(range(0, len(sources), step))[: data_args.num_sample_translations]
        sample_translations(training_args.output_dir, [sources[i] for i in picks], [targets[i] for i in picks],
                            source_lang, target_lang)
    _log(training_args, f"\nSaved the model, tokenizer and model card to {training_args.output_dir} "
         f"({metrics['total_seconds'] / 60:.1f} min in all)")
    return metrics


def check_requirements() -> None:
    import importlib.util

    missing = [name for name in ("accelerate", "datasets", "sacrebleu", "sacremoses", "num2words")
               if importlib.util.find_spec(name) is None]
    if missing:
        sys.exit(f"error: training needs {', '.join(missing)}: pip install \"vanilla-transformer[train]\"")


def main(argv: list[str] | None = None, callbacks=None) -> dict:
    """Command-line entry point; `callbacks` (TrainerCallback instances) are for programmatic use."""
    check_requirements()
    from vanilla_transformer.files import OutputError

    data_args, model_args, training_args, explicit = parse_arguments(argv)
    from vanilla_transformer.training.precision import default_precision, precision_in_use

    _log(training_args, "Precision: " + (f"{precision_in_use(training_args)}, as asked" if {"bf16", "fp16"} & explicit
                                          else default_precision(training_args.use_cpu)[1]))
    try:
        return run(data_args, model_args, training_args, explicit, callbacks=callbacks)
    except (UsageError, DataError, OutputError) as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
