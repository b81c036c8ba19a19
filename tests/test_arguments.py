"""training/arguments.py: presets fill the dataclasses they name, and the learning rate is settled while parsing."""

import dataclasses

import pytest
from transformers import GenerationConfig

from helpers import run_main
from vanilla_transformer.cli.main import main as cli_main
from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.training.arguments import DataArguments, parse_arguments
from vanilla_transformer.training.presets import PRESETS, paper_learning_rate
from vanilla_transformer.training.trainer import TranslationTrainingArguments

DATA = ["--train_source", "a.en", "--train_target", "a.de", "--report_to", "none"]


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_value_is_a_field_of_the_dataclass_it_names(name):
    preset = PRESETS[name]
    data_fields = {f.name for f in dataclasses.fields(DataArguments)}
    training_fields = {f.name for f in dataclasses.fields(TranslationTrainingArguments)}
    assert set(preset.data) <= data_fields, set(preset.data) - data_fields
    assert set(preset.training_defaults()) <= training_fields, set(preset.training_defaults()) - training_fields
    generation_fields = set(GenerationConfig().to_dict())
    assert set(preset.generation) <= generation_fields, set(preset.generation) - generation_fields
    data_args, _, args, _ = parse_arguments(["--preset", name, *DATA])
    for key, value in preset.data.items():
        assert getattr(data_args, key) == value, key
    for key in ("max_tokens", "max_steps", "warmup_steps", "average_last_n_checkpoints"):
        if key in preset.training:
            assert getattr(args, key) == preset.training[key], key


def test_learning_rate_is_settled_while_parsing():
    _, _, args, explicit = parse_arguments(["--report_to", "none"])  # demo: the paper's, d_model 128, warmup 300
    assert args.learning_rate == pytest.approx(paper_learning_rate(128, 300)) and "learning_rate" not in explicit
    _, _, args, _ = parse_arguments(["--report_to", "none", "--d_model", "64", "--warmup_steps", "50"])
    assert args.learning_rate == pytest.approx(paper_learning_rate(64, 50))
    _, _, args, _ = parse_arguments(["--preset", "tiny", *DATA])  # the preset's own
    assert args.learning_rate == PRESETS["tiny"].training["learning_rate"]
    _, _, args, explicit = parse_arguments(["--preset", "tiny", *DATA, "--learning_rate", "0.01"])
    assert args.learning_rate == 0.01 and "learning_rate" in explicit


def test_paper_learning_rate_needs_a_warmup_in_steps(capsys):
    """A usage error of the train command: exit status 2, its usage and one error line."""
    with pytest.raises(UsageError, match="needs --warmup_steps >= 1"):
        parse_arguments(["--report_to", "none", "--warmup_steps", "0.1"])
    code, _, stderr = run_main(cli_main, ["train", "--report_to", "none", "--warmup_steps", "0.1"], capsys)
    assert code == 2 and stderr.startswith("usage: vanilla-transformer train") and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].endswith("needs --warmup_steps >= 1; give --learning_rate to choose one "
                                                    "yourself."), stderr


def test_paper_learning_rate_from_an_unreadable_checkpoint_is_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    code, _, stderr = run_main(cli_main, ["train", "--report_to", "none", "--model_name_or_path", str(tmp_path)],
                               capsys)
    assert code == 1 and stderr.count("\n") == 1 and "cannot read its config" in stderr, stderr
    assert stderr.startswith("vanilla-transformer train: error: --model_name_or_path") and "Traceback" not in stderr


def test_time_budget_without_max_steps_plans_and_refuses_a_schedule_it_cannot_plan(capsys):
    _, _, args, _ = parse_arguments(["--preset", "tiny", *DATA, "--max_train_minutes", "5"])
    assert args.plans_time_budget and args.max_train_minutes == 5
    _, _, args, _ = parse_arguments(["--preset", "tiny", *DATA, "--max_train_minutes", "5", "--max_steps", "100"])
    assert not args.plans_time_budget and args.max_steps == 100  # the clock only stops it
    with pytest.raises(SystemExit):
        parse_arguments(["--preset", "tiny", *DATA, "--max_train_minutes", "5", "--lr_scheduler_type", "polynomial"])
    assert "--lr_scheduler_type polynomial needs --max_steps" in capsys.readouterr().err


def test_help_shows_the_presets_defaults(capsys):
    code, out, _ = run_main(parse_arguments, ["--preset", "tiny", "--help"], capsys)
    assert code == 0 and "object at 0x" not in out
    assert "(default: 0.003)" in out and "(default: 4096)" in out  # tiny's learning rate and batch tokens


def test_the_pre_ln_preset_is_multi30k_with_pre_layernorm_a_smaller_ffn_and_vocabulary_and_its_own_peak():
    """`multi30k-pre-ln` changes the residual layout, the feed-forward size, the dropout, the vocabulary and the peak
    learning rate of `multi30k`, nothing else; the model it builds is pre-LayerNorm (a final LayerNorm on each stack)
    with d_ff 512 and dropout 0.2, and `multi30k`'s is the paper's post-LN with d_ff 1,024 and dropout 0.1."""
    from vanilla_transformer import VanillaTransformerConfig
    from vanilla_transformer.training.build import build_model

    post, pre = PRESETS["multi30k"], PRESETS["multi30k-pre-ln"]
    assert pre.model["normalize_before"] and not post.model.get("normalize_before", False)
    changed = {"normalize_before", "encoder_ffn_dim", "decoder_ffn_dim", "dropout"}
    assert {k: v for k, v in pre.model.items() if k not in changed} == {
        k: v for k, v in post.model.items() if k not in changed}
    assert pre.model["encoder_ffn_dim"] == pre.model["decoder_ffn_dim"] == post.model["encoder_ffn_dim"] // 2
    assert {**pre.data, "vocab_size": post.data["vocab_size"]} == post.data
    assert pre.data["vocab_size"] < post.data["vocab_size"]
    assert {**pre.training, "learning_rate": post.training["learning_rate"]} == post.training
    assert pre.training["learning_rate"] > post.training["learning_rate"] and pre.generation == post.generation

    for preset, pre_ln in ((pre, True), (post, False)):
        _, model_args, _, _ = parse_arguments(["--preset", "multi30k-pre-ln" if pre_ln else "multi30k", *DATA])
        model = build_model(model_args, preset, Tokenizer(), resume=None)
        assert isinstance(model.config, VanillaTransformerConfig) and model.config.normalize_before is pre_ln
        assert (model.model.encoder.layer_norm is not None) is pre_ln
        assert (model.model.decoder.layer_norm is not None) is pre_ln
        assert model.config.encoder_ffn_dim == model.config.decoder_ffn_dim == (512 if pre_ln else 1024)
        assert model.config.dropout == (0.2 if pre_ln else 0.1)


class Tokenizer:  # the four ids and the length build_model reads
    pad_token_id, bos_token_id, eos_token_id = 1, 0, 2

    def __len__(self):
        return 120


def test_the_preset_sets_the_decoding_of_a_new_model_and_the_option_overrides_it(tmp_path):
    """generation_config of a new model: the preset's length penalty (multi30k), the model's 0.6 for a preset without
    one (demo), --length_penalty over both; a --model_name_or_path checkpoint keeps its own unless the option is
    given. Beam 4 stays."""
    from vanilla_transformer.training.build import build_model

    cases = [("multi30k", [], 1.4), ("multi30k", ["--length_penalty", "0.8"], 0.8), ("demo", [], 0.6),
             ("demo", ["--length_penalty", "1.1"], 1.1)]
    for name, options, expected in cases:
        _, model_args, _, _ = parse_arguments(["--preset", name, *DATA, *options])
        model = build_model(model_args, PRESETS[name], Tokenizer(), resume=None)
        assert (model.generation_config.length_penalty, model.generation_config.num_beams) == (expected, 4), name
    model.save_pretrained(tmp_path / "checkpoint")  # length penalty 1.1
    for options, expected in (([], 1.1), (["--length_penalty", "0.9"], 0.9)):
        _, model_args, _, _ = parse_arguments(
            ["--preset", "multi30k", *DATA, "--model_name_or_path", str(tmp_path / "checkpoint"), *options])
        model = build_model(model_args, PRESETS["multi30k"], Tokenizer(), resume=None)
        assert model.generation_config.length_penalty == expected, options
