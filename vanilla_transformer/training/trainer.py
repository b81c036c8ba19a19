"""Seq2SeqTrainer with the paper's batching, and the pieces `vanilla_transformer.training.train` hangs on it.

- `TranslationTrainingArguments`: `Seq2SeqTrainingArguments` plus `--max_tokens` (token-budget batches),
  `--max_train_minutes` (wall-clock budget, see training/budget.py), `--average_last_n_checkpoints` and
  `--averaging_span`; `--learning_rate` defaults to None, "the preset's or the paper's", settled while parsing.
- `TranslationTrainer`: trains on `TokenBudgetBatchSampler` batches, always normalises the loss by the number of
  target tokens in the whole optimizer step, follows a time budget's plan, and writes the model card with
  `render_model_card`.

The scores (sacreBLEU, chrF, the literature's BLEU) are in training/metrics.py.
"""

import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, SequentialSampler
from tqdm.auto import tqdm
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from vanilla_transformer.cards.model_card import render_model_card
from vanilla_transformer.files import clean_stale_staging, install_folder, staging_name, writing_errors
from vanilla_transformer.training.arrow_columns import length_columns
from vanilla_transformer.training.background_tokens import BATCHES_RECORD, TrainingWhileTokenizing
from vanilla_transformer.training.batching import TokenBudgetBatchSampler
from vanilla_transformer.training.budget import (
    PLACEHOLDER_MAX_STEPS,
    SKIP_STEPS,
    BudgetOptions,
    BudgetSchedule,
    MinutesProgressBar,
    TimeBudget,
    elapsed_on_the_main_process,
)
from vanilla_transformer.training.precision import attention_kernel


@dataclass
class LabelSmoothedCrossEntropy:
    """The loss of transformers' `LabelSmoother` computed by `torch.nn.functional.cross_entropy(label_smoothing=)`.

    Per target token (1 - epsilon) * -log p(label) + epsilon * mean over the vocabulary of -log p, summed over the
    tokens whose label is not `ignore_index` and divided by `num_items_in_batch` (the Trainer's count of target tokens
    in the whole optimizer step) or else by the tokens of this batch. `LabelSmoother` computes the same number
    through a negated copy of the log-probabilities, a gather and a masked fill over the (tokens x vocabulary)
    tensor; torch's single op does it in one pass and its backward in one more, without the copy, so in less time
    (benchmarks/experiments/loss-and-optimiser.md). Equal to `LabelSmoother` up to float rounding
    (tests/test_training.py).
    """

    epsilon: float = 0.1
    ignore_index: int = -100

    def __call__(self, model_output, labels, shift_labels=False, num_items_in_batch=None):
        logits = model_output["logits"] if isinstance(model_output, dict) else model_output[0]
        if shift_labels:
            logits = logits[..., :-1, :]
            labels = labels[..., 1:]
        token_losses = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                       ignore_index=self.ignore_index, label_smoothing=self.epsilon, reduction="sum")
        if num_items_in_batch is None:
            denominator = labels.ne(self.ignore_index).sum().clamp(min=1)
        elif torch.is_tensor(num_items_in_batch):
            denominator = num_items_in_batch.to(token_losses.device)  # the count may be on another device
        else:
            denominator = num_items_in_batch
        return token_losses / denominator


@dataclass
class TranslationTrainingArguments(Seq2SeqTrainingArguments):
    learning_rate: float | None = field(
        default=None,
        metadata={"help": "Peak learning rate. Default: the preset's, else the paper's (d_model * warmup_steps)^-0.5 "
                          "(equation 3), settled when the options are parsed."},
    )
    max_tokens: int | None = field(
        default=None,
        metadata={"help": "Token budget of a training batch on each device (padded source or target tokens, whichever "
                          "is larger), with pairs of similar length batched together (section 5.1). 0 or unset: "
                          "fixed --per_device_train_batch_size batches."},
    )
    max_train_minutes: float | None = field(
        default=None,
        metadata={"help": "Wall-clock budget of the training in minutes. Without --max_steps the run sizes itself to "
                          "it: it times its first steps, then plans the steps that fit, the warmup (--warmup_steps, "
                          "a fraction or a number of steps), the decay to the end of the budget and the checkpoints "
                          "to average, and prints the plan. With --max_steps it only stops training (and saves) when "
                          "the time is up."},
    )
    budget_seconds_per_step: float | None = field(
        default=None,
        metadata={"help": "With --max_train_minutes: plan for this many seconds per step instead of timing the first "
                          "steps, e.g. to replay on a GPU the plan of a CPU run (benchmarks/recipe_sweep.py)."},
    )
    budget_calibration_steps: int = field(
        default=20,
        metadata={"help": "With --max_train_minutes: steps timed (after 3 untimed ones) before planning the run; "
                          "fewer (at least 3) where timing them would take more than a tenth of the budget."},
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
    budget_checkpoints: int | None = field(
        default=None,
        metadata={"help": "With --max_train_minutes: how many checkpoints the plan saves over the last --averaging_span "
                          "(to average them later, e.g. with training.average_checkpoints). Default: "
                          "--average_last_n_checkpoints."},
    )
    averaging_span: float = field(
        default=0.2,
        metadata={"help": "With --max_train_minutes: the averaged checkpoints are spread over this last fraction of "
                          "the planned steps."},
    )

    @property
    def plans_time_budget(self) -> bool:
        """True when --max_train_minutes sizes the run (no --max_steps given: max_steps is the placeholder)."""
        return bool(self.max_train_minutes) and self.max_steps == PLACEHOLDER_MAX_STEPS

    def __post_init__(self):
        super().__post_init__()
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ValueError(f"--max_tokens must be positive (or 0 for fixed-size batches), got {self.max_tokens}.")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError(f"--max_steps must be positive, or -1 (the default: --num_train_epochs decides), got "
                             f"{self.max_steps}.")
        if self.max_train_minutes is not None and self.max_train_minutes <= 0:
            raise ValueError(f"--max_train_minutes must be positive, got {self.max_train_minutes}.")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ValueError(f"--learning_rate must be positive, got {self.learning_rate}.")
        if self.budget_seconds_per_step is not None and self.budget_seconds_per_step <= 0:
            raise ValueError(f"--budget_seconds_per_step must be positive, got {self.budget_seconds_per_step}.")
        if self.budget_calibration_steps < 1:
            raise ValueError(f"--budget_calibration_steps must be >= 1, got {self.budget_calibration_steps}.")
        if self.budget_checkpoints is not None and self.budget_checkpoints < 1:
            raise ValueError(f"--budget_checkpoints must be >= 1, got {self.budget_checkpoints}.")
        if not 0 < self.averaging_span <= 1:
            raise ValueError(f"--averaging_span must be in (0, 1], got {self.averaging_span}.")
        if self.average_last_n_checkpoints < 0:
            raise ValueError(f"--average_last_n_checkpoints must be >= 0, got {self.average_last_n_checkpoints}.")
        if (self.average_last_n_checkpoints > 1 and self.save_total_limit is not None
                and self.save_total_limit < self.average_last_n_checkpoints):
            raise ValueError(
                f"--average_last_n_checkpoints {self.average_last_n_checkpoints} needs that many checkpoints kept, "
                f"but --save_total_limit is {self.save_total_limit}."
            )
        strategy = getattr(self.save_strategy, "value", self.save_strategy)
        # without a clock (with one, training.train averages the checkpoints the run saved and says so)
        if (self.average_last_n_checkpoints > 1 and not self.max_train_minutes and self.max_steps > 0
                and strategy == "steps" and self.save_steps and self.save_steps > 0):
            saved = checkpoints_saved(self.max_steps, self.save_steps)
            if saved < self.average_last_n_checkpoints:
                fix = (f"give --save_steps {self.max_steps // self.average_last_n_checkpoints} or less, or average "
                       "fewer" if self.max_steps >= self.average_last_n_checkpoints else "average fewer")
                raise ValueError(
                    f"--average_last_n_checkpoints {self.average_last_n_checkpoints} needs that many checkpoints, but "
                    f"--max_steps {self.max_steps} with --save_steps {self.save_steps:g} saves {saved}: {fix}."
                )


class CheckpointsToAverage(TrainerCallback):
    """A run whose steps come from its epochs (no --max_steps, no clock) learns how many it makes only from its
    batches: before the first step, refuse one that would save fewer checkpoints than it averages at the end, as
    `TranslationTrainingArguments` refuses such a --max_steps, rather than after the whole training."""

    def on_train_begin(self, args, state, control, **kwargs):
        wanted = args.average_last_n_checkpoints
        strategy = getattr(args.save_strategy, "value", args.save_strategy)
        if wanted > 1 and strategy == "steps" and args.save_steps and args.save_steps > 0 and state.max_steps > 0:
            saved = checkpoints_saved(state.max_steps, args.save_steps)
            if saved < wanted:
                fix = (f"give --save_steps {state.max_steps // wanted} or less, or average fewer"
                       if state.max_steps >= wanted else "train longer, or average fewer")
                raise ValueError(f"--average_last_n_checkpoints {wanted} needs that many checkpoints, but "
                                 f"--num_train_epochs {args.num_train_epochs:g} makes {state.max_steps} steps and "
                                 f"--save_steps {args.save_steps:g} saves {saved} of them: {fix}.")


def checkpoints_saved(max_steps: int, save_steps: float) -> int:
    """The checkpoints the Trainer saves in `max_steps` steps: every `save_steps` (a fraction: of max_steps) and at the
    last step."""
    interval = save_steps if save_steps >= 1 else math.ceil(max_steps * save_steps)
    return math.ceil(max_steps / interval)


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


class EpochForCollator(TrainerCallback):
    """Tells a collator that draws anew every epoch (training.augmentation.AugmentingCollator) which epoch starts,
    derived from the step count as `EpochForTokenBatches` does (0 for a stream, which has no length)."""

    def __init__(self, collator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, train_dataloader=None, **kwargs):
        try:
            batches = len(train_dataloader)
        except TypeError:  # a stream: one endless epoch
            batches = 0
        steps_per_epoch = max(math.ceil(batches / args.gradient_accumulation_steps), 1)
        self.collator.set_epoch(state.global_step // steps_per_epoch if batches else 0)


class TimeLimit(TrainerCallback):
    """Stops training once `minutes` of wall-clock time have passed, saving a checkpoint of the last step (a run
    with both --max_steps and --max_train_minutes: the schedule is --max_steps', the clock only stops it)."""

    def __init__(self, minutes: float):
        self.seconds = 60.0 * minutes
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        # process 0's clock on every process, so that all stop at the same step
        if self.start is not None and elapsed_on_the_main_process(self.start) >= self.seconds:
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
        return control


def _print_above_the_bar(line: str) -> None:
    """Print a line of the log above a tqdm progress bar (not glued to its end), flushed."""
    tqdm.write(line)
    sys.stdout.flush()


class TranslationTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with token-budget training batches and the package's model card.

    Loss: label-smoothed cross-entropy (`LabelSmoothedCrossEntropy`, epsilon = `label_smoothing_factor`, 0 for
    none) given to the Trainer as `compute_loss_func`. The Trainer then passes it `num_items_in_batch`, the number of
    target tokens in the whole optimizer step across gradient accumulation and processes, and it divides the summed
    token losses by that: batches of different sizes weigh by their tokens, and N processes compute the same gradient
    as one process accumulating their N batches, whatever the model does with `num_items_in_batch` itself.

    `train_lengths`: (source lengths, target lengths) of the training pairs where the caller already has them (the
    cached corpus reads them once from its Arrow columns); otherwise the sampler reads them from the dataset.
    `train_collator`: collates the training batches where they differ from the evaluation's (`data_collator`): the
    run's `--augment` (training/augmentation.py).
    """

    def __init__(self, *args, run_state=None, train_lengths=None, train_collator=None, **kwargs):
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if kwargs.get("compute_loss_func") is None and training_args is not None:
            kwargs["compute_loss_func"] = LabelSmoothedCrossEntropy(epsilon=training_args.label_smoothing_factor)
        super().__init__(*args, **kwargs)
        if self.args.learning_rate is None:
            raise ValueError("TranslationTrainingArguments.learning_rate is None: give a learning rate (training.train "
                             "settles it from the preset or the paper's formula while parsing).")
        self.run_state = run_state  # training.train.RunState: what the model card says about the run
        self.train_collator = train_collator  # collates the training batches (evaluation: data_collator)
        if hasattr(train_collator, "set_epoch"):  # training.augmentation.AugmentingCollator
            self.add_callback(EpochForCollator(train_collator))
        self.pairs_trained = 0  # pairs in the batches this process trained on (`training_step`)
        self.token_batch_sampler = None
        self.streams_batches = isinstance(self.train_dataset, torch.utils.data.IterableDataset)
        if self.args.max_tokens and self.train_dataset is not None and not self.streams_batches:
            columns = getattr(self.train_dataset, "column_names", ())
            epoch_lengths = None
            if hasattr(self.train_dataset, "epoch_lengths"):  # tokenized_splits.SubwordDropout
                source_lengths = self.train_dataset.source_lengths
                target_lengths = self.train_dataset.target_lengths
                epoch_lengths = self.train_dataset.epoch_lengths
            elif train_lengths is not None:
                source_lengths, target_lengths = train_lengths
                if not len(source_lengths) == len(target_lengths) == len(self.train_dataset):
                    raise ValueError(f"train_lengths gives {len(source_lengths)} source and {len(target_lengths)} "
                                     f"target lengths for a training set of {len(self.train_dataset)} pairs")
            elif "source_length" in columns and "target_length" in columns:
                source_lengths, target_lengths = length_columns(self.train_dataset)
            else:
                source_lengths = [len(ids) for ids in self.train_dataset["input_ids"]]
                target_lengths = [len(ids) for ids in self.train_dataset["labels"]]
            self.token_batch_sampler = TokenBudgetBatchSampler(
                source_lengths,
                target_lengths,
                self.args.max_tokens,
                seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
                epoch_lengths=epoch_lengths,
            )
            self.add_callback(EpochForTokenBatches(self.token_batch_sampler))
        if self.args.max_steps <= 0 and not self.args.max_train_minutes:
            self.add_callback(CheckpointsToAverage())
        self.budget_schedule = self.time_budget = None
        if self.args.plans_time_budget:
            self._follow_time_budget()
        elif self.args.max_train_minutes:
            self.add_callback(TimeLimit(self.args.max_train_minutes))

    def _follow_time_budget(self) -> None:
        """Plan the run after timing its first steps (training/budget.py); the bar counts minutes."""
        args = self.args
        self.budget_schedule = BudgetSchedule(
            getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type),
            provisional_warmup=10 * (SKIP_STEPS + args.budget_calibration_steps))
        self.time_budget = TimeBudget(BudgetOptions.from_arguments(args), self.budget_schedule,
                                      log=_print_above_the_bar)
        self.add_callback(self.time_budget)
        if self.pop_callback(ProgressCallback) is not None:
            self.add_callback(MinutesProgressBar(args.max_train_minutes))

    def training_step(self, model, inputs, *args, **kwargs):
        """The Trainer's step; with bf16 autocast on the CPU, attention of short batches by the math kernel (the flash
        kernel's bf16 backward is slower there: training/precision.py)."""
        if "input_ids" in inputs:
            self.pairs_trained += int(inputs["input_ids"].shape[0])
        with attention_kernel(self.args, inputs):
            return super().training_step(model, inputs, *args, **kwargs)

    def log(self, logs: dict, *args, **kwargs) -> None:
        """The Trainer's log, with the end of training's `train_samples_per_second` counted in pairs where batches
        are token batches (`pairs_per_second`): the console and trainer_state.json say what the run did."""
        if getattr(self.args, "max_tokens", None) and "train_samples_per_second" in logs:
            logs = {**logs, "train_samples_per_second": self.pairs_per_second(logs.get("train_runtime"))}
        super().log(logs, *args, **kwargs)

    def pairs_per_second(self, runtime: float) -> float | None:
        """Training pairs per second over `runtime` seconds, counted in the batches every process trained on. The
        Trainer's own `train_samples_per_second` multiplies the steps by --per_device_train_batch_size, which token
        batches (--max_tokens, --streaming) do not have."""
        if not runtime or runtime <= 0:
            return None
        pairs = torch.tensor(self.pairs_trained, device=self.args.device)
        if self.args.world_size > 1:
            pairs = self.accelerator.reduce(pairs, reduction="sum")
        return round(int(pairs) / runtime, 3)

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        """A time-budget run follows its plan (`BudgetSchedule`); any other the Trainer's `--lr_scheduler_type`."""
        if self.budget_schedule is None:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            self.lr_scheduler = LambdaLR(optimizer or self.optimizer, self.budget_schedule)
        return self.lr_scheduler

    # ---- Atomic checkpoints -------------------------------------------------------------------------------------
    # The Trainer writes checkpoint-STEP file by file (weights, optimizer, scheduler, RNG states, trainer_state.json)
    # and then deletes the oldest checkpoints: a kill in between left a half-written newest checkpoint that
    # `--resume_from_checkpoint true` picked and failed on. Here the Trainer writes into a hidden staging folder
    # (`.checkpoint-STEP.staging-PID/checkpoint-STEP`, by pointing `_get_output_dir` there for the duration of the
    # save), which is renamed into place once whole; only then are old checkpoints rotated away. The Trainer has no
    # public hook for where or how it writes a checkpoint, so this overrides its `_get_output_dir` and
    # `_save_checkpoint`.

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
                if dist.is_available() and dist.is_initialized():
                    dist.broadcast_object_list(pid, src=0)
            self._main_pid = pid[0]
        return self._main_pid

    def _save_checkpoint(self, model, trial) -> None:
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
                with open(os.path.join(staged, BATCHES_RECORD), "w", encoding="utf-8") as f:  # a resume follows it
                    json.dump({"train_while_tokenizing": isinstance(self.train_dataset, TrainingWhileTokenizing)}, f)
                install_folder(staged, target)
                shutil.rmtree(holder, ignore_errors=True)
                rotate_checkpoints(output_dir=run_dir, save_total_limit=self.args.save_total_limit,
                                   best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)
            self.accelerator.wait_for_everyone()

    def _point_best_checkpoint_at(self, run_dir: str, holder: str) -> None:
        """The Trainer looked for the best checkpoint in the staging folder: point at the real one, as it would."""
        best_step = self.state.best_global_step
        if best_step:
            best = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{best_step}")
            if best_step == self.state.global_step or os.path.exists(best):
                self.state.best_model_checkpoint = best
        elif self.state.best_model_checkpoint and self.state.best_model_checkpoint.startswith(holder):
            self.state.best_model_checkpoint = run_dir + self.state.best_model_checkpoint[len(holder):]

    def get_train_dataloader(self) -> DataLoader:
        collator = self.train_collator or self.data_collator
        if self.streams_batches:  # training.streaming.StreamingTokenBatches: whole batches, this process's share
            return DataLoader(self.train_dataset, batch_size=None, collate_fn=collator, num_workers=0,
                              pin_memory=self.args.dataloader_pin_memory)
        if self.token_batch_sampler is None:
            if self.train_collator is None:
                return super().get_train_dataloader()
            # the Trainer's own loader reads self.data_collator (it has no argument for it): the training collator
            # for the time it is built
            evaluation_collator, self.data_collator = self.data_collator, self.train_collator
            try:
                return super().get_train_dataloader()
            finally:
                self.data_collator = evaluation_collator
        dataset = self.train_dataset
        workers = self.args.dataloader_num_workers
        if hasattr(dataset, "column_names"):  # a datasets.Dataset
            # the Trainer's own column filter (no public form): its get_train_dataloader applies it, replaced here
            dataset = self._remove_unused_columns(dataset, description="training")
        else:  # tokenized_splits.SubwordDropout: the sampler has it segment each epoch, in this process, before the
            workers = 0  # batches are read; a worker would hold the copy of an earlier epoch (and has little to do)
        dataloader = DataLoader(
            dataset,
            batch_sampler=self.token_batch_sampler,
            collate_fn=collator,
            num_workers=workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers and workers > 0,
        )
        # accelerate gives each process every N-th batch (whole batches: the sampler's batch_size is None)
        return self.accelerator.prepare(dataloader)

    def _get_eval_sampler(self, eval_dataset):
        """Always the dataset's order (the Trainer shuffles it under `train_sampling_strategy="group_by_length"`):
        BLEU is computed against references kept in that order. (The Trainer chooses the evaluation sampler in this
        private method only.)"""
        if self.args.world_size <= 1:
            return SequentialSampler(eval_dataset)
        return None  # accelerate shards it, and the gathered predictions come back in order

    def create_model_card(self, **kwargs) -> None:
        """Write README.md with `vanilla_transformer.cards.model_card.render_model_card` (also used by `push_to_hub`)."""
        if not self.is_world_process_zero():
            return
        write_model_card(self.model, self.args.output_dir, **(self.run_state.card_fields() if self.run_state else {}))


def write_model_card(model, output_dir: str, **card_info) -> str:
    """Render the package's model card for `model` into `output_dir/README.md` and return its path."""
    card = render_model_card(model, **card_info)
    path = os.path.join(output_dir, "README.md")
    card.save(path)
    return path
