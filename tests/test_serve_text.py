"""The server's text handling: sentences cut by sentencex and put back exactly, HTML text nodes found as lxml finds
them and the markup written back byte for byte."""

import random

import pytest

pytest.importorskip("sentencex")

from vanilla_transformer.serve.markup import join_markup, split_markup  # noqa: E402
from vanilla_transformer.serve.text import join_sentences, split_sentences  # noqa: E402

WORDS = ["Two", "dogs", "play", "in", "the", "snow", "Dr.", "Smith", "runs", "e.g.", "3.5", "km", "Zwei", "Hunde",
         "spielen", "im", "Schnee", "z.B.", "fünf", "Leute"]
ENDS = [".", "!", "?", "", "...", ";"]
SPACES = [" ", "  ", "\n", "\n\n", "\t", " \n "]


def random_text(rng: random.Random) -> str:
    parts = [rng.choice(SPACES) if rng.random() < 0.3 else ""]
    for _ in range(rng.randint(1, 6)):
        parts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) + rng.choice(ENDS))
        parts.append(rng.choice(SPACES))
    return "".join(parts)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("language", ["en", "de"])
def test_sentences_put_back_give_the_text_and_are_sentencex_sentences(seed, language):
    from sentencex import segment

    rng = random.Random(seed)
    for _ in range(50):
        text = random_text(rng)
        split = split_sentences(text, language)
        assert join_sentences(split, list(split.sentences)) == text
        expected = [piece.strip() for line in text.splitlines(keepends=True) for piece in segment(language, line)
                    if piece.strip()]
        assert list(split.sentences) == expected
        assert all(sentence == sentence.strip() and sentence for sentence in split.sentences)
        marked = join_sentences(split, [f"<{i}>" for i in range(len(split.sentences))])
        assert marked.count("<") == len(split.sentences)  # every sentence replaced once


def test_a_count_of_translations_unlike_the_sentences_is_refused():
    split = split_sentences("One. Two.", "en")
    with pytest.raises(ValueError, match="1 translations for 2 sentences"):
        join_sentences(split, ["Eins."])


FRAGMENTS = [
    '<p class="intro">Two dogs <b>play</b> in the snow.</p>',
    "<ul><li>One</li><li> Two </li><li></li></ul>Tail text",
    '<div><img src="a.png" alt="a dog"/><br>Text after a break &amp; an entity</div>',
    "<p>Code: <code>x = 1</code> and <pre>  keep\n  this</pre> done</p><!-- a comment -->",
    '<script>var s = "<p>not text</p>";</script><style>p { color: red }</style><p>Shown</p>',
    "Plain text without tags",
]


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_markup_is_written_back_as_it_was_and_text_nodes_are_lxmls(fragment):
    lxml_html = pytest.importorskip("lxml.html")

    markup = split_markup(fragment)
    assert join_markup(markup, list(markup.texts)) == fragment
    root = lxml_html.fragment_fromstring(fragment, create_parent="div")
    skipped = {"script", "style", "code", "pre", "kbd", "samp", "var", "textarea"}
    expected = []
    for element in root.iter():
        prose = isinstance(element.tag, str) and element.tag not in skipped  # not a comment, not code
        if prose and element.text and element.text.strip():
            expected.append(element.text.strip())
        if element is not root and element.tail and element.tail.strip():
            expected.append(element.tail.strip())
    assert sorted(markup.texts) == sorted(expected)
    upper = join_markup(markup, [text.upper() for text in markup.texts])
    assert split_markup(upper).texts == tuple(text.upper() for text in markup.texts)  # same places, new text
