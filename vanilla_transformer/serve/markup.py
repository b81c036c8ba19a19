"""The text nodes of an HTML fragment, to translate them and keep the markup: `format=html` of /translate.

`split_markup` cuts a fragment into markup, kept exactly as written (tags with their case, attributes and spacing,
comments, declarations, entities, and the content of <script>, <style>, <code>, <pre> and the like), and text
nodes, whose text (entities decoded) is translated; `join_markup` writes the fragment back with each text node
replaced by its translation (escaped) and every other character as it came. A text node's leading and trailing
whitespace stays outside its translation.

The cut follows the tokenizer of the HTML standard where it decides what is markup: a tag starts with "<" and a
letter (or "</" and a letter) and ends at the first ">" outside a quoted attribute value; comments run from "<!--"
to "-->"; "<!", "<?" and "</" otherwise start a bogus comment that ends at the next ">"; the text of raw-text
elements (<script>, <style>, <textarea>, ...) runs to their end tag; markup left open at the end of the fragment
runs to its end. Each step is one scan forward (`str.find`, or a regular expression that cannot backtrack), so the
time grows with the length of the fragment, and no input makes it fail: the standard library's `html.parser`,
which rewrites tags and fails on some malformed markup, is not used.
"""

import html
import re
from dataclasses import dataclass

from vanilla_transformer.serve.text import edges

# elements whose text is not prose: markup inside them is read, their text kept as written
UNTRANSLATED = frozenset({"code", "pre", "kbd", "samp", "var"})
# elements whose content is text up to their end tag (no markup inside): kept as written, except <title>'s
RAW_TEXT = frozenset({"script", "style", "textarea", "xmp", "iframe", "noembed", "noframes", "plaintext", "title"})
TRANSLATED_RAW_TEXT = frozenset({"title"})

_MARKUP_START = re.compile(r"<[a-zA-Z/!?]")
_TAG_NAME = re.compile(r"[^\t\n\f\r />]*")
# a tag's attributes up to its closing ">": any character but ">" and "=", or "=" with a quoted value (a quote
# opens a value only after "="); each step takes at least one character and never needs to be undone
_ATTRIBUTES = re.compile(r"""(?:[^>=]|=[\t\n\f\r ]*(?:"[^"]*"|'[^']*'|(?![\"'])))*""")
_END_TAG_OF: dict[str, re.Pattern] = {}


@dataclass(frozen=True)
class Markup:
    """A fragment as `parts`: markup kept as written (str) and text-node numbers (int) into `texts`."""

    texts: tuple[str, ...]
    parts: tuple[str | int, ...]


def _tag_end(fragment: str, start: int) -> int:
    """The index after the ">" that closes the tag whose attributes start at `start` (the fragment's end if none)."""
    end = _ATTRIBUTES.match(fragment, start).end()
    return end + 1 if end < len(fragment) and fragment[end] == ">" else len(fragment)


def _until(fragment: str, marker: str, start: int) -> int:
    """The index after the first `marker` from `start` (the fragment's end if none)."""
    found = fragment.find(marker, start)
    return len(fragment) if found < 0 else found + len(marker)


def _raw_text_end(fragment: str, name: str, start: int) -> int:
    """Where the content of raw-text element `name` that starts at `start` ends: at its end tag, any case."""
    if name == "plaintext":
        return len(fragment)
    if name not in _END_TAG_OF:
        _END_TAG_OF[name] = re.compile(rf"</{name}(?=[\t\n\f\r />]|$)", re.IGNORECASE)
    found = _END_TAG_OF[name].search(fragment, start)
    return len(fragment) if found is None else found.start()


def _markup_end(fragment: str, start: int) -> tuple[int, str | None, bool]:
    """(end, tag name, is an end tag) of the markup at `start` (a "<" that `_MARKUP_START` found)."""
    following = fragment[start + 1]
    if following == "!":
        if fragment.startswith("<!--", start):
            for abrupt in ("<!-->", "<!--->"):
                if fragment.startswith(abrupt, start):
                    return start + len(abrupt), None, False
            return _until(fragment, "-->", start + 4), None, False
        return _until(fragment, ">", start + 2), None, False  # doctype, CDATA, bogus comment
    if following == "?":
        return _until(fragment, ">", start + 2), None, False
    closing = following == "/"
    name_start = start + 2 if closing else start + 1
    if closing and not (name_start < len(fragment) and fragment[name_start].isascii()
                        and fragment[name_start].isalpha()):
        if fragment.startswith(">", name_start):  # "</>": nothing
            return name_start + 1, None, False
        return _until(fragment, ">", name_start), None, False  # a bogus comment
    name_end = _TAG_NAME.match(fragment, name_start).end()
    return _tag_end(fragment, name_end), fragment[name_start:name_end].lower(), closing


def split_markup(fragment: str) -> Markup:
    """The text nodes of the HTML `fragment` and how to write it back (`join_markup`)."""
    texts: list[str] = []
    parts: list[str | int] = []
    open_untranslated: list[str] = []  # untranslated elements open here, innermost last
    open_counts = dict.fromkeys(UNTRANSLATED, 0)  # how many of each are open (no scan of the list to find out)

    def text_node(raw: str, translated: bool) -> None:
        leading, middle, trailing = edges(raw)
        decoded = html.unescape(middle)
        if not translated or not decoded.strip():
            parts.append(raw)
            return
        parts.extend((leading, len(texts), trailing))
        texts.append(decoded)

    position = 0
    while position < len(fragment):
        found = _MARKUP_START.search(fragment, position)
        markup_start = len(fragment) if found is None else found.start()
        if markup_start > position:
            text_node(fragment[position:markup_start], translated=not open_untranslated)
        if found is None:
            break
        end, name, closing = _markup_end(fragment, markup_start)
        parts.append(fragment[markup_start:end])
        position = end
        if name is None:
            continue
        if closing:
            if open_counts.get(name):  # close it and every element opened inside it
                while True:
                    innermost = open_untranslated.pop()
                    open_counts[innermost] -= 1
                    if innermost == name:
                        break
        elif name in UNTRANSLATED:
            open_untranslated.append(name)
            open_counts[name] += 1
        elif name in RAW_TEXT and end < len(fragment) and fragment[end - 1] == ">":
            content_end = _raw_text_end(fragment, name, end)
            if content_end > end:
                text_node(fragment[end:content_end],
                          translated=name in TRANSLATED_RAW_TEXT and not open_untranslated)
            position = content_end
    return Markup(tuple(texts), tuple(part for part in parts if part != ""))


def join_markup(markup: Markup, translations: list[str]) -> str:
    """The fragment of `markup` with each text node replaced by its translation (HTML-escaped)."""
    if len(translations) != len(markup.texts):
        raise ValueError(f"{len(translations)} translations for {len(markup.texts)} text nodes")
    return "".join(part if isinstance(part, str) else html.escape(translations[part], quote=False)
                   for part in markup.parts)


__all__ = ["Markup", "join_markup", "split_markup"]
