"""What one run of the recipe works with, handed from step to step as one object (`RunContext`): its three option
groups as parsed, and what `train.run` builds from them, in this order:

1. `data` (`build.load_data`): the splits and where they came from (`RunData`);
2. `tokenizer` (`build.build_tokenizer`), then `model` (`build.build_model`, checked by `build.prepare_model`);
3. `state`: what the model card will say about the run (`summary.RunState`);
4. `trainer`, `tokenized` and `texts` (`build.build_trainer`), which `evaluation.evaluate` then uses.

A field is None until its step has run.
"""

from dataclasses import dataclass

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from vanilla_transformer.training.arguments import DataArguments, ModelArguments
from vanilla_transformer.training.summary import RunState
from vanilla_transformer.training.text_corpus import Corpora, TextCorpus
from vanilla_transformer.training.trainer import TranslationTrainer, TranslationTrainingArguments


@dataclass
class RunData:
    """A run's parallel data as loaded: {split: Dataset(source, target)} (the training split of text files is in
    `corpus`, cached or streamed, and in `splits` only when cached), the languages, and the data's name for the card."""

    splits: dict
    source_lang: str | None
    target_lang: str | None
    dataset_name: str
    corpus: TextCorpus | Corpora | None = None  # the training text files (one pair, or several corpora), else None
    trains_while_tokenizing: bool = False  # the run trains while `corpus` is tokenized (background_tokens.py)


@dataclass
class RunContext:
    """One run: the option groups (`arguments.parse_arguments`) and what the run has built so far."""

    data_args: DataArguments
    model_args: ModelArguments
    training_args: TranslationTrainingArguments
    resume: str | None = None  # the checkpoint the run resumes from
    callbacks: list | None = None  # TrainerCallback instances given by a caller of `train.main`
    data: RunData | None = None
    tokenizer: PreTrainedTokenizerBase | None = None
    model: PreTrainedModel | None = None
    state: RunState | None = None
    trainer: TranslationTrainer | None = None
    tokenized: dict | None = None  # {split: tokenized dataset}: what the trainer trains on and evaluates
    texts: dict | None = None  # {split: its source and target sentences and line numbers} of the evaluation splits
