"""Which language a text is in, among those the server translates from: `source=auto` and POST /detect.

The detector is py3langid (the maintained fork of langid.py: a naive Bayes model over byte n-grams of 97 languages,
its model file inside its wheel, nothing downloaded), restricted to the served languages it knows, so it answers
with a language the server can translate. Its probabilities over those languages become LibreTranslate's
confidences (0 to 100). A served code it does not know cannot be detected: the log says so at start, and a server
with none it knows answers `auto` with a 400.

The model is read once (about half a second) and then only read: `detect` may run in several threads at once.
"""

import logging

from vanilla_transformer.extras import import_extra

logger = logging.getLogger("vanilla_transformer.serve")


def _load_identifier():
    langid = import_extra("py3langid.langid", "serve", "Detecting the language (source=auto)")
    return langid.LanguageIdentifier.from_model_file(langid.MODEL_FILE, norm_probs=True)


class LanguageDetector:
    """Detects among `codes` (ISO 639-1 codes; those py3langid does not know are left out, `unknown` lists them)."""

    def __init__(self, codes: list[str]):
        self.codes = list(dict.fromkeys(codes))
        self._identifier = _load_identifier() if self.codes else None
        known = set(self._identifier.nb_classes) if self._identifier is not None else set()
        self.detectable = [code for code in self.codes if code in known]
        self.unknown = [code for code in self.codes if code not in known]
        if self.detectable:
            self._identifier.set_languages(self.detectable)

    def log(self) -> None:
        if self.unknown:
            logger.warning("source=auto cannot detect %s (the language detector does not know %s): give source "
                           "for %s", ", ".join(self.unknown), "it" if len(self.unknown) == 1 else "them",
                           "it" if len(self.unknown) == 1 else "them")

    def detect(self, text: str, among: list[str] | None = None) -> list[dict]:
        """LibreTranslate's answer for `text`: [{"confidence": 0..100, "language": code}, ...], most likely first,
        over the detectable codes (of `among`, when given). An empty list when none is detectable."""
        codes = [code for code in (among if among is not None else self.detectable) if code in self.detectable]
        if not codes:
            return []
        if len(codes) == 1:
            return [{"confidence": 100.0, "language": codes[0]}]
        ranked = self._identifier.rank(text)
        chosen = set(codes)
        weights = [(code, float(probability)) for code, probability in ranked if code in chosen]
        total = sum(weight for _, weight in weights) or 1.0
        return [{"confidence": round(100 * weight / total, 2), "language": code} for code, weight in weights]


__all__ = ["LanguageDetector"]
