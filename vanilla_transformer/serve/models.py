"""The models one server translates with, and the way from a source language to a target through them.

Each loaded engine (`engine.TranslationEngine`) translates one language pair. `ServedModels` holds them and answers
which chain of engines takes a text from `source` to `target`: the engine of that pair when there is one, else the
shortest chain through other languages (a pivot: en -> de and de -> fr serve en -> fr through de), found once at
start by a breadth-first search over the pairs. When two chains are equally short, the one through the models given
first is taken. Every chain is fixed at start and written to the log, so what a pivot translation went through is
never a guess. Two folders for one pair are refused: which one answers would be a guess too.
"""

import logging
from collections import deque

from vanilla_transformer.serve.engine import language_name
from vanilla_transformer.serve.protocol import ApiError

logger = logging.getLogger("vanilla_transformer.serve")


def describe_language(code: str) -> str:
    """"German (de)", as LibreTranslate names a language in its errors."""
    return f"{language_name(code)} ({code})"


class ServedModels:
    """The engines of a server (each one language pair) and the routes between their languages."""

    def __init__(self, engines):
        self.engines = list(engines)
        if not self.engines:
            raise ValueError("no model to serve")
        self.pairs: dict[tuple[str, str], object] = {}
        for engine in self.engines:
            pair = (engine.source_lang, engine.target_lang)
            if pair in self.pairs:
                raise ValueError(f"{self.pairs[pair].path} and {engine.path} both translate {pair[0]} into {pair[1]}: "
                                 "serve one model per language pair")
            self.pairs[pair] = engine
        # every code, sources first, each in the order the models were given (LibreTranslate's /languages order)
        self.codes = list(dict.fromkeys([source for source, _ in self.pairs] + [target for _, target in self.pairs]))
        self.routes = {source: self._routes_from(source) for source in self.codes}

    def _routes_from(self, source: str) -> dict[str, list]:
        """{target: [engine, ...]} of the shortest chain from `source` to each language it reaches."""
        chains: dict[str, list] = {source: []}
        waiting = deque([source])
        while waiting:
            language = waiting.popleft()
            for (pair_source, pair_target), engine in self.pairs.items():
                if pair_source == language and pair_target not in chains:
                    chains[pair_target] = chains[language] + [engine]
                    waiting.append(pair_target)
        del chains[source]
        return chains

    @property
    def sources(self) -> list[str]:
        """The codes a text can be translated from."""
        return [code for code in self.codes if self.routes[code]]

    def targets(self, source: str) -> list[str]:
        return [code for code in self.codes if code in self.routes.get(source, {})]

    def sources_to(self, target: str) -> list[str]:
        """The codes a text can be translated from into `target`."""
        return [code for code in self.codes if target in self.routes[code]]

    def route(self, source: str, target: str) -> list:
        """The engines from `source` to `target`, in order; an `ApiError` (400, as LibreTranslate words it) when a
        code is not served or no chain joins them."""
        if source not in self.codes:
            raise ApiError(400, f"{source} is not supported as source language: this server translates "
                                f"{self.describe_pairs()}")
        if target not in self.codes:
            raise ApiError(400, f"{target} is not supported as target language: this server translates "
                                f"{self.describe_pairs()}")
        chain = self.routes[source].get(target)
        if chain is None:
            if not self.routes[source]:
                raise ApiError(400, f"{source} is not supported as source language: this server translates "
                                    f"{self.describe_pairs()}")
            raise ApiError(400, f"{describe_language(target)} is not available as a target language from "
                                f"{describe_language(source)}: this server translates {self.describe_pairs()}")
        return chain

    def describe_pairs(self) -> str:
        return ", ".join(f"{source} into {target}" for source, target in self.pairs)

    def languages(self) -> list[dict]:
        """LibreTranslate's GET /languages: each code with its name and the codes it can be translated into."""
        return [{"code": code, "name": language_name(code), "targets": self.targets(code)} for code in self.codes]

    def pivots(self) -> list[str]:
        """One line for each route through other languages: "en -> fr through de"."""
        return [f"{source} -> {target} through {', '.join(engine.target_lang for engine in chain[:-1])}"
                for source in self.codes for target, chain in self.routes[source].items() if len(chain) > 1]

    def log_routes(self) -> None:
        for engine in self.engines:
            logger.info("Translating %s", engine.describe())
        for line in self.pivots():
            logger.info("Pivot: %s (no model of that pair: each text is translated once per model on the way)", line)


__all__ = ["ServedModels", "describe_language"]
