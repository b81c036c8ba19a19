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

import contextlib
import os
import sys
import time

from transformers import TrainerState, set_seed

from vanilla_transformer.extras import check_extra
from vanilla_transformer.files import writing_errors
from vanilla_transformer.training.arguments import parse_arguments, precision_question
from vanilla_transformer.training.augmentation import parse_augment
from vanilla_transformer.training.average_checkpoints import saved_weights
from vanilla_transformer.training.build import (
    build_model,
    build_tokenizer,
    build_trainer,
    check_options,
    load_data,
    prepare_model,
)
from vanilla_transformer.training.context import RunContext
from vanilla_transformer.training.evaluation import average_last_checkpoints, evaluate, sample_translations
from vanilla_transformer.training.messages import log
from vanilla_transformer.training.precision import default_precision, precision_in_use
from vanilla_transformer.training.presets import PRESETS
from vanilla_transformer.training.run_folder import (
    check_checkpoints,
    check_data_paths,
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
from vanilla_transformer.training.summary import RunState, training_summary
from vanilla_transformer.training.watch import watch_callbacks


@contextlib.contextmanager
def closed_loggers(trainer):
    """Close the run's log writers (TensorBoard's) when the body ends, however it ends: before the output folder's
    lock records what the run wrote. A writer the evaluation after training opened again, or one a failure left
    open, would otherwise write its last events after the record, when the interpreter exits, and the next run would
    take the changed file for a user's."""
    try:
        yield
    finally:
        for callback in trainer.callback_handler.callbacks:
            writer = getattr(callback, "tb_writer", None)
            if writer is not None:
                writer.close()
                callback.tb_writer = None


def train(trainer, training_args, resume: str | None) -> dict:
    """Train (or resume) and return the training metrics, each named train_*. A checkpoint that already reached
    --max_steps is only loaded (the Trainer would train one step past it)."""
    if resume is not None and (step := reached_max_steps(resume, training_args)) is not None:
        log(training_args, f"{resume} already reached step {step}; finishing the run without training further.")
        trainer.model.load_state_dict(saved_weights(resume))
        trainer.state = TrainerState.load_from_json(os.path.join(resume, "trainer_state.json"))
        return {}
    train_result = trainer.train(resume_from_checkpoint=resume)
    if training_args.max_tokens and "train_samples_per_second" in train_result.metrics:  # token batches (the log's
        # copy is counted in pairs by the trainer's `log`)
        train_result.metrics["train_samples_per_second"] = trainer.pairs_per_second(
            train_result.metrics.get("train_runtime"))
    # One write with its newline: processes sharing a pipe cannot split the line.
    sys.stdout.write(f"Finished training on rank {training_args.process_index} of {training_args.world_size} "
                     f"(step {trainer.state.global_step})\n")
    sys.stdout.flush()
    return {f"train_{k}" if not k.startswith("train_") else k: v for k, v in train_result.metrics.items()}


def run(data_args, model_args, training_args, callbacks=None) -> dict:
    """The whole run, step by step: check the options, load the data, build tokenizer, model and trainer, train,
    average the last checkpoints, translate and score the test set, save a Hub-ready folder. The options are
    settled (`training.arguments.parse_arguments`); the steps hand what they build to each other in a
    `context.RunContext`."""
    started = time.monotonic()
    check_options(data_args, model_args)
    set_seed(training_args.seed)
    resume = resolve_resume_checkpoint(training_args)
    check_checkpoints(resume, model_args, data_args)
    inputs = model_inputs(data_args, model_args)
    check_data_paths(data_args, training_args)
    check_output_dir(training_args, resume, inputs)
    if resume is not None and (saved := finished_run(training_args)) is not None:
        return saved

    # Nothing is written before the lock: data, tokenizer, model and trainer are built and checked first (only the
    # processes of a distributed run share the new tokenizer through a hidden folder).
    context = RunContext(data_args, model_args, training_args, resume=resume, callbacks=callbacks)
    data = context.data = load_data(data_args, training_args, resume)
    context.callbacks = [*(callbacks or []), *watch_callbacks(data_args, training_args, data.splits)]  # watch.py
    context.tokenizer = build_tokenizer(context)
    context.model = build_model(model_args, PRESETS[data_args.preset], context.tokenizer, resume)
    prepare_model(context)
    state = context.state = RunState(data.source_lang, data.target_lang,
                                     data_args.dataset_card_name or data.dataset_name, corpus=data.corpus)
    context.trainer, context.tokenized, context.texts = build_trainer(context)
    trainer = context.trainer

    with output_dir_lock(training_args), writing_errors(training_args.output_dir), closed_loggers(trainer):
        prepare_output_dir(training_args, resume, inputs)
        metrics = train(trainer, training_args, resume)
        if data.trains_while_tokenizing:  # background_tokens: the tokenized copy whole, the counts known
            trainer.train_dataset.finish()
        if trainer.time_budget is not None:
            state.budget = trainer.time_budget.plan
        state.averaged = average_last_checkpoints(trainer, training_args)
        metrics["averaged_checkpoints"] = state.averaged  # all_results.json: what the final weights are
        staging = final_staging_folder(training_args)
        evaluated_split, scores = evaluate(context, staging)
        if evaluated_split is not None:
            metrics.update({f"{evaluated_split}_{k}": v for k, v in scores.items()})
            state.signatures = {k.removesuffix("_signature"): v for k, v in scores.items()
                                if k.endswith("_signature")}
            state.metrics = {**{k: v for k, v in scores.items() if not k.endswith("_signature")},
                             "split": evaluated_split}
        if state.budget is not None:
            metrics["time_budget"] = state.budget.card_entry()
        if data.corpus is not None:
            metrics.update(data.corpus.report())
        if data_args.augment:  # the probabilities of --augment (training/augmentation.py)
            metrics["augmentation"] = parse_augment(data_args.augment)
        training_pairs = (data.corpus.pairs_used if data.corpus is not None and not data.corpus.streaming else
                          f"streamed from the {data.corpus.pairs_read:,} pairs of the files, cleaned on the fly"
                          if data.corpus is not None else len(context.tokenized["train"]))
        state.training_summary = training_summary(context, training_pairs=training_pairs, metrics=metrics)
        save(trainer, training_args, metrics, staging)
        commit_final_save(trainer, training_args, staging)
    metrics["total_seconds"] = round(time.monotonic() - started, 1)

    if data_args.num_sample_translations and evaluated_split is not None and trainer.is_world_process_zero():
        sources, targets = context.texts[evaluated_split]["source"], context.texts[evaluated_split]["target"]
        step = max(len(sources) // data_args.num_sample_translations, 1)
        picks = list(range(0, len(sources), step))[: data_args.num_sample_translations]
        sample_translations(training_args.output_dir, [sources[i] for i in picks], [targets[i] for i in picks],
                            data.source_lang, data.target_lang)
    log(training_args, f"\nSaved the model, tokenizer and model card to {training_args.output_dir} "
         f"({metrics['total_seconds'] / 60:.1f} min in all)")
    return metrics


def main(argv: list[str] | None = None, callbacks=None) -> dict:
    """The recipe: parse `argv` (the options of `vanilla-transformer train`) and run it; `callbacks`
    (TrainerCallback instances) are for programmatic use. Problems are exceptions with one-line messages, which the
    command line (`cli.main`) reports with its exit-code rule: `cli.options.UsageError` for options that do not go
    together (2), `DataError`, `TextFileError`, `OutputError` and a missing extra for the rest (1)."""
    check_extra(["accelerate", "datasets", "sacrebleu", "sacremoses", "num2words"], "train", "Training")

    data_args, model_args, training_args, explicit = parse_arguments(argv)

    if {"bf16", "fp16"} & explicit:
        chosen = f"{precision_in_use(training_args)}, as asked"
    else:  # the measurement parse_arguments made, kept by `default_precision`
        question = precision_question(model_args, PRESETS[data_args.preset], training_args.use_cpu)
        chosen = default_precision(**question)[1]
    log(training_args, f"Precision: {chosen}")
    return run(data_args, model_args, training_args, callbacks=callbacks)


if __name__ == "__main__":  # `python -m vanilla_transformer.training.train`: the train command and its exit-code rule
    from vanilla_transformer.cli.main import main as command_line

    command_line(["train", *sys.argv[1:]])
