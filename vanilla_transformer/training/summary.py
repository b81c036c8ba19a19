"""What the model card says about a run: `RunState`, gathered on the way by `train.run`, and the card's "Training"
table (`training_summary`)."""

import os
from dataclasses import dataclass, field

from vanilla_transformer.training.augmentation import describe_augment, parse_augment
from vanilla_transformer.training.budget import BudgetPlan
from vanilla_transformer.training.data_sources import training_corpora
from vanilla_transformer.training.precision import precision_in_use
from vanilla_transformer.training.text_corpus import Corpora, TextCorpus


@dataclass
class RunState:
    """What one run learns about itself on the way, owned by `run`; the model card is written from it."""
    source_lang: str | None
    target_lang: str | None
    dataset_name: str | None
    examples: list[str] | None = None  # source sentences for the card's usage snippet
    budget: BudgetPlan | None = None  # the plan of a --max_train_minutes run (training/budget.py)
    averaged: int = 0  # checkpoints averaged into the final weights
    metrics: dict | None = None  # numeric scores and the split they were measured on
    signatures: dict = field(default_factory=dict)  # sacreBLEU's signatures of those scores
    training_summary: dict | None = None
    corpus: TextCorpus | Corpora | None = None  # the training text files: pairs read and used, cleaning, tokenizer sample

    def card_fields(self) -> dict:
        """The keyword arguments of `render_model_card`."""
        return dict(source_lang=self.source_lang, target_lang=self.target_lang, dataset_name=self.dataset_name,
                    examples=self.examples, metrics=self.metrics, training_summary=self.training_summary)


def distinct_names(paths: list[str]) -> list[str]:
    """Each path's shortest ending (its file name, then with its folders from the nearest up) that no other of
    `paths` ends with: the card tells d/x/a.en and d/y/a.en apart as x/a.en and y/a.en, and names files whose names
    differ by their names alone, without the folders of the machine that trained."""
    parts = [os.path.normpath(os.path.abspath(path)).split(os.sep) for path in paths]
    names = []
    for mine in parts:
        others = [theirs for theirs in parts if theirs != mine]  # a file given twice is one name
        depth = 1
        while depth < len(mine) and any(theirs[-depth:] == mine[-depth:] for theirs in others):
            depth += 1
        names.append("/".join(mine[-depth:]))
    return names


def corpus_names(data_args) -> list[str]:
    """'source / target' for each training corpus, told apart by `distinct_names`."""
    corpora = training_corpora(data_args)
    sources = distinct_names([source for source, *_ in corpora])
    targets = distinct_names([target for _, target, *_ in corpora])
    return [f"{source} / {target}" for source, target in zip(sources, targets)]


def training_summary(context, *, training_pairs: int | str, metrics: dict) -> dict:
    """The "Training" table of the model card of the run `context` (`context.RunContext`, trained): recipe, data,
    batch, optimizer, schedule, averaging, time."""
    data_args, training_args, state = context.data_args, context.training_args, context.state
    model, trainer = context.model, context.trainer
    lr = training_args.learning_rate
    schedule = getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)

    summary = {
        "recipe": "Vaswani et al. (2017), section 5",
        "preset": data_args.preset,
        "data": (f"{data_args.dataset_name} {data_args.dataset_config_name or ''} (Hugging Face datasets)"
                 if data_args.dataset_name else
                 "text files " + ", ".join(corpus_names(data_args))
                 if data_args.train_source else
                 f"number words generated with num2words, {state.source_lang} -> {state.target_lang}"),
        "training pairs": training_pairs,
        "optimizer steps": trainer.state.global_step,
        "batch": (f"~{training_args.max_tokens} tokens per device (sentences of similar length)"
                  if training_args.max_tokens else f"{training_args.per_device_train_batch_size} sentences per device"),
        "devices": training_args.world_size,
        "precision": precision_in_use(training_args),
        "gradient accumulation": training_args.gradient_accumulation_steps,
        "optimizer": f"Adam(beta1={training_args.adam_beta1}, beta2={training_args.adam_beta2}, "
                     f"eps={training_args.adam_epsilon}), weight decay {training_args.weight_decay}",
        "learning rate": (f"{schedule}, peak {lr:.3g} after {state.budget.warmup_steps} warmup steps" if state.budget
                          else f"{schedule}, peak {lr:.3g} after {training_args.warmup_steps} warmup steps"),
        "label smoothing": training_args.label_smoothing_factor,
        "BLEU": f"sacreBLEU corpus BLEU, {data_args.bleu_tokenize} tokenization, beam search as in "
                "generation_config.json" + (f" (signature {state.signatures['bleu']}; chrF {state.signatures['chrf']})"
                                             if state.signatures else ""),
        "dropout": model.config.dropout,
        "checkpoint averaging": f"last {state.averaged} checkpoints" if state.averaged else "none",
        "training time": f"{metrics.get('train_runtime', 0) / 60:.1f} min",
    }
    corpus = state.corpus
    if corpus is not None:
        summary["training pairs read"] = corpus.pairs_read
        summary["cleaning"] = (
            "pairs dropped (the rules of Moses' clean-corpus-n.perl): "
            + ", ".join(f"{rule.replace('_', ' ')} {count:,}" for rule, count in corpus.cleaning.items())
            if corpus.cleaning and not data_args.no_clean else
            "empty side, too long, length ratio above 9, applied while streaming" if corpus.streaming
            and not data_args.no_clean else "none (--no_clean)")
        if isinstance(corpus, Corpora):  # the card's table of corpora
            summary["corpora"] = [{
                "corpus": name,  # told apart by their files' shortest distinct endings
                "pairs read": part.pairs_read,
                "cleaned away": ", ".join(f"{rule.replace('_', ' ')} {count:,}" for rule, count in part.cleaning.items()
                                          if count) or "none",
                "pairs used": part.pairs_used, "weight": f"{part.weight:g}", "pairs per epoch": part.pairs_drawn,
                "tag": f"`{part.tag}`" if part.tag else ""}
                for part, name in zip(corpus.parts, corpus_names(data_args))]
        if corpus.tokenizer_sample:
            summary["tokenizer"] = f"BPE vocabulary trained on {corpus.tokenizer_sample}"
    if data_args.augment and any(parse_augment(data_args.augment).values()):
        summary["augmentation"] = describe_augment(parse_augment(data_args.augment))
    if data_args.bpe_dropout:
        summary["BPE-dropout"] = f"{data_args.bpe_dropout:g} (Provilkov et al. 2020; training only)"
    if state.budget:
        summary["time budget"] = state.budget.describe()
    return summary
