"""What a run builds before it trains, each checked before anything is written: the data splits, the tokenizer
(given, or a BPE vocabulary trained on the training data), the model (new from the preset, or a checkpoint's) and
the `TranslationTrainer` with the tokenized splits."""

import os
import shutil

from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.checkpoints.kinds import tokenizer_errors
from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.files import reads_once
from vanilla_transformer.training.augmentation import augmenting_collator
from vanilla_transformer.training.context import RunContext, RunData
from vanilla_transformer.training.corpus_cache import sample_texts
from vanilla_transformer.training.data_sources import (
    SPLITS,
    demo_splits,
    language_from_extension,
    load_hub_dataset,
    load_text_files,
    training_corpora,
)
from vanilla_transformer.training.evaluation import example_sentences
from vanilla_transformer.training.messages import DataError, log
from vanilla_transformer.training.metrics import bleu_metric
from vanilla_transformer.training.precision import precision_in_use
from vanilla_transformer.training.text_corpus import (
    Corpora,
    background_training_set,
    cached_tokenizer,
    cached_training_set,
    corpora_training_set,
    open_training_corpora,
    streaming_training_set,
    tokenizer_texts,
    trains_while_tokenizing,
)
from vanilla_transformer.training.tokenized_splits import SubwordDropout, tokenize_splits
from vanilla_transformer.training.tokenizer import train_tokenizer
from vanilla_transformer.training.trainer import TranslationTrainer


def check_options(data_args, model_args) -> None:
    """Fail before any work on options that can be checked alone: the BLEU tokenizer and --config_overrides keys."""
    import sacrebleu  # the train extra, which train.check_requirements names when it is missing

    try:
        sacrebleu.BLEU(tokenize=data_args.bleu_tokenize)
    except Exception as error:  # sacrebleu raises a bare error for an unknown or uninstalled tokenizer
        raise UsageError(f"--bleu_tokenize {data_args.bleu_tokenize}: {error}") from None
    try:
        model_args.config_values()
        model_args.generation_values()
    except ValueError as error:
        raise UsageError(str(error)) from None


def load_splits(data_args, training_args) -> RunData:
    """The splits, their languages and their description for the card, and the `TextCorpus` of training text files
    or None. The training pair of text files is cached out of core (training/corpus_cache.py), or only checked when
    streamed (no train split then); the other splits are small and held in memory."""
    files = {split: (getattr(data_args, f"{split}_source"), getattr(data_args, f"{split}_target")) for split in SPLITS}
    any_files = any(path is not None for pair in files.values() for path in pair)
    if data_args.dataset_name and any_files:
        raise UsageError("Give either --dataset_name or text files (--train_source ...), not both.")
    if data_args.dataset_name:
        if not (data_args.source_lang and data_args.target_lang):
            raise UsageError("--dataset_name needs --source_lang and --target_lang (e.g. --source_lang en "
                             "--target_lang de).")
        splits = load_hub_dataset(data_args.dataset_name, data_args.dataset_config_name, data_args.source_lang,
                                  data_args.target_lang)
        name = data_args.dataset_name  # a Hub id names the data set in the card's metadata; a folder its basename
        if os.path.isdir(name):
            name = os.path.basename(os.path.abspath(name))
        return RunData(splits, data_args.source_lang, data_args.target_lang, name)
    if any_files:
        if files["train"] == (None, None):
            raise UsageError("Text files need a training pair: --train_source and --train_target.")
        splits = load_text_files({split: pair for split, pair in files.items() if split != "train"})
        corpus = open_training_corpora(data_args, training_args)
        if corpus.pairs is not None:
            splits = {"train": corpus.pairs, **splits}
        first_source, first_target = training_corpora(data_args)[0][:2]
        source_lang = data_args.source_lang or language_from_extension(first_source)
        target_lang = data_args.target_lang or language_from_extension(first_target)
        named_by = next((path for path in (first_source, data_args.test_source, data_args.validation_source)
                         if path is not None and not reads_once(path)), None)  # /dev/fd/63 names nothing
        if named_by is None:
            return RunData(splits, source_lang, target_lang, "text files read from pipes", corpus)
        folder = os.path.basename(os.path.dirname(os.path.abspath(named_by)))
        return RunData(splits, source_lang, target_lang, folder or os.path.basename(named_by), corpus)
    if data_args.preset != "demo":
        raise UsageError(f"--preset {data_args.preset} needs data: text files (--train_source/--train_target, "
                         "...) or --dataset_name. Only the demo preset generates its own corpus.")
    source_lang, target_lang = data_args.source_lang or "en", data_args.target_lang or "de"
    from num2words import CONVERTER_CLASSES  # the train extra (train.check_requirements)

    unknown = [lang for lang in (source_lang, target_lang) if lang not in CONVERTER_CLASSES]
    if unknown:
        raise UsageError(f"num2words has no language {', '.join(unknown)} to generate the demo corpus.")
    splits = demo_splits(data_args.demo_train_size, training_args.seed, source_lang, target_lang)
    return RunData(splits, source_lang, target_lang, "number words generated with num2words")


def first_samples(dataset, n: int | None):
    """The first `n` rows of `dataset` (all of them for None or more than it has)."""
    return dataset if n is None or n >= len(dataset) else dataset.select(range(n))


def load_data(data_args, training_args, resume: str | None = None) -> RunData:
    """`load_splits`, the splits cut to --max_*_samples."""
    data = load_splits(data_args, training_args)
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_test_samples}
    data.splits = {split: first_samples(dataset, limits[split]) for split, dataset in data.splits.items()}
    sizes = [f"{split} {len(d):,} pairs" for split, d in data.splits.items()]
    if data.corpus is not None and data.corpus.streaming:
        sizes.insert(0, f"train {data.corpus.pairs_read:,} pairs (streamed)")
    log(training_args, "Data: " + ", ".join(sizes) + f" ({data.source_lang or '?'} -> {data.target_lang or '?'})")
    data.trains_while_tokenizing = trains_while_tokenizing(data.corpus, data_args, training_args, resume)
    return data


def build_tokenizer(context: RunContext):
    """The tokenizer of --tokenizer_name, --model_name_or_path or the resumed checkpoint; otherwise a shared BPE
    vocabulary trained on both sides of the training data (by the main process; the others load its copy)."""
    data_args, training_args, corpus = context.data_args, context.training_args, context.data.corpus
    source = data_args.tokenizer_name or context.resume or context.model_args.model_name_or_path
    tags = corpus.tags if corpus is not None and not corpus.streaming else []
    if source is not None:
        with tokenizer_errors(source):  # a damaged tokenizer file: one line naming it
            tokenizer = AutoTokenizer.from_pretrained(source)
        return with_tags(tokenizer, tags, context)

    def train(texts):
        tokenizer = train_tokenizer(texts, vocab_size=data_args.vocab_size,
                                    model_max_length=max(data_args.max_source_length, data_args.max_target_length))
        if tags:  # --train_tags: each one special token, after the BPE vocabulary
            check_tags(tokenizer, tags)
            tokenizer.add_special_tokens({"extra_special_tokens": tags})
        return tokenizer

    if corpus is not None and not corpus.streaming:  # kept in the corpus cache, beside the pairs it was trained on
        return cached_tokenizer(corpus, data_args, training_args, train)
    # nothing is written into --output_dir before every option is checked: other processes read a hidden copy
    shared = os.path.join(training_args.output_dir, ".tokenizer-for-other-processes")
    with training_args.main_process_first(desc="training the BPE tokenizer"):
        if training_args.local_process_index == 0:
            if corpus is not None:
                texts = tokenizer_texts(corpus, data_args, training_args.seed)
            else:
                texts = sample_texts(context.data.splits["train"], data_args.tokenizer_sample_lines,
                                     training_args.seed)[0]
            tokenizer = train(texts)
            if training_args.world_size > 1:  # for the other processes; the checkpoints and final save hold it
                tokenizer.save_pretrained(shared)
        else:
            tokenizer = AutoTokenizer.from_pretrained(shared)
    if training_args.world_size > 1:
        with training_args.main_process_first(desc="sharing the tokenizer"):
            pass  # the main process waits here until every other one has loaded it
        if training_args.local_process_index == 0:
            shutil.rmtree(shared, ignore_errors=True)
    return tokenizer


def check_tags(tokenizer, tags: list[str]) -> None:
    """A tag may not be one of the tokens the model gives a role (padding, start, end, unknown): one usage line."""
    roles = {getattr(tokenizer, name, None): name.removesuffix("_token") for name in
             ("pad_token", "bos_token", "eos_token", "unk_token")}
    for tag in tags:
        if tag in roles:
            raise UsageError(f"--train_tags {tag}: that is the tokenizer's {roles[tag]} token; choose another tag, "
                             "e.g. <BT>.")


def with_tags(tokenizer, tags: list[str], context: RunContext):
    """The given tokenizer with the tags of --train_tags: a tag it holds as one token is used as it is; one it lacks
    becomes a new special token where a new model is built from it (--tokenizer_name without a checkpoint), and is
    one `UsageError` line where the model's vocabulary is a checkpoint's."""
    check_tags(tokenizer, tags)
    vocabulary = tokenizer.get_vocab()
    missing = [tag for tag in tags if tag not in vocabulary]
    if not missing:
        return tokenizer
    checkpoint = context.resume or context.model_args.model_name_or_path
    if checkpoint is not None:
        raise UsageError(f"--train_tags {missing[0]}: the tokenizer of {checkpoint} has no token {missing[0]}, and "
                         "the checkpoint's vocabulary cannot take a new one; use a tag it has, or train a new model.")
    name = context.data_args.tokenizer_name
    added = tokenizer.add_special_tokens({"extra_special_tokens": missing})
    if added != len(missing) or any(len(tokenizer.tokenize(tag)) != 1 for tag in missing):
        raise UsageError(f"--train_tags {missing[0]}: the tokenizer {name} cannot take it as one token.")
    log(context.training_args, f"Added the tags {', '.join(missing)} to the tokenizer {name} as special tokens "
        "(--train_tags).")
    return tokenizer


def build_model(model_args, preset, tokenizer, resume: str | None):


    try:
        overrides = model_args.config_values()
        decoding = model_args.generation_values()
    except ValueError as error:
        raise UsageError(str(error)) from None
    if model_args.model_name_or_path is not None:
        if overrides:
            raise UsageError(f"--model_name_or_path loads a finished architecture; drop {', '.join(overrides)}.")
        model = AutoModelForSeq2SeqLM.from_pretrained(model_args.model_name_or_path)
        model.generation_config.update(**decoding)  # the checkpoint's own decoding, unless an option sets it
        return model
    if resume is not None:  # the Trainer loads the weights; the architecture is the checkpoint's
        config = AutoConfig.from_pretrained(resume)
        check_resume_options(config, overrides, resume)
    else:
        special = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id)
        missing = [name for name, value in special.items() if value is None]
        if missing:
            raise UsageError(f"The tokenizer defines no {', '.join(missing)}; a translation model needs padding, "
                             "start and end-of-sentence tokens.")
        try:
            config = VanillaTransformerConfig(**{**preset.model, **overrides, "vocab_size": len(tokenizer), **special})
        except (TypeError, ValueError, StrictDataclassError) as error:  # @strict wraps the ValueError of our checks
            raise UsageError(str(error.__cause__ or error)) from None
    model = VanillaTransformerForConditionalGeneration(config)
    model.generation_config.update(**{**preset.generation, **decoding})  # the preset's decoding, e.g. length penalty
    return model


# config keys set by options of their own (the rest come from --config_overrides KEY=VALUE)
OPTION_OF_CONFIG_KEY = {"encoder_attention_heads": "--attention_heads", "decoder_attention_heads": "--attention_heads",
                        "encoder_ffn_dim": "--ffn_dim", "decoder_ffn_dim": "--ffn_dim", "d_model": "--d_model",
                        "encoder_layers": "--encoder_layers", "decoder_layers": "--decoder_layers",
                        "dropout": "--dropout", "attention_dropout": "--attention_dropout",
                        "activation_dropout": "--activation_dropout"}


def check_resume_options(config, overrides: dict, resume: str) -> None:
    """A resumed run has the checkpoint's architecture: an option that gives another value is refused in one line
    naming the option and the checkpoint's value (the weights would not fit it, or it would be ignored)."""
    for key, value in overrides.items():
        saved = getattr(config, key, None)
        if saved != value:
            given = (f"{OPTION_OF_CONFIG_KEY[key]} {value}" if key in OPTION_OF_CONFIG_KEY
                     else f"--config_overrides {key}={value}")
            raise UsageError(f"{given} disagrees with the checkpoint {resume}, which has {key}={saved!r}; "
                             "a resumed run keeps the checkpoint's architecture: drop the option, or start a new run "
                             "in another --output_dir.")


def prepare_model(context: RunContext) -> None:
    """Check that the tokenizer fits the model and cap the decoding length of a new model."""
    model, tokenizer, data_args = context.model, context.tokenizer, context.data_args
    if len(tokenizer) > model.config.vocab_size:
        raise UsageError(f"The tokenizer has {len(tokenizer)} tokens but the model only {model.config.vocab_size}.")
    if context.model_args.model_name_or_path is None:
        # Decode at most as long as the longest target trained on (+ the start token): a half-trained model that
        # loops would otherwise run its beams to 256 tokens. The paper caps at input length + 50 (section 6.1).
        model.generation_config.max_length = min(model.generation_config.max_length, data_args.max_target_length + 1)
    log(context.training_args, describe_model(model, tokenizer, context.training_args,
                                              bpe_dropout=data_args.bpe_dropout))


def describe_model(model, tokenizer, training_args, bpe_dropout: float = 0.0) -> str:
    """The `Model:` line printed once at the start: the shape, regularisation, schedule, decoding and precision."""
    config = model.config
    warmup = (f"{training_args.warmup_steps:g} of the steps" if training_args.warmup_steps < 1
              else f"{int(training_args.warmup_steps)} steps")
    extra_dropout = [f"{name} {value:g}" for name, value in (("attention", config.attention_dropout),
                                                             ("activation", config.activation_dropout)) if value]
    return (f"Model: {model.num_parameters():,} parameters, d_model {config.d_model}, "
            f"{config.encoder_layers}+{config.decoder_layers} layers, "
            f"{'pre' if config.normalize_before else 'post'}-LayerNorm, dropout {config.dropout:g}"
            f"{' (' + ', '.join(extra_dropout) + ')' if extra_dropout else ''}, "
            f"label smoothing {training_args.label_smoothing_factor:g}, vocabulary {len(tokenizer):,}"
            f"{f' (BPE-dropout {bpe_dropout:g})' if bpe_dropout else ''}; "
            f"peak learning rate {training_args.learning_rate:.3g} after a warmup of {warmup}; "
            f"decoding: beam {model.generation_config.num_beams}, "
            f"length penalty {model.generation_config.length_penalty:g}; "
            f"{precision_in_use(training_args)}")


def build_trainer(context: RunContext):
    """-> (TranslationTrainer, tokenized splits, their texts). Validation BLEU is computed only with a split. Sets
    the examples of the run's model card (`context.state`)."""
    data_args, training_args, tokenizer = context.data_args, context.training_args, context.tokenizer
    corpus = context.data.corpus
    keep_text = data_args.bpe_dropout > 0
    small = {split: dataset for split, dataset in context.data.splits.items() if corpus is None or split != "train"}
    tokenized, texts = tokenize_splits(small, tokenizer, data_args.max_source_length, data_args.max_target_length,
                                       keep_train_text=keep_text)
    train_lengths = None  # read by the sampler from the dataset's columns unless the cached corpus gives them
    if corpus is not None and corpus.streaming:
        tokenized["train"] = streaming_training_set(corpus, tokenizer, data_args, training_args)
    elif isinstance(corpus, Corpora):  # several corpora, or one with a weight or a tag
        tokenized["train"], train_lengths = corpora_training_set(corpus, tokenizer, data_args, training_args)
    elif context.data.trains_while_tokenizing:
        tokenized["train"] = background_training_set(corpus, tokenizer, data_args, training_args)
    elif corpus is not None:
        tokenized["train"], train_lengths = cached_training_set(corpus, tokenizer, data_args, training_args,
                                                                keep_text)
    train_dataset = tokenized["train"]
    if data_args.bpe_dropout > 0:
        try:
            train_dataset = SubwordDropout(train_dataset, tokenizer, data_args.bpe_dropout,
                                           data_args.max_source_length, data_args.max_target_length)
        except DataError as error:
            raise UsageError(f"--bpe_dropout {data_args.bpe_dropout:g}: {error}") from None
    eval_dataset = tokenized.get("validation")
    if training_args.eval_strategy != "no" and eval_dataset is None:
        raise UsageError(f"--eval_strategy {training_args.eval_strategy} needs a validation split "
                         "(--validation_source/--validation_target, or a dataset with one).")

    compute_metrics = None
    if eval_dataset is not None:
        compute_metrics = bleu_metric(tokenizer, texts["validation"]["target"], data_args.bleu_tokenize)
    context.state.examples = example_sentences(texts)
    collator = DataCollatorForSeq2Seq(tokenizer, model=context.model, label_pad_token_id=-100)
    trainer = TranslationTrainer(
        model=context.model,
        args=training_args,
        data_collator=collator,
        train_collator=augmenting_collator(collator, tokenizer, data_args, training_args),  # --augment, else None
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=context.callbacks,
        run_state=context.state,
        train_lengths=train_lengths if train_dataset is tokenized["train"] else None,
    )
    return trainer, tokenized, texts
