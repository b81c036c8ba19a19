"""Translate sentences in batches with a loaded model: the library side of `vanilla-transformer translate`.

    from vanilla_transformer.translate import load_model_and_tokenizer, translate
    model, tokenizer = load_model_and_tokenizer("outputs/multi30k")   # or a CTranslate2 export
    translate(model, tokenizer, ["Two dogs play in the snow."], num_beams=4)

Decoding follows the model's `generation_config` (the paper's beam 4, length penalty 0.6) unless the keyword
arguments say otherwise, and each translation is bounded by its source's length as the model's `generate` bounds it:
at most `max_length_a * n + max_length_b` tokens for a source of n tokens (fairseq's `--max-len-a` / `--max-len-b`;
the folder's generation config, or the keywords, set them; `max_length_a=None` turns the bound off). A
`CTranslate2Translator` applies the same bound from its folder's generation config. A sentence longer than the model
reads (`max_input_tokens`: its positions and the tokenizer's `model_max_length`) is cut to that many tokens, as the
translation pipeline and CTranslate2 cut it, and a warning names its line: the end of it is not translated, and a
hostile line of millions of tokens costs no more than one of the longest the model reads. `translate_chunks` translates
an iterable of lines chunk by chunk (a corpus of millions of lines in flat memory); each chunk is sorted by length into
batches and comes back in its own order; `translate_hypotheses` gives each sentence's n best. `translate_chunks(...,
closest_to=references)` writes, of each sentence's n best, the one closest to its reference line (sentence BLEU):
sequence-level interpolation (Kim & Rush 2016, section 3.2), for a teacher's translations of a training corpus whose
original translations are known. Folders are opened by `checkpoints.load.load_checkpoint`; the command is
`cli/translate.py`.

A batch goes to CTranslate2 for a `CTranslate2Translator` (a folder written by `vanilla-transformer export
ctranslate2`), which needs neither torch nor transformers' model code, and to the model's `generate` otherwise
(`translate.pytorch`, imported for such a model only).
"""

import logging
import sys
from collections.abc import Iterable, Iterator
from itertools import islice

from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from vanilla_transformer.casing import recase as recase_texts
from vanilla_transformer.casing import restore_case
from vanilla_transformer.checkpoints.load import ENGINES, load_checkpoint
from vanilla_transformer.decoding import (
    LENGTH_BOUND,
    check_generation_parameters,
    length_bound_setting,
    longest_input,
    positions_read,
)
from vanilla_transformer.interop.ctranslate2_runtime import CTranslate2Translator, import_ctranslate2

TRANSLATION_KINDS = ("seq2seq", "ctranslate2")
CHUNK_SIZE = 4096  # lines read, sorted by length and translated together by `translate_chunks`
logger = logging.getLogger("vanilla_transformer.translate")


def load_model(path: str, device=None):
    """A saved translation model folder's model in eval mode on `device` (default: CUDA when available), checked
    first by `checkpoints.load.load_checkpoint`: a folder that is not whole raises `CheckpointError` (a ValueError)."""
    return load_checkpoint(path, kinds=("seq2seq",), device=device, need_tokenizer=False).model


def load_model_and_tokenizer(path: str, device=None, *, engine: str = "auto", compute_type: str = "default"):
    """The model and tokenizer of a saved translation folder: our PyTorch model, or a
    `ctranslate2_runtime.CTranslate2Translator` (with `compute_type`) for a folder written by `vanilla-transformer
    export ctranslate2`; `engine` ("pytorch" or "ctranslate2") insists on one. Both `generate` for `translate`."""
    loaded = load_checkpoint(path, kinds=TRANSLATION_KINDS, device=device, engine=engine,
                             compute_type=compute_type, purpose="translate")
    return loaded.model, loaded.tokenizer


def max_input_tokens(model, tokenizer) -> int | None:
    """The longest source in tokens (special tokens included) `model` reads: its positions (a CTranslate2 folder's as
    its export recorded them; a PyTorch model's as its exports would hold them, `positions_read`: the same for both
    engines) and the tokenizer's `model_max_length`, whichever is less; None when neither says."""
    if isinstance(model, CTranslate2Translator):
        return longest_input(model.max_positions, tokenizer)
    return longest_input(positions_read(getattr(model, "config", None)), tokenizer)


def characters_read(tokenizer, limit: int | None) -> int | None:
    """Characters of a source that are sure to hold its first `limit` tokens, with a wide margin (no token is longer
    than the vocabulary's longest; normalization may change a text's length): a longer source is cut to this many
    characters before it is tokenized, so that one line of megabytes costs what a long sentence does. None: no
    limit."""
    if limit is None:
        return None
    longest = max(map(len, tokenizer.get_vocab()), default=1)
    return 4 * (limit + 1) * longest + 1024


def source_ids(model, tokenizer, sources: list[str]) -> tuple[list[list[int]], list[tuple[int, int, bool]]]:
    """The token ids of each source as `model` reads them, and (index, length, whether the length is the whole
    source's) of each source that was longer than `max_input_tokens` and is cut to that many tokens (as
    `tokenizer(..., truncation=True)` cuts it). A source longer than `characters_read` is counted in its first
    characters only (the length is then at least what it says)."""
    limit = max_input_tokens(model, tokenizer)
    characters = characters_read(tokenizer, limit)
    whole = [characters is None or len(source) <= characters for source in sources]
    if not all(whole):
        sources = [source if fits else source[:characters] for source, fits in zip(sources, whole)]
    ids = tokenizer(sources, verbose=False)["input_ids"] if sources else []  # warn_cut says what is too long
    cut = [(i, len(row), whole[i]) for i, row in enumerate(ids) if limit is not None and len(row) > limit]
    if cut:
        shortened = tokenizer([sources[i] for i, *_ in cut], truncation=True, max_length=limit)["input_ids"]
        for (i, *_), row in zip(cut, shortened):
            ids[i] = row
    return ids, cut


def warn_cut(cut: list[tuple[int, int, bool]], limit: int | None, what: str = "line") -> None:
    """One warning for the sources `source_ids` cut: (number counted from 1, length, whether it is the whole
    source's) of each."""
    if not cut:
        return
    named = ", ".join(f"{number:,} ({length:,}{'' if whole else '+'} tokens)" for number, length, whole in cut[:5])
    more = f" and {len(cut) - 5:,} more" if len(cut) > 5 else ""
    logger.warning(f"{what.capitalize()}{'s' if len(cut) > 1 else ''} {named}{more} longer than the {limit:,} tokens "
                   f"the model reads: cut to the first {limit:,}, the rest is not translated (split long lines into "
                   "sentences).")


def translate(
    model,
    tokenizer,
    texts: Iterable[str],
    *,
    batch_size: int = 32,
    progress: bool = False,
    recase: bool = True,
    **generate_kwargs,
) -> list[str]:
    """Translate `texts` in batches of `batch_size` sentences; returns one single-line string per input text.

    Sentences are batched by token length (less padding) and returned in their original order. A blank text gives
    an empty translation without running the model. `generate_kwargs` go to `model.generate` (num_beams,
    max_new_tokens, length_penalty, do_sample, top_k, temperature, max_length_a, max_length_b, ...): each
    translation takes at most `max_length_a * n + max_length_b` tokens for a source of n tokens (its </s>
    included), and at most `max_new_tokens` or the generation config's maximum. `progress=True` shows a tqdm bar
    on stderr. `model` is our model or an `ctranslate2_runtime.CTranslate2Translator` (see
    `load_model_and_tokenizer`). `recase`: ALL-CAPS and Title Case texts are translated recased, and their
    translations given their case (`casing`); False translates every text as it is written.
    """
    texts = list(texts)
    translations = []
    with progress_bar(len(texts), show=progress) as bar:
        for chunk in translate_chunks(model, tokenizer, texts, chunk_size=max(len(texts), 1), batch_size=batch_size,
                                      bar=bar, recase=recase, **generate_kwargs):
            translations.extend(chunk)
    return translations


def translate_chunks(
    model,
    tokenizer,
    lines: Iterable[str],
    *,
    chunk_size: int = CHUNK_SIZE,
    batch_size: int = 32,
    seed: int | None = None,
    first_chunk: int = 0,
    bar: tqdm | None = None,
    recase: bool = True,
    closest_to: Iterable[str] | None = None,
    **generate_kwargs,
) -> Iterator[list[str]]:
    """Translate `lines` `chunk_size` at a time, as `translate` does; yields each chunk's translations (one per line,
    in order) as soon as they are done, so that a file of any size is translated in the memory of one chunk.

    `seed`: sampling (`do_sample=True`) draws from the seed `seed + k` for the k-th chunk, counted from `first_chunk`
    (a run that resumes after `first_chunk` chunks draws as the run it continues would have). `bar` is updated by
    the lines translated. A line cut to `max_input_tokens` is named in a warning, its number counted from 1 at the
    first of `lines` as chunk `first_chunk` (a resumed run names the lines of the whole file)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    check_generation_parameters(model.generation_config, generate_kwargs)
    length_bound_setting({name: generate_kwargs[name] for name in LENGTH_BOUND if name in generate_kwargs},
                         model.generation_config)  # a value that cannot work fails before the first chunk
    if closest_to is not None and generate_kwargs.get("do_sample"):
        raise ValueError("closest_to chooses among the beam's best translations: it takes no sampling (do_sample)")
    lines = iter(lines)
    references = None if closest_to is None else iter(closest_to)
    index = first_chunk
    while chunk := list(islice(lines, chunk_size)):
        if seed is not None:
            manual_seed(model, seed + index)
        first_line = index * chunk_size + 1
        if references is None:
            yield _translate_chunk(model, tokenizer, chunk, batch_size, generate_kwargs, bar, recase, first_line)
        else:
            chunk_references = list(islice(references, len(chunk)))
            if len(chunk_references) < len(chunk):
                raise ValueError(f"closest_to has fewer lines than the text to translate: it ends at line "
                                 f"{index * chunk_size + len(chunk_references) + 1}")
            yield _closest_chunk(model, tokenizer, chunk, chunk_references, batch_size, generate_kwargs, bar, recase,
                                 first_line)
        index += 1
    if references is not None and next(references, None) is not None:
        raise ValueError("closest_to has more lines than the text to translate")


def translate_hypotheses(model, tokenizer, texts: list[str], count: int, *, recase: bool = True,
                         **generate_kwargs) -> list[list[str]]:
    """The `count` best translations of each of `texts` (one batch), best first: beam search at least `count`
    wide (the model's own beam when wider) returns each text's `count` best hypotheses, each bounded by its source's
    length by the engine (the model's `generate`, or CTranslate2 without torch) as `translate`'s one translation
    is, and recased as it is (`recase`). A blank text gives `count` empty ones. Fewer distinct hypotheses than
    `count` can come back the same text twice. A text cut to `max_input_tokens` is named in a warning."""
    results, cut = _hypotheses(model, tokenizer, texts, count, recase, generate_kwargs)
    warn_cut([(i + 1, *rest) for i, *rest in cut], max_input_tokens(model, tokenizer), "text")
    return results


def _hypotheses(model, tokenizer, texts: list[str], count: int, recase: bool,
                generate_kwargs: dict) -> tuple[list[list[str]], list[tuple[int, int, bool]]]:
    """`translate_hypotheses`'s results, and (index in `texts`, length, whole) of each text cut to
    `max_input_tokens`."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    beams = max(count, generate_kwargs.pop("num_beams", None) or model.generation_config.num_beams or 1)
    generate_kwargs = {**generate_kwargs, "num_beams": beams, "num_return_sequences": count, "do_sample": False}
    check_generation_parameters(model.generation_config, generate_kwargs)
    results = [[""] * count for _ in texts]
    todo = [i for i, text in enumerate(texts) if text.strip()]
    if not todo:
        return results, []
    sources, styles = _recased(tokenizer, [texts[i] for i in todo], recase)
    ids, cut = source_ids(model, tokenizer, sources)
    output_ids = _generate_batch(model, tokenizer, ids, generate_kwargs)
    decoded = [" ".join(text.splitlines()) for text in tokenizer.batch_decode(output_ids, skip_special_tokens=True)]
    for row, (i, style) in enumerate(zip(todo, styles)):
        results[i] = [restore_case(text, style) for text in decoded[row * count:(row + 1) * count]]
    return results, [(todo[row], *rest) for row, *rest in cut]


def closest(hypotheses: list[str], reference: str) -> str:
    """Of `hypotheses` (best first), the one of highest sentence BLEU against `reference` (sacreBLEU's
    `sentence_bleu`, its default exponential smoothing); of equals, the better-ranked."""
    from sacrebleu import sentence_bleu

    scores = [sentence_bleu(hypothesis, [reference]).score for hypothesis in hypotheses]
    return hypotheses[scores.index(max(scores))]


def _closest_chunk(model, tokenizer, texts: list[str], references: list[str], batch_size: int,
                   generate_kwargs: dict, bar: tqdm | None, recase: bool, first_line: int = 1) -> list[str]:
    """One chunk as `_translate_chunk` translates it, each text's translation the closest of its beam's best to
    its reference."""
    count = generate_kwargs.get("num_beams") or model.generation_config.num_beams or 1
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)  # batches of similar lengths
    translations = [""] * len(texts)
    cut = []
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        hypotheses, batch_cut = _hypotheses(model, tokenizer, [texts[i] for i in batch], count, recase,
                                            dict(generate_kwargs))
        cut += [(batch[row], *rest) for row, *rest in batch_cut]
        for i, candidates in zip(batch, hypotheses):
            translations[i] = closest(candidates, references[i]) if texts[i].strip() else ""
        if bar is not None:
            bar.update(len(batch))
    warn_cut([(first_line + i, *rest) for i, *rest in sorted(cut)], max_input_tokens(model, tokenizer))
    return translations


def progress_bar(total: int | None, *, initial: int = 0, show: bool = True) -> tqdm:
    """The bar of sentences translated on stderr: sentences/s, and the time left when `total` is known."""
    return tqdm(total=total, initial=initial, disable=not show, unit="sent", desc="Translating", file=sys.stderr,
                dynamic_ncols=True)


def warnings_above_the_bar():
    """A context in which `warn_cut`'s warnings are written above a progress bar (`tqdm.write`), not through it."""
    return logging_redirect_tqdm([logger])


def manual_seed(model, seed: int) -> None:
    """Seed the random numbers `model` samples from: CTranslate2's (a `CTranslate2Translator`), or torch's."""
    if isinstance(model, CTranslate2Translator):
        import_ctranslate2().set_random_seed(seed)
    else:
        from vanilla_transformer.translate import pytorch  # a torch model: torch is imported already

        pytorch.seed(seed)


def _recased(tokenizer, texts: list[str], recase: bool) -> tuple[list[str], list[str | None]]:
    """`texts` as they are translated, and the case each one's translation is given (`casing.recase`)."""
    return recase_texts(texts, tokenizer) if recase else (texts, [None] * len(texts))


def _translate_chunk(model, tokenizer, texts: list[str], batch_size: int, generate_kwargs: dict,
                     bar: tqdm | None, recase: bool = True, first_line: int = 1) -> list[str]:
    """One chunk: its non-blank texts sorted by token length into batches, translated, and put back in order; the
    texts cut to `max_input_tokens` named in one warning (their lines counted from `first_line`)."""
    translations = [""] * len(texts)
    todo = [i for i, text in enumerate(texts) if text.strip()]
    sources, styles = _recased(tokenizer, [texts[i] for i in todo], recase)
    style_of = dict(zip(todo, styles))
    input_ids, cut = source_ids(model, tokenizer, sources)
    warn_cut([(first_line + todo[row], *rest) for row, *rest in cut], max_input_tokens(model, tokenizer))
    ids_of = dict(zip(todo, input_ids))
    todo.sort(key=lambda i: len(ids_of[i]), reverse=True)  # longest first: an out-of-memory shows at once
    if bar is not None:
        bar.update(len(texts) - len(todo))  # blank lines
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        output_ids = _generate_batch(model, tokenizer, [ids_of[i] for i in batch], generate_kwargs)
        for i, text in zip(batch, tokenizer.batch_decode(output_ids, skip_special_tokens=True)):
            translations[i] = restore_case(" ".join(text.splitlines()), style_of[i])  # one line out per line in
        if bar is not None:
            bar.update(len(batch))
    return translations


def _generate_batch(model, tokenizer, rows: list[list[int]], generate_kwargs: dict):
    """The generated ids of each row of source ids (one list of ids per row, or `num_return_sequences` per row, row
    after row), each bounded by its source's length by the engine: by CTranslate2 for a `CTranslate2Translator`,
    without torch; by the model's `generate` otherwise (`translate.pytorch`)."""
    if isinstance(model, CTranslate2Translator):
        return model.translate_ids(rows, **generate_kwargs)
    from vanilla_transformer.translate import pytorch  # a torch model: torch is imported already

    return pytorch.generate_batch(model, tokenizer, rows, generate_kwargs)


__all__ = ["CHUNK_SIZE", "ENGINES", "characters_read", "load_model", "load_model_and_tokenizer", "manual_seed",
           "max_input_tokens", "progress_bar", "source_ids", "translate", "translate_chunks", "translate_hypotheses",
           "closest"]
