"""ALL-CAPS and Title Case input (vanilla_transformer/casing.py): which texts are recased, how each word is written,
and that `translate`, CTranslate2, `translate_hypotheses`, the pipeline, the command line and the server translate
such a text as the two steps done by hand give: the recased text translated as written (transformers' own
`generate`, each sentence alone), then given the input's case. Off (`recase=False`, `--no-recase`), a text is
translated exactly as written. Multi30k, where present, gives the words the recasing is measured on; the quality
it buys is measured by benchmarks/augment.py (RESULTS.md)."""

import random
import string

import pytest
from transformers import pipeline

from helpers import SHARED_DATA as MULTI30K
from translation_fixtures import ENGLISH, GERMAN, saved_with_export, tiny_tokenizer, tiny_translator
from vanilla_transformer.casing import case_style, recase, recase_words, restore_case, title_case
from vanilla_transformer.translate import load_model_and_tokenizer, translate, translate_hypotheses

SHOUTED = [GERMAN[0].upper(), title_case(GERMAN[5]), GERMAN[1], GERMAN[4].upper(), "Ja.", title_case(GERMAN[2])]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model():
    return tiny_translator(seed=5)


# ---------------------------------------------------------------------------------------------------------------
# which texts


@pytest.mark.parametrize("text, style", [
    ("HELLO WORLD", "upper"), ("A MAN IN AN ORANGE HAT.", "upper"), ("SOPA DE ERVILHA", "upper"),
    ("ΚΑΛΗΜΕΡΑ ΚΟΣΜΕ", "upper"), ("ZWEI HUNDE, 3 KATZEN!", "upper"),
    ("A Man In An Orange Hat.", "title"), ("Zwei Hunde Spielen Im Schnee", "title"), ("The 3 Little Pigs", "title"),
    ("USA", None), ("OK.", None), ("A B", None), ("HELLO", None), ("A man in an orange hat.", None),
    ("Ein Boston Terrier läuft über Gras.", None), ("New York", None), ("", None), ("   ", None), ("123 456 789", None),
    ("两只狗在雪地里玩", None), ("NASA launched a rocket.", None),
])
def test_which_texts_are_upper_or_title_cased(text, style):
    assert case_style(text) == style


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_sentence_upper_or_title_cased_is_seen_as_such_and_as_written_is_not(seed):
    rng = random.Random(seed)
    sentences = ENGLISH + GERMAN
    if MULTI30K.is_dir():
        sentences += rng.sample((MULTI30K / "val.en").read_text(encoding="utf-8").splitlines(), 200)
        sentences += rng.sample((MULTI30K / "val.de").read_text(encoding="utf-8").splitlines(), 200)
    for sentence in sentences:
        words = [word for word in sentence.split() if any(c.isalpha() for c in word)]
        if sum(c.isalpha() for c in sentence) >= 4 and len(words) >= 2:
            assert case_style(sentence.upper()) == "upper", sentence
        if len(words) >= 3:
            assert case_style(title_case(sentence)) in ("title", "upper"), sentence
    written = [case_style(sentence) for sentence in sentences]
    assert written.count(None) >= 0.98 * len(sentences)  # captions as written: not recased


# ---------------------------------------------------------------------------------------------------------------
# how each word is written


def fewest_pieces(word: str, tokenizer) -> str:
    """The definition, one tokenizer call per form: lower-case, capitalised, as given; the earlier on a tie."""
    forms = [word.lower(), word[:1].upper() + word[1:].lower(), word]
    counts = [len(tokenizer(form, add_special_tokens=False)["input_ids"]) for form in forms]
    return forms[counts.index(min(counts))]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_word_takes_the_form_of_fewest_pieces(tokenizer, seed):
    rng = random.Random(seed)
    words = [word for sentence in GERMAN + ENGLISH for word in sentence.split()]
    words += ["".join(rng.choice(string.ascii_letters + "äöüß-.,") for _ in range(rng.randint(1, 12)))
              for _ in range(100)]
    shouted = [rng.choice((str.upper, str.title, str.lower, str))(word) for word in words]
    assert recase_words(shouted, tokenizer) == [fewest_pieces(word, tokenizer) for word in shouted]


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="Multi30k is not beside the checkout")
@pytest.mark.parametrize("language, share", [("en", 0.97), ("de", 0.80)])
def test_a_vocabulary_learnt_from_the_corpus_gives_most_words_their_case_back(language, share):
    from vanilla_transformer.training.tokenizer import train_tokenizer

    corpus = MULTI30K / f"train.{language}"
    tokenizer = train_tokenizer(files=[corpus], vocab_size=6000)
    lines = (MULTI30K / f"test_2016_flickr.{language}").read_text(encoding="utf-8").splitlines()
    recased = recase([line.upper() for line in lines], tokenizer)[0]
    pairs = [(got, want) for line, back in zip(lines, recased) for got, want in zip(back.split(), line.split())]
    assert sum(got == want for got, want in pairs) >= share * len(pairs)


def test_the_translation_gets_the_case_of_its_source():
    assert restore_case("zwei hunde spielen im schnee.", "upper") == "ZWEI HUNDE SPIELEN IM SCHNEE."
    assert restore_case("two dogs play in the snow.", "title") == "Two Dogs Play In The Snow."
    assert restore_case("Two dogs  play.", None) == "Two dogs  play."


# ---------------------------------------------------------------------------------------------------------------
# translation: the two steps by hand are the oracle


def by_hand(model, tokenizer, texts: list[str], **generate_kwargs) -> list[str]:
    """Each text alone: recased (or not), translated by transformers' `generate`, given its source's case."""
    results = []
    for text in texts:
        (source,), (style,) = recase([text], tokenizer)
        ids = model.generate(**tokenizer(source, return_tensors="pt"), **generate_kwargs)
        results.append(restore_case(tokenizer.decode(ids[0], skip_special_tokens=True), style))
    return results


def as_written(model, tokenizer, texts: list[str], **generate_kwargs) -> list[str]:
    return [tokenizer.decode(model.generate(**tokenizer(text, return_tensors="pt"), **generate_kwargs)[0],
                             skip_special_tokens=True) for text in texts]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_translate_recases_as_by_hand_alone_and_batched(tokenizer, seed):
    model = tiny_translator(seed=seed)
    greedy = dict(num_beams=1, max_new_tokens=12)
    expected = by_hand(model, tokenizer, SHOUTED, **greedy)
    assert translate(model, tokenizer, SHOUTED, batch_size=4, **greedy) == expected
    assert [translate(model, tokenizer, [text], **greedy)[0] for text in SHOUTED] == expected
    assert translate(model, tokenizer, SHOUTED, recase=False, **greedy) == as_written(model, tokenizer, SHOUTED,
                                                                                      **greedy)
    assert all(text == text.upper() for text in expected[:1] + expected[3:4])


def test_the_n_best_are_each_given_the_case_of_their_source(model, tokenizer):
    hypotheses = translate_hypotheses(model, tokenizer, SHOUTED, 2, num_beams=2, max_new_tokens=10)
    plain = translate_hypotheses(model, tokenizer, recase(SHOUTED, tokenizer)[0], 2, recase=False, num_beams=2,
                                 max_new_tokens=10)
    styles = recase(SHOUTED, tokenizer)[1]
    assert hypotheses == [[restore_case(text, style) for text in texts] for texts, style in zip(plain, styles)]


def test_the_pipeline_recases_our_models_and_leaves_others_as_they_were(model, tokenizer):
    greedy = dict(num_beams=1, max_new_tokens=12)
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    expected = by_hand(model, tokenizer, SHOUTED, **greedy)
    assert [r["translation_text"] for r in translator(SHOUTED, batch_size=4, **greedy)] == expected
    assert [r["translation_text"] for r in translator(SHOUTED, recase=False, **greedy)] == as_written(
        model, tokenizer, SHOUTED, **greedy)

    # another encoder-decoder model (transformers' own BART): translated as written unless asked
    from transformers import BartConfig, BartForConditionalGeneration

    bart = BartForConditionalGeneration(BartConfig(
        vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, forced_eos_token_id=None)).eval()
    other = pipeline("translation", model=bart, tokenizer=tokenizer)
    assert [r["translation_text"] for r in other(SHOUTED, **greedy)] == as_written(bart, tokenizer, SHOUTED, **greedy)
    assert [r["translation_text"] for r in other(SHOUTED, recase=True, **greedy)] == by_hand(bart, tokenizer,
                                                                                              SHOUTED, **greedy)


@pytest.fixture(scope="module")
def folders(model, tokenizer, tmp_path_factory):
    """The model saved greedy (de -> en), and its CTranslate2 export where CTranslate2 is installed."""
    folder = tmp_path_factory.mktemp("casing")
    greedy = tiny_translator(seed=5)
    greedy.generation_config.update(num_beams=1, early_stopping=False, length_penalty=1.0, max_length=13)
    return saved_with_export(greedy, tokenizer, folder)


@pytest.mark.parametrize("engine", ["pytorch", "ctranslate2"])
def test_both_engines_and_the_server_recase_as_by_hand(engine, folders, model, tokenizer):
    from serve_fixtures import post, server_in_thread  # a module that skips where num2words is not installed

    from vanilla_transformer.serve.engine import TranslationEngine
    from vanilla_transformer.serve.settings import ServeSettings

    if engine not in folders:
        pytest.skip("CTranslate2 is not installed")
    expected = by_hand(model, tokenizer, SHOUTED, num_beams=1, max_new_tokens=12)
    loaded, loaded_tokenizer = load_model_and_tokenizer(folders[engine], "cpu")
    assert translate(loaded, loaded_tokenizer, SHOUTED, batch_size=3) == expected
    assert translate(loaded, loaded_tokenizer, SHOUTED, recase=False) == as_written(
        model, tokenizer, SHOUTED, num_beams=1, max_new_tokens=12)
    for recasing in (True, False):
        served = TranslationEngine(folders[engine], recase=recasing)
        with server_in_thread(served, ServeSettings()) as url:
            answers = [post(url, q=text, source="de", target="en").json()["translatedText"] for text in SHOUTED[:2]]
        assert answers == (expected[:2] if recasing else as_written(model, tokenizer, SHOUTED[:2], num_beams=1,
                                                                    max_new_tokens=12))


def test_the_server_counts_the_tokens_it_translates(folders, tokenizer):
    """An ALL-CAPS sentence longer in letters than the model reads, but not once recased: translated, not refused."""
    from serve_fixtures import post, server_in_thread

    from vanilla_transformer.serve.engine import TranslationEngine
    from vanilla_transformer.serve.settings import ServeSettings

    text = f"{GERMAN[1][:-1]} und {GERMAN[2][:-1]}.".upper()  # one sentence
    recased = recase([text], tokenizer)[0][0]
    limit = len(tokenizer(recased)["input_ids"])
    assert len(tokenizer(text)["input_ids"]) > limit
    served = TranslationEngine(folders["pytorch"])
    served.max_input_tokens = limit
    with server_in_thread(served, ServeSettings()) as url:
        answer = post(url, q=text, source="de", target="en")
        assert answer.status_code == 200, answer.text
        assert served.count_tokens([text]) == [limit]
        served.recase = False
        refused = post(url, q=text, source="de", target="en")
        assert refused.status_code == 400 and "tokens long" in refused.json()["error"]


def test_the_command_recases_unless_told_not_to(folders, model, tokenizer, tmp_path):
    from vanilla_transformer.cli.main import main

    source = tmp_path / "source.de"
    source.write_text("\n".join(SHOUTED) + "\n", encoding="utf-8")
    greedy = dict(num_beams=1, max_new_tokens=12)
    for flags, expected in (([], by_hand(model, tokenizer, SHOUTED, **greedy)),
                            (["--no-recase"], as_written(model, tokenizer, SHOUTED, **greedy))):
        output = tmp_path / f"out{len(flags)}.en"
        main(["translate", "--model", str(folders["pytorch"]), "--input", str(source), "--output", str(output),
              "--engine", "pytorch", "--no-progress", *flags])
        assert output.read_text(encoding="utf-8").splitlines() == expected
