"""training/metrics.py: sacreBLEU with its signature, chrF, and the Multi30k literature's tokenised BLEU.

Oracles: the dataset's own `*.lc.norm.tok.*` files (made with Moses' lowercase.perl, normalize-punctuation.perl and
tokenizer.perl), lines copied from them into this file, and sacreBLEU called directly.
"""

import logging
import os

import pytest
import sacrebleu

from helpers import SHARED_DATA
from vanilla_transformer.training.metrics import literature_bleu, moses_tokenize, translation_scores

DATA = os.environ.get("MULTI30K_DIR", str(SHARED_DATA))  # ../shared/data/multi30k from the checkout

# (raw German line, the dataset's line in test_2016_flickr.lc.norm.tok.de / val.lc.norm.tok.de), copied from the files
DATASET_LINES = [
    ("Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
     "ein mann mit einem orangefarbenen hut , der etwas anstarrt ."),
    ("Eine Frau auf einem Boot namens \"El Corazon\" lässt schwarze Gewichte ins Wasser fallen.",
     "eine frau auf einem boot namens &quot; el corazon &quot; lässt schwarze gewichte ins wasser fallen ."),
    ("Eine Frau hält einen großen Scheck für \"Kids' Food Basket\".",
     "eine frau hält einen großen scheck für &quot; kids &apos; food basket &quot; ."),
    ("Zwei Jungen essen ihr McDonald's-Menü im Außenbereich, umgeben von vielen anderen Leuten.",
     "zwei jungen essen ihr mcdonald &apos; s-menü im außenbereich , umgeben von vielen anderen leuten ."),
    # normalize-punctuation.perl -l de turns „...“ into "..." and moves a full stop out of the quotes
    ("Ein Mann in einem blauen Hemd hält ein Schild, auf dem steht: „Come on now ... what's gayer than tea.“",
     "ein mann in einem blauen hemd hält ein schild , auf dem steht : &quot; come on now ... what &apos; s gayer "
     "than tea &quot; ."),
]


def test_moses_pipeline_reproduces_lines_of_the_dataset_written_here():
    raw, expected = zip(*DATASET_LINES)
    assert moses_tokenize(raw, "de") == list(expected)


@pytest.mark.parametrize("name, lang", [("test_2016_flickr", "de"), ("test_2016_flickr", "en"), ("val", "de")])
def test_moses_pipeline_reproduces_the_datasets_lc_norm_tok_files(name, lang):
    raw_path, tok_path = (os.path.join(DATA, f"{name}{kind}.{lang}") for kind in ("", ".lc.norm.tok"))
    if not (os.path.isfile(raw_path) and os.path.isfile(tok_path)):
        pytest.skip(f"Multi30k is not at {DATA} (../shared/data/multi30k from the checkout, or $MULTI30K_DIR)")
    raw = open(raw_path, encoding="utf-8").read().splitlines()
    expected = open(tok_path, encoding="utf-8").read().splitlines()
    ours = moses_tokenize(raw, lang)
    identical = sum(a == b for a, b in zip(ours, expected)) / len(expected)
    assert len(ours) == len(expected) and identical == 1.0, identical


def test_literature_bleu_is_tokenised_bleu_against_the_lc_norm_tok_reference():
    raw, tokenized = zip(*DATASET_LINES)
    assert literature_bleu(raw, tokenized, "de") == 100.0  # the raw reference, processed, is the tokenised one
    # a cased, detokenised hypothesis: same words as the reference but for one, scored as sacreBLEU does on text
    # that is already tokenised
    hypotheses = [line.replace("Mann", "Herr") for line in raw]
    expected = sacrebleu.corpus_bleu([h.replace("mann", "herr") for h in tokenized], [list(tokenized)],
                                     tokenize="none").score
    assert literature_bleu(hypotheses, tokenized, "de") == pytest.approx(expected, abs=0.01)
    assert expected < 100
    with pytest.raises(ValueError, match="2 translations for 5 references"):
        literature_bleu(raw[:2], tokenized, "de")


def test_literature_bleu_does_not_warn_that_its_tokenised_text_looks_tokenised(caplog, capsys):
    """sacreBLEU warns when 100 lines end in " ." (tokenised on purpose here): the warning would be wrong."""
    raw, tokenized = zip(*DATASET_LINES)
    raw, tokenized = list(raw) * 30, list(tokenized) * 30  # 150 lines, all ending in " ."
    caplog.set_level(logging.WARNING)
    sacrebleu.corpus_bleu(list(tokenized), [list(tokenized)], tokenize="none")  # sacreBLEU's own check fires...
    assert "detokenize" in caplog.text + capsys.readouterr().err
    caplog.clear()
    assert literature_bleu(raw, tokenized, "de") == 100.0  # ... not in ours
    assert "detokenize" not in caplog.text + capsys.readouterr().err


def test_translation_scores_report_sacrebleu_with_its_signature_and_chrf():
    raw, tokenized = zip(*DATASET_LINES)
    hypotheses = [line.replace("Frau", "Dame").replace(".", "") for line in raw]
    scores = translation_scores(hypotheses, raw, target_lang="de")
    assert scores["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [list(raw)]).score, 2)
    assert scores["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [list(raw)]).score, 2)
    assert "tok:13a" in scores["bleu_signature"] and "case:mixed" in scores["bleu_signature"]
    assert "nrefs:1" in scores["chrf_signature"]
    assert scores["literature_bleu"] == literature_bleu(hypotheses, tokenized, "de")
    assert scores["literature_bleu"] != scores["bleu"]  # lowercased and tokenised otherwise
    assert "literature_bleu" not in translation_scores(hypotheses, raw)
