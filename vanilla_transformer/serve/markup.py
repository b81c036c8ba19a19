"""The text nodes of an HTML fragment, to translate them and keep the markup: `format=html` of /translate.

`split_markup` reads a fragment with the standard library's `html.parser` and returns its text nodes (entities
decoded) and a `Markup` that writes the fragment back with each text node replaced, every tag, attribute, comment
and the content of <script>, <style> and <code>-like raw elements kept byte for byte. A text node's leading and
trailing whitespace stays outside its translation.
"""

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser

# elements whose text is not prose: kept as written
UNTRANSLATED = frozenset({"script", "style", "code", "pre", "kbd", "samp", "var", "textarea"})
_EDGES = re.compile(r"(\s*)(.*?)(\s*)", re.DOTALL)


@dataclass(frozen=True)
class Markup:
    """A fragment as `parts`: markup kept as written (str) and text-node numbers (int) into `texts`."""

    texts: tuple[str, ...]
    parts: tuple[str | int, ...]


class _Splitter(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.parts: list[str | int] = []
        self.open: list[str] = []  # elements whose text is kept as written, innermost last

    def handle_starttag(self, tag, attrs):
        self.parts.append(self.get_starttag_text())
        if tag in UNTRANSLATED:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.parts.append(self.get_starttag_text())

    def handle_endtag(self, tag):
        self.parts.append(f"</{tag}>")
        if tag in self.open:
            del self.open[len(self.open) - 1 - self.open[::-1].index(tag):]

    def handle_data(self, data):
        leading, text, trailing = _EDGES.fullmatch(data).groups()
        if self.open or self.cdata_elem or not text:
            self.parts.append(data if self.cdata_elem else html.escape(data, quote=False))
            return
        self.parts += [leading, len(self.texts), trailing]
        self.texts.append(text)

    def handle_comment(self, data):
        self.parts.append(f"<!--{data}-->")

    def handle_decl(self, decl):
        self.parts.append(f"<!{decl}>")

    def handle_pi(self, data):
        self.parts.append(f"<?{data}>")

    def unknown_decl(self, data):
        self.parts.append(f"<![{data}]>")


def split_markup(fragment: str) -> Markup:
    """The text nodes of the HTML `fragment` and how to write it back (`join_markup`)."""
    splitter = _Splitter()
    splitter.feed(fragment)
    splitter.close()
    return Markup(tuple(splitter.texts), tuple(part for part in splitter.parts if part != ""))


def join_markup(markup: Markup, translations: list[str]) -> str:
    """The fragment of `markup` with each text node replaced by its translation (HTML-escaped)."""
    if len(translations) != len(markup.texts):
        raise ValueError(f"{len(translations)} translations for {len(markup.texts)} text nodes")
    return "".join(part if isinstance(part, str) else html.escape(translations[part], quote=False)
                   for part in markup.parts)


__all__ = ["Markup", "join_markup", "split_markup"]
