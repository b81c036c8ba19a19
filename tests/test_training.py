"""training/: the paper's recipe on Seq2SeqTrainer, token-budget batches, resume, averaging, presets, data errors.

Every run here is tiny (d_model 32, one layer, a few hundred generated pairs, a handful of steps); the oracles are
the paper's formula, safetensors files read directly, sacreBLEU, and an uninterrupted run of the same training.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from helpers import run_main, train_command, train_error, train_usage_error
from vanilla_transformer.training.arguments import parse_arguments
from vanilla_transformer.training.average_checkpoints import average_checkpoints, last_checkpoints
from vanilla_transformer.training.average_checkpoints import main as average_main
from vanilla_transformer.training.batching import TokenBudgetBatchSampler
from vanilla_transformer.training.presets import PAPER_RECIPE, PRESETS, paper_learning_rate
from vanilla_transformer.training.train import main as train_main

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A model and corpus small enough to train a few steps in a second or two.
TINY_OPTIONS = dict(
    d_model=32, encoder_layers=1, decoder_layers=1, attention_heads=2, ffn_dim=64, vocab_size=90,
    demo_train_size=300, max_tokens=200, max_test_samples=24, per_device_eval_batch_size=24,
    config_overrides="max_position_embeddings=20", report_to="none", disable_tqdm="true", num_sample_translations=0,
    warmup_steps=4,
)


def tiny(**options) -> list[str]:
    """Command-line options of a tiny run, `options` added or replacing the defaults."""
    return [item for name, value in {**TINY_OPTIONS, **options}.items() for item in (f"--{name}", str(value))]


TINY = tiny()


# ---------------------------------------------------------------------------------------------------------------
# Token-budget batches


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_batches_cover_every_pair_once_within_the_budget(seed):
    rng = np.random.default_rng(seed)
    source = rng.integers(1, 60, size=500)
    target = rng.integers(1, 60, size=500)
    sampler = TokenBudgetBatchSampler(source, target, max_tokens=400, seed=seed)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(500))
    for batch in batches:
        cost = len(batch) * max(max(source[batch]), max(target[batch]))
        assert cost <= 400 or len(batch) == 1
    # similar lengths together: far less padding than batches of random pairs of the same sizes
    padded = sum(len(b) * max(source[b]) - sum(source[b]) for b in batches)
    shuffled = rng.permutation(500)
    sizes = np.cumsum([len(b) for b in batches])[:-1]
    random_padded = sum(len(b) * max(source[b]) - sum(source[b]) for b in np.split(shuffled, sizes))
    assert padded < 0.3 * random_padded


def test_token_batches_change_order_each_epoch_reproducibly():
    lengths = np.random.default_rng(0).integers(1, 30, size=300)
    sampler = TokenBudgetBatchSampler(lengths, lengths, max_tokens=120, seed=7)
    epoch0 = list(sampler)
    sampler.set_epoch(1)
    epoch1 = list(sampler)
    assert epoch0 != epoch1 and sorted(map(tuple, epoch0)) == sorted(map(tuple, epoch1))
    again = TokenBudgetBatchSampler(lengths, lengths, max_tokens=120, seed=7)
    again.set_epoch(1)
    assert list(again) == epoch1


def test_token_batches_shard_into_disjoint_whole_batches_across_processes():
    from accelerate.data_loader import BatchSamplerShard

    lengths = np.random.default_rng(3).integers(1, 40, size=400)
    sampler = TokenBudgetBatchSampler(lengths, lengths, max_tokens=200, seed=0)
    batches = [tuple(b) for b in sampler]
    shards = [[tuple(b) for b in BatchSamplerShard(sampler, num_processes=2, process_index=r)] for r in range(2)]
    assert len(shards[0]) == len(shards[1])
    assert shards[0][: len(batches) // 2] == batches[0::2][: len(batches) // 2]
    assert shards[1][: len(batches) // 2] == batches[1::2][: len(batches) // 2]
    assert set(batches) <= set(shards[0]) | set(shards[1])


def test_token_batches_reject_bad_arguments():
    with pytest.raises(ValueError, match="pair up"):
        TokenBudgetBatchSampler([1, 2], [1], max_tokens=10)
    with pytest.raises(ValueError, match="max_tokens"):
        TokenBudgetBatchSampler([1, 2], [1, 2], max_tokens=0)
    with pytest.raises(ValueError, match="empty"):
        TokenBudgetBatchSampler([], [], max_tokens=10)


# ---------------------------------------------------------------------------------------------------------------
# The loss


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("epsilon", [0.1, 0.0, 0.3])
@pytest.mark.parametrize("num_items", [None, 57, "tensor"])
def test_label_smoothed_loss_and_gradient_equal_transformers_label_smoother(seed, epsilon, num_items):
    from transformers.trainer_pt_utils import LabelSmoother

    from vanilla_transformer.training.trainer import LabelSmoothedCrossEntropy

    generator = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(4, 9, 37, generator=generator, dtype=torch.float64)).requires_grad_()
    labels = torch.randint(0, 37, (4, 9), generator=generator)
    labels[0, 6:] = -100  # padded rows
    labels[2, 3:] = -100
    if num_items == "tensor":
        num_items = torch.tensor(41)
    oracle = LabelSmoother(epsilon=epsilon)({"logits": logits}, labels, num_items_in_batch=num_items)
    (oracle_gradient,) = torch.autograd.grad(oracle, logits)
    ours = LabelSmoothedCrossEntropy(epsilon=epsilon)({"logits": logits}, labels, num_items_in_batch=num_items)
    (our_gradient,) = torch.autograd.grad(ours, logits)
    # LabelSmoother sums the smoothing term in float32 whatever the logits are: agreement to float32 rounding
    assert ours.item() == pytest.approx(oracle.item(), rel=1e-6)
    torch.testing.assert_close(our_gradient, oracle_gradient, rtol=1e-5, atol=1e-8)
    assert our_gradient[0, 6:].abs().max() == 0 and our_gradient[2, 3:].abs().max() == 0  # no loss on padding


def test_label_smoothed_loss_of_half_precision_logits_is_computed_in_float32():
    from transformers.trainer_pt_utils import LabelSmoother

    from vanilla_transformer.training.trainer import LabelSmoothedCrossEntropy

    generator = torch.Generator().manual_seed(3)
    logits = (4 * torch.randn(3, 5, 50, generator=generator)).to(torch.bfloat16)
    labels = torch.randint(0, 50, (3, 5), generator=generator)
    ours = LabelSmoothedCrossEntropy(epsilon=0.1)({"logits": logits}, labels)
    assert ours.dtype == torch.float32
    oracle = LabelSmoother(epsilon=0.1)({"logits": logits.float()}, labels)
    assert ours.item() == pytest.approx(oracle.item(), rel=1e-6)


def test_trainer_loss_is_the_label_smoothed_loss_of_the_model_outputs(tmp_path):
    from transformers.trainer_pt_utils import LabelSmoother

    from helpers import random_batch, tiny_model
    from vanilla_transformer.training.trainer import (
        LabelSmoothedCrossEntropy,
        TranslationTrainer,
        TranslationTrainingArguments,
    )

    model = tiny_model(4)
    args = TranslationTrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.2, learning_rate=1e-3,
                                        report_to="none")
    trainer = TranslationTrainer(model=model, args=args)
    assert trainer.compute_loss_func == LabelSmoothedCrossEntropy(epsilon=0.2)
    input_ids, attention_mask = random_batch(4)
    labels, _ = random_batch(5, length=6)
    labels[1, 4:] = -100
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)  # as the data collator gives them
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                  labels=labels)
    loss = trainer.compute_loss(model, dict(inputs), num_items_in_batch=torch.tensor(13))
    logits = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits
    expected = LabelSmoother(epsilon=0.2)({"logits": logits}, labels, num_items_in_batch=13)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# Presets and the paper's schedule


def test_trainer_inverse_sqrt_schedule_is_equation_3():
    from transformers import get_scheduler

    for d_model, warmup in [(512, 4000), (128, 300), (1024, 4000)]:
        parameter = torch.nn.Parameter(torch.zeros(1))
        optimizer = torch.optim.Adam([parameter], lr=paper_learning_rate(d_model, warmup))
        scheduler = get_scheduler("inverse_sqrt", optimizer, num_warmup_steps=warmup)
        peak = optimizer.param_groups[0]["initial_lr"]
        for step in [1, warmup // 3, warmup - 1, warmup, warmup + 1, 3 * warmup, 25 * warmup]:
            expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
            assert peak * scheduler.lr_lambdas[0](step) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("preset", ["base", "multi30k"])
def test_preset_optimizer_makes_the_updates_of_adam_written_out(tmp_path, preset):
    from helpers import tiny_model
    from vanilla_transformer.training.trainer import TranslationTrainer

    data = ["--train_source", "a.en", "--train_target", "a.de", "--output_dir", str(tmp_path)]
    _, _, args, _ = parse_arguments(["--preset", preset, "--learning_rate", "0.01", *data])
    model = tiny_model(2)
    trainer = TranslationTrainer(model=model, args=args)
    optimizer = trainer.create_optimizer()
    parameters = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in parameters]
    beta1, beta2, eps, lr = 0.9, 0.98, 1e-9, 0.01
    m = [torch.zeros_like(p) for p in parameters]
    v = [torch.zeros_like(p) for p in parameters]
    expected = [p.clone() for p in start]
    generator = torch.Generator().manual_seed(7)
    for step in (1, 2, 3):  # Kingma & Ba's Algorithm 1
        gradients = [torch.randn(p.shape, generator=generator) * 10.0**step for p in parameters]
        for p, g in zip(parameters, gradients):
            p.grad = g.clone()
        optimizer.step()
        for i, g in enumerate(gradients):
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            m_hat, v_hat = m[i] / (1 - beta1**step), v[i] / (1 - beta2**step)
            expected[i] = expected[i] - lr * m_hat / (v_hat.sqrt() + eps)
    for p, e, s0 in zip(parameters, expected, start):
        torch.testing.assert_close(p.detach(), e, rtol=1e-5, atol=1e-6)
        assert not torch.equal(p.detach(), s0)


def test_presets_set_the_paper_recipe_and_every_flag_overrides_them(tmp_path):
    data = ["--train_source", "a.en", "--train_target", "a.de"]
    data_args, model_args, args, explicit = parse_arguments(["--preset", "base", *data])
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert args.label_smoothing_factor == 0.1 and args.weight_decay == 0.0
    assert args.lr_scheduler_type == "inverse_sqrt" and args.predict_with_generate
    assert args.warmup_steps == PRESETS["base"].training["warmup_steps"] == 4000
    assert args.learning_rate == pytest.approx((512 * 4000) ** -0.5)  # equation 3's peak
    assert args.max_tokens == PRESETS["base"].training["max_tokens"]
    assert args.average_last_n_checkpoints == PRESETS["base"].training["average_last_n_checkpoints"]
    assert data_args.vocab_size == PRESETS["base"].data["vocab_size"]
    assert args.output_dir == os.path.join("outputs", "base")
    assert "learning_rate" not in explicit

    # multi30k: the paper's optimiser with the schedule chosen for a time budget (a fraction of the planned steps)
    data_args, model_args, args, explicit = parse_arguments(["--preset", "multi30k", *data])
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon, args.label_smoothing_factor) == (0.9, 0.98, 1e-9, 0.1)
    assert (args.lr_scheduler_type, args.learning_rate, args.warmup_steps) == ("linear", 0.0014, 0.4)
    assert (args.average_last_n_checkpoints, args.averaging_span, args.max_tokens) == (2, 0.02, 2048)
    assert data_args.vocab_size == 8000 and args.output_dir == os.path.join("outputs", "multi30k")

    data_args, model_args, args, explicit = parse_arguments([
        "--preset", "multi30k", *data, "--warmup_steps", "50", "--adam_beta2", "0.99", "--max_steps", "7",
        "--max_tokens", "999", "--label_smoothing_factor", "0", "--vocab_size", "123", "--d_model", "64",
        "--learning_rate=0.5", "--output_dir", str(tmp_path), "--save_steps", "3", "--save_total_limit", "12"])
    assert (args.warmup_steps, args.adam_beta2, args.max_steps, args.max_tokens) == (50, 0.99, 7, 999)
    assert (args.label_smoothing_factor, data_args.vocab_size, model_args.d_model) == (0, 123, 64)
    assert (args.learning_rate, args.output_dir, args.save_steps) == (0.5, str(tmp_path), 3)
    assert {"warmup_steps", "adam_beta2", "learning_rate", "d_model"} <= explicit
    assert "adam_beta1" not in explicit

    for name, preset in PRESETS.items():
        merged = preset.training_defaults()
        assert merged["adam_beta2"] == PAPER_RECIPE["adam_beta2"], name

    # TensorBoard logging by default where it is installed; any --report_to wins
    import importlib.util

    _, _, args, _ = parse_arguments([])
    assert args.report_to == (["tensorboard"] if importlib.util.find_spec("tensorboard") else [])
    assert parse_arguments(["--report_to", "none"])[2].report_to == []


def test_the_model_line_names_the_regularisation_the_options_set():
    """The `Model:` line printed at the start reports what was chosen: extra dropouts only where they are on."""
    from translation_fixtures import tiny_tokenizer
    from vanilla_transformer.training.build import build_model, describe_model

    data = ["--train_source", "a.en", "--train_target", "a.de", "--d_model", "32", "--ffn_dim", "64"]
    lines = {}
    for name, extra in (("preset", []), ("options", ["--dropout", "0.3", "--attention_dropout", "0.1",
                                                       "--activation_dropout", "0.15", "--label_smoothing_factor",
                                                       "0.2", "--length_penalty", "1.1"])):
        data_args, model_args, args, _ = parse_arguments(["--preset", "multi30k-pre-ln", *data, *extra])
        tokenizer = tiny_tokenizer()
        model = build_model(model_args, PRESETS["multi30k-pre-ln"], tokenizer, None)
        lines[name] = describe_model(model, tokenizer, args)
    assert "pre-LayerNorm, dropout 0.2, label smoothing 0.1, " in lines["preset"]
    assert "(attention" not in lines["preset"] and "activation" not in lines["preset"]
    assert ("pre-LayerNorm, dropout 0.3 (attention 0.1, activation 0.15), label smoothing 0.2, "
            f"vocabulary {len(tokenizer):,}") in lines["options"]
    assert "d_model 32, 3+3 layers" in lines["options"] and "length penalty 1.1;" in lines["options"]


def test_unknown_preset_and_bad_flags_exit_with_a_message(capsys):
    with pytest.raises(SystemExit):
        parse_arguments(["--preset", "huge"])
    assert "unknown --preset 'huge'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_arguments(["--average_last_n_checkpoints", "5", "--save_total_limit", "2"])
    assert "save_total_limit" in capsys.readouterr().err


@pytest.mark.parametrize("options, saved, fix", [
    (["--max_steps", "120", "--save_steps", "1000"], 1, "give --save_steps 60 or less, or average fewer"),
    (["--max_steps", "100", "--save_steps", "0.5", "--average_last_n_checkpoints", "3"], 2,
     "give --save_steps 33 or less, or average fewer"),
    (["--max_steps", "1", "--save_steps", "1"], 1, "average fewer"),
])
def test_averaging_more_checkpoints_than_the_run_saves_stops_before_training(tmp_path, capsys, options, saved, fix):
    # the preset averages the last 2 checkpoints; the run would fail after training, in Trainer-made folders
    out = tmp_path / "out"
    with pytest.raises(SystemExit):
        train_main(["--preset", "multi30k-pre-ln", "--output_dir", str(out), *options])
    wanted = options[options.index("--average_last_n_checkpoints") + 1] if "--average_last_n_checkpoints" in options \
        else "2"
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith(f"--average_last_n_checkpoints {wanted} needs that many checkpoints, but --max_steps "
                         f"{options[1]} with --save_steps {options[3]} saves {saved}: {fix}.")
    assert not out.exists()
    parse_arguments(["--preset", "multi30k-pre-ln", "--max_steps", "120", "--save_steps", "60"])  # 2: enough


@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_max_steps_that_is_neither_positive_nor_the_default_is_one_line(tmp_path, capsys, value):
    with pytest.raises(SystemExit):
        train_main([*TINY, "--output_dir", str(tmp_path / "out"), "--max_steps", value])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith(f"--max_steps must be positive, or -1 (the default: --num_train_epochs decides), got "
                         f"{value}.") and not (tmp_path / "out").exists()


@pytest.mark.parametrize("pairs, epochs", [(20, 1), (30, 2)])
def test_an_epoch_run_that_saves_too_few_checkpoints_to_average_stops_before_its_first_step(tmp_path, capsys, pairs,
                                                                                           epochs):
    """Its steps come from its batches: the run with checkpoints every step is the oracle of how many it makes."""
    options = [*TINY, "--max_train_samples", str(pairs), "--max_steps", "-1", "--num_train_epochs", str(epochs),
               "--average_last_n_checkpoints", "2"]
    refused = tmp_path / "refused"
    with pytest.raises(ValueError) as error:
        train_main([*options, "--save_steps", "1000", "--output_dir", str(refused)])
    line = str(error.value)
    trained = tmp_path / "trained"
    train_main([*options, "--save_steps", "1", "--output_dir", str(trained)])
    steps = json.loads((trained / "trainer_state.json").read_text())["global_step"]
    assert steps >= 2
    assert line.endswith(f"--average_last_n_checkpoints 2 needs that many checkpoints, but --num_train_epochs {epochs} "
                         f"makes {steps} steps and --save_steps 1000 saves 1 of them: give --save_steps {steps // 2} "
                         "or less, or average fewer."), line
    assert not list(refused.glob("checkpoint-*"))  # stopped before its first step


@pytest.mark.parametrize("overrides, expected", [
    ("normalise_before=true", "--config_overrides: unknown key 'normalise_before' (did you mean normalize_before?)"),
    ("normalize_before=true,postion_embedding_type=learned",
     "--config_overrides: unknown key 'postion_embedding_type' (did you mean position_embedding_type"),
    ("zzz=1", "--config_overrides: unknown key 'zzz' (VanillaTransformerConfig has no such field)"),
    ("pad_token_id=5", "--config_overrides: pad_token_id is set from the tokenizer."),
    ("normalize_before", "--config_overrides expects key=value pairs"),
])
def test_config_overrides_with_an_unknown_key_stop_the_run_with_one_line_naming_it(tmp_path, capsys, overrides,
                                                                                 expected):
    message = _usage_error_of([*tiny(config_overrides=overrides), "--output_dir", str(tmp_path / "out")], capsys)
    assert message.startswith("vanilla-transformer train: error: " + expected) and "\n" not in message
    assert not (tmp_path / "out").exists()  # stopped before any work


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_length_penalty_that_is_not_a_finite_number_stops_the_run_with_one_line(tmp_path, capsys, value):
    message = _usage_error_of([*tiny(), "--length_penalty", value, "--output_dir", str(tmp_path / "out")], capsys)
    assert f"--length_penalty must be a finite number, got {float(value)}" in message and "\n" not in message


def test_config_overrides_with_a_bad_value_stop_the_run_with_one_line_naming_it(tmp_path, capsys):
    out = ["--output_dir", str(tmp_path / "out")]
    message = _usage_error_of([*tiny(config_overrides="position_embedding_type=rotary,dropout=2"), *out], capsys)
    assert message.startswith("vanilla-transformer train: error: Invalid VanillaTransformerConfig: ")
    assert "dropout=2 must be in [0, 1)" in message and "position_embedding_type='rotary'" in message
    message = _usage_error_of([*tiny(config_overrides="encoder_layers=two"), "--overwrite_output_dir", "true", *out],
                              capsys)
    assert message == "vanilla-transformer train: error: Field 'encoder_layers' expected int, got str (value: 'two')"


def test_every_preset_names_only_config_fields_and_builds_a_valid_config():
    from vanilla_transformer import PAPER_PRESETS, VanillaTransformerConfig

    for name, preset in PRESETS.items():
        config = VanillaTransformerConfig(**preset.model)  # validates; a misspelled key is an error
        assert set(preset.model) <= set(VanillaTransformerConfig.__dataclass_fields__), name
        assert not set(vars(config)) - set(VanillaTransformerConfig.__dataclass_fields__) - {
            k for k in vars(config) if k.startswith("_")}, name
    for size in ("base", "big"):  # the paper's sizes come from the one table in the configuration file
        assert PRESETS[size].model == PAPER_PRESETS[size]
        assert VanillaTransformerConfig(**PRESETS[size].model).to_diff_dict() == (
            VanillaTransformerConfig.from_paper(size).to_diff_dict())


# ---------------------------------------------------------------------------------------------------------------
# Data errors


def _write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


def _error_of(argv, capsys) -> str:
    """The one line `vanilla-transformer train` reports a problem with (exit status 1)."""
    return train_error(*run_main(train_command, argv, capsys)[::2])


def _usage_error_of(argv, capsys) -> str:
    """The error line of options that do not go together (exit status 2, after the usage)."""
    return train_usage_error(*run_main(train_command, argv, capsys)[::2])


def test_bad_parallel_files_are_reported_by_name_and_count(tmp_path, capsys):
    src = _write(tmp_path / "train.en", ["one", "two", "three"])
    tgt = _write(tmp_path / "train.de", ["eins", "zwei"])
    empty = _write(tmp_path / "empty.de", ["", "  "])
    out = ["--output_dir", str(tmp_path / "out"), *TINY]

    message = _error_of(["--preset", "multi30k", "--train_source", src, "--train_target", tgt, *out], capsys)
    assert src in message and tgt in message and "3 lines" in message and "2" in message

    message = _error_of(["--preset", "multi30k", "--train_source", src, "--train_target", empty, *out], capsys)
    assert empty in message and "empty" in message

    missing = str(tmp_path / "nope.de")
    message = _error_of(["--preset", "multi30k", "--train_source", src, "--train_target", missing, *out], capsys)
    assert missing in message and "does not exist" in message

    message = _usage_error_of(["--preset", "multi30k", "--train_source", src, *out], capsys)
    assert "--train-target" in message

    message = _usage_error_of(["--preset", "multi30k", *out], capsys)
    assert "needs data" in message


@pytest.mark.slow  # fresh interpreters
def test_command_line_errors_print_one_line_without_traceback(tmp_path):
    src = _write(tmp_path / "train.en", ["one", "two"])
    result = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer.training.train", "--preset", "multi30k", "--train_source", src,
         "--train_target", str(tmp_path / "missing.de"), "--output_dir", str(tmp_path / "out")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO_ROOT},
    )
    assert train_error(result.returncode, result.stderr) == (
        f"vanilla-transformer train: error: The train target file {tmp_path / 'missing.de'} does not exist.")


# ---------------------------------------------------------------------------------------------------------------
# End to end


def test_demo_run_saves_a_checkpoint_whose_generations_score_the_reported_bleu(tmp_path):
    import sacrebleu
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    out = tmp_path / "demo"
    metrics = train_main(["--output_dir", str(out), "--max_steps", "6", "--save_steps", "3", "--logging_steps", "1",
                          "--average_last_n_checkpoints", "2", "--dropout", "0.0", "--max_target_length", "16",
                          "--length_penalty", "1.2", *TINY])
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "README.md",
                 "trainer_state.json", "test_predictions.txt", "all_results.json"):
        assert (out / name).is_file(), name
    assert sorted(os.listdir(out / "checkpoint-3")) and (out / "checkpoint-6").is_dir()
    # decoding stops at the longest target length trained on (+ the start token), below the 20 positions
    generation = json.loads((out / "generation_config.json").read_text())
    assert (generation["max_length"], generation["length_penalty"], generation["num_beams"]) == (17, 1.2, 4)

    # the paper's learning rate for d_model 32 and 4 warmup steps: the Trainer logs the rate its update number s
    # used, which is the paper's rate of step s - 1 (HF counts steps from 0, so the first update has rate 0)
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    logged = {entry["step"]: entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry}
    assert sorted(logged) == [1, 2, 3, 4, 5, 6] and logged[1] == 0
    for step in range(2, 7):
        paper_step = step - 1
        assert logged[step] == pytest.approx(32**-0.5 * min(paper_step**-0.5, paper_step * 4**-1.5), rel=1e-6)

    # the saved weights are the mean of the last two checkpoints, read straight from their files
    from safetensors.torch import load_file

    final = load_file(out / "model.safetensors")
    for name, tensor in final.items():
        mean = (load_file(out / "checkpoint-3" / "model.safetensors")[name]
                + load_file(out / "checkpoint-6" / "model.safetensors")[name]) / 2
        torch.testing.assert_close(tensor, mean, msg=name)

    # BLEU of the saved model decoding with its own generation config, recomputed with sacreBLEU
    from vanilla_transformer.training.numbers import number_translation_splits

    test = number_translation_splits(train_size=300, seed=42)["test"]
    sources, references = test["source"][:24], test["target"][:24]
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        generated = model.generate(**tokenizer(sources, return_tensors="pt", padding=True))
    hypotheses = tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert (out / "test_predictions.txt").read_text(encoding="utf-8").splitlines() == [h.strip() for h in hypotheses]
    bleu = sacrebleu.corpus_bleu([h.strip() for h in hypotheses], [references], tokenize="char").score
    assert metrics["test_bleu"] == pytest.approx(bleu, abs=0.01)
    exact = sum(h.strip() == r for h, r in zip(hypotheses, references)) / len(references)
    assert metrics["test_exact_match"] == pytest.approx(exact, abs=1e-4)
    # the model card carries the test scores in its metadata (model-index)
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")
    scores = {result.metric_type: result.metric_value for result in card.data.eval_results}
    assert scores["bleu"] == metrics["test_bleu"] and scores["exact_match"] == metrics["test_exact_match"]
    assert {result.dataset_split for result in card.data.eval_results} == {"test"}
    assert card.data.language == ["en", "de"]
    assert f'translator("{sources[0]}")' in card.text  # the usage snippet translates a test sentence


class Interrupt(Exception):
    pass


@pytest.mark.slow  # training runs
def test_resume_from_checkpoint_continues_without_losing_steps(tmp_path):
    """Kill a run after its step-4 checkpoint (at step 6), resume: losses and weights match an uninterrupted run."""
    from transformers import TrainerCallback

    class CrashAtStep6(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 6:
                raise Interrupt

    # ~5 batches per epoch, so the resumed run starts mid-epoch and crosses epoch boundaries
    common = ["--max_steps", "12", "--save_steps", "4", "--logging_steps", "1",
              *tiny(demo_train_size=120, max_tokens=250)]
    full = tmp_path / "full"
    train_main(["--output_dir", str(full), *common])

    broken = tmp_path / "broken"
    with pytest.raises(Interrupt):
        train_main(["--output_dir", str(broken), *common], callbacks=[CrashAtStep6()])
    assert (broken / "checkpoint-4").is_dir() and not (broken / "checkpoint-8").exists()
    train_main(["--output_dir", str(broken), "--resume_from_checkpoint", "true", *common])

    def losses(folder):
        state = json.loads((folder / "trainer_state.json").read_text())
        return state["global_step"], {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}

    full_steps, full_losses = losses(full)
    resumed_steps, resumed_losses = losses(broken)
    assert full_steps == resumed_steps == 12
    assert sorted(resumed_losses) == list(range(1, 13))  # steps 1-4 from the checkpoint's history, 5-12 resumed
    for step in range(1, 13):
        assert resumed_losses[step] == pytest.approx(full_losses[step], rel=1e-4), step

    from safetensors.torch import load_file

    full_weights, resumed_weights = load_file(full / "model.safetensors"), load_file(broken / "model.safetensors")
    for name in full_weights:
        torch.testing.assert_close(resumed_weights[name], full_weights[name], rtol=1e-4, atol=1e-5)


def test_a_second_run_into_the_same_folder_must_resume_or_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--output_dir", str(out), "--max_steps", "2", "--save_steps", "2", *TINY]
    train_main(argv)
    capsys.readouterr()
    assert "--resume_from_checkpoint" in _usage_error_of(argv, capsys)
    train_main([*argv, "--overwrite_output_dir", "true"])


def test_hugging_face_dataset_with_a_translation_column(tmp_path, capsys):
    folder = tmp_path / "dataset"
    folder.mkdir()
    from vanilla_transformer.training.numbers import number_translation_splits

    corpus = number_translation_splits(train_size=200, validation_size=10, test_size=12, seed=1,
                                       source_lang="en", target_lang="fr")
    for split in ("train", "test"):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for s, t in zip(corpus[split]["source"], corpus[split]["target"]):
                f.write(json.dumps({"translation": {"en": s, "fr": t, "de": "-"}}) + "\n")
    out = tmp_path / "out"
    metrics = train_main(["--preset", "multi30k", "--dataset_name", str(folder), "--source_lang", "en",
                          "--target_lang", "fr", "--output_dir", str(out), "--max_steps", "2",
                          "--average_last_n_checkpoints", "0", *TINY])
    assert "test_bleu" in metrics
    assert len((out / "test_predictions.txt").read_text(encoding="utf-8").splitlines()) == 12
    capsys.readouterr()
    message = _error_of(["--preset", "multi30k", "--dataset_name", str(folder), "--source_lang", "en",
                         "--target_lang", "it", "--output_dir", str(tmp_path / "out2"), *TINY], capsys)
    assert "no it text" in message and "'fr'" in message


# ---------------------------------------------------------------------------------------------------------------
# Checkpoint averaging


def _tiny_checkpoints(folder, steps):
    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

    config = VanillaTransformerConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1,
                                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                      decoder_ffn_dim=32)
    paths = []
    for step in steps:
        torch.manual_seed(step)
        path = folder / f"checkpoint-{step}"
        VanillaTransformerForConditionalGeneration(config).save_pretrained(path)
        paths.append(path)
    return paths


def test_average_checkpoints_command_writes_the_mean_of_the_last_n(tmp_path, capsys):
    from safetensors.torch import load_file
    from transformers import AutoModelForSeq2SeqLM

    _tiny_checkpoints(tmp_path, [5, 10, 20, 100])  # numeric, not lexicographic, order: 100 is the last
    assert [os.path.basename(p) for p in last_checkpoints(tmp_path, 3)] == ["checkpoint-10", "checkpoint-20",
                                                                            "checkpoint-100"]
    average_main(["--checkpoint_dir", str(tmp_path), "--last", "3", "--output_dir", str(tmp_path / "avg")])
    averaged = load_file(tmp_path / "avg" / "model.safetensors")
    files = [load_file(tmp_path / f"checkpoint-{s}" / "model.safetensors") for s in (10, 20, 100)]
    assert set(averaged) == set(files[0])
    for name, tensor in averaged.items():
        torch.testing.assert_close(tensor, sum(f[name] for f in files) / 3, msg=name)
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "avg")
    assert model.lm_head.weight.data_ptr() == model.model.shared.weight.data_ptr()  # still tied

    with pytest.raises(SystemExit):
        average_main(["--checkpoint_dir", str(tmp_path), "--last", "9", "--output_dir", str(tmp_path / "x")])
    assert "only 4" in capsys.readouterr().err


def test_averaging_refuses_checkpoints_of_different_shapes(tmp_path):
    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

    first = _tiny_checkpoints(tmp_path, [1])[0]
    other = VanillaTransformerConfig(vocab_size=40, d_model=8, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                     decoder_ffn_dim=32)
    VanillaTransformerForConditionalGeneration(other).save_pretrained(tmp_path / "checkpoint-2")
    with pytest.raises(ValueError, match="architecture"):
        average_checkpoints([first, tmp_path / "checkpoint-2"])


def test_time_budget_stops_training_and_keeps_a_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "budget"
    train_main(["--output_dir", str(out), "--max_steps", "10000", "--save_steps", "10000",
                "--max_train_minutes", "0.0001", *tiny(max_test_samples=4, report_to="tensorboard")])
    state = json.loads((out / "trainer_state.json").read_text())
    assert 1 <= state["global_step"] < 10000
    assert (out / f"checkpoint-{state['global_step']}").is_dir()
    assert list((out / "runs").glob("*/events.out.tfevents.*"))  # TensorBoard logs
