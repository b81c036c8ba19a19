"""Translation scores: sacreBLEU (with its signature), chrF, exact match, and the literature's tokenised BLEU.

- `translation_scores`: corpus BLEU and chrF from sacreBLEU against the raw reference strings, with the signatures
  that say how they were computed (e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.5.1"), and the
  fraction of exact matches.
- `literature_bleu`: the BLEU that papers on Multi30k report (e.g. Wu et al. 2021, 41.02 for Transformer-Tiny on
  test2016). It is *not* sacreBLEU: hypotheses are lowercased, punctuation-normalised and Moses-tokenised the way the
  dataset's `*.lc.norm.tok.*` files were made (`lowercase.perl | normalize-punctuation.perl -l de |
  tokenizer.perl -l de`), then scored with no further tokenisation against that file. `moses_tokenize` is that
  pipeline, with `sacremoses`; it reproduces every line of test_2016_flickr.lc.norm.tok.{en,de} and
  val.lc.norm.tok.{en,de} from the raw files (tests/test_metrics.py).
- `decode_predictions` / `bleu_metric`: generated ids back to strings, and the Trainer's `compute_metrics`.
"""

from collections.abc import Sequence

import numpy as np


def translation_scores(predictions: Sequence[str], references: Sequence[str], bleu_tokenize: str = "13a",
                       *, target_lang: str | None = None,
                       literature_references: Sequence[str] | None = None) -> dict:
    """Corpus BLEU (sacreBLEU; `bleu_tokenize` "13a" is its standard, "char" suits languages or data without
    spaces, like the demo's German number words), chrF, the fraction of exact matches and the two signatures.

    With `target_lang`, also `literature_bleu` (see `literature_bleu`) against `literature_references` (lines of a
    `.lc.norm.tok` file, in the order of `references`), by default the references through `moses_tokenize`.
    """
    import sacrebleu

    if len(predictions) != len(references):
        raise ValueError(f"Got {len(predictions)} translations for {len(references)} references.")
    predictions = [p.strip() for p in predictions]
    references = [r.strip() for r in references]
    bleu = sacrebleu.BLEU(tokenize=bleu_tokenize)
    chrf = sacrebleu.CHRF()
    scores = {
        "bleu": round(bleu.corpus_score(predictions, [references]).score, 2),
        "chrf": round(chrf.corpus_score(predictions, [references]).score, 2),
        "exact_match": round(sum(p == r for p, r in zip(predictions, references)) / max(len(references), 1), 4),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }
    if target_lang is not None:
        if literature_references is None:
            literature_references = moses_tokenize(references, target_lang)
        scores["literature_bleu"] = literature_bleu(predictions, literature_references, target_lang)
    return scores


def moses_tokenize(lines: Sequence[str], lang: str) -> list[str]:
    """lowercase -> Moses punctuation normalisation -> Moses tokenisation (XML-escaped, as the dataset's files are).

    normalize-punctuation.perl reads lines with their newline, and one of its German rules (`."` -> `".`) needs a
    character after the quote; the newline is it, so each line is normalised with its newline, then stripped.
    """
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [tokenizer.tokenize(normalizer.normalize(line.strip().lower() + "\n").strip(), escape=True,
                               return_str=True).strip()
            for line in lines]


def literature_bleu(predictions: Sequence[str], tokenized_references: Sequence[str], lang: str) -> float:
    """BLEU of `predictions` (detokenised text) against lowercased, normalised, Moses-tokenised references (e.g.
    test_2016_flickr.lc.norm.tok.de), after the same processing of the predictions; no further tokenisation."""
    import sacrebleu

    if len(predictions) != len(tokenized_references):
        raise ValueError(f"Got {len(predictions)} translations for {len(tokenized_references)} references.")
    hypotheses = moses_tokenize(predictions, lang)
    references = [line.strip() for line in tokenized_references]
    # tokenised on purpose: force=True keeps sacreBLEU from warning that the data looks tokenised
    return round(sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none", force=True).score, 2)


def decode_predictions(tokenizer, predictions, count: int) -> list[str]:
    """Token ids from `predict_with_generate` (padded with -100 across batches) -> `count` strings.

    Under several processes, accelerate completes the last batch of each process with examples from the start of
    the dataset, and the Trainer (transformers 5.23, accelerate on CPU/gloo) returns those extra rows. The
    gathered rows keep the dataset order, so the first `count` rows are the predictions.
    """
    if isinstance(predictions, tuple):
        predictions = predictions[0]
    if len(predictions) < count:
        raise ValueError(f"Got {len(predictions)} predictions for {count} examples.")
    predictions = predictions[:count]
    predictions = np.where(predictions != -100, predictions, tokenizer.pad_token_id)
    return tokenizer.batch_decode(predictions, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def bleu_metric(tokenizer, references: list[str], bleu_tokenize: str = "13a"):
    """`compute_metrics` for the Trainer: decodes the generated ids and scores them against the raw references
    (not the tokenised, truncated labels), in dataset order. Only numbers (the Trainer logs them)."""

    def compute_metrics(eval_prediction) -> dict[str, float]:
        predictions = decode_predictions(tokenizer, eval_prediction.predictions, len(references))
        scores = translation_scores(predictions, references, bleu_tokenize)
        return {k: v for k, v in scores.items() if not k.endswith("_signature")}

    return compute_metrics
