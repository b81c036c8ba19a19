"""Sentences in and out of a text: `split_sentences` cuts a text into the sentences the engine translates one by one
(models are trained on sentences), `join_sentences` puts their translations back with the text's own whitespace
and line breaks.

The sentence boundaries are `sentencex`'s (Wikimedia's segmenter: abbreviations and numbers of ~300 languages,
falling back to related languages), not a regular expression of ours.
"""

import re
from dataclasses import dataclass

from sentencex import segment

# a piece of sentencex's output: its leading whitespace, the sentence, its trailing whitespace
_PIECE = re.compile(r"(\s*)(.*?)(\s*)", re.DOTALL)


@dataclass(frozen=True)
class SplitText:
    """A text as `parts`: whitespace kept as it is (str) and sentence numbers (int) into `sentences`."""

    sentences: tuple[str, ...]
    parts: tuple[str | int, ...]


def split_sentences(text: str, language: str) -> SplitText:
    """`text` cut into sentences of `language` (an ISO 639 code) by sentencex; whitespace between them is kept."""
    sentences: list[str] = []
    parts: list[str | int] = []
    for line in text.splitlines(keepends=True):  # a line break always ends a sentence
        for piece in segment(language, line):
            leading, sentence, trailing = _PIECE.fullmatch(piece).groups()
            if leading:
                parts.append(leading)
            if sentence:
                parts.append(len(sentences))
                sentences.append(sentence)
            if trailing:
                parts.append(trailing)
    return SplitText(tuple(sentences), tuple(parts))


def join_sentences(split: SplitText, translations: list[str]) -> str:
    """The text of `split` with each sentence replaced by its translation."""
    if len(translations) != len(split.sentences):
        raise ValueError(f"{len(translations)} translations for {len(split.sentences)} sentences")
    return "".join(part if isinstance(part, str) else translations[part] for part in split.parts)


__all__ = ["SplitText", "join_sentences", "split_sentences"]
