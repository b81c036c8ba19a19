"""The options of `python -m training.train`, parsed into three dataclasses with the preset's values as defaults.

- `DataArguments` (data, vocabulary, evaluation), `ModelArguments` (architecture) and `TranslationTrainingArguments`
  (every Seq2SeqTrainingArguments flag and ours, training/trainer.py), parsed by HfArgumentParser.
- `parse_arguments` settles everything that depends on more than one option before anything is built: the
  preset's defaults, the peak learning rate (the preset's, else the paper's (d_model * warmup_steps)^-0.5 from the
  final d_model and warmup), the precision the machine does fast (training/precision.py), and a time budget's
  placeholder step count (training/budget.py). It returns the names of the options given on the command line too.
- `option_table`: the parser written down as a table (training/option_table.py), from which `--help` and argparse's
  usage errors are answered without torch.
"""

import argparse
import dataclasses
import difflib
import json
import math
import os
import sys
from dataclasses import dataclass, field

import torch
from transformers import AutoConfig, HfArgumentParser

from vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.files.paths import file_key
from vanilla_transformer.training.augmentation import parse_augment
from vanilla_transformer.training.budget import PLACEHOLDER_MAX_STEPS, SCHEDULES
from vanilla_transformer.training.option_table import (
    cached_table,
    check_command_line,
    save_table,
    table_key,
    table_of,
    unknown_preset,
)
from vanilla_transformer.training.precision import default_precision
from vanilla_transformer.training.presets import PRESETS, Preset, paper_learning_rate
from vanilla_transformer.training.trainer import TranslationTrainingArguments

# the train command's usage and name in argparse's messages (`python -m training.train` is the same command)
PROG = "vanilla-transformer train"
USAGE = f"{PROG} [--preset {{{'|'.join(PRESETS)}}}] [data, model and Trainer options; --help lists them all]"


@dataclass
class DataArguments:
    preset: str = field(default="demo", metadata={
        "help": "Sets the defaults of every other option ('--preset NAME --help' shows them). "
                + " ".join(f"{k}: {p.description}" for k, p in PRESETS.items())})
    dataset_name: str | None = field(default=None, metadata={
        "help": "A Hugging Face dataset (name or local folder) with a 'translation' column, as in transformers' "
                "translation example."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration, e.g. 'de-en'."})
    source_lang: str | None = field(default=None, metadata={
        "help": "Source language code (e.g. 'en'). With text files, defaults to the source file's extension."})
    target_lang: str | None = field(default=None, metadata={"help": "Target language code (e.g. 'de')."})
    train_source: list[str] | None = field(default=None, metadata={
        "help": "Training source sentences, one per line. Several files are several corpora (e.g. original and "
                "back-translated), each cached, cleaned and counted on its own, paired with --train_target by "
                "position (docs/large-corpora.md#several-corpora)."})
    train_target: list[str] | None = field(default=None, metadata={
        "help": "Their translations, line by line: one file per --train_source file, in the same order."})
    train_weights: list[float] | None = field(default=None, metadata={
        "help": "With several corpora: how many times each corpus's pairs are drawn per epoch, one number per "
                "corpus (default 1 each): 2 = every pair twice; 0.5 = a half drawn with --seed; 1.5 = every pair "
                "once and a seeded half once more."})
    train_tags: list[str] | None = field(default=None, metadata={
        "help": "With several corpora: a token put before the source sentences of each corpus (tagged back-"
                "translation, Caswell et al. 2019), one per corpus, '' or 'none' for none: e.g. --train_tags none "
                "'<BT>'. Each tag is one special token of the trained BPE vocabulary, read as the tag wherever it "
                "occurs: it starts and ends with a character other than a letter or digit (e.g. <BT>, >>bt<<), and no "
                "line of the training files may hold it."})
    validation_source: str | None = field(default=None, metadata={"help": "Validation source sentences."})
    validation_target: str | None = field(default=None, metadata={"help": "Validation references."})
    test_source: str | None = field(default=None, metadata={"help": "Test source sentences (BLEU for the card)."})
    test_target: str | None = field(default=None, metadata={"help": "Test references."})
    max_source_length: int = field(default=256, metadata={"help": "Truncate source sentences to this many tokens."})
    max_target_length: int = field(default=256, metadata={"help": "Truncate target sentences to this many tokens."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation pairs."})
    max_test_samples: int | None = field(default=None, metadata={"help": "Use only the first N test pairs."})
    tokenizer_name: str | None = field(default=None, metadata={
        "help": "A tokenizer to use (folder or Hub id). Default: train a shared BPE vocabulary on the training data."})
    vocab_size: int = field(default=8000, metadata={"help": "Size of the BPE vocabulary trained on the data."})
    bpe_dropout: float = field(default=0.0, metadata={
        "help": "BPE-dropout (Provilkov et al. 2020): while training, each BPE merge is skipped with this "
                "probability, so the training sentences are segmented anew every time (0.1 in the paper; 0: off). "
                "Needs a fast BPE tokenizer (the one trained on the data is); evaluation is not affected."})
    augment: str | None = field(default=None, metadata={
        "help": "Change training pairs on the fly, after OpusTrainer's modifiers: NAME=PROBABILITY items separated by "
                "commas, e.g. 'upper=0.05,title=0.05,typos=0.02,noise=0.01'. upper/title: both sides upper-/title-"
                "cased, drawn per batch; typos: typing errors in the source only, per pair; noise: a pair of random "
                "words (the same on both sides) added beside a pair. Deterministic with --seed; off by default "
                "(training/augmentation.py, docs/train.md)."})
    streaming: bool = field(default=False, metadata={
        "help": "Read, tokenize and clean the training text files on the fly while training (nothing cached; needs "
                "--max_steps or --max_train_minutes): for a corpus one does not want copied into the cache. Without "
                "it, the files are read once into a memory-mapped Arrow cache (docs/large-corpora.md)."})
    no_clean: bool = field(default=False, metadata={
        "help": "Keep every training pair of text files. Default: drop pairs with an empty side, longer than "
                "--max_source_length/--max_target_length tokens or with a length ratio above 9, and exact "
                "duplicates (the rules of Moses' clean-corpus-n.perl); the counts go into all_results.json."})
    data_cache_dir: str | None = field(default=None, metadata={
        "help": "Where the training text files are cached as Arrow files (read once, tokenized once per tokenizer). "
                "Default: $HF_DATASETS_CACHE/vanilla-transformer-corpora (~/.cache/huggingface/datasets/...)."})
    verify_corpus: bool = field(default=False, metadata={
        "help": "Use the cached copy of the training files only if their content's SHA-256, recorded when they were "
                "read, still matches (one more pass over the files). Default: a file is read again when its path, "
                "inode, size, modification or status-change time changed, which every edit shows on local disks; "
                "this is for file systems that do not report them reliably."})
    train_while_tokenizing: bool | None = field(default=None, metadata={
        "help": "Start training once the first block of 100,000 cached training pairs is tokenized, while a thread "
                "tokenizes the rest: the first pass visits the blocks in a seeded order, later passes are the usual "
                "epochs (needs --max_steps or --max_train_minutes; docs/large-corpora.md). Default: for one corpus "
                "of 1,000,000 pairs or more; false: tokenize everything first."})
    tokenizer_sample_lines: int = field(default=1_000_000, metadata={
        "help": "Train the BPE vocabulary on at most this many sentences (both sides of half as many training "
                "pairs), drawn at random with --seed from a larger corpus (as SentencePiece's input_sentence_size)."})
    preprocessing_num_workers: int | None = field(default=None, metadata={
        "help": "Processes that tokenize the training text files (datasets' num_proc). Default: one process whose "
                "batched fast-tokenizer calls use every core."})
    shuffle_buffer_pairs: int = field(default=100_000, metadata={
        "help": "With --streaming: pairs held in the shuffle buffer."})
    maxi_batch_pairs: int = field(default=20_000, metadata={
        "help": "With --streaming, and in the first pass of --train_while_tokenizing: pairs sorted by length "
                "together before they are cut into token batches (Marian's maxi-batch)."})
    dataset_card_name: str | None = field(default=None, metadata={
        "help": "Name of the data set in the model card. Default: --dataset_name, the folder of the text files, or "
                "the demo corpus's description."})
    demo_train_size: int = field(default=50_000, metadata={"help": "Training pairs of the generated demo corpus."})
    bleu_tokenize: str = field(default="13a", metadata={
        "help": "sacreBLEU tokenization: 13a (the standard), intl, char (for text without spaces, e.g. the demo's "
                "German number words), zh, ja-mecab, ..."})
    literature_bleu: bool = field(default=False, metadata={
        "help": "Also score BLEU the way the Multi30k literature does: lowercased, Moses-normalised and -tokenised "
                "text (as the dataset's *.lc.norm.tok files), no further tokenisation (training/metrics.py)."})
    num_sample_translations: int = field(default=0, metadata={
        "help": "At the end, print this many test translations made by pipeline('translation', model=output_dir)."})
    watch_steps: float = field(default=0.0, metadata={
        "help": "Record every N steps (a number below 1: that fraction of --max_steps) the cross-attention and greedy "
                "translation of --watch_sentences validation sentences, and each layer's gradient norm, into "
                "OUTPUT_DIR/watch/ for `vanilla-transformer explore OUTPUT_DIR --training` (training/watch.py). "
                "0: off."})
    watch_sentences: int = field(default=3, metadata={
        "help": "With --watch_steps: how many validation sentences (the first ones) to record."})

    def __post_init__(self):
        check_training_corpora(self)
        if self.augment is not None:
            parse_augment(self.augment)  # ValueError: one line naming the item
        if not (0.0 <= self.bpe_dropout < 1.0):  # also NaN
            raise ValueError(f"--bpe_dropout must be at least 0 and below 1, got {self.bpe_dropout}")
        for name in ("tokenizer_sample_lines", "shuffle_buffer_pairs", "maxi_batch_pairs"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}")
        for name in ("max_train_samples", "max_eval_samples", "max_test_samples"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.preprocessing_num_workers is not None and self.preprocessing_num_workers < 1:
            raise ValueError(f"--preprocessing_num_workers must be at least 1, got {self.preprocessing_num_workers}")


def check_training_corpora(data_args) -> None:
    """ValueError (one line, a usage error) for training corpora that do not go together: different numbers of
    source and target files, weights or tags that are not one per corpus, a weight that is not a positive finite
    number, a tag with a space or with a letter or digit at either end, the same file twice under any names
    (`file_key`: symbolic and hard links too; a source file may serve corpora with different targets)."""
    sources = data_args.train_source if isinstance(data_args.train_source, list) else [data_args.train_source]
    targets = data_args.train_target if isinstance(data_args.train_target, list) else [data_args.train_target]
    sources, targets = [path for path in sources if path is not None], [path for path in targets if path is not None]
    if len(sources) != len(targets) and sources and targets:
        raise ValueError(f"--train_source gives {len(sources)} files but --train_target {len(targets)}; each "
                         "corpus is a source file and its target file, paired by position.")
    for option, values in (("--train_weights", data_args.train_weights), ("--train_tags", data_args.train_tags)):
        if values is not None and len(values) != len(sources):
            raise ValueError(f"{option} gives {len(values)} values for {len(sources)} training corpora; give one "
                             "per --train_source file.")
    for weight in data_args.train_weights or ():
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"--train_weights must be positive numbers, got {weight:g}")
    for tag in data_args.train_tags or ():
        if tag in ("", "none"):
            continue
        if tag.split() != [tag]:
            raise ValueError(f"--train_tags: a tag is one token without spaces, got {tag!r}")
        # the tokenizer reads a tag wherever its characters occur, inside words too: markup never part of a word
        if tag[0].isalnum() or tag[-1].isalnum():
            raise ValueError(f"--train_tags: a tag starts and ends with a character other than a letter or digit, "
                             f"so that it is never part of a word (e.g. <BT> or >>bt<<), got {tag!r}")
    # A source file may be shared by corpora with different targets (a distilled and an original translation of
    # it); a target file, or a file on both sides, is one corpus's.
    seen = {}
    for side, paths in (("source", sources), ("target", targets)) if len(sources) == len(targets) else ():
        for index, path in enumerate(paths):
            real = file_key(path)
            earlier = seen.get(real)
            if earlier is not None and (side == "target" or earlier[0] == "target"
                                        or file_key(targets[earlier[1]]) == file_key(targets[index])):
                raise ValueError(f"--train_source/--train_target name {path} twice"
                                 f"{f' (as {earlier[2]})' if earlier[2] != path else ''}; give each corpus once (to "
                                 "draw a corpus more often, give it a --train_weights).")
            seen.setdefault(real, (side, index, path))


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Start from this checkpoint (folder or Hub id) instead of a new model."})
    d_model: int | None = field(default=None, metadata={"help": "Model width (preset value if unset)."})
    encoder_layers: int | None = field(default=None, metadata={"help": "Encoder layers."})
    decoder_layers: int | None = field(default=None, metadata={"help": "Decoder layers."})
    attention_heads: int | None = field(default=None, metadata={"help": "Attention heads of encoder and decoder."})
    ffn_dim: int | None = field(default=None, metadata={"help": "Inner size d_ff of the feed-forward networks."})
    dropout: float | None = field(default=None, metadata={"help": "Residual and embedding dropout P_drop."})
    attention_dropout: float | None = field(default=None, metadata={"help": "Dropout on attention weights."})
    activation_dropout: float | None = field(default=None, metadata={"help": "Dropout inside the feed-forward net."})
    config_overrides: str | None = field(default=None, metadata={
        "help": "Any other VanillaTransformerConfig values, e.g. 'normalize_before=true,position_embedding_type=learned'."})
    length_penalty: float | None = field(default=None, metadata={
        "help": "Beam search's length penalty saved in generation_config.json (a hypothesis scores its summed "
                "log-probabilities / length^penalty; higher favours longer outputs): the preset's value, else the "
                "model's 0.6. Also sets the decoding of a --model_name_or_path checkpoint."})

    def config_values(self) -> dict:
        """The VanillaTransformerConfig values these options set. An unknown --config_overrides key is an error that
        names the closest fields; so is a key the tokenizer sets (vocab_size, the special token ids)."""
        values = {name: getattr(self, name) for name in
                  ("d_model", "encoder_layers", "decoder_layers", "dropout", "attention_dropout", "activation_dropout")
                  if getattr(self, name) is not None}
        if self.attention_heads is not None:
            values.update(encoder_attention_heads=self.attention_heads, decoder_attention_heads=self.attention_heads)
        if self.ffn_dim is not None:
            values.update(encoder_ffn_dim=self.ffn_dim, decoder_ffn_dim=self.ffn_dim)
        for item in filter(None, (self.config_overrides or "").split(",")):
            key, sep, raw = item.partition("=")
            if not sep:
                raise ValueError(f"--config_overrides expects key=value pairs separated by commas, got {item!r}.")
            key = key.strip()
            check_config_key(key)
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = raw
            values[key] = value
        return values

    def generation_values(self) -> dict:
        """The GenerationConfig values these options set (ValueError, one line, for a length penalty that is not a
        finite number)."""
        if self.length_penalty is None:
            return {}
        if not math.isfinite(self.length_penalty):
            raise ValueError(f"--length_penalty must be a finite number, got {self.length_penalty}")
        return {"length_penalty": self.length_penalty}


# the option groups, in the order parse_arguments returns them
DATACLASS_TYPES = (DataArguments, ModelArguments, TranslationTrainingArguments)

# Set by build_model from the tokenizer, so an override would be ignored.
TOKENIZER_CONFIG_KEYS = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


# counts that are at least 1 whatever their default (None: the preset's): a width, a number of layers or heads, the
# tokens of a sentence (its </s> among them)
AT_LEAST_ONE = ("d_model", "encoder_layers", "decoder_layers", "attention_heads", "ffn_dim", "max_source_length",
                "max_target_length")
# probabilities of dropping or smoothing: 1 would leave nothing to learn from
FRACTIONS = ("dropout", "attention_dropout", "activation_dropout", "label_smoothing_factor")


def check_number_options(*settings) -> None:
    """Raise ValueError (one line naming the option) for a number in the dataclasses `settings` (the parsed options
    of a command built on `HfArgumentParser`, e.g. the training recipe's) that is not finite (nan, inf), or that is
    negative where the option's default is not: a number option's range starts where its default does (a default
    of -1 or None marks options whose negative values or absence mean something); `AT_LEAST_ONE` below 1, or
    `FRACTIONS` outside [0, 1)."""
    for group in settings:
        for option in dataclasses.fields(group):
            value = getattr(group, option.name, None)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not math.isfinite(value):
                raise ValueError(f"--{option.name} must be a finite number, got {value}")
            if option.name in AT_LEAST_ONE and value < 1:
                raise ValueError(f"--{option.name} must be at least 1, got {value}")
            if option.name in FRACTIONS and not 0 <= value < 1:
                raise ValueError(f"--{option.name} must be from 0 to below 1, got {value}")
            default = option.default
            if (value < 0 and isinstance(default, (int, float)) and not isinstance(default, bool)
                    and default >= 0):
                raise ValueError(f"--{option.name} must be 0 or more, got {value}")


def check_config_key(key: str) -> None:
    """Raise ValueError (one line) unless `key` names a VanillaTransformerConfig field or one of its aliases."""
    if key in TOKENIZER_CONFIG_KEYS:
        raise ValueError(f"--config_overrides: {key} is set from the tokenizer"
                         + (" (--vocab_size sets the size of the BPE vocabulary trained on the data)."
                            if key == "vocab_size" else "."))
    valid = [*VanillaTransformerConfig.__dataclass_fields__, *VanillaTransformerConfig.attribute_map]
    if key not in valid:
        close = difflib.get_close_matches(key, valid, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}?" if close else "VanillaTransformerConfig has no such field"
        raise ValueError(f"--config_overrides: unknown key {key!r} ({hint})")


def hyphens_first(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The command line's convention, hyphens (`--max-train-minutes`), first in `--help` and in argparse's messages;
    HfArgumentParser accepts both spellings of every option, so the underscore one (transformers' examples, e.g.
    run_translation.py) keeps working."""
    for action in parser._actions:  # argparse keeps no public list of its actions
        action.option_strings.sort(key=lambda option: "_" in option)
    return parser


def explicit_options(parser: argparse.ArgumentParser, argv: list[str], dataclass_types) -> set[str]:
    """Names of the options given on the command line (as opposed to taken from a default or preset): parsed once
    more with every default replaced by a marker (argparse leaves the defaults of options not given)."""
    unset = object()
    names = [f.name for dataclass_type in dataclass_types for f in dataclasses.fields(dataclass_type) if f.init]
    parser.set_defaults(**dict.fromkeys(names, unset))
    namespace, _ = parser.parse_known_args(argv)
    return {name for name, value in vars(namespace).items() if value is not unset}


class LearningRateError(ValueError):
    """The paper's learning rate cannot be computed: the checkpoint's config cannot be read."""


def architecture_d_model(model_args, preset: Preset) -> int:
    """d_model of the model the run will train: the option, the checkpoint's config, else the preset's."""
    if model_args.d_model is not None:
        return model_args.d_model
    if model_args.model_name_or_path is not None:
        try:
            config = AutoConfig.from_pretrained(model_args.model_name_or_path)
        except (OSError, ValueError) as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise LearningRateError(f"--model_name_or_path {model_args.model_name_or_path}: cannot read its config "
                                    f"for the paper's learning rate ({first_line}); give --learning_rate or a "
                                    "readable checkpoint.") from None
        if not hasattr(config, "d_model"):
            raise LearningRateError(f"--model_name_or_path {model_args.model_name_or_path} has no d_model in its "
                                    "config; give --learning_rate.")
        return config.d_model

    return preset.model.get("d_model", VanillaTransformerConfig().d_model)


def settle_learning_rate(model_args, training_args, preset: Preset) -> float:
    """The paper's peak learning rate (d_model * warmup_steps)^-0.5 (equation 3) for a run given no --learning_rate
    and a preset without one; it needs an integer --warmup_steps >= 1."""
    if not training_args.warmup_steps or training_args.warmup_steps < 1:
        raise UsageError("The paper's learning rate (d_model * warmup_steps)^-0.5 needs --warmup_steps >= 1; "
                                "give --learning_rate to choose one yourself.")
    return paper_learning_rate(architecture_d_model(model_args, preset), int(training_args.warmup_steps))


def recipe_parser() -> HfArgumentParser:
    """The parser of the recipe's options, without the preset's defaults."""
    return hyphens_first(HfArgumentParser(DATACLASS_TYPES, prog=PROG, usage=USAGE))


def preset_defaults(preset_name: str) -> dict:
    """The option defaults the preset `preset_name` sets, but those the machine decides (see `parse_arguments`)."""
    preset = PRESETS[preset_name]
    return {**preset.training_defaults(), **preset.data, "output_dir": os.path.join("outputs", preset_name),
            "ddp_find_unused_parameters": False}  # every parameter takes part in every step


def option_table() -> dict | None:
    """The table of the recipe's options (`training.option_table`): the one kept for the installed sources, else
    made from `recipe_parser` and kept for the next command. None where the parser cannot be written down as one."""
    table = cached_table()
    if table is None and (key := table_key()) is not None:
        presets = {name: {"defaults": preset_defaults(name)} for name in PRESETS}
        table = table_of(recipe_parser(), presets, key)
        if table is not None:
            save_table(table)
    return table


def parse_arguments(argv: list[str] | None = None):
    """-> (data_args, model_args, training_args, explicit option names). Preset values become the defaults; the
    learning rate, the precision and a time budget's step count are settled here, before anything is built.
    `--help` and argparse's usage errors are answered from the table of the options, as the train command answers
    them before importing torch (`training.option_table`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    table = option_table()
    if table is not None:
        check_command_line(argv, table)
    preset_parser = argparse.ArgumentParser(add_help=False)
    preset_parser.add_argument("--preset", default="demo")
    preset_parser.add_argument("--d_model", "--d-model", type=int)  # the widths the precision is measured at
    preset_parser.add_argument("--ffn_dim", "--ffn-dim", type=int)
    known = preset_parser.parse_known_args(argv)[0]
    for name in ("d_model", "ffn_dim"):  # measured with before the other options are checked
        if getattr(known, name) is not None and getattr(known, name) < 1:
            raise UsageError(f"--{name} must be at least 1, got {getattr(known, name)}")
    preset_name = known.preset
    parser = recipe_parser()
    if preset_name not in PRESETS:
        parser.error(unknown_preset(preset_name, PRESETS))
    preset = PRESETS[preset_name]
    explicit = explicit_options(HfArgumentParser(DATACLASS_TYPES, add_help=False), argv, DATACLASS_TYPES)
    defaults = preset_defaults(preset_name)
    try:
        import tensorboard  # noqa: F401

        defaults["report_to"] = "tensorboard"
    except ImportError:
        defaults["report_to"] = "none"

    defaults["dataloader_pin_memory"] = torch.cuda.is_available()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        # torchrun on a machine without GPUs: accelerate runs several CPU processes (gloo) only with use_cpu
        defaults["use_cpu"] = True
    if not {"bf16", "fp16"} & explicit:  # what the machine does fast (printed by vanilla_transformer.training.train)
        use_cpu = bool(defaults.get("use_cpu")) or "use_cpu" in explicit
        defaults.update(default_precision(**precision_question(known, preset, use_cpu))[0])
    if "max_train_minutes" in explicit and "max_steps" not in explicit:
        defaults["max_steps"] = PLACEHOLDER_MAX_STEPS  # the time budget plans the steps (training/budget.py)
    parser.set_defaults(**defaults)
    try:
        data_args, model_args, training_args = parser.parse_args_into_dataclasses(args=argv)
        check_time_budget(training_args)
    except ValueError as error:  # the dataclasses' own checks (__post_init__) and ours
        parser.error(str(error))
    try:
        check_number_options(data_args, model_args, training_args)  # nan, inf, negative: before any work
    except ValueError as error:
        raise UsageError(str(error)) from None
    if training_args.learning_rate is None:  # parsed again with the learning rate it implies as the default
        learning_rate = settle_learning_rate(model_args, training_args, preset)  # LearningRateError: exit status 1
        parser.set_defaults(learning_rate=learning_rate)
        data_args, model_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    return data_args, model_args, training_args, explicit


def precision_question(options, preset: Preset, use_cpu: bool) -> dict:
    """The arguments of `default_precision` for this run: the device and the model's widths (`options.d_model` and
    `options.ffn_dim`, given on the command line, else the preset's, else the paper's base model)."""
    d_model = options.d_model or preset.model.get("d_model", VanillaTransformerConfig().d_model)
    d_ff = options.ffn_dim or preset.model.get("encoder_ffn_dim", 4 * d_model)
    return {"use_cpu": use_cpu, "d_model": d_model, "d_ff": d_ff}


def check_time_budget(training_args) -> None:
    if training_args.plans_time_budget:
        schedule = getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)
        if schedule not in SCHEDULES:
            raise ValueError(f"--max_train_minutes plans the schedules {', '.join(SCHEDULES)}; --lr_scheduler_type "
                             f"{schedule} needs --max_steps.")
