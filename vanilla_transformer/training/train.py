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

import os
import sys
import time

# OpenMP threads that spin while waiting for work slow a CPU run down badly as soon as another process shares the
# cores; passive waiting costs little when the cores are free. Set before torch is imported; an explicit
# OMP_WAIT_POLICY wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from transformers import TrainerState, set_seed  # noqa: E402  (after the OpenMP setting)

from vanilla_transformer.extras import check_extra  # noqa: E402
from vanilla_transformer.files import OutputError, writing_errors  # noqa: E402
from vanilla_transformer.training.arguments import parse_arguments, precision_question  # noqa: E402
from vanilla_transformer.training.build import (  # noqa: E402
    build_model,
    build_tokenizer,
    build_trainer,
    check_options,
    load_data,
    prepare_model,
)
from vanilla_transformer.training.data import DataError  # noqa: E402
from vanilla_transformer.training.evaluation import (  # noqa: E402
    average_last_checkpoints,
    evaluate,
    sample_translations,
)
from vanilla_transformer.training.messages import UsageError, log  # noqa: E402
from vanilla_transformer.training.precision import default_precision, precision_in_use  # noqa: E402
from vanilla_transformer.training.presets import PRESETS  # noqa: E402
from vanilla_transformer.training.run_folder import (  # noqa: E402
    check_checkpoints,
    check_output_dir,
    commit_final_save,
    final_staging_folder,
    finished_run,
    model_inputs,
    output_dir_lock,
    prepare_output_dir,
    reached_max_steps,
    resolve_resume_checkpoint,
    save,
)
from vanilla_transformer.training.summary import RunState, training_summary  # noqa: E402
from vanilla_transformer.training.watch import watch_callbacks  # noqa: E402


def train(trainer, training_args, resume: str | None) -> dict:
    """Train (or resume) and return the training metrics, each named train_*. A checkpoint that already reached
    --max_steps is only loaded (the Trainer would train one step past it)."""
    if resume is not None and (step := reached_max_steps(resume, training_args)) is not None:
        log(training_args, f"{resume} already reached step {step}; finishing the run without training further.")
        trainer._load_from_checkpoint(resume)  # private API, the same in transformers 5.18-5.24
        trainer.state = TrainerState.load_from_json(os.path.join(resume, "trainer_state.json"))
        return {}
    train_result = trainer.train(resume_from_checkpoint=resume)
    # One write with its newline: processes sharing a pipe cannot split the line.
    sys.stdout.write(f"Finished training on rank {training_args.process_index} of {training_args.world_size} "
                     f"(step {trainer.state.global_step})\n")
    sys.stdout.flush()
    return {f"train_{k}" if not k.startswith("train_") else k: v for k, v in train_result.metrics.items()}


def run(data_args, model_args, training_args, explicit: set[str] = frozenset(), callbacks=None) -> dict:
    """The whole run, step by step: check the options, load the data, build tokenizer, model and trainer, train,
    average the last checkpoints, translate and score the test set, save a Hub-ready folder. The options are
    settled (`training.arguments.parse_arguments`); `explicit` names those given on the command line."""
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
    splits, source_lang, target_lang, dataset_name, corpus = load_data(data_args, training_args)
    tokenizer = build_tokenizer(data_args, model_args, training_args, splits, resume, corpus)
    model = build_model(model_args, PRESETS[data_args.preset], tokenizer, resume)
    prepare_model(model, tokenizer, data_args, model_args, training_args)
    state = RunState(source_lang, target_lang, data_args.dataset_card_name or dataset_name, corpus=corpus)
    callbacks = [*(callbacks or []), *watch_callbacks(data_args, training_args, splits)]  # training/watch.py
    trainer, tokenized, texts = build_trainer(model, tokenizer, splits, data_args, training_args, state, callbacks,
                                              corpus)

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
        if corpus is not None:
            metrics.update(corpus.report())
        training_pairs = corpus.pairs_used if corpus is not None else len(tokenized["train"])
        state.training_summary = training_summary(data_args, training_args, model, trainer, state,
                                                  training_pairs=training_pairs, metrics=metrics)
        save(trainer, training_args, metrics, staging)
        commit_final_save(trainer, training_args, staging)
    metrics["total_seconds"] = round(time.monotonic() - started, 1)

    if data_args.num_sample_translations and evaluated_split is not None and trainer.is_world_process_zero():
        sources, targets = texts[evaluated_split]["source"], texts[evaluated_split]["target"]
        step = max(len(sources) // data_args.num_sample_translations, 1)
        picks = list(range(0, len(sources), step))[: data_args.num_sample_translations]
        sample_translations(training_args.output_dir, [sources[i] for i in picks], [targets[i] for i in picks],
                            source_lang, target_lang)
    log(training_args, f"\nSaved the model, tokenizer and model card to {training_args.output_dir} "
         f"({metrics['total_seconds'] / 60:.1f} min in all)")
    return metrics


def check_requirements() -> None:

    try:
        check_extra(["accelerate", "datasets", "sacrebleu", "sacremoses", "num2words"], "train", "Training")
    except ImportError as error:
        sys.exit(f"error: {error}")


def main(argv: list[str] | None = None, callbacks=None) -> dict:
    """Command-line entry point; `callbacks` (TrainerCallback instances) are for programmatic use."""
    check_requirements()

    data_args, model_args, training_args, explicit = parse_arguments(argv)

    if {"bf16", "fp16"} & explicit:
        chosen = f"{precision_in_use(training_args)}, as asked"
    else:  # the measurement parse_arguments made, kept by `default_precision`
        question = precision_question(model_args, PRESETS[data_args.preset], training_args.use_cpu)
        chosen = default_precision(**question)[1]
    log(training_args, f"Precision: {chosen}")
    try:
        return run(data_args, model_args, training_args, explicit, callbacks=callbacks)
    except (UsageError, DataError, OutputError) as error:
        sys.exit(f"error: {error}")



if __name__ == "__main__":
    main()
