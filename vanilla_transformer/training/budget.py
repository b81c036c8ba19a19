"""A wall-clock budget as the input of the recipe: `--max_train_minutes M` without `--max_steps`.

The run times its first steps, then plans the rest of the budget (`plan_budget`): how many steps fit, the warmup
(`--warmup_steps` as a fraction of them, or a number of steps), the decay of the learning rate to the end of the
budget (`--lr_scheduler_type` linear, cosine, inverse_sqrt or constant_with_warmup), and the steps at which the
checkpoints to average are saved (`--average_last_n_checkpoints` of them, spread over the last `--averaging_span` of
the run, the last one at the last step). `TimeBudget`, a TrainerCallback, does the timing, prints the plan once,
sets the Trainer's `state.max_steps` and decides the saves; `BudgetSchedule` is the learning-rate multiplier the
Trainer's LambdaLR follows. The run keeps timing its steps and re-plans the rest when the machine's speed drifts
(until the first checkpoint to average); if the clock still runs out first, training stops there and saves a
checkpoint (the averaged checkpoints are then the last ones saved).

Why the plan matters: the paper's schedule is made for 100k steps; a 30-minute CPU run makes ~2,000, so with the
paper's warmup it would spend most of its budget warming up and average checkpoints from the steep part of the
learning curve.
"""

import math
import time
from dataclasses import asdict, dataclass, field

import torch.distributed as dist
from tqdm.auto import tqdm
from transformers import TrainerCallback
from transformers.trainer_callback import ProgressCallback

# --max_steps of a time-budget run until its plan sets the Trainer's state.max_steps.
PLACEHOLDER_MAX_STEPS = 10_000_000
SCHEDULES = ("linear", "cosine", "inverse_sqrt", "constant_with_warmup")


@dataclass
class BudgetPlan:
    """What a time-budget run decided after timing its first steps (printed once, and in the model card)."""

    minutes: float
    seconds_per_step: float  # measured
    measured_steps: int
    planned_at_step: int
    total_steps: int  # expected steps in the budget (Trainer's state.max_steps)
    warmup_steps: int
    schedule: str
    checkpoint_steps: list[int] = field(default_factory=list)  # saved, then averaged
    note: str = ""

    def describe(self) -> str:
        checkpoints = (f"average of the {len(self.checkpoint_steps)} checkpoints at steps "
                       f"{', '.join(map(str, self.checkpoint_steps))}" if len(self.checkpoint_steps) > 1
                       else f"final checkpoint at step {self.total_steps}")
        timing = f"over {self.measured_steps} steps" if self.measured_steps else "(given)"
        return (f"{self.minutes:g} min budget: {self.seconds_per_step:.3f} s/step {timing} -> "
                f"{self.total_steps:,} steps expected; warmup {self.warmup_steps:,} steps, then {self.schedule} decay "
                f"to step {self.total_steps:,}; {checkpoints}" + (f" ({self.note})" if self.note else ""))

    def card_entry(self) -> dict:
        return asdict(self)


def plan_budget(*, minutes: float, elapsed_seconds: float, steps_done: int, seconds_per_step: float,
                measured_steps: int, warmup: float, schedule: str, average_last: int, averaging_span: float,
                safety: float = 0.97) -> BudgetPlan:
    """The plan for the rest of a `minutes` budget, `steps_done` steps and `elapsed_seconds` into it.

    `warmup` < 1 is a fraction of the steps expected, else a number of steps (at most a quarter of them). The
    `average_last` checkpoints are `spacing` steps apart, the last at the last step, and span at most
    `averaging_span` of the run. `safety` leaves a little of the budget for saving checkpoints and noise.
    """
    if seconds_per_step <= 0:
        raise ValueError(f"seconds_per_step must be positive, got {seconds_per_step}.")
    remaining = max(60.0 * minutes - elapsed_seconds, 0.0)
    total = max(steps_done + int(safety * remaining / seconds_per_step), steps_done + 1)
    note = []
    if warmup < 1:
        warmup_steps = round(warmup * total)
    else:
        warmup_steps = int(warmup)
        if warmup_steps > total // 4:
            note.append(f"--warmup_steps {warmup_steps} does not fit: a quarter of the steps instead")
            warmup_steps = total // 4
    warmup_steps = max(warmup_steps, steps_done + 1) if total > steps_done + 1 else total
    count = max(average_last, 1)
    span_steps = int(averaging_span * total)
    if count > 1 and span_steps < count - 1:  # one step apart at the closest, all within the span
        count = max(span_steps + 1, 1)
        note.append(f"{count} checkpoint{'s' if count > 1 else ''} fit in the last {averaging_span:g} of the steps")
    spacing = max(int(averaging_span * total / (count - 1)), 1) if count > 1 else 1
    if count > 1 and total - (count - 1) * spacing <= steps_done:  # the window must lie after the plan
        spacing = max((total - steps_done - 1) // (count - 1), 1)
        count = min(count, total - steps_done)
        note.append("a short budget: the averaged checkpoints are closer together")
    checkpoints = sorted({total - i * spacing for i in range(count)})
    return BudgetPlan(minutes=minutes, seconds_per_step=seconds_per_step, measured_steps=measured_steps,
                      planned_at_step=steps_done, total_steps=total, warmup_steps=warmup_steps, schedule=schedule,
                      checkpoint_steps=checkpoints, note="; ".join(note))


class BudgetSchedule:
    """The learning-rate multiplier (LambdaLR's `lr_lambda`) of a time-budget run.

    Before the plan: a linear ramp over `provisional_warmup` steps. After it (planned at step c with warmup W and
    T steps): linear from the value at c to 1 at W, then the chosen decay: linear to 0 at T, cosine to 0 at T,
    the paper's sqrt(W / step), or constant. A re-plan at step c (`TimeBudget` re-times the steps as the run goes)
    starts from the value the old plan gives at c, so the learning rate never jumps: during the warmup it rises from
    there to 1 at the new W; after it, it decays from there to 0 at the new T (linear or cosine; the paper's decay
    and the constant do not depend on T). A callable object, so LambdaLR's state_dict saves the plan with each
    checkpoint and a resumed run follows it.
    """

    def __init__(self, schedule: str, provisional_warmup: int):
        if schedule not in SCHEDULES:
            raise ValueError(f"a time budget plans the schedules {', '.join(SCHEDULES)}, not {schedule!r}")
        self.schedule = schedule
        self.provisional_warmup = max(int(provisional_warmup), 1)
        self.planned_at = self.warmup = self.total = None
        self.checkpoint_steps: list[int] | None = None  # saved with the plan, so a resumed run saves the same ones
        self.start_value = None  # the multiplier at planned_at (None: the provisional ramp's)
        self.decay_from, self.decay_value = None, 1.0  # the decay starts at this step from this value (None: warmup)

    def set_plan(self, plan: BudgetPlan) -> None:
        step = plan.planned_at_step
        if self.total is not None and step >= self.warmup:  # a re-plan after the warmup: decay from here
            self.decay_from, self.decay_value = step, self(step)
            self.start_value = self.decay_value
        else:  # the first plan, or a re-plan during the warmup: rise from here to 1 at the new warmup's end
            self.start_value = None if self.total is None else self(step)
            self.warmup, self.decay_from, self.decay_value = plan.warmup_steps, None, 1.0
        self.planned_at, self.total = step, plan.total_steps
        self.checkpoint_steps = list(plan.checkpoint_steps)

    def __call__(self, step: int) -> float:
        ramp = min(step / self.provisional_warmup, 1.0)
        if self.total is None:
            return ramp
        if step <= self.planned_at:
            return ramp if self.start_value is None else self.start_value
        if step < self.warmup:
            start = self(self.planned_at)
            return start + (1.0 - start) * (step - self.planned_at) / (self.warmup - self.planned_at)
        decay_from = self.warmup if self.decay_from is None else self.decay_from
        progress = min((step - decay_from) / max(self.total - decay_from, 1), 1.0)
        if self.schedule == "linear":
            return self.decay_value * (1.0 - progress)
        if self.schedule == "cosine":
            return self.decay_value * 0.5 * (1.0 + math.cos(math.pi * progress))
        if self.schedule == "inverse_sqrt":
            return math.sqrt(self.warmup / max(step, 1))
        return 1.0  # constant_with_warmup


def elapsed_on_the_main_process(start: float) -> float:
    """Seconds since `start` by the clock of process 0: every process of a distributed run decides from the same
    number (when to plan, what, when to stop), so that none stops a step before the others and leaves them waiting.
    One process: this process's clock."""
    elapsed = time.monotonic() - start
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        shared = [elapsed]
        dist.broadcast_object_list(shared, src=0)
        elapsed = shared[0]
    return elapsed


@dataclass(frozen=True)
class BudgetOptions:
    """What a time-budget run is asked for: the options of `TranslationTrainingArguments` (`from_arguments`)."""

    minutes: float  # --max_train_minutes
    warmup: float  # --warmup_steps: a fraction of the steps (< 1), else a number of steps
    average_last: int  # checkpoints to average: --budget_checkpoints, else --average_last_n_checkpoints
    averaging_span: float  # --averaging_span: the last fraction of the steps they are spread over
    calibration_steps: int = 20  # --budget_calibration_steps: steps timed before the plan
    seconds_per_step: float | None = None  # --budget_seconds_per_step: plan from it at the first step, time nothing

    @classmethod
    def from_arguments(cls, args) -> "BudgetOptions":
        return cls(minutes=args.max_train_minutes, warmup=args.warmup_steps,
                   average_last=args.budget_checkpoints or args.average_last_n_checkpoints,
                   averaging_span=args.averaging_span, calibration_steps=args.budget_calibration_steps,
                   seconds_per_step=args.budget_seconds_per_step)


# How a time-budget run times its steps (`TimeBudget`).
SKIP_STEPS = 3  # the first steps are not timed: they include one-off work (allocations, kernel choices)
CALIBRATION_SHARE = 0.1  # the timing stops early once it used this share of the budget ...
MIN_CALIBRATION_STEPS = 3  # ... and timed at least this many steps
REPLAN_SHARE = 0.1  # the steps are re-timed every this share of the budget ...
REPLAN_TOLERANCE = 0.03  # ... and the rest re-planned when their time differs from the plan's by more than this


class TimeBudget(TrainerCallback):
    """Times steps `SKIP_STEPS`+1 .. `SKIP_STEPS`+`calibration_steps`, then plans the run (`plan_budget`), prints
    the plan, sets `state.max_steps` and saves only the checkpoints of the plan; stops when the clock runs out.

    On a slow machine or a short budget the timing stops earlier, once it has used `CALIBRATION_SHARE` of the budget
    and timed at least `MIN_CALIBRATION_STEPS` steps, so that most of the budget follows the plan.

    A machine's speed drifts (other jobs, thermal limits, a shared host; benchmarks/experiments/budget-replanning.md),
    and a plan made from the first steps then runs out
    of time before its learning rate has decayed and before its checkpoints to average are saved. So the run keeps
    timing: every `REPLAN_SHARE` of the budget it re-plans the rest from the step time since the last timing, if
    that differs from the plan's by more than `REPLAN_TOLERANCE`; the learning rate goes on from where it is
    (`BudgetSchedule.set_plan`). Once the first checkpoint to average is reached the plan stays. A plan made from a
    given `seconds_per_step` is never re-planned. Every process reads the clock of process 0
    (`elapsed_on_the_main_process`).
    """

    def __init__(self, options: BudgetOptions, schedule: BudgetSchedule, log=print):
        self.options, self.schedule, self.log = options, schedule, log
        self.min_calibration_steps = min(MIN_CALIBRATION_STEPS, options.calibration_steps)
        self.start = self.timed_from = None
        self.retimed_from = None  # (elapsed seconds, step) where the timing for the next re-plan began
        self.plan: BudgetPlan | None = None
        self.replans: list[str] = []

    def calibrated(self, step: int, elapsed: float) -> bool:
        """Enough steps timed: all `calibration_steps`, or a few once the timing used its share of the budget."""
        timed = step - SKIP_STEPS
        return timed >= self.options.calibration_steps or (
            timed >= self.min_calibration_steps and elapsed >= CALIBRATION_SHARE * 60.0 * self.options.minutes)

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()
        if self.schedule.total is not None:  # resumed: the plan came back with the scheduler's state
            state.max_steps = self.schedule.total
        elif self.options.seconds_per_step is not None:
            self.make_plan(state, 0.0, state.global_step, self.options.seconds_per_step, measured_steps=0)

    def on_step_end(self, args, state, control, **kwargs):
        elapsed = elapsed_on_the_main_process(self.start)
        step = state.global_step
        if self.schedule.total is None:
            if step == SKIP_STEPS:
                self.timed_from = elapsed
            elif self.timed_from is not None and self.calibrated(step, elapsed):
                measured = step - SKIP_STEPS
                self.make_plan(state, elapsed, step, (elapsed - self.timed_from) / measured, measured)
                self.retimed_from = (elapsed, step)
            control.should_save = False
        else:
            if self.retimed_from is not None:
                self.maybe_replan(state, elapsed, step)
            checkpoints = self.schedule.checkpoint_steps or [self.schedule.total]
            control.should_save = step in checkpoints or step >= state.max_steps
        if elapsed >= 60.0 * self.options.minutes:
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
        return control

    def make_plan(self, state, elapsed: float, step: int, seconds_per_step: float, measured_steps: int) -> None:
        self.adopt(state, self.plan_from(elapsed, step, seconds_per_step, measured_steps))

    def adopt(self, state, plan: BudgetPlan) -> None:
        """Follow `plan` from now on (the first plan or a re-plan), and print it."""
        self.schedule.set_plan(plan)
        plan.warmup_steps = self.schedule.warmup  # a re-plan after the warmup keeps the warmup already made
        self.plan = plan
        state.max_steps = plan.total_steps
        if state.is_world_process_zero:
            self.log("Time budget: " + plan.describe())

    def plan_from(self, elapsed: float, step: int, seconds_per_step: float, measured_steps: int) -> BudgetPlan:
        options = self.options
        return plan_budget(
            minutes=options.minutes, elapsed_seconds=elapsed, steps_done=step, seconds_per_step=seconds_per_step,
            measured_steps=measured_steps, warmup=options.warmup, schedule=self.schedule.schedule,
            average_last=options.average_last, averaging_span=options.averaging_span)

    def maybe_replan(self, state, elapsed: float, step: int) -> None:
        """Re-plan the rest of the budget from the step time since the last plan (see the class docstring)."""
        since, since_step = self.retimed_from
        if step >= min(self.schedule.checkpoint_steps or [self.schedule.total]):
            self.retimed_from = None  # the averaging window has begun: the plan stays
            return
        if elapsed - since < REPLAN_SHARE * 60.0 * self.options.minutes or step <= since_step:
            return
        self.retimed_from = (elapsed, step)
        seconds_per_step = (elapsed - since) / (step - since_step)
        if abs(seconds_per_step / self.plan.seconds_per_step - 1.0) <= REPLAN_TOLERANCE:
            return  # the speed holds: the plan stands
        plan = self.plan_from(elapsed, step, seconds_per_step, step - since_step)
        self.replans.append(f"re-planned at step {step:,}: {self.schedule.total:,} -> {plan.total_steps:,} steps")
        plan.note = "; ".join(filter(None, [plan.note, *self.replans]))
        self.adopt(state, plan)


class MinutesProgressBar(ProgressCallback):
    """The training bar of a time-budget run counts minutes of the budget (and shows step / steps expected)."""

    def __init__(self, minutes: float):
        super().__init__()
        self.minutes = minutes

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.training_bar = tqdm(total=round(self.minutes, 2), unit="min", dynamic_ncols=True,
                                     bar_format="{l_bar}{bar}| {n:.1f}/{total:g} min [{elapsed}{postfix}]")
        self.current_step = 0
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None:
            elapsed = min((time.monotonic() - self.start) / 60.0, self.minutes)
            self.training_bar.update(elapsed - self.training_bar.n)
            planned = f"/{state.max_steps:,}" if state.max_steps < PLACEHOLDER_MAX_STEPS else ""
            self.training_bar.set_postfix_str(f"step {state.global_step:,}{planned}", refresh=False)
            self.current_step = state.global_step
