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


# ----------------------------------------------------------------------------------------------------------------
# Hostile input: markup kept byte for byte, and time that grows with the length of the text

HOSTILE_FRAGMENTS = [
    # (fragment, the fragment with its text nodes upper-cased): everything but the text nodes as sent
    ("<P>Two dogs</P>", "<P>TWO DOGS</P>"),
    ("<p>one</p  >two</P\n>", "<p>ONE</p  >TWO</P\n>"),
    ("<code>&quot;a&quot; &lt;b&gt; &amp;</code> snow", "<code>&quot;a&quot; &lt;b&gt; &amp;</code> SNOW"),
    ("<pre><b>kept</b> &amp; as is</PRE>after", "<pre><b>kept</b> &amp; as is</PRE>AFTER"),
    ("dogs <script>var a = 1; if (a < 2) {", "DOGS <script>var a = 1; if (a < 2) {"),
    ("<style>p > b { x: 1 }</STYLE >tail", "<style>p > b { x: 1 }</STYLE >TAIL"),
    ("<![ x", "<![ x"),
    ("<![ a]]>snow <![CDATA[x]]>b", "<![ a]]>SNOW <![CDATA[x]]>B"),
    ('<a TITLE="x > y" data-x=\'1 > 0\' hidden>link</a >', '<a TITLE="x > y" data-x=\'1 > 0\' hidden>LINK</a >'),
    ("<!-- a <p>comment</p> -->text<!--->more<!-->end", "<!-- a <p>comment</p> -->TEXT<!--->MORE<!-->END"),
    ("one < two and <3 & so", "ONE &lt; TWO AND &lt;3 &amp; SO"),
    ("<p>open comment <!-- never closed <b>x</b>", "<p>OPEN COMMENT <!-- never closed <b>x</b>"),
    ("</ odd>text</>x<?pi ?>y", "</ odd>TEXT</>X<?pi ?>Y"),
    ("<title>a &amp; b</title><textarea><b>raw</b></textarea>", "<title>A &amp; B</title><textarea><b>raw</b></textarea>"),
    ("<p>&nbsp;</p>  <br/>\n", "<p>&nbsp;</p>  <br/>\n"),
    ("<a x='unclosed>text", "<a x='unclosed>text"),
]


@pytest.mark.parametrize("fragment, upper", HOSTILE_FRAGMENTS, ids=[f for f, _ in HOSTILE_FRAGMENTS])
def test_markup_is_kept_as_sent_and_only_text_nodes_change(fragment, upper):
    markup = split_markup(fragment)
    assert join_markup(markup, [text.upper() for text in markup.texts]) == upper


def test_entities_of_a_text_node_are_decoded_for_translation_and_escaped_back():
    markup = split_markup("<b>Fish &amp; chips &lt;3 &#x41;</b>")
    assert markup.texts == ("Fish & chips <3 A",)
    assert join_markup(markup, ["Fisch & Pommes <3"]) == "<b>Fisch &amp; Pommes &lt;3</b>"


def seconds(function, *texts: str, rounds: int = 5) -> list[float]:
    """The shortest of `rounds` runs of function(text) for each of `texts`, the texts taken in turn each round, so
    that a busy spell of the machine slows all of them alike rather than one."""
    import time

    best = [float("inf")] * len(texts)
    for _ in range(rounds):
        for i, text in enumerate(texts):
            started = time.perf_counter()
            function(text)
            best[i] = min(best[i], time.perf_counter() - started)
    return best


LONG_RUNS = {  # inputs on which a splitter can take time that grows with the square of their length
    "spaces inside a sentence": lambda n: "Two" + " " * n + "dogs.",
    "no-break spaces": lambda n: "Two" + "\u00a0" * n + "dogs.",
    "spaces and tabs": lambda n: "Two" + " \t" * (n // 2) + "dogs.",
    "only spaces": lambda n: " " * n,
    "quotes": lambda n: "'" * n,
    "short sentence, long rest": lambda n: ("x. " + "y" * 1990) * (n // 1993),
    "unclosed comments": lambda n: "<!--" * (n // 4),
    "unclosed tags": lambda n: "<a" * (n // 2),
    "open code elements": lambda n: "<code>" * (n // 6),
}


@pytest.mark.parametrize("kind", LONG_RUNS)
def test_splitting_time_grows_linearly_with_the_text(kind):
    """100,000 characters take about four times as long as 25,000 (at most 8x here, on a busy machine): a
    quadratic splitter takes sixteen times as long, and seconds."""
    make = LONG_RUNS[kind]

    def split(text):
        markup = split_markup(text)
        for piece in markup.texts:
            split_sentences(piece, "en")
        return split_sentences(text, "en")

    short, long = seconds(split, make(25_000), make(100_000))
    assert long < 8 * short + 0.05, (short, long)
    assert long < 2.0, long
    text = make(100_000)
    result = split(text)
    assert join_sentences(result, list(result.sentences)) == text


def test_a_line_longer_than_a_window_gets_sentencexs_sentences():
    """Lines are given to sentencex a window at a time: where no sentence is that long, the sentences are those of
    sentencex over the whole line."""
    from sentencex import segment

    from vanilla_transformer.serve.text import WINDOW_CHARS

    rng = random.Random(0)
    words = [word for word in WORDS if word not in ("e.g.", "z.B.")]
    line = " ".join(" ".join(rng.choice(words) for _ in range(rng.randint(2, 12))) + rng.choice(".!?")
                    for _ in range(3 * WINDOW_CHARS // 30))
    assert len(line) > 2 * WINDOW_CHARS
    expected = [piece.strip() for piece in segment("en", line) if piece.strip()]
    assert max(map(len, expected)) < WINDOW_CHARS // 2
    assert list(split_sentences(line, "en").sentences) == expected
