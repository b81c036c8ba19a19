"""Sentences in and out of a text: `split_sentences` cuts a text into the sentences the engine translates one by one
(models are trained on sentences), `join_sentences` puts their translations back with the text's own whitespace
and line breaks.

The sentence boundaries are `sentencex`'s (Wikimedia's segmenter: abbreviations and numbers of ~300 languages,
falling back to related languages), not a regular expression of ours. sentencex's time grows faster than the
length of what it is given on some inputs (runs of quotes), so a long line goes to it a window of at most
`WINDOW_CHARS` characters at a time: the sentences a window ends are kept, and its last, possibly unfinished
piece starts the next window (a sentence longer than three quarters of a window may be cut at a space). The split
is sentencex's own for lines up to a window long, and close to it beyond (sentencex pairs quotes across a whole
line); its time grows with the length of the text. Everything else here is linear too (whitespace edges by
`str.strip`, not by a backtracking regular expression).
"""

from dataclasses import dataclass

from sentencex import segment

# most characters sentencex is given at once; longer sentences are cut at their last space within a window
WINDOW_CHARS = 2000


@dataclass(frozen=True)
class SplitText:
    """A text as `parts`: whitespace kept as it is (str) and sentence numbers (int) into `sentences`."""

    sentences: tuple[str, ...]
    parts: tuple[str | int, ...]


def edges(text: str) -> tuple[str, str, str]:
    """(leading whitespace, the rest without it, trailing whitespace) of `text`, in linear time."""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if end <= start:
        return text, "", ""
    return text[:start], text[start:end], text[end:]


def _window_cut(window: str, start: int) -> int:
    """Where to cut a window sentencex found no sentence end in (after `start`): after its last space or tab when
    that leaves a quarter of the window behind, else at its end."""
    space = max(window.rfind(" ", start), window.rfind("\t", start))
    return space + 1 if space + 1 >= len(window) // 4 else len(window)


def segment_line(language: str, line: str):
    """sentencex's pieces of `line` (together, the whole line), given to sentencex a window at a time. Each window
    moves on by at least a quarter of its length, so sentencex sees each character at most four times."""
    start = 0
    while len(line) - start > WINDOW_CHARS:
        window = line[start:start + WINDOW_CHARS]
        pieces = list(segment(language, window))
        kept = len(window) - len(pieces[-1]) if pieces else 0
        yield from pieces[:-1]  # the sentences this window ends
        if kept < len(window) // 4:  # the rest is one long piece: cut it, the remainder goes on in the next window
            cut = _window_cut(window, kept)
            yield window[kept:cut]
            kept = cut
        start += kept
    yield from segment(language, line[start:])


def split_sentences(text: str, language: str) -> SplitText:
    """`text` cut into sentences of `language` (an ISO 639 code) by sentencex; whitespace between them is kept."""
    sentences: list[str] = []
    parts: list[str | int] = []
    for line in text.splitlines(keepends=True):  # a line break always ends a sentence
        for piece in segment_line(language, line):
            leading, sentence, trailing = edges(piece)
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


__all__ = ["SplitText", "edges", "join_sentences", "segment_line", "split_sentences"]
