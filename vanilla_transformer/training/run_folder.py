"""The run's --output_dir: checked before any work, locked while the run writes, resumed from its newest whole
checkpoint, and given the final model through a staging folder that is moved in only once whole.

- Before anything is built: `resolve_resume_checkpoint`, `check_checkpoints`, `check_output_dir`, `finished_run`.
- Under the lock (`output_dir_lock`): `prepare_output_dir`, then at the end `final_staging_folder`, `save` and
  `commit_final_save`.
"""

import contextlib
import json
import os
import shutil

from transformers.trainer_utils import get_last_checkpoint

from vanilla_transformer.checkpoints.kinds import CheckpointError, check_folder_kind
from vanilla_transformer.checkpoints.validate import check_checkpoint
from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.files import (
    OutputError,
    RunLock,
    check_output_folder,
    check_run_folder,
    clean_stale_staging,
    commit_files,
    has_model,
    is_within,
    remove_ours,
    staging_name,
)
from vanilla_transformer.training.average_checkpoints import CHECKPOINT_PATTERN
from vanilla_transformer.training.messages import log
from vanilla_transformer.training.trainer import write_model_card


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
                log(training_args, f"Skipping {line}; resuming from {path}.")
            return path
        skipped.append(f"{path}: incomplete ({problem})")
    if skipped:
        raise UsageError(f"--resume_from_checkpoint {training_args.resume_from_checkpoint}: {output_dir} holds no "
                         f"whole checkpoint to resume from (the newest, {skipped[0]})")
    return None


def check_checkpoints(resume: str | None, model_args, data_args) -> None:
    """A local checkpoint to resume from or to start from (`--model_name_or_path`; a Hub id is left to transformers)
    must be whole: readable weights that match its config, and its tokenizer unless `--tokenizer_name` gives one."""
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


DATA_OPTIONS = ("train_source", "train_target", "validation_source", "validation_target", "test_source",
                "test_target", "dataset_name")


def check_data_paths(data_args, training_args) -> None:
    """Before any work: --output_dir never holds a file or folder the run reads its data from (the run writes
    test_predictions.txt, checkpoints and a model there, and --overwrite_output_dir deletes), nor the corpus cache
    (--data_cache_dir: the cache's files are not the run's). One `UsageError` line naming both."""
    output_dir = training_args.output_dir
    for option in DATA_OPTIONS:
        paths = getattr(data_args, option, None)
        for path in paths if isinstance(paths, list) else [paths]:  # --train_source takes several files
            if path is not None and os.path.exists(path) and is_within(path, output_dir):
                raise UsageError(f"--{option.replace('_', '-')} {path} lies inside --output-dir {output_dir}, "
                                 "where the run writes its predictions, checkpoints and model: move the file out or "
                                 "choose another --output-dir.")
    cache_dir = getattr(data_args, "data_cache_dir", None)
    if cache_dir is not None and data_args.train_source is not None and is_within(cache_dir, output_dir):
        raise UsageError(f"--data-cache-dir {cache_dir} lies inside --output-dir {output_dir}; the corpus cache "
                         "outlives runs and holds none of the run's files: choose a cache folder outside it.")


def only_ours(output_dir: str, resume: str | None) -> None:
    """--output_dir holds nothing the user saved that this run could replace (`files.lock.check_run_folder`)."""
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
    log(training_args, f"{output_dir} holds the finished run (step {step} of {wanted}); nothing to train. Give a "
         "larger --max_steps to train on, or --overwrite_output_dir true to start over.")
    if training_args.process_index == 0:  # a run killed after its final save left its staging folder

        for line in clean_stale_staging(output_dir):
            log(training_args, line)
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
        remove_ours(output_dir, [name for name in os.listdir(output_dir) if name.startswith("checkpoint-")],
                    overwrite_flag="--overwrite_output_dir")


def output_dir_lock(training_args):
    """The lock that keeps a second run out of --output_dir (taken by the main process)."""


    return RunLock(training_args.output_dir) if training_args.process_index == 0 else contextlib.nullcontext()


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


def final_staging_folder(training_args) -> str:
    """A hidden folder inside --output_dir for the final model, moved in by `commit_final_save` once whole."""
    if training_args.process_index == 0:
        for line in clean_stale_staging(training_args.output_dir):
            log(training_args, line)
    folder = os.path.join(training_args.output_dir, staging_name("final-model"))
    if training_args.process_index == 0:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    return folder


def save(trainer, training_args, metrics: dict, folder: str | None = None) -> None:
    """Model, tokenizer and model card, plus the trainer state and all metrics, into `folder` (default
    --output_dir; `commit_final_save` moves a staging folder's files into --output_dir)."""
    folder = folder or training_args.output_dir
    # save_model pushes to the Hub under --push_to_hub unless its `_internal_call` is set, and has no public way to
    # save without pushing; the push comes after the commit (`commit_final_save`)
    trainer.save_model(folder, _internal_call=True)
    if trainer.is_world_process_zero():
        trainer.state.save_to_json(os.path.join(folder, "trainer_state.json"))
        with open(os.path.join(folder, "all_results.json"), "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=4, sort_keys=True)  # as Trainer.save_metrics("all", combined=False)
        if not training_args.push_to_hub:

            write_model_card(trainer.model, folder, **(trainer.run_state.card_fields() if trainer.run_state else {}))


def commit_final_save(trainer, training_args, staging: str) -> None:
    """Move the finished final save into --output_dir, weights last: a kill leaves either no model (and the run
    resumable) or the whole new one, never new settings beside old weights. Then push it if asked."""
    if trainer.is_world_process_zero():
        commit_files(staging, training_args.output_dir)
    trainer.accelerator.wait_for_everyone()
    if training_args.push_to_hub:
        trainer.push_to_hub(commit_message="Model save", revision=training_args.hub_revision)
