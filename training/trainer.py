"""Seq2SeqTrainer with the paper's batching, and the pieces `training.train` hangs on it.

- `TranslationTrainingArguments`: `Seq2SeqTrainingArguments` plus `--max_tokens` (token-budget batches),
  `--max_train_minutes` (wall-clock budget) and `--average_last_n_checkpoints`.
- `TranslationTrainer`: trains on `TokenBudgetBatchSampler` batches, always normalises the loss by the number of
  target tokens in the whole optimizer step, and writes the model card with `render_model_card`.
- `translation_scores`: corpus BLEU and chrF (sacreBLEU) and exact match against the raw reference strings.
"""

import math
import os
import shutil
import time
from dataclasses import dataclass, field

from torch.utils.data import DataLoader, SequentialSampler
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback
from transformers.trainer_pt_utils import LabelSmoother

from .batching import TokenBudgetBatchSampler


@dataclass
class TranslationTrainingArguments(Seq2SeqTrainingArguments):
    max_tokens: int | None = field(
        default=None,
        metadata={"help": "Token budget of a training batch on each device (padded source or target tokens, whichever "
                          "is larger), with pairs of similar length batched together (section 5.1). 0 or unset: "
                          "fixed --per_device_train_batch_size batches."},
    )
    max_train_minutes: float | None = field(
        default=None,
        metadata={"help": "Stop training (and save a checkpoint) after this many minutes of wall-clock time."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Start a new run even if --output_dir holds checkpoints of an earlier one (deletes them)."},
    )
    average_last_n_checkpoints: int = field(
        default=0,
        metadata={"help": "Average the weights of the last N checkpoints into the final model (section 6.1: 5 for "
                          "base, 20 for big). 0 or 1: keep the final weights."},
    )

    def __post_init__(self):
        super().__post_init__()
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ValueError(f"--max_tokens must be positive (or 0 for fixed-size batches), got {self.max_tokens}.")
        if self.max_train_minutes is not None and self.max_train_minutes <= 0:
            raise ValueError(f"--max_train_minutes must be positive, got {self.max_train_minutes}.")
        if self.average_last_n_checkpoints < 0:
            raise ValueError(f"--average_last_n_checkpoints must be >= 0, got {self.average_last_n_checkpoints}.")
        if (self.average_last_n_checkpoints > 1 and self.save_total_limit is not None
                and self.save_total_limit < self.average_last_n_checkpoints):
            raise ValueError(
                f"--average_last_n_checkpoints {self.average_last_n_checkpoints} needs that many checkpoints kept, "
                f"but --save_total_limit is {self.save_total_limit}."
            )


class EpochForTokenBatches(TrainerCallback):
    """Tells the token-budget sampler which epoch starts, so each epoch (and a resumed one) gets its batch order.

    The Trainer reaches the sampler itself in most set-ups; not through accelerate's wrappers of a resumed
    multi-process run, so the epoch is derived here from the step count, exactly as the Trainer does.
    """

    def __init__(self, sampler: "TokenBudgetBatchSampler"):
        self.sampler = sampler

    def on_epoch_begin(self, args, state, control, train_dataloader=None, **kwargs):
        if train_dataloader is not None:
            steps_per_epoch = max(math.ceil(len(train_dataloader) / args.gradient_accumulation_steps), 1)
            self.sampler.set_epoch(state.global_step // steps_per_epoch)


class TimeBudgetCallback(TrainerCallback):
    """Stops training once `minutes` of wall-clock time have passed, saving a checkpoint of the last step."""

    def __init__(self, minutes: float):
        self.seconds = 60.0 * minutes
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if self.start is not None and time.monotonic() - self.start >= self.seconds:
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
        return control


class TranslationTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with token-budget training batches and the package's model card.

    Loss: label-smoothed cross-entropy (`LabelSmoother`, epsilon = `label_smoothing_factor`, 0 for none) given to the
    Trainer as `compute_loss_func`. The Trainer then passes it `num_items_in_batch`, the number of target tokens in
    the whole optimizer step across gradient accumulation and processes, and it divides the summed token losses by
    that: batches of different sizes weigh by their tokens, and N processes compute the same gradient as one
    process accumulating their N batches, whatever the model does with `num_items_in_batch` itself.
    """

    def __init__(self, *args, card_info: dict | None = None, **kwargs):
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if kwargs.get("compute_loss_func") is None and training_args is not None:
            kwargs["compute_loss_func"] = LabelSmoother(epsilon=training_args.label_smoothing_factor)
        super().__init__(*args, **kwargs)
        self.card_info = card_info or {}
        self.token_batch_sampler = None
        if self.args.max_tokens and self.train_dataset is not None:
            columns = self.train_dataset.column_names
            if "source_length" in columns and "target_length" in columns:
                source_lengths = list(self.train_dataset["source_length"])
                target_lengths = list(self.train_dataset["target_length"])
            else:
                source_lengths = [len(ids) for ids in self.train_dataset["input_ids"]]
                target_lengths = [len(ids) for ids in self.train_dataset["labels"]]
            self.token_batch_sampler = TokenBudgetBatchSampler(
                source_lengths,
                target_lengths,
                self.args.max_tokens,
                seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            )
            self.add_callback(EpochForTokenBatches(self.token_batch_sampler))
        if self.args.max_train_minutes:
            self.add_callback(TimeBudgetCallback(self.args.max_train_minutes))

    # ---- Atomic checkpoints -------------------------------------------------------------------------------------
    # The Trainer writes checkpoint-STEP file by file (weights, optimizer, scheduler, RNG states, trainer_state.json)
    # and then deletes the oldest checkpoints: a kill in between left a half-written newest checkpoint that
    # `--resume_from_checkpoint true` picked and failed on. Here the Trainer writes into a hidden staging folder
    # (`.checkpoint-STEP.staging-PID/checkpoint-STEP`, by pointing `_get_output_dir` there for the duration of the
    # save), which is renamed into place once whole; only then are old checkpoints rotated away.

    _checkpoint_staging_dir = None

    def _get_output_dir(self, trial) -> str:
        if self._checkpoint_staging_dir is not None:
            return self._checkpoint_staging_dir
        return super()._get_output_dir(trial)

    def _staging_pid(self) -> int:
        """The main process's id, which names the staging folder that every process writes its RNG state into."""
        if getattr(self, "_main_pid", None) is None:
            pid = [os.getpid()]
            if self.args.world_size > 1:
                import torch.distributed as dist

                if dist.is_available() and dist.is_initialized():
                    dist.broadcast_object_list(pid, src=0)
            self._main_pid = pid[0]
        return self._main_pid

    def _save_checkpoint(self, model, trial) -> None:
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

        from vanilla_transformer.files import (
            clean_stale_staging,
            install_folder,
            staging_name,
            writing_errors,
        )

        run_dir = super()._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        holder = os.path.join(run_dir, staging_name(name, self._staging_pid()))
        if self.args.should_save:
            for line in clean_stale_staging(run_dir):
                print(line, flush=True)
        with writing_errors(run_dir):
            try:
                self._checkpoint_staging_dir = holder  # the Trainer saves into holder/checkpoint-STEP
                super()._save_checkpoint(model, trial)  # (its rotation sees only the staging folder: a no-op)
            except BaseException:
                if self.args.should_save:
                    shutil.rmtree(holder, ignore_errors=True)
                raise
            finally:
                self._checkpoint_staging_dir = None
            self.accelerator.wait_for_everyone()  # every process wrote its RNG state
            if self.args.should_save:
                staged, target = os.path.join(holder, name), os.path.join(run_dir, name)
                self._point_best_checkpoint_at(run_dir, holder)
                self.state.save_to_json(os.path.join(staged, "trainer_state.json"))
                install_folder(staged, target)
                shutil.rmtree(holder, ignore_errors=True)
                rotate_checkpoints(output_dir=run_dir, save_total_limit=self.args.save_total_limit,
                                   best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)
            self.accelerator.wait_for_everyone()

    def _point_best_checkpoint_at(self, run_dir: str, holder: str) -> None:
        """The Trainer looked for the best checkpoint in the staging folder: point at the real one, as it would."""
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        best_step = self.state.best_global_step
        if best_step:
            best = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{best_step}")
            if best_step == self.state.global_step or os.path.exists(best):
                self.state.best_model_checkpoint = best
        elif self.state.best_model_checkpoint and self.state.best_model_checkpoint.startswith(holder):
            self.state.best_model_checkpoint = run_dir + self.state.best_model_checkpoint[len(holder):]

    def get_train_dataloader(self) -> DataLoader:
        if self.token_batch_sampler is None:
            return super().get_train_dataloader()
        dataset = self._remove_unused_columns(self.train_dataset, description="training")
        dataloader = DataLoader(
            dataset,
            batch_sampler=self.token_batch_sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers and self.args.dataloader_num_workers > 0,
        )
        # accelerate gives each process every N-th batch (whole batches: the sampler's batch_size is None)
        return self.accelerator.prepare(dataloader)

    def _get_eval_sampler(self, eval_dataset):
        """Always the dataset's order (the Trainer shuffles it under `train_sampling_strategy="group_by_length"`):
        BLEU is computed against references kept in that order."""
        if self.args.world_size <= 1:
            return SequentialSampler(eval_dataset)
        return None  # accelerate shards it, and the gathered predictions come back in order

    def create_model_card(self, **kwargs) -> None:
        """Write README.md with `vanilla_transformer.model_card.render_model_card` (also used by `push_to_hub`)."""
        if not self.is_world_process_zero():
            return
        write_model_card(self.model, self.args.output_dir, **self.card_info)


def write_model_card(model, output_dir: str, **card_info) -> str:
    """Render the package's model card for `model` into `output_dir/README.md` and return its path."""
    from vanilla_transformer.model_card import render_model_card

    card = render_model_card(model, **card_info)
    path = os.path.join(output_dir, "README.md")
    card.save(path)
    return path


def translation_scores(predictions: list[str], references: list[str], bleu_tokenize: str = "13a") -> dict[str, float]:
    """Corpus BLEU (sacreBLEU; `bleu_tokenize` "13a" is its standard, "char" suits languages or data without
    spaces, like the demo's German number words), chrF and the fraction of exact matches."""
    import sacrebleu

    if len(predictions) != len(references):
        raise ValueError(f"Got {len(predictions)} translations for {len(references)} references.")
    predictions = [p.strip() for p in predictions]
    references = [r.strip() for r in references]
    return {
        "bleu": round(sacrebleu.corpus_bleu(predictions, [references], tokenize=bleu_tokenize).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(predictions, [references]).score, 2),
        "exact_match": round(sum(p == r for p, r in zip(predictions, references)) / max(len(references), 1), 4),
    }


def decode_predictions(tokenizer, predictions, count: int) -> list[str]:
    """Token ids from `predict_with_generate` (padded with -100 across batches) -> `count` strings.

    Under several processes, accelerate completes the last batch of each process with examples from the start of
    the dataset; the Trainer (transformers 5.23, accelerate on CPU/gloo) was seen to return those extra rows. The
    gathered rows keep the dataset order, so the first `count` rows are the predictions.
    """
    import numpy as np

    if isinstance(predictions, tuple):
        predictions = predictions[0]
    if len(predictions) < count:
        raise ValueError(f"Got {len(predictions)} predictions for {count} examples.")
    predictions = predictions[:count]
    predictions = np.where(predictions != -100, predictions, tokenizer.pad_token_id)
    return tokenizer.batch_decode(predictions, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def bleu_metric(tokenizer, references: list[str], bleu_tokenize: str = "13a"):
    """`compute_metrics` for the Trainer: decodes the generated ids and scores them against the raw references
    (not the tokenised, truncated labels), in dataset order."""

    def compute_metrics(eval_prediction) -> dict[str, float]:
        predictions = decode_predictions(tokenizer, eval_prediction.predictions, len(references))
        return translation_scores(predictions, references, bleu_tokenize)

    return compute_metrics
