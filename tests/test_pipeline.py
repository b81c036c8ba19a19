"""pipeline("translation") on transformers 5: TranslationPipeline behaves like v4's, checked against generate()."""

import json

import pytest
import torch
from transformers import AutoConfig, GenerationConfig, GPT2Config, GPT2LMHeadModel, pipeline
from transformers.testing_utils import CaptureLogger

import vanilla_transformer
from translation_fixtures import GERMAN, tiny_tokenizer, tiny_translator
from vanilla_transformer import pipeline_translation
from vanilla_transformer.pipeline_translation import TranslationPipeline


def generate_text(model, tokenizer, text, **generate_kwargs) -> list[str]:
    """The oracle: what model.generate gives for one input, decoded."""
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, **generate_kwargs)
    return tokenizer.batch_decode(output, skip_special_tokens=True)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model():
    return tiny_translator(seed=0)


@pytest.fixture(scope="module")
def translator(model, tokenizer):
    return pipeline("translation", model=model, tokenizer=tokenizer, device="cpu")


def test_pipeline_from_a_model_object_is_our_translation_pipeline(translator):
    assert type(translator) is TranslationPipeline
    assert translator.task == "translation"


def test_pipeline_output_equals_generate_with_the_models_decoding_defaults(seed, tokenizer):
    model = tiny_translator(seed=seed)
    translator = pipeline("translation", model=model, tokenizer=tokenizer, device="cpu")
    assert model.generation_config.num_beams == 4  # the paper's beam search is what both use
    for text in GERMAN[:2]:
        expected = generate_text(model, tokenizer, text)
        assert translator(text) == [{"translation_text": expected[0]}]


def test_generation_parameters_are_passed_through_to_generate(model, tokenizer, translator):
    text = GERMAN[1]
    for kwargs in ({"num_beams": 1, "max_new_tokens": 3}, {"num_beams": 2, "max_new_tokens": 7, "length_penalty": 1.0},
                   {"num_beams": 3, "num_return_sequences": 3, "max_new_tokens": 5}):
        expected = generate_text(model, tokenizer, text, **kwargs)
        assert translator(text, **kwargs) == [{"translation_text": t} for t in expected]
    config = GenerationConfig(num_beams=1, max_new_tokens=4)
    assert translator(text, generation_config=config)[0]["translation_text"] == generate_text(
        model, tokenizer, text, num_beams=1, max_new_tokens=4)[0]
    ids = translator(text, num_beams=1, max_new_tokens=3, return_tensors=True)[0]["translation_token_ids"]
    assert len(ids) <= 1 + 3  # decoder start + at most 3 new tokens


def test_generation_parameters_given_to_pipeline_are_defaults_a_call_can_override(model, tokenizer):
    translator = pipeline("translation", model=model, tokenizer=tokenizer, num_beams=1, max_new_tokens=2)
    text = GERMAN[0]
    assert translator(text)[0]["translation_text"] == generate_text(model, tokenizer, text, num_beams=1, max_new_tokens=2)[0]
    assert translator(text, max_new_tokens=6)[0]["translation_text"] == generate_text(
        model, tokenizer, text, num_beams=1, max_new_tokens=6)[0]


def test_string_gives_one_dict_list_gives_one_dict_per_input(translator):
    single = translator(GERMAN[0], max_new_tokens=4)
    assert isinstance(single, list) and len(single) == 1 and set(single[0]) == {"translation_text"}
    several = translator(GERMAN[:3], max_new_tokens=4)
    assert [list(item) for item in several] == [["translation_text"]] * 3
    assert several[0] == single[0]
    assert translator(tuple(GERMAN[:3]), max_new_tokens=4) == several
    assert translator([]) == []
    nested = translator(GERMAN[:2], num_return_sequences=2, max_new_tokens=4)
    assert [len(item) for item in nested] == [2, 2]  # as v4: a list per input when several sequences are asked for
    streamed = translator((text for text in GERMAN[:3]), max_new_tokens=4)
    assert [item[0] for item in streamed] == several


@pytest.mark.parametrize("generate_kwargs", [{}, {"num_beams": 1}], ids=["beam4", "greedy"])
def test_batched_results_equal_one_by_one(seed, tokenizer, generate_kwargs):
    model = tiny_translator(seed=seed)
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    texts = GERMAN + ["Hunde.", GERMAN[3] + " " + GERMAN[4]]  # lengths from 3 to about 40 tokens
    one_by_one = [translator(text, max_new_tokens=12, **generate_kwargs)[0] for text in texts]
    for batch_size in (3, len(texts)):
        assert translator(texts, batch_size=batch_size, max_new_tokens=12, **generate_kwargs) == one_by_one


def test_overlong_input_is_truncated_with_a_warning(model):
    tokenizer = tiny_tokenizer()
    tokenizer.model_max_length = 12
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    text = " ".join(GERMAN[:3])
    assert len(tokenizer(text)["input_ids"]) > 12
    with CaptureLogger(pipeline_translation.logger) as captured:
        result = translator(text, num_beams=1, max_new_tokens=5)
    assert "truncated to 12 tokens" in captured.out
    truncated = tokenizer(text, truncation=True, max_length=12, return_tensors="pt")
    assert truncated["input_ids"].shape[1] == 12 and truncated["input_ids"][0, -1] == tokenizer.eos_token_id
    expected = model.generate(**truncated, num_beams=1, max_new_tokens=5)
    assert result[0]["translation_text"] == tokenizer.decode(expected[0], skip_special_tokens=True)

    with CaptureLogger(pipeline_translation.logger) as captured:
        whole = translator(text, num_beams=1, max_new_tokens=5, truncation=False)
    assert captured.out == ""
    assert whole[0]["translation_text"] == generate_text(model, tokenizer, text, num_beams=1, max_new_tokens=5)[0]


def test_the_models_positions_also_limit_the_input():
    model = tiny_translator(seed=1, max_position_embeddings=10, position_embedding_type="learned")
    tokenizer = tiny_tokenizer()  # model_max_length 64: the model's 10 learned positions are the limit
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    with CaptureLogger(pipeline_translation.logger) as captured:
        translator(" ".join(GERMAN[:2]), num_beams=1, max_new_tokens=3)
    assert "truncated to 10 tokens" in captured.out


@pytest.mark.parametrize(
    "bad_input, error, message",
    [
        ("", ValueError, "empty string"),
        ("   \n", ValueError, "empty string \\(only whitespace\\)"),
        (None, ValueError, "is None"),
        (42, TypeError, "is of type int"),
        ({"text": "Hallo"}, TypeError, "is of type dict"),
        ([GERMAN[0], ""], ValueError, "item 1 of the input list is an empty string"),
        ([GERMAN[0], None], ValueError, "item 1 of the input list is None"),
        ([GERMAN[0], 3.5], TypeError, "item 1 of the input list is of type float"),
    ],
    ids=["empty", "whitespace", "none", "int", "dict", "empty-in-list", "none-in-list", "float-in-list"],
)
def test_bad_input_gives_a_clear_error(translator, bad_input, error, message):
    with pytest.raises(error, match=message):
        translator(bad_input)


def test_bad_input_in_a_stream_gives_a_clear_error(translator):
    with pytest.raises(ValueError, match="empty string"):
        list(translator(text for text in [GERMAN[0], ""]))


def test_language_codes_are_accepted_and_a_task_name_sets_them(model, tokenizer, translator):
    text = GERMAN[2]
    plain = translator(text, max_new_tokens=5)
    assert translator(text, src_lang="de", tgt_lang="en", max_new_tokens=5) == plain  # one-direction model
    named = pipeline("translation_de_to_en", model=model, tokenizer=tokenizer)
    assert type(named) is TranslationPipeline and named.task == "translation_de_to_en"
    assert named._preprocess_params == {"src_lang": "de", "tgt_lang": "en"}
    assert named(text, max_new_tokens=5) == plain
    with pytest.raises(ValueError, match="src_lang must be a language code"):
        translator(text, src_lang=5)


def test_language_codes_reach_a_multilingual_tokenizer():
    """As v4: src_lang/tgt_lang go to the tokenizers that use them (NLLB/M2M100 force the target-language token)."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    tokenizer = NllbTokenizer()
    torch.manual_seed(0)
    config = M2M100Config(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                          max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
                          bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                          decoder_start_token_id=tokenizer.eos_token_id)
    translator = pipeline("translation", model=M2M100ForConditionalGeneration(config).eval(), tokenizer=tokenizer)
    for target in ("fra_Latn", "deu_Latn"):
        outputs = translator(["hello world", "hi"], src_lang="eng_Latn", tgt_lang=target, return_tensors=True,
                             num_beams=1, max_new_tokens=3, batch_size=2)
        for output in outputs:
            assert output["translation_token_ids"][1] == tokenizer.convert_tokens_to_ids(target)
    with pytest.raises(ValueError, match="src_lang"):
        translator("hello")  # that tokenizer needs the languages


def test_saved_folder_works_with_pipeline_without_trust_remote_code(model, tokenizer, translator, tmp_path):
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "translation" in saved["custom_pipelines"]  # for users without this package...
    assert not hasattr(AutoConfig.from_pretrained(tmp_path), "custom_pipelines")  # ...which with it is not needed
    expected = translator(GERMAN[:2], max_new_tokens=6)
    for task in ("translation", "translation_de_to_en"):
        loaded = pipeline(task, model=str(tmp_path))
        assert type(loaded) is TranslationPipeline
        assert type(loaded.model) is vanilla_transformer.VanillaTransformerForConditionalGeneration
        assert loaded(GERMAN[:2], max_new_tokens=6) == expected


def test_other_removed_tasks_still_raise_transformers_error(model, tokenizer):
    for task in ("summarization", "text2text-generation", "translation_de"):
        with pytest.raises(KeyError):
            pipeline(task, model=model, tokenizer=tokenizer)


def test_a_model_that_is_not_encoder_decoder_is_refused(tokenizer):
    decoder_only = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match="needs an encoder-decoder model"):
        pipeline("translation", model=decoder_only, tokenizer=tokenizer)


def test_registration_is_idempotent():
    import transformers.pipelines as pipelines

    from vanilla_transformer.compat import translation_task_gate

    owner, name = translation_task_gate(pipelines)
    gate, registry_attributes = getattr(owner, name), dict(vars(pipelines.PIPELINE_REGISTRY))
    vanilla_transformer.register()
    assert getattr(owner, name) is gate  # not wrapped twice
    assert vars(pipelines.PIPELINE_REGISTRY) == registry_attributes
    assert pipelines.PIPELINE_REGISTRY.supported_tasks["translation"]["impl"] is TranslationPipeline
