"""training/budget.py: `--max_train_minutes` without `--max_steps` sizes the run to the budget.

Oracles: the plan's arithmetic against the measured step time; the learning rates the Trainer logged (from
trainer_state.json) and the checkpoint folders it wrote, read back after a real tiny run.
"""

import json
import math
import os
import shutil

import pytest

from vanilla_transformer.training.arguments import parse_arguments
from vanilla_transformer.training.budget import BudgetSchedule, plan_budget
from vanilla_transformer.training.run_folder import finished_run
from vanilla_transformer.training.train import main as train_main

TINY = dict(d_model=32, encoder_layers=1, decoder_layers=1, attention_heads=2, ffn_dim=64, vocab_size=90,
            demo_train_size=300, max_tokens=200, max_test_samples=24, per_device_eval_batch_size=24,
            config_overrides="max_position_embeddings=20", report_to="none", disable_tqdm="true",
            num_sample_translations=0)


@pytest.mark.parametrize("seconds_per_step, warmup", [(0.5, 0.1), (0.05, 0.25), (2.0, 300)])
def test_plan_fits_the_steps_in_the_budget_and_averages_the_last_part(seconds_per_step, warmup):
    plan = plan_budget(minutes=30, elapsed_seconds=20.0, steps_done=23, seconds_per_step=seconds_per_step,
                       measured_steps=20, warmup=warmup, schedule="linear", average_last=10, averaging_span=0.2)
    expected = 23 + int(0.97 * (1800 - 20) / seconds_per_step)
    assert plan.total_steps == expected
    assert plan.total_steps * seconds_per_step <= 1800  # the plan ends within the budget
    if warmup < 1:
        assert plan.warmup_steps == round(warmup * expected)
    else:
        assert plan.warmup_steps == min(300, expected // 4)
    checkpoints = plan.checkpoint_steps
    assert len(checkpoints) == 10 and checkpoints[-1] == plan.total_steps
    assert checkpoints[0] >= plan.total_steps * (1 - 0.2)  # all in the last fifth
    assert len({b - a for a, b in zip(checkpoints, checkpoints[1:])}) == 1  # evenly spaced
    assert str(plan.total_steps) in plan.describe() and "warmup" in plan.describe()


def test_schedule_warms_up_continuously_then_decays_to_zero_at_the_planned_end():
    for kind in ("linear", "cosine", "inverse_sqrt"):
        schedule = BudgetSchedule(kind, provisional_warmup=100)
        before = [schedule(step) for step in range(11)]
        assert before == [step / 100 for step in range(11)]
        plan = plan_budget(minutes=1, elapsed_seconds=5, steps_done=10, seconds_per_step=0.1, measured_steps=7,
                           warmup=0.1, schedule=kind, average_last=5, averaging_span=0.2)
        schedule.set_plan(plan)
        values = [schedule(step) for step in range(plan.total_steps + 1)]
        assert values[:11] == before  # the plan does not rewrite the steps already made
        assert max(abs(b - a) for a, b in zip(values, values[1:])) < 0.1  # no jump
        assert values[plan.warmup_steps] == pytest.approx(1.0) and max(values) == pytest.approx(1.0)
        after = values[plan.warmup_steps:]
        assert all(b <= a + 1e-12 for a, b in zip(after, after[1:]))  # decays from the end of the warmup on
        if kind != "inverse_sqrt":
            assert values[-1] == pytest.approx(0.0, abs=1e-12)
        else:
            assert values[-1] == pytest.approx(math.sqrt(plan.warmup_steps / plan.total_steps))
    with pytest.raises(ValueError, match="polynomial"):
        BudgetSchedule("polynomial", 10)


@pytest.mark.slow  # a training run
def test_a_tiny_budget_warms_up_decays_and_averages_checkpoints_from_the_end_of_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    options = {**TINY, "max_train_minutes": 0.25, "warmup_steps": 0.2, "lr_scheduler_type": "linear",
               "learning_rate": 0.003, "budget_calibration_steps": 5, "average_last_n_checkpoints": 4,
               "averaging_span": 0.3, "save_total_limit": 4, "logging_steps": 1, "output_dir": str(out)}
    metrics = train_main([item for k, v in options.items() for item in (f"--{k}", str(v))])
    printed = capsys.readouterr().out
    plans = [line for line in printed.splitlines() if line.startswith("Time budget: 0.25 min budget:")]
    # the plan, printed once; then once per re-plan, if this machine's speed drifted
    assert plans and "re-planned" not in plans[0] and all("re-planned at step" in line for line in plans[1:])

    plan = metrics["time_budget"]
    total, warmup = plan["total_steps"], plan["warmup_steps"]
    state = json.loads((out / "trainer_state.json").read_text())
    steps_made = state["global_step"]
    assert state["max_steps"] == total and total > 2 * 8  # sized by the plan, not the 10,000,000 placeholder
    assert metrics["train_runtime"] <= 0.25 * 60 + 5  # within the budget (plus the last step and a save)
    # the Trainer logs at step s the learning rate step s used: the schedule's value after s - 1 steps
    lr = {entry["step"] - 1: entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry}
    peak_step = max(lr, key=lr.get)
    assert lr[peak_step] == pytest.approx(0.003, rel=1e-6) and peak_step == warmup  # warmup ends...
    assert warmup < steps_made - 1  # ... before the budget does
    decay = [lr[s] for s in sorted(lr) if s >= warmup]
    assert len(decay) > 3 and all(b < a for a, b in zip(decay, decay[1:]))  # ... and the learning rate decays
    if steps_made == total:  # the planned end (a much slower machine stops earlier, on the clock)
        assert lr[total - 2] == pytest.approx(2 * lr[total - 1], rel=1e-6)  # linear to 0 at the end
        if len(plans) == 1:
            assert lr[total - 1] == pytest.approx(0.003 / (total - warmup), rel=1e-6)

    averaged = sorted(int(name.split("-")[1]) for name in os.listdir(out) if name.startswith("checkpoint-"))
    assert averaged == plan["checkpoint_steps"][-len(averaged):] or averaged[-1] == steps_made
    assert min(averaged) >= total * (1 - 0.3) - 1  # the averaged checkpoints lie in the last part of the run
    card = (out / "README.md").read_text()
    assert "time budget" in card and f"{total:,} steps expected" in card

    # resuming a finished budget run: its planned end (not the placeholder --max_steps) says there is nothing to
    # train; a run the clock stopped before that end trains on
    argv = [item for k, v in options.items() for item in (f"--{k}", str(v))]
    finished = tmp_path / "finished"
    shutil.copytree(out, finished)
    (finished / "trainer_state.json").write_text(json.dumps({**state, "global_step": total}))
    _, _, args, _ = parse_arguments([*argv, "--output_dir", str(finished), "--resume_from_checkpoint", "true"])
    assert finished_run(args) == json.loads((out / "all_results.json").read_text())
    (finished / "trainer_state.json").write_text(json.dumps({**state, "global_step": total - 1}))
    assert finished_run(args) is None
    if steps_made == total:
        again = train_main([*argv, "--resume_from_checkpoint", "true"])
        assert f"holds the finished run (step {total} of {total})" in capsys.readouterr().out
        assert again["time_budget"] == plan


def test_a_short_budget_averages_only_the_checkpoints_that_fit_in_its_last_part():
    plan = plan_budget(minutes=3, elapsed_seconds=30.0, steps_done=6, seconds_per_step=5.3, measured_steps=3,
                       warmup=0.2, schedule="linear", average_last=10, averaging_span=0.2)
    total, checkpoints = plan.total_steps, plan.checkpoint_steps
    assert total == 6 + int(0.97 * 150 / 5.3)  # 33
    assert checkpoints == list(range(total - int(0.2 * total), total + 1))  # one per step over the last fifth
    assert len(checkpoints) < 10 and "fit in the last 0.2" in plan.note
    assert plan.warmup_steps == round(0.2 * total) and checkpoints[0] > plan.warmup_steps


class _State:
    def __init__(self):
        self.global_step, self.max_steps, self.is_world_process_zero = 0, 10_000_000, True


class _Control:
    should_save = should_training_stop = False


def _budget_on_a_clock(monkeypatch, minutes: float, **options):
    """A TimeBudget of `minutes` (linear schedule, 10 checkpoints over the last 20 %) on a clock the test moves,
    after on_train_begin. -> (clock, printed lines, schedule, callback, state, control)"""
    import vanilla_transformer.training.budget as budget

    clock = [1000.0]
    monkeypatch.setattr(budget.time, "monotonic", lambda: clock[0])
    printed = []
    schedule = BudgetSchedule("linear", provisional_warmup=230)
    callback = budget.TimeBudget(budget.BudgetOptions(minutes, average_last=10, averaging_span=0.2, **options),
                                 schedule, log=printed.append)
    state, control = _State(), _Control()
    callback.on_train_begin(None, state, control)
    return clock, printed, schedule, callback, state, control


@pytest.mark.parametrize("seconds_per_step, planned_at", [(0.5, 3 + 20), (5.0, 3 + 3)])
def test_timing_stops_early_when_it_would_take_more_than_a_tenth_of_the_budget(monkeypatch, seconds_per_step,
                                                                                 planned_at):
    """3 minutes: 23 steps of 0.5 s are timed (12 s, under the 18 s share); of 5 s steps only 3 are (the share is
    used up by then), and the plan is made from them."""
    clock, printed, schedule, callback, state, control = _budget_on_a_clock(
        monkeypatch, 3, warmup=0.2, calibration_steps=20)
    while callback.plan is None:
        clock[0] += seconds_per_step
        state.global_step += 1
        callback.on_step_end(None, state, control)
        assert state.global_step <= 3 + 20
    assert state.global_step == planned_at and len(printed) == 1
    assert callback.plan.seconds_per_step == pytest.approx(seconds_per_step)
    assert state.max_steps == callback.plan.total_steps == planned_at + int(
        0.97 * (180 - planned_at * seconds_per_step) / seconds_per_step)


def test_the_plan_travels_with_the_schedulers_state():
    """A resumed run gets the plan back from the LambdaLR state in its checkpoint, checkpoint steps included."""
    import torch

    plan = plan_budget(minutes=30, elapsed_seconds=20.0, steps_done=23, seconds_per_step=1.0, measured_steps=20,
                       warmup=0.2, schedule="linear", average_last=10, averaging_span=0.2)
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.randn(3))], lr=0.003)
    saved = BudgetSchedule("linear", provisional_warmup=230)
    saved.set_plan(plan)
    state = torch.optim.lr_scheduler.LambdaLR(optimizer, saved).state_dict()
    resumed = BudgetSchedule("linear", provisional_warmup=230)
    torch.optim.lr_scheduler.LambdaLR(optimizer, resumed).load_state_dict(state)
    assert resumed.total == plan.total_steps and resumed.checkpoint_steps == plan.checkpoint_steps
    assert [resumed(s) for s in range(0, plan.total_steps, 97)] == [saved(s) for s in range(0, plan.total_steps, 97)]


def test_a_given_step_time_plans_at_the_first_step_and_times_nothing(monkeypatch):
    """--budget_seconds_per_step: the plan is made before the first step from the given time (a CPU run's plan
    replayed elsewhere), the same arithmetic as a timed plan, printed once with "(given)"; the clock still stops."""
    clock, printed, schedule, callback, state, control = _budget_on_a_clock(
        monkeypatch, 30, warmup=0.4, seconds_per_step=1.36)
    expected = plan_budget(minutes=30, elapsed_seconds=0.0, steps_done=0, seconds_per_step=1.36, measured_steps=0,
                           warmup=0.4, schedule="linear", average_last=10, averaging_span=0.2)
    assert callback.plan == expected and state.max_steps == expected.total_steps == int(0.97 * 1800 / 1.36)
    assert expected.warmup_steps == round(0.4 * expected.total_steps)
    assert len(printed) == 1 and "1.360 s/step (given)" in printed[0]
    assert schedule(0) == 0.0 and schedule(expected.warmup_steps) == 1.0 and schedule(expected.total_steps) == 0.0
    for step in range(1, 40):  # a fast machine: the steps take no time, nothing is re-planned
        state.global_step = step
        callback.on_step_end(None, state, control)
        assert callback.plan == expected and control.should_save == (step in expected.checkpoint_steps)
    clock[0] += 30 * 60  # a slow one: the budget still ends the run
    state.global_step = 40
    callback.on_step_end(type("Args", (), {"save_strategy": "steps"})(), state, control)
    assert control.should_training_stop and control.should_save


@pytest.mark.slow  # a training run
def test_a_given_step_time_makes_the_same_plan_on_any_machine(tmp_path, capsys):
    """A real tiny run with --budget_seconds_per_step trains exactly the planned steps, whatever this machine's
    speed, and saves the planned checkpoints."""
    out = tmp_path / "run"
    options = {**TINY, "max_train_minutes": 0.5, "budget_seconds_per_step": 0.75, "warmup_steps": 0.4,
               "lr_scheduler_type": "linear", "learning_rate": 0.003, "average_last_n_checkpoints": 3,
               "averaging_span": 0.3, "save_total_limit": 3, "logging_steps": 1, "output_dir": str(out)}
    metrics = train_main([item for k, v in options.items() for item in (f"--{k}", str(v))])
    assert "0.750 s/step (given) -> 38 steps expected" in capsys.readouterr().out  # int(0.97 * 30 / 0.75)
    plan = metrics["time_budget"]
    assert plan["total_steps"] == 38 and plan["warmup_steps"] == 15 and plan["measured_steps"] == 0
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 38
    lr = {entry["step"] - 1: entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry}
    assert max(lr, key=lr.get) == 15 and lr[15] == pytest.approx(0.003, rel=1e-6)
    assert metrics["time_budget"]["checkpoint_steps"][-1] == 38


@pytest.mark.parametrize("value", ["0", "-1.5"])
def test_a_step_time_must_be_positive(value, capsys):
    with pytest.raises(SystemExit):
        parse_arguments(["--max_train_minutes", "1", "--budget_seconds_per_step", value])
    assert f"--budget_seconds_per_step must be positive, got {float(value)}" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["linear", "cosine", "inverse_sqrt", "constant_with_warmup"])
@pytest.mark.parametrize("replan_at, new_total", [(120, 700), (120, 1400), (600, 750), (600, 1300)])
def test_a_replan_goes_on_from_the_current_learning_rate_to_the_new_end(kind, replan_at, new_total):
    """Planned at step 23 for 1,000 steps (warmup 400); re-planned during the warmup (step 120) or the decay (600)
    for fewer or more steps: no jump, the peak at the new warmup's end (a re-plan during the warmup), then the
    decay to 0 at the new end. (The Trainer asks the schedule only for the rate of the next step.)"""
    schedule = BudgetSchedule(kind, provisional_warmup=230)
    first = plan_budget(minutes=30, elapsed_seconds=20.0, steps_done=23, seconds_per_step=1.75, measured_steps=20,
                        warmup=0.4, schedule=kind, average_last=2, averaging_span=0.02)
    schedule.set_plan(first)
    before = [schedule(step) for step in range(replan_at + 1)]
    seconds = (1800 - replan_at * 1.75) * 0.97 / (new_total - replan_at)
    second = plan_budget(minutes=30, elapsed_seconds=replan_at * 1.75, steps_done=replan_at, seconds_per_step=seconds,
                         measured_steps=97, warmup=0.4, schedule=kind, average_last=2, averaging_span=0.02)
    assert abs(second.total_steps - new_total) <= 1
    schedule.set_plan(second)
    values = before + [schedule(step) for step in range(replan_at + 1, second.total_steps + 1)]
    assert schedule(replan_at) == before[-1]  # the new plan starts from the rate of the step it is made at
    assert max(abs(b - a) for a, b in zip(values, values[1:])) < 0.01  # no jump at the re-plan
    assert schedule.total == second.total_steps and schedule.checkpoint_steps == second.checkpoint_steps
    if replan_at < first.warmup_steps:
        assert schedule.warmup == second.warmup_steps == round(0.4 * second.total_steps)
        assert values[schedule.warmup] == pytest.approx(1.0) and max(values) == pytest.approx(1.0)
    else:
        assert schedule.warmup == first.warmup_steps  # the warmup already made
    after = values[max(schedule.warmup, replan_at):]
    assert all(b <= a + 1e-12 for a, b in zip(after, after[1:]))
    if kind in ("linear", "cosine"):
        assert values[-1] == pytest.approx(0.0, abs=1e-12) and values[-2] > 0


def test_a_machine_that_slows_down_is_replanned_so_the_run_still_ends_its_decay_in_the_budget(monkeypatch):
    """30 minutes; the first steps take 0.87 s, then every step 1.15 s (as the development machine did): the plan
    for 2,005 steps is re-planned from the slower steps after a tenth of the budget, and again only if the speed
    changes again; the new plan ends in the budget with its checkpoints at its end, and the learning rate runs on
    from where it was; once the checkpoints to average begin, the plan stays."""
    clock, printed, schedule, callback, state, control = _budget_on_a_clock(monkeypatch, 30, warmup=0.4)
    args = type("Args", (), {"save_strategy": "steps"})()
    rates = []
    while not control.should_training_stop and state.global_step < state.max_steps:
        clock[0] += 0.87 if state.global_step < 23 else 1.15
        state.global_step += 1
        rates.append(schedule(state.global_step))
        callback.on_step_end(args, state, control)
        if state.global_step == 23:
            assert state.max_steps == 23 + int(0.97 * (1800 - 23 * 0.87) / 0.87) and len(printed) == 1
    assert len(printed) == 2 and "re-planned at step" in printed[1] and "1.150 s/step" in printed[1]
    step = int(callback.replans[0].split("step ")[1].split(":")[0].replace(",", ""))
    elapsed = 23 * 0.87 + (step - 23) * 1.15
    assert 180 <= elapsed - 23 * 0.87 < 181.2  # after a tenth of the budget
    assert callback.plan.total_steps == step + int(0.97 * (1800 - elapsed) / 1.15)
    assert state.global_step == callback.plan.total_steps and not control.should_training_stop  # ends in time
    assert 23 * 0.87 + (state.global_step - 23) * 1.15 < 1800
    assert callback.plan.checkpoint_steps[-1] == callback.plan.total_steps and "re-planned" in callback.plan.note
    assert max(abs(b - a) for a, b in zip(rates[30:], rates[31:])) < 0.01 and rates[-1] == pytest.approx(0.0)


def test_no_replan_once_the_checkpoints_to_average_begin_or_where_the_speed_holds(monkeypatch):
    clock, printed, schedule, callback, state, control = _budget_on_a_clock(monkeypatch, 30, warmup=0.4)
    args = type("Args", (), {"save_strategy": "steps"})()
    while state.global_step < state.max_steps and not control.should_training_stop:
        first_checkpoint = min(schedule.checkpoint_steps or [10**9])
        clock[0] += 1.0 if state.global_step < first_checkpoint else 3.0  # slows down only in the averaging window
        state.global_step += 1
        callback.on_step_end(args, state, control)
    assert len(printed) == 1 and callback.replans == []  # a steady speed, then a late slowdown: one plan
    assert control.should_training_stop  # the clock ended the run before the plan did, and saved a checkpoint
    assert control.should_save


def test_every_process_of_a_distributed_run_reads_the_clock_of_process_0(monkeypatch):
    import torch.distributed as dist

    import vanilla_transformer.training.budget as budget

    monkeypatch.setattr(budget.time, "monotonic", lambda: 1010.0)
    assert budget.elapsed_on_the_main_process(1000.0) == 10.0  # one process: its own clock
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)

    def broadcast_from_process_0(objects, src):  # what process 0 had measured
        assert src == 0
        objects[0] = 7.5

    monkeypatch.setattr(dist, "broadcast_object_list", broadcast_from_process_0)
    assert budget.elapsed_on_the_main_process(1000.0) == 7.5
