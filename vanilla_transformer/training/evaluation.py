"""After training: the last checkpoints averaged into the final weights (section 6.1 of the paper), the test split
(else the validation split) translated with beam search and scored (training/metrics.py), and a few translations
by the saved folder loaded as a user would."""

import os

from transformers import pipeline

from vanilla_transformer.training.average_checkpoints import (
    CHECKPOINT_PATTERN,
    average_state_dicts,
    last_checkpoints,
)
from vanilla_transformer.training.context import RunContext
from vanilla_transformer.training.messages import log
from vanilla_transformer.training.metrics import decode_predictions, translation_scores


def average_last_checkpoints(trainer, training_args) -> int:
    """Load the mean of the last --average_last_n_checkpoints checkpoints into the model (section 6.1 of the
    paper); returns how many were averaged (0: none). A time-budget run that the clock stopped before its plan
    averages the checkpoints it saved."""
    if training_args.average_last_n_checkpoints <= 1:
        return 0

    trainer.accelerator.wait_for_everyone()
    saved = sum(bool(CHECKPOINT_PATTERN.match(name)) for name in os.listdir(training_args.output_dir))
    wanted = training_args.average_last_n_checkpoints
    plan = trainer.time_budget.plan if trainer.time_budget is not None else None
    if plan is not None and len(plan.checkpoint_steps) < wanted:  # a short budget: as many as fit (the plan's note)
        wanted = len(plan.checkpoint_steps)
    if training_args.max_train_minutes and saved < wanted:  # the clock stopped the run before its last checkpoints
        log(training_args, f"The time ran out before the last checkpoints: averaging {saved}, not {wanted}")
        wanted = saved
    if wanted <= 1:
        return 0
    checkpoints = last_checkpoints(training_args.output_dir, wanted)
    trainer.model.load_state_dict(average_state_dicts(checkpoints))
    log(training_args, f"Averaged the weights of {', '.join(os.path.basename(c) for c in checkpoints)}")
    return len(checkpoints)


def evaluate(context: RunContext, folder: str | None = None) -> tuple[str | None, dict]:
    """Translate the test split (else the validation split) of the run, once its trainer is built, with beam search,
    write the translations to {split}_predictions.txt in input order (in `folder`, default --output_dir) and score
    them (training/metrics.py). -> (split or None, scores)."""
    trainer, tokenized, texts = context.trainer, context.tokenized, context.texts
    data_args, training_args = context.data_args, context.training_args
    split = "test" if "test" in tokenized else "validation" if "validation" in tokenized else None
    if split is None:
        return None, {}
    trainer.compute_metrics = None  # scored below against this split's references
    output = trainer.predict(tokenized[split], metric_key_prefix=split)
    predictions = decode_predictions(context.tokenizer, output.predictions, len(tokenized[split]))
    scores = translation_scores(predictions, texts[split]["target"], data_args.bleu_tokenize,
                                target_lang=context.data.target_lang if data_args.literature_bleu else None)
    if trainer.is_world_process_zero():  # in the order of the input, one line per sentence
        in_order = [""] * len(predictions)
        for index, prediction in zip(texts[split]["index"], predictions):
            in_order[index] = prediction.replace("\n", " ")
        with open(os.path.join(folder or training_args.output_dir, f"{split}_predictions.txt"), "w",
                  encoding="utf-8") as f:
            f.write("\n".join(in_order) + "\n")
    literature = (f", literature BLEU (lowercased, Moses-tokenised) {scores['literature_bleu']:.2f}"
                  if "literature_bleu" in scores else "")
    log(training_args, f"{split.capitalize()} set ({len(predictions)} sentences): BLEU {scores['bleu']:.2f} "
         f"({scores['bleu_signature']}), chrF {scores['chrf']:.2f}{literature}, exact match "
         f"{100 * scores['exact_match']:.1f}%")
    return split, scores


def example_sentences(texts: dict, count: int = 2) -> list[str] | None:
    """The first `count` non-empty source sentences of the test (else validation) split, in file order: the model
    card's usage snippet shows text from the model's own domain."""
    for split in ("test", "validation"):
        if split in texts:
            in_file_order = sorted(zip(texts[split]["index"], texts[split]["source"]))
            picked = [source.strip() for _, source in in_file_order if source.strip()][:count]
            if picked:
                return picked
    return None


def sample_translations(output_dir: str, sources: list[str], references: list[str], source_lang, target_lang) -> None:
    """Load the saved folder the way a user would and translate a few test sentences with it."""


    translator = pipeline("translation", model=output_dir)
    outputs = translator(sources)
    print(f"\nTranslations by pipeline('translation', model={output_dir!r}) ({source_lang} -> {target_lang}):")
    for source, output, reference in zip(sources, outputs, references):
        hypothesis = output["translation_text"]
        mark = "=" if hypothesis.strip() == reference.strip() else "≠"
        print(f"  {source}\n    -> {hypothesis}   [{mark} {reference}]")
