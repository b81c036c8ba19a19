"""Model cards: Hub metadata built with huggingface_hub's card tools, read back by huggingface_hub.ModelCard."""

import pytest
from huggingface_hub import ModelCard

from translation_fixtures import tiny_translator
from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, render_model_card


@pytest.fixture(scope="module")
def model():
    return tiny_translator(seed=0)


def saved_and_loaded(card, tmp_path) -> ModelCard:
    path = tmp_path / "README.md"
    card.save(path)
    return ModelCard.load(path)


def test_card_metadata_loads_back_with_huggingface_hub(model, tmp_path):
    card = render_model_card(
        model, source_lang="de", target_lang="en", dataset_name="bentrevett/multi30k",
        metrics={"bleu": 27.1, "exact_match": 0.93, "split": "test"}, training_summary={"steps": 100},
        base_model="Helsinki-NLP/opus-mt-de-en", model_id="someone/vt-de-en",
    )
    data = saved_and_loaded(card, tmp_path).data
    assert data.library_name == "transformers"
    assert data.pipeline_tag == "translation"
    assert data.language == ["de", "en"]
    assert data.license == "apache-2.0"
    assert data.datasets == ["bentrevett/multi30k"]
    assert data.metrics == ["bleu", "exact_match"]
    assert data.base_model == "Helsinki-NLP/opus-mt-de-en"
    assert {"translation", "vanilla-transformer"} <= set(data.tags)
    assert data.model_name == "vt-de-en"
    results = {result.metric_type: result for result in data.eval_results}
    assert set(results) == {"bleu", "exact_match"}
    assert results["bleu"].metric_value == 27.1 and results["exact_match"].metric_value == 0.93
    for result in results.values():
        assert result.task_type == "translation"
        assert result.dataset_type == "bentrevett/multi30k" and result.dataset_split == "test"
    assert "model-index" in str(card)


def test_card_without_evaluation_numbers_has_no_model_index(model, tmp_path):
    card = render_model_card(model, source_lang="fr", target_lang="en", license="mit")
    loaded = saved_and_loaded(card, tmp_path)
    assert loaded.data.eval_results is None and loaded.data.metrics is None
    assert "model-index" not in str(card)
    assert loaded.data.license == "mit" and loaded.data.language == ["fr", "en"]
    assert "No evaluation results were recorded" in loaded.text
    assert "No training details were recorded" in loaded.text


def test_card_body_describes_the_architecture_read_from_the_config():
    config = VanillaTransformerConfig.from_paper("big", vocab_size=900, normalize_before=True, encoder_layers=2, decoder_layers=1)
    model = VanillaTransformerForConditionalGeneration(config)
    card = render_model_card(model, source_lang="en", target_lang="de", training_summary="Trained for 3 epochs.")
    text = card.text
    parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert "| d_model / d_ff | 1024 / 4096 |" in text
    assert "| Attention heads | 16 |" in text
    assert "2 encoder + 1 decoder layers" in text
    assert "pre-LayerNorm" in text
    assert "0.3 (residual)" in text
    assert f"| Parameters | {parameters / 1e6:.1f}M |" in text
    assert "beam size 4, length penalty 0.6" in text
    assert "English → German" in text and "Trained for 3 epochs." in text
    assert 'pipeline("translation", model="vanilla-transformer-en-de", trust_remote_code=True)' in text
    assert 'AutoModelForSeq2SeqLM.from_pretrained("vanilla-transformer-en-de", trust_remote_code=True)' in text


def test_card_rejects_bad_arguments_with_clear_messages(model):
    cases = [
        ({"source_lang": "German"}, ValueError, "not an ISO 639 language code"),
        ({"metrics": {"bleu": "high"}, "dataset_name": "d"}, ValueError, r"metrics\['bleu'\] must be a number"),
        ({"metrics": {"bleu": float("nan")}, "dataset_name": "d"}, ValueError, "must be a number"),
        ({"metrics": {"bleu": 20.0}}, ValueError, "without dataset_name"),
        ({"metrics": {"bleu": 20.0, "split": 1}, "dataset_name": "d"}, ValueError, "split"),
        ({"metrics": [20.0]}, TypeError, "metrics must be a dict"),
        ({"training_summary": 12}, TypeError, "training_summary must be a dict or a string"),
        ({"license": ""}, ValueError, "license"),
        ({"examples": "one sentence"}, ValueError, "examples must be a non-empty list"),
        ({"examples": ["fine", ""]}, ValueError, "examples must be a non-empty list"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            render_model_card(model, **kwargs)


def test_usage_snippet_shows_the_given_example_sentences(model):
    examples = ["two hundred and five", "ninety-nine thousand"]
    card = render_model_card(model, source_lang="en", target_lang="de", examples=examples)
    assert 'translator("two hundred and five")' in card.text
    assert '["two hundred and five", "ninety-nine thousand"]' in card.text
    assert "orange hat" not in card.text
