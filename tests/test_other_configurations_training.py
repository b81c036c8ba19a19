"""The other two configurations learn, through the user's own `Trainer` and transformers' data collators, small tasks
generated offline from number words (numbers 0-999; 200 of them held out and never trained on):

- the decoder-only LM continues "3 4 2 =" with "three hundred and forty - two" (greedy generate, exact match);
- the encoder-only classifier tells even from odd numbers written in words;
- the encoder-only masked LM recovers a masked token of "3 4 2 = three hundred and forty - two".

The trained models then serve `pipeline("text-generation" / "text-classification" / "fill-mask")` unchanged, equal
their own forward/generate, save a folder that reloads as the same class, and load in a fresh interpreter where this
package cannot be imported (`trust_remote_code=True`)."""

import collections
import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    pipeline,
)

from helpers import HIDE_PACKAGE
from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForCausalLM,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.training.numbers import number_to_words

pytestmark = pytest.mark.slow  # the module trains three models (and starts a fresh interpreter)

NUMBERS = list(range(1000))
random.Random(0).shuffle(NUMBERS)
HELD_OUT, TRAIN = NUMBERS[:200], NUMBERS[200:]

# Held-out thresholds, calibrated on seeds 0-2 of the recipes below (measured: LM exact match 0.99-1.00 after 200
# steps, classifier accuracy 1.00 after 150 steps, masked-token accuracy 0.82-0.90 after 300 steps against 0.085 for
# always answering the most frequent token).
LM_EXACT_MATCH = 0.9
CLASSIFIER_ACCURACY = 0.95
MASKED_TOKEN_ACCURACY = 0.6


def words(number: int) -> str:
    """"three hundred and forty - two": num2words' English, hyphen and comma as words of their own."""
    return number_to_words(number, "en").replace("-", " - ").replace(",", " ,")


def digits_and_words(number: int) -> str:
    return " ".join(str(number)) + " = " + words(number)


def word_tokenizer() -> PreTrainedTokenizerFast:
    """One id per word or digit; <pad> 0, <s> 1, </s> 2 as the config's defaults, and [MASK] for the masked LM."""
    specials = ["<pad>", "<s>", "</s>", "<unk>", "[MASK]"]
    vocab = {token: i for i, token in enumerate(specials)}
    for number in range(1000):
        for word in digits_and_words(number).split():
            vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", mask_token="[MASK]")


def small_config(tokenizer, **overrides) -> VanillaTransformerConfig:
    """d_model 64, 2 layers, 4 heads: one config, read by each model class for its own stack."""
    values = dict(vocab_size=len(tokenizer), d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, dropout=0.0,
                  max_position_embeddings=32)
    return VanillaTransformerConfig(**(values | overrides))


def train(model, features, collator, steps: int, output_dir) -> None:
    args = TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=32, max_steps=steps, learning_rate=3e-3,
        lr_scheduler_type="inverse_sqrt", warmup_steps=steps // 5, adam_beta2=0.98, weight_decay=0.0,
        logging_steps=50, save_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True, seed=0,
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=args, train_dataset=features, data_collator=collator).train()
    model.eval()


@pytest.fixture
def tokenizer():
    return word_tokenizer()  # a fresh one: pipeline("text-generation") sets padding_side="left" on its tokenizer


@pytest.fixture(scope="module")
def trained_lm(tmp_path_factory):
    tokenizer = word_tokenizer()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(small_config(tokenizer))
    features = [tokenizer(digits_and_words(n) + " </s>") for n in TRAIN]
    train(model, features, DataCollatorForLanguageModeling(tokenizer, mlm=False), 200, tmp_path_factory.mktemp("lm"))
    return model


@pytest.fixture(scope="module")
def trained_classifier(tmp_path_factory):
    tokenizer = word_tokenizer()
    torch.manual_seed(0)
    config = small_config(tokenizer, id2label={0: "even", 1: "odd"}, label2id={"even": 0, "odd": 1})
    model = AutoModelForSequenceClassification.from_config(config)
    features = [dict(tokenizer(words(n)), labels=n % 2) for n in TRAIN]
    train(model, features, DataCollatorWithPadding(tokenizer), 150, tmp_path_factory.mktemp("classifier"))
    return model


@pytest.fixture(scope="module")
def trained_masked_lm(tmp_path_factory):
    tokenizer = word_tokenizer()
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(small_config(tokenizer))
    features = [tokenizer(digits_and_words(n)) for n in TRAIN]
    train(model, features, DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15), 300,
          tmp_path_factory.mktemp("masked_lm"))
    return model


def continue_prompts(model, numbers) -> list[str]:
    """Greedy continuations of "d d d =" prompts, batched and left-padded as a causal LM's prompts are."""
    tokenizer = word_tokenizer()
    tokenizer.padding_side = "left"
    batch = tokenizer([" ".join(str(n)) + " =" for n in numbers], return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch, do_sample=False, num_beams=1, max_new_tokens=12)
    return [text.strip() for text in tokenizer.batch_decode(generated[:, batch.input_ids.shape[1] :],
                                                            skip_special_tokens=True)]


# ---------------------------------------------------------------------------------------------------------------
# Learning, held out.


def test_causal_lm_learns_to_write_held_out_numbers_in_words(trained_lm, tokenizer):
    predictions = continue_prompts(trained_lm, HELD_OUT)
    exact = sum(p == words(n) for p, n in zip(predictions, HELD_OUT)) / len(HELD_OUT)
    print(f"decoder-only LM, held-out exact match: {exact:.3f} (required {LM_EXACT_MATCH})")
    assert exact >= LM_EXACT_MATCH, list(zip(predictions[:5], map(words, HELD_OUT[:5])))


def test_classifier_learns_to_tell_even_from_odd_held_out_numbers(trained_classifier, tokenizer):
    batch = tokenizer([words(n) for n in HELD_OUT], return_tensors="pt", padding=True)
    with torch.no_grad():
        predicted = trained_classifier(**batch).logits.argmax(-1)
    accuracy = (predicted == torch.tensor([n % 2 for n in HELD_OUT])).float().mean().item()
    print(f"encoder-only classifier, held-out even/odd accuracy: {accuracy:.3f} (required {CLASSIFIER_ACCURACY})")
    assert accuracy >= CLASSIFIER_ACCURACY


def test_masked_lm_recovers_masked_tokens_of_held_out_numbers(trained_masked_lm, tokenizer):
    rng = random.Random(1)
    frequencies = collections.Counter(tokenizer(digits_and_words(n)).input_ids[i] for n in TRAIN
                                      for i in range(len(digits_and_words(n).split())))
    most_frequent = frequencies.most_common(1)[0][0]
    correct = baseline = 0
    for number in HELD_OUT:
        input_ids = tokenizer(digits_and_words(number), return_tensors="pt").input_ids
        position = rng.randrange(input_ids.shape[1])
        target = int(input_ids[0, position])
        input_ids[0, position] = tokenizer.mask_token_id
        with torch.no_grad():
            predicted = int(trained_masked_lm(input_ids=input_ids).logits[0, position].argmax())
        correct += predicted == target
        baseline += most_frequent == target
    accuracy, chance = correct / len(HELD_OUT), baseline / len(HELD_OUT)
    print(f"encoder-only masked LM, held-out masked-token accuracy: {accuracy:.3f} (required {MASKED_TOKEN_ACCURACY}; "
          f"the most frequent token: {chance:.3f})")
    assert accuracy >= MASKED_TOKEN_ACCURACY and accuracy > 3 * chance


# ---------------------------------------------------------------------------------------------------------------
# Pipelines, unchanged: they equal the models' own outputs.


def test_text_generation_pipeline_equals_generate(trained_lm, tokenizer):
    generator = pipeline("text-generation", model=trained_lm, tokenizer=tokenizer)
    prompts = [" ".join(str(n)) + " =" for n in HELD_OUT[:4]]
    outputs = generator(prompts, max_new_tokens=12, do_sample=False, return_full_text=False)
    assert [o[0]["generated_text"].strip() for o in outputs] == continue_prompts(trained_lm, HELD_OUT[:4])
    assert outputs[0][0]["generated_text"].strip() == words(HELD_OUT[0])


def test_text_classification_pipeline_names_the_labels(trained_classifier, tokenizer):
    classifier = pipeline("text-classification", model=trained_classifier, tokenizer=tokenizer)
    texts = [words(n) for n in HELD_OUT[:6]]
    results = classifier(texts)
    with torch.no_grad():  # one text at a time, as the pipeline runs them
        probabilities = torch.cat([trained_classifier(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)
                                   for text in texts])
    assert [r["label"] for r in results] == [("even", "odd")[i] for i in probabilities.argmax(-1).tolist()]
    torch.testing.assert_close(torch.tensor([r["score"] for r in results]), probabilities.max(-1).values,
                               atol=1e-5, rtol=0)
    assert [r["label"] for r in results] == [("even", "odd")[n % 2] for n in HELD_OUT[:6]]


def test_fill_mask_pipeline_ranks_the_models_predictions(trained_masked_lm, tokenizer):
    unmasker = pipeline("fill-mask", model=trained_masked_lm, tokenizer=tokenizer)
    number = HELD_OUT[0]  # a number the model never saw, its last word masked
    *start, last = digits_and_words(number).split(" ")
    text = " ".join([*start, "[MASK]"])
    results = unmasker(text, top_k=3)
    with torch.no_grad():
        input_ids = tokenizer(text, return_tensors="pt").input_ids
        probabilities = trained_masked_lm(input_ids=input_ids).logits[0, -1].softmax(-1)
    top = probabilities.topk(3)
    assert [r["token"] for r in results] == top.indices.tolist()
    torch.testing.assert_close(torch.tensor([r["score"] for r in results]), top.values, atol=1e-5, rtol=0)
    assert results[0]["token_str"] == last, (text, results)


# ---------------------------------------------------------------------------------------------------------------
# Save, reload as the same class, and load in a fresh interpreter without this package.


FRESH_SCRIPT = HIDE_PACKAGE + textwrap.dedent(
    r'''
    import json, sys

    import torch
    from transformers import (AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification,
                              AutoTokenizer, pipeline)

    folders = json.loads(sys.argv[1])
    out = {}
    lm = AutoModelForCausalLM.from_pretrained(folders["lm"], trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folders["lm"], trust_remote_code=True)
    generator = pipeline("text-generation", model=folders["lm"], trust_remote_code=True)
    out["lm"] = [type(lm).__module__.split(".")[0], type(lm).__name__,
                 generator("5 0 7 =", max_new_tokens=12, do_sample=False, return_full_text=False)[0]["generated_text"]]
    ids = tokenizer("5 0 7 = five hundred", return_tensors="pt").input_ids
    with torch.no_grad():
        out["lm_logits"] = lm(input_ids=ids).logits[0, -1].tolist()
    classifier = pipeline("text-classification", model=folders["classifier"], trust_remote_code=True)
    out["classifier"] = [type(classifier.model).__name__, classifier(["three hundred and one", "forty - four"])]
    unmasker = pipeline("fill-mask", model=folders["masked_lm"], trust_remote_code=True)
    out["masked_lm"] = [type(unmasker.model).__name__, unmasker("4 7 = forty - [MASK]", top_k=2)]
    print(json.dumps(out))
    '''
)


@pytest.fixture(scope="module")
def saved_folders(trained_lm, trained_classifier, trained_masked_lm, tmp_path_factory):
    tokenizer = word_tokenizer()
    root = tmp_path_factory.mktemp("saved")
    folders = {}
    for name, model in (("lm", trained_lm), ("classifier", trained_classifier), ("masked_lm", trained_masked_lm)):
        folders[name] = str(root / name)
        model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


@pytest.mark.parametrize("name, auto_class, model_class", [
    ("lm", AutoModelForCausalLM, VanillaTransformerForCausalLM),
    ("classifier", AutoModelForSequenceClassification, VanillaTransformerForSequenceClassification),
    ("masked_lm", AutoModelForMaskedLM, VanillaTransformerForMaskedLM),
])
def test_saved_folder_records_its_class_and_reloads_as_itself(saved_folders, request, name, auto_class, model_class):
    model = request.getfixturevalue({"lm": "trained_lm", "classifier": "trained_classifier",
                                     "masked_lm": "trained_masked_lm"}[name])
    folder = saved_folders[name]
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == [model_class.__name__]
    assert config["auto_map"][auto_class.__name__] == f"modeling_vanilla_transformer.{model_class.__name__}"
    assert config["auto_map"]["AutoConfig"] == "configuration_vanilla_transformer.VanillaTransformerConfig"
    assert config["is_encoder_decoder"] is False
    for source in ("modeling_vanilla_transformer.py", "configuration_vanilla_transformer.py"):
        assert os.path.exists(os.path.join(folder, source))
    loaded = auto_class.from_pretrained(folder).eval()
    assert type(loaded) is model_class
    ids = AutoTokenizer.from_pretrained(folder)(digits_and_words(HELD_OUT[0]), return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    if name == "classifier":
        assert config["id2label"] == {"0": "even", "1": "odd"} and config["label2id"] == {"even": 0, "odd": 1}
        assert loaded.config.id2label == {0: "even", 1: "odd"}
    else:
        assert loaded.lm_head.weight is loaded.model.embed_tokens.weight


def test_fresh_interpreter_without_the_package_loads_each_folder_with_remote_code(
    saved_folders, trained_lm, trained_classifier, trained_masked_lm, tokenizer, tmp_path
):
    (tmp_path / "check.py").write_text(FRESH_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run([sys.executable, "-I", str(tmp_path / "check.py"), json.dumps(saved_folders)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])

    assert out["lm"][:2] == ["transformers_modules", "VanillaTransformerForCausalLM"]
    assert out["lm"][2].strip() == continue_prompts(trained_lm, [507])[0]
    ids = tokenizer("5 0 7 = five hundred", return_tensors="pt").input_ids
    with torch.no_grad():
        expected = trained_lm(input_ids=ids).logits[0, -1]
    torch.testing.assert_close(torch.tensor(out["lm_logits"]), expected, atol=1e-6, rtol=0)

    assert out["classifier"][0] == "VanillaTransformerForSequenceClassification"
    here = pipeline("text-classification", model=trained_classifier, tokenizer=tokenizer)
    expected = here(["three hundred and one", "forty - four"])
    assert [r["label"] for r in out["classifier"][1]] == [r["label"] for r in expected]
    torch.testing.assert_close(torch.tensor([r["score"] for r in out["classifier"][1]]),
                               torch.tensor([r["score"] for r in expected]), atol=1e-6, rtol=0)

    assert out["masked_lm"][0] == "VanillaTransformerForMaskedLM"
    expected = pipeline("fill-mask", model=trained_masked_lm, tokenizer=tokenizer)("4 7 = forty - [MASK]", top_k=2)
    assert [r["token_str"] for r in out["masked_lm"][1]] == [r["token_str"] for r in expected]


# ---------------------------------------------------------------------------------------------------------------
# `vanilla-transformer plot attention` draws these models too.


def test_plot_attention_draws_the_self_attention_of_each_saved_model(saved_folders, trained_lm, trained_masked_lm,
                                                                     tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from vanilla_transformer.cli.main import main
    from vanilla_transformer.inspect.plots import attention_weights

    tokenizer = word_tokenizer()
    # decoder-only: the prompt and the model's own greedy continuation, masked (lower-triangular)
    attention = attention_weights(trained_lm, tokenizer, "5 0 7 =", kind="decoder", layer=1,
                                  generate_kwargs=dict(do_sample=False, max_new_tokens=12))
    assert attention.target_generated and attention.target == words(507)
    ids = tokenizer("5 0 7 = " + words(507), return_tensors="pt").input_ids
    with torch.no_grad():
        expected = trained_lm(input_ids=ids, output_attentions=True).attentions[1][0]
    assert attention.query_tokens == tokenizer.convert_ids_to_tokens(ids[0]) + ["</s>"]
    torch.testing.assert_close(torch.from_numpy(attention.weights)[:, :-1, :-1], expected, atol=1e-6, rtol=0)
    np.testing.assert_allclose(attention.weights.sum(-1), 1.0, atol=1e-5)  # rows are distributions over keys
    assert np.all(np.triu(attention.weights, k=1) == 0)  # no query sees a later position
    # encoder-only: the text
    attention = attention_weights(trained_masked_lm, tokenizer, "4 7 = forty - [MASK]", kind="encoder", layer=0)
    ids = tokenizer("4 7 = forty - [MASK]", return_tensors="pt").input_ids
    with torch.no_grad():
        expected = trained_masked_lm(input_ids=ids, output_attentions=True).attentions[0][0]
    torch.testing.assert_close(torch.from_numpy(attention.weights), expected, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"kind='cross' does not exist in this encoder-only model"):
        attention_weights(trained_masked_lm, tokenizer, "4 7", kind="cross")

    for name, kind, text in (("lm", "decoder", "5 0 7 ="), ("masked_lm", "encoder", "4 7 = forty - [MASK]"),
                             ("classifier", "encoder", "forty - four")):
        out = tmp_path / f"{name}.png"
        main(["plot", "attention", "--model", saved_folders[name], "--text", text, "--kind", kind, "--head", "all",
              "--max-new-tokens", "12", "--dpi", "40", "--out", str(out)])
        assert "Wrote" in capsys.readouterr().out and imread(out).shape[2] == 4
    with pytest.raises(SystemExit, match=r"kind='encoder' does not exist in this decoder-only model"):
        main(["plot", "attention", "--model", saved_folders["lm"], "--text", "5", "--kind", "encoder",
              "--out", str(tmp_path / "x.png")])
