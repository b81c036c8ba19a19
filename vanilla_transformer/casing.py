"""ALL-CAPS and Title Case input, translated as the model knows the text: recased before translating, the
translation given the input's case afterwards.

A vocabulary learnt from ordinary text knows "▁man" and "▁Mann" as whole tokens, and "MAN" only as letters: a model
that never saw such input copies it through or garbles it (Multi30k en->de: 37.6 case-insensitive BLEU as written,
0.0 upper-cased, 6.4 title-cased). Augmenting the training data (training/augmentation.py, OpusTrainer's UpperCase
and TitleCase) teaches it only slowly, and only for what it was trained on. Recasing works for any model:

- `case_style(text)`: `"upper"` for a text without a lower-case letter that has at least `MIN_UPPER_LETTERS`
  upper-case letters in at least two words ("HELLO WORLD"; not "USA" or "OK"); `"title"` for a text of at least
  `MIN_TITLE_WORDS` words with letters, each word's first letter upper-case, with lower-case letters elsewhere ("A
  Man In An Orange Hat", OpusTrainer's TitleCase); None otherwise, and such text is translated as it is.
- `recase_words(words, tokenizer)`: each word written as the model's vocabulary knows it best: of its lower-case
  form, its capitalised form and the form given, the one the tokenizer cuts into the fewest pieces, the earlier
  of these on a tie ("MAN" -> "man", "MANN" -> "Mann" with a German vocabulary, "USA" -> "USA" where the vocabulary
  has it). The text's first word then starts with a capital, as sentences do. Measured word by word against
  Multi30k's test sentences as written, with the 6,000-token English-German vocabulary of a Multi30k model: 99 % of
  English words and 85 % of German words (whose nouns are capitalised) get their case back.
- `restore_case(translation, style)`: the translation upper-cased (`"upper"`) or title-cased (`"title"`).

`recase(texts, tokenizer)` does the first two for a list of texts; `translate.translate`, corpus translation, `serve`
and `pipeline("translation")` call it unless told not to (`recase=False`, `--no-recase`). Text is split on white
space and joined with one space: the tokenizer normalises white space the same way.

This file is copied next to the weights with the pipeline (Hub remote code): it imports only the standard library.
"""

MIN_UPPER_LETTERS = 4
MIN_TITLE_WORDS = 3
STYLES = ("upper", "title")


def _has_letters(word: str) -> bool:
    return any(character.isalpha() for character in word)


def case_style(text: str) -> str | None:
    """"upper", "title" or None (module docstring)."""
    words = [word for word in text.split() if _has_letters(word)]
    if any(character.islower() for character in text):
        first_letters = [next(character for character in word if character.isalpha()) for word in words]
        if len(words) >= MIN_TITLE_WORDS and all(letter.isupper() for letter in first_letters):
            return "title"
        return None
    shouted = [word for word in words if sum(character.isupper() for character in word) >= 1]
    if len(shouted) >= 2 and sum(character.isupper() for character in text) >= MIN_UPPER_LETTERS:
        return "upper"
    return None


def _capitalized(word: str) -> str:
    return word[:1].upper() + word[1:].lower()


def recase_words(words: list[str], tokenizer) -> list[str]:
    """Each of `words` in the form of the fewest pieces of `tokenizer` (module docstring)."""
    forms = [(word.lower(), _capitalized(word), word) for word in words]
    distinct = sorted({form for options in forms for form in options})
    pieces = dict(zip(distinct, (len(ids) for ids in tokenizer(distinct, add_special_tokens=False)["input_ids"])))
    return [min(options, key=lambda form: (pieces[form], options.index(form))) for options in forms]


def recase(texts: list[str], tokenizer) -> tuple[list[str], list[str | None]]:
    """`texts` as they are translated, and each one's style for `restore_case` (None: the text as it was)."""
    styles = [case_style(text) for text in texts]
    todo = [i for i, style in enumerate(styles) if style is not None]
    if not todo:
        return list(texts), styles
    words = [texts[i].split() for i in todo]
    recased = iter(recase_words([word for text_words in words for word in text_words], tokenizer))
    texts = list(texts)
    for i, text_words in zip(todo, words):
        new = [next(recased) for _ in text_words]
        new[0] = new[0][:1].upper() + new[0][1:]
        texts[i] = " ".join(new)
    return texts, styles


def title_case(text: str) -> str:
    """OpusTrainer's TitleCase: each whitespace-separated word with its first character upper-cased."""
    return " ".join(word[0].upper() + word[1:] for word in text.split())


def restore_case(translation: str, style: str | None) -> str:
    """`translation` in the case of a source of `style`."""
    if style == "upper":
        return translation.upper()
    if style == "title":
        return title_case(translation)
    return translation


__all__ = ["MIN_TITLE_WORDS", "MIN_UPPER_LETTERS", "STYLES", "case_style", "recase", "recase_words",
           "restore_case", "title_case"]
