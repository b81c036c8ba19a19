"""The model behind the server: a saved folder (PyTorch or CTranslate2 export) and its language pair.

`TranslationEngine.translate(sentences)` is one call of `vanilla_transformer.translate.translate` over all the
sentences of a batch (so a sentence gets exactly what `vanilla-transformer translate` gives it), decoded with the
folder's generation config unless `generate_kwargs` say otherwise; ALL-CAPS and Title Case sentences recased unless
`recase=False` (vanilla_transformer/casing.py), their tokens counted as they are translated. `restart()` loads the
folder again, for when the engine failed in a way that may have left it unusable (an unloaded CTranslate2 model, a
CUDA error).

A running server's answers do not depend on the files: a PyTorch model's weights are copied out of the memory map
that `from_pretrained` reads `model.safetensors` through (`in_own_memory`), so a checkpoint written over the file
changes nothing and a truncated one cannot end the process with SIGBUS; CTranslate2 and the tokenizers read their
files into memory when they load.

The language pair is read from the folder's model card (README.md, whose `language:` lists the source and target
codes, as `cards.model_card` writes it) unless given.
"""

import copy
import os

import torch

from vanilla_transformer.cards.model_card import LANGUAGE_CODE, LANGUAGE_NAMES, card_languages
from vanilla_transformer.casing import recase
from vanilla_transformer.checkpoints.kinds import check_folder_kind
from vanilla_transformer.checkpoints.load import load_checkpoint
from vanilla_transformer.decoding import LENGTH_BOUND, check_generation_parameters, length_bound_setting
from vanilla_transformer.interop.ctranslate2_runtime import recorded_languages
from vanilla_transformer.translate import TRANSLATION_KINDS, max_input_tokens, translate, translate_hypotheses


def model_languages(folder: str | os.PathLike, source_lang: str | None = None,
                    target_lang: str | None = None) -> tuple[str, str]:
    """The model's (source, target) codes: those given, else its card's (a PyTorch folder) or those its CTranslate2
    export recorded; a ValueError saying what to pass if none."""
    card_source, card_target = (None, None)
    if source_lang is None or target_lang is None:
        card_source, card_target = card_languages(folder)
        if card_source is None:
            card_source, card_target = recorded_languages(folder) or (None, None)
    source, target = source_lang or card_source, target_lang or card_target
    for name, code in (("--source-lang", source), ("--target-lang", target)):
        if code is None:
            raise ValueError(f"{folder} does not say which languages it translates (no README.md model card with "
                             f"`language: [source, target]`, no `languages` in a CTranslate2 export's config.json): "
                             f"give {name} (and the other), e.g. --source-lang de --target-lang en")
        if not LANGUAGE_CODE.fullmatch(code):
            raise ValueError(f"{name} {code!r} is not an ISO 639 code (two or three lowercase letters, e.g. en)")
    if source == target:
        raise ValueError(f"the source and target languages are both {source!r}")
    return source, target


def in_own_memory(model: torch.nn.Module) -> None:
    """Copy `model`'s CPU parameters and buffers into memory of the process's own, out of any file they are mapped
    from; tensors that share memory (tied weights) still share it."""
    copies: dict[int, torch.UntypedStorage] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.device.type != "cpu":  # already copied to the device
            continue
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in copies:
            copies[storage.data_ptr()] = storage.clone()
        with torch.no_grad():
            tensor.data = torch.empty(0, dtype=tensor.dtype).set_(copies[storage.data_ptr()], tensor.storage_offset(),
                                                                  tensor.size(), tensor.stride())


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def folder_state(folder: str) -> dict[str, tuple[int, int]]:
    """{name: (size, modification time in ns)} of the files at the top of `folder` (links followed): what tells
    that a file was replaced or written since."""
    state = {}
    for entry in os.scandir(folder):
        try:
            if entry.is_file():
                info = entry.stat()
                state[entry.name] = (info.st_size, info.st_mtime_ns)
        except OSError:  # removed meanwhile
            state[entry.name] = (-1, -1)
    return state


class TranslationEngine:
    """A translation folder loaded for serving. `kind` is "seq2seq" (PyTorch) or "ctranslate2"."""

    def __init__(self, path: str | os.PathLike, *, source_lang: str | None = None, target_lang: str | None = None,
                 engine: str = "auto", device: str | None = None, compute_type: str = "default",
                 recase: bool = True, **generate_kwargs):
        self.path = os.fspath(path)
        self.recase = recase
        check_folder_kind(self.path, TRANSLATION_KINDS, "serve")  # a missing or wrong folder first, in one line
        self.source_lang, self.target_lang = model_languages(self.path, source_lang, target_lang)
        self.load_options = dict(kinds=TRANSLATION_KINDS, device=device, engine=engine, compute_type=compute_type,
                                 purpose="serve")
        self.generate_kwargs = generate_kwargs
        self.load()
        self.check_decoding()

    def check_decoding(self) -> None:
        """ValueError (one line) when the folder's generation_config.json, or the options given, hold a decoding
        setting that cannot work: refused at start, not answered as a fault of each client's text."""
        try:
            check_generation_parameters(self.model.generation_config, self.generate_kwargs)
            length_bound_setting({name: self.generate_kwargs[name] for name in LENGTH_BOUND
                                  if name in self.generate_kwargs}, self.model.generation_config)
        except ValueError as error:
            raise ValueError(f"{self.path} cannot be served: {error} (its generation_config.json, or the options "
                             "given)") from None

    def load(self) -> None:
        files = folder_state(self.path)
        loaded = load_checkpoint(self.path, **self.load_options)
        self.kind, self.model, self.tokenizer = loaded.kind, loaded.model, loaded.tokenizer
        if isinstance(self.model, torch.nn.Module):
            in_own_memory(self.model)
        # token counts are asked for from other threads than the batcher's, while `translate` sets padding on the
        # tokenizer (a Rust object that refuses use from two threads while one changes it): a copy of its own
        self._counting_tokenizer = copy.deepcopy(self.tokenizer)
        self.max_input_tokens = max_input_tokens(self.model, self.tokenizer)  # longer: 400 (serve.app)
        self.files = files  # the folder as the server read it (restart reads the same files or none)

    def count_tokens(self, sentences: list[str]) -> list[int]:
        """Source tokens of each sentence (with its special tokens), as the engine will read it (recased)."""
        if not sentences:
            return []
        if self.recase:
            sentences = recase(sentences, self._counting_tokenizer)[0]
        return [len(ids) for ids in self._counting_tokenizer(sentences)["input_ids"]]

    def translate(self, sentences: list[str]) -> list[str]:
        """The translation of each sentence, in one batch."""
        return translate(self.model, self.tokenizer, sentences, batch_size=max(len(sentences), 1),
                         recase=self.recase, **self.generate_kwargs)

    def hypotheses(self, sentences: list[str], count: int) -> list[list[str]]:
        """The `count` best translations of each sentence, best first, in one batch (beam search at least `count`
        wide: `translate.translate_hypotheses`)."""
        return translate_hypotheses(self.model, self.tokenizer, sentences, count, recase=self.recase,
                                    **self.generate_kwargs)

    def is_usable(self) -> bool:
        """False when the engine cannot translate any more without `restart` (its CTranslate2 model unloaded)."""
        translator = getattr(self.model, "translator", None)
        return translator is None or bool(translator.model_is_loaded)

    def restart(self) -> None:
        """Load the folder again (after a failure that may have broken the loaded model); a RuntimeError, the engine
        left as it is, when the folder's files changed since the server read them: a running server's answers must
        not change with the files on disk (restart the server to serve the new ones)."""
        if folder_state(self.path) != self.files:
            raise RuntimeError(f"{self.path} changed on disk since the server loaded it; it is not loaded again, so "
                               "that the server's answers do not change while it runs: restart the server to serve "
                               "the folder as it is now")
        self.load()

    def describe(self, path: bool = True) -> str:
        """What is served, for the log: "FOLDER (engine, source -> target)"; `path=False` leaves the folder out (for
        public answers, which show no path of the server's machine)."""
        engine = "CTranslate2" if self.kind == "ctranslate2" else "PyTorch"
        described = f"{engine}, {self.source_lang} -> {self.target_lang}"
        return f"{self.path} ({described})" if path else described


__all__ = ["TranslationEngine", "folder_state", "card_languages", "in_own_memory", "language_name", "model_languages"]
