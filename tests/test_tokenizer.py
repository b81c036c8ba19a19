"""The shared BPE vocabulary (training/tokenizer.py): standard files, labels, exact round trips, CLI."""

import os
import re
import subprocess
import sys
import unicodedata

import pytest
from transformers import AutoTokenizer, TokenizersBackend

from helpers import REPO_ROOT, SHARED_DATA
from vanilla_transformer.training.tokenizer import main, train_tokenizer

# Real sentences: Multi30k validation/test captions (German, French, English), with umlauts, ß, accents, apostrophes,
# hyphens, digits and the French spacing before "?" and "!".
GERMAN = [
    "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
    "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun.",
    "Ein Mädchen in einem Karateanzug bricht einen Stock mit einem Tritt.",
    "Fünf Leute in Winterjacken und mit Helmen stehen im Schnee mit Schneemobilen im Hintergrund.",
    "Leute reparieren das Dach eines Hauses.",
    "Eine Gruppe von Menschen steht vor einem Iglu.",
    "Ein Junge in einem roten Trikot versucht, die Home Base zu erreichen, während der Catcher im blauen Trikot versucht, ihn zu fangen.",
    "Zwei Männer, die Fußball spielen; einer trägt ein gelbes Trikot, der andere ein rotes!",
]
FRENCH = [
    "Un homme avec un chapeau orange regardant quelque chose.",
    "Un terrier de Boston court sur l'herbe verdoyante devant une clôture blanche.",
    "Une fille en tenue de karaté brisant un bâton avec un coup de pied.",
    "Cinq personnes avec des vestes d'hiver et des casques sont debout dans la neige, avec des motoneiges en arrière-plan.",
    "Des gens réparent le toit d'une maison.",
    "Un groupe de personnes debout devant un igloo.",
    "Où est l'élève ? Il s'est déjà enfui à l'été dernier !",
    "Une femme âgée, vêtue d'un manteau à carreaux, fait des courses au marché.",
]
ENGLISH = [
    "A man in an orange hat starring at something.",
    "A Boston Terrier is running on lush green grass in front of a white fence.",
    "A girl in karate uniform breaking a stick with a front kick.",
    "Five people in winter jackets and helmets stand in the snow, with snowmobiles in the background.",
    "People are fixing the roof of a house.",
    "A group of people standing in front of an igloo.",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(GERMAN + FRENCH + ENGLISH, vocab_size=300, min_frequency=1)


def normalized(text: str) -> str:
    """What the tokenizer promises to give back, computed without it: NFKC, whitespace runs as one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def test_saved_tokenizer_loads_with_auto_tokenizer_as_a_standard_fast_tokenizer(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "tokenizer.json").is_file()
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded) is TokenizersBackend  # transformers' own class: nothing custom to import
    assert [loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id, loaded.unk_token_id] == [0, 1, 2, 3]
    for sentence in GERMAN + FRENCH:
        assert loaded(sentence)["input_ids"] == tokenizer(sentence)["input_ids"]


def test_special_ids_match_the_model_config_defaults(tokenizer):
    from vanilla_transformer import VanillaTransformerConfig

    config = VanillaTransformerConfig()
    assert tokenizer.pad_token_id == config.pad_token_id
    assert tokenizer.eos_token_id == config.eos_token_id
    assert tokenizer.bos_token_id == config.decoder_start_token_id


def test_text_target_gives_labels_ending_in_eos(tokenizer):
    batch = tokenizer(GERMAN[:3], text_target=ENGLISH[:3])
    assert len(batch["labels"]) == 3
    for source, labels, english in zip(batch["input_ids"], batch["labels"], ENGLISH):
        assert source[-1] == tokenizer.eos_token_id and labels[-1] == tokenizer.eos_token_id
        assert tokenizer.bos_token_id not in labels  # the model prepends the decoder start itself
        assert tokenizer.decode(labels, skip_special_tokens=True) == english


@pytest.mark.parametrize("sentences", [GERMAN, FRENCH], ids=["german", "french"])
def test_decode_restores_real_sentences_exactly(tokenizer, sentences):
    for sentence in sentences:
        ids = tokenizer(sentence)["input_ids"]
        assert tokenizer.unk_token_id not in ids
        assert len(ids) < len(sentence)  # subwords, not characters
        assert tokenizer.decode(ids, skip_special_tokens=True) == sentence


def test_whitespace_and_compatibility_characters_are_normalised(tokenizer):
    messy = ["  Ein Mann\tmit einem  orangefarbenen\u00a0Hut.\n", "Des gens  réparent le\u2009toit d'une maison. "]
    for text in messy:
        decoded = tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True)
        assert decoded == normalized(text)
    assert tokenizer.decode(tokenizer("ﬁ")["input_ids"], skip_special_tokens=True) == "fi"  # NFKC


@pytest.mark.skipif(not (SHARED_DATA / "val.de").is_file(), reason="Multi30k not found at ../shared/data/multi30k")
def test_decode_restores_every_multi30k_german_and_french_sentence():
    files = [SHARED_DATA / f"{split}.{lang}" for split in ("val", "test_2016_flickr") for lang in ("de", "fr")]
    tokenizer = train_tokenizer(files=files, vocab_size=2000)
    for path in files:
        lines = path.read_text(encoding="utf-8").splitlines()
        decoded = tokenizer.batch_decode(tokenizer(lines)["input_ids"], skip_special_tokens=True)
        mismatches = [(line, out) for line, out in zip(lines, decoded) if out != normalized(line)]
        assert not mismatches, f"{path.name}: {len(mismatches)} lines differ, e.g. {mismatches[0]}"


def test_training_input_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="exactly one of texts"):
        train_tokenizer()
    with pytest.raises(TypeError, match="not a single string"):
        train_tokenizer("Ein Satz.")
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer(GERMAN, vocab_size=3)
    with pytest.raises(ValueError, match="empty"):
        train_tokenizer(["", "   "])
    with pytest.raises(FileNotFoundError, match="missing.de"):
        train_tokenizer(files=[tmp_path / "missing.de"])


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_cli_reports_missing_and_empty_files_without_traceback(tmp_path, capsys):
    good = write_lines(tmp_path / "train.de", GERMAN)
    empty = write_lines(tmp_path / "empty.fr", ["", "  "])
    binary = tmp_path / "latin1.fr"
    binary.write_bytes("Où est l'élève ?".encode("latin-1"))
    cases = {
        str(tmp_path / "nope.de"): "not found: .*nope.de",
        empty: "empty.fr is empty",
        str(binary): "latin1.fr is not UTF-8",
        str(tmp_path): "is a folder, not a file",
    }
    for bad, message in cases.items():
        with pytest.raises(SystemExit) as exit_info:
            main(["--files", good, bad, "--output_dir", str(tmp_path / "tok")])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert re.search(message, err), err
    assert not (tmp_path / "tok").exists()


@pytest.mark.slow  # a fresh interpreter
def test_cli_trains_and_saves_a_loadable_tokenizer(tmp_path):
    de = write_lines(tmp_path / "train.de", GERMAN)
    fr = write_lines(tmp_path / "train.fr", FRENCH)
    out = tmp_path / "tok"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer.training.tokenizer", "--files", de, fr, "--vocab_size", "250", "--min_frequency", "1",
         "--output_dir", str(out)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert f"to {out}" in result.stdout
    loaded = AutoTokenizer.from_pretrained(out)
    assert len(loaded) == 250
    assert loaded.decode(loaded(FRENCH[6])["input_ids"], skip_special_tokens=True) == FRENCH[6]
