"""A run's training pair of text files (`TextCorpus`): cached and cleaned (training/corpus_cache.py,
training/cleaning.py) or streamed (training/streaming.py), what the BPE vocabulary is trained on, and what the run
reports about it.

Under torchrun / accelerate launch the main process of each machine reads and tokenizes while the others wait
(`main_process_first`); they then find its cached files and read them: one tokenization, one set of files.
"""

import hashlib
import json
import os
import resource
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field

import datasets
import numpy as np
import pyarrow.compute as pc
from transformers import AutoTokenizer

from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.files import reads_once
from vanilla_transformer.training.arrow_columns import length_columns, select_kept
from vanilla_transformer.training.background_tokens import BATCHES_RECORD, TrainingWhileTokenizing
from vanilla_transformer.training.cleaning import clean_corpus, describe_cleaning, drop_empty_sides
from vanilla_transformer.training.corpus_cache import (
    check_cache_dir,
    check_pairs,
    default_cache_dir,
    read_corpus,
    sample_file_texts,
    sample_pairs,
    sample_texts,
    staging,
    tokenize_corpus,
)
from vanilla_transformer.training.data_sources import check_file_pair, training_corpora
from vanilla_transformer.training.messages import DataError
from vanilla_transformer.training.streaming import StreamingTokenBatches


@dataclass
class TextCorpus:
    """The training pair of text files of a run, and what was learnt about it."""

    source: str
    target: str
    streaming: bool
    cache_dir: str
    pairs: datasets.Dataset | None = None  # the cached pairs (not streaming)
    key: str | None = None  # their fingerprint
    pairs_read: int = 0
    pairs_used: int | None = None
    cleaning: dict = field(default_factory=dict)  # pairs dropped per rule
    tokenizer_sample: str | None = None  # how the BPE vocabulary's sentences were chosen
    weight: float = 1.0  # times its pairs are drawn per epoch (--train_weights)
    tag: str | None = None  # the token put before its sources (--train_tags)
    pairs_drawn: int | None = None  # pairs per epoch after the weight

    @property
    def tags(self) -> list[str]:
        return [self.tag] if self.tag is not None else []

    def fingerprint(self) -> list:
        """What the BPE vocabulary trained on this corpus depends on, of the corpus itself."""
        return [self.key, len(self.pairs)] + ([["tags", self.tags]] if self.tags else [])

    def describe(self) -> dict:
        """One row of all_results.json's and the card's table of corpora."""
        return {"source": self.source, "target": self.target, "pairs_read": self.pairs_read,
                **({"cleaning": dict(self.cleaning)} if self.cleaning else {}), "pairs_used": self.pairs_used,
                "weight": self.weight, "pairs_per_epoch": self.pairs_drawn, "tag": self.tag}

    def report(self) -> dict:
        """The entries of all_results.json."""
        entries = {"train_pairs_read": self.pairs_read}
        if self.pairs_used is not None:  # a stream counts no used pairs
            entries["train_pairs_used"] = self.pairs_used
        if self.cleaning:
            entries["cleaning"] = dict(self.cleaning)
        return entries


@dataclass
class Corpora:
    """Several training corpora of text files (`--train_source a.en bt.en --train_target a.de bt.de`), or one with
    a weight or a tag: each a `TextCorpus`, read into its own cache entry, tokenized and cleaned on its own; the run
    trains on their pairs together, each drawn as its weight says (`weighted_rows`). Answers the questions the run
    asks of a `TextCorpus`."""

    parts: list[TextCorpus]
    streaming: bool = False
    tokenizer_sample: str | None = None

    @property
    def cache_dir(self) -> str:
        return self.parts[0].cache_dir

    @property
    def key(self) -> str:
        """Where the BPE vocabulary trained on them is kept: beside the first corpus's pairs."""
        return self.parts[0].key

    @property
    def pairs(self):
        """Every corpus's pairs, one after the other (memory-mapped, nothing copied): what the BPE vocabulary is
        trained on, each pair once whatever its weight."""
        return datasets.concatenate_datasets([part.pairs for part in self.parts])

    @property
    def tags(self) -> list[str]:
        return list(dict.fromkeys(tag for part in self.parts for tag in part.tags))

    @property
    def pairs_read(self) -> int:
        return sum(part.pairs_read for part in self.parts)

    @property
    def pairs_used(self) -> int | None:
        """Training pairs per epoch, after the cleaning and the weights."""
        drawn = [part.pairs_drawn for part in self.parts]
        return None if None in drawn else sum(drawn)

    @property
    def cleaning(self) -> dict:
        total = {}
        for part in self.parts:
            for rule, count in part.cleaning.items():
                total[rule] = total.get(rule, 0) + count
        return total

    def fingerprint(self) -> list:
        return [part.fingerprint() + [part.source, part.target] for part in self.parts]

    def report(self) -> dict:
        """The entries of all_results.json: the sums, and every corpus's counts, weight and tag."""
        entries = {"train_pairs_read": self.pairs_read}
        if self.pairs_used is not None:
            entries["train_pairs_used"] = self.pairs_used
        if self.cleaning:
            entries["cleaning"] = self.cleaning
        entries["corpora"] = [part.describe() for part in self.parts]
        return entries


# pairs per epoch of one corpus after its weight: past this, the indices of one epoch alone take over 16 GiB
MAX_DRAWN_PAIRS = 2**31
# memory an epoch takes per pair it draws: its row (8 bytes), the dataset's index of it (8), its two lengths (8) and
# the token-budget sampler's arrays over them (about 16 more at their peak, measured with tracemalloc)
BYTES_PER_DRAWN_PAIR = 40


def memory_limit() -> int | None:
    """The bytes this process may hold: the machine's memory, or less where the address space or data segment is
    limited (`ulimit -v`, `ulimit -d`) or the cgroup's memory.max says so; None where none of them is known."""
    limits = []
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        pass
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limits.append(int(f.read().strip()))
    except (OSError, ValueError):  # no cgroup v2 file, or "max"
        pass
    return min(limits) if limits else None


def weighted_rows(count: int, weight: float, seed: int, corpus_index: int) -> np.ndarray:
    """The rows (0 .. count-1) of a corpus of `count` pairs that one epoch draws with `weight`: every row
    int(weight) times, then round(fraction * count) rows more (fraction = weight - int(weight)), chosen without
    replacement by numpy's generator seeded with (seed, corpus_index): the same rows for the same seed, ascending."""
    whole, fraction = int(weight), weight - int(weight)
    times = np.full(count, whole, dtype=np.int64)  # how often each row is drawn
    extra = int(fraction * count + 0.5)
    if extra:
        times[np.random.default_rng([seed, corpus_index]).choice(count, size=extra, replace=False)] += 1
    # made in one step, ascending, at 8 bytes per drawn row: the rows alone, no copies of them to sort
    return np.repeat(np.arange(count, dtype=np.int64), times)


def _process_log(training_args):
    """print, naming the process where there are several (each says whether it tokenized or reused the cache)."""
    prefix = f"[process {training_args.process_index}] " if training_args.world_size > 1 else ""
    return lambda line: print(prefix + line, flush=True)


def _check_pipes(data_args, training_args, paths) -> None:
    """A training file that can be read only once (a pipe, a FIFO, /dev/stdin: `files.reads_once`) is read once into
    the cache, by one process; where that cannot be, one line before anything is read."""
    pipes = [path for path in paths if reads_once(path)]
    if not pipes:
        return
    if data_args.streaming:
        raise UsageError(f"--streaming reads the training files again and again, but {pipes[0]} is a pipe (or "
                         "FIFO, /dev/stdin), which can be read only once: drop --streaming (the pipe is then read "
                         "once into the corpus cache), or write it to a file first.")
    if training_args.world_size > 1:
        raise UsageError(f"{pipes[0]} is a pipe (or FIFO, /dev/stdin), which can be read only once, but every "
                         f"process of this {training_args.world_size}-process run reads the training files: write "
                         "it to a file first.")


def open_training_corpora(data_args, training_args) -> "TextCorpus | Corpora":
    """The training text files: one pair as a `TextCorpus` (`open_text_corpus`), several (or one with a weight or a
    tag) as `Corpora`, each pair checked and read into its own cache entry in turn. `--streaming` takes one pair."""
    corpora = training_corpora(data_args)
    if len(corpora) == 1 and corpora[0][2] == 1 and corpora[0][3] is None:
        return open_text_corpus(data_args, training_args)
    if data_args.streaming:
        raise UsageError("--streaming reads one training pair of files; several corpora, --train_weights and "
                         "--train_tags need the corpus cache: drop --streaming.")
    if data_args.bpe_dropout:
        raise UsageError("--bpe_dropout takes one training corpus without --train_weights or --train_tags; drop "
                         "--bpe_dropout or the other corpora.")
    for source, target, _, _ in corpora:  # every pair checked before any is read
        check_file_pair("train", source, target)
    parts = []
    for source, target, weight, tag in corpora:
        part = open_text_corpus(data_args, training_args, source, target)
        part.weight, part.tag = weight, tag
        parts.append(part)
    check_tags_absent(parts, [tag for *_, tag in corpora if tag is not None])
    return Corpora(parts)


def check_tags_absent(parts: list[TextCorpus], tags: list[str]) -> None:
    """No line of any corpus, on either side, holds a tag: the tokenizer reads a tag's characters as the tag wherever
    they occur. One `UsageError` line naming the first file and line that does; checked on the cached pairs (Arrow's
    substring search over the memory-mapped columns, before the tokenizer is trained), so a cached corpus is checked
    against a new tag too."""
    for part in parts if tags else ():
        table = part.pairs.with_format("arrow", columns=["source", "target"])[:]  # the lines as read, one row each
        for side, path in (("source", part.source), ("target", part.target)):
            for tag in tags:
                row = pc.index(pc.match_substring(table.column(side), tag), True).as_py()
                if row >= 0:
                    raise UsageError(f"--train_tags {tag}: line {row + 1:,} of {path} holds it, and the tokenizer "
                                     "would read it there as the tag; choose a tag that no training line holds.")


def open_text_corpus(data_args, training_args, source: str | None = None, target: str | None = None) -> TextCorpus:
    """Check the training files (`source` and `target`, default: the only pair of the options) and (unless
    streaming) read them into the cache; one line for a bad file or a cache folder that cannot take them, before
    anything is written."""
    if source is None:
        source, target = training_corpora(data_args)[0][:2]
    check_file_pair("train", source, target)
    cache_dir = os.path.abspath(data_args.data_cache_dir or default_cache_dir())
    corpus = TextCorpus(source, target, data_args.streaming, cache_dir)
    if data_args.streaming:
        if not training_args.max_tokens:
            raise UsageError("--streaming makes token batches: give --max_tokens (the presets do).")
        if training_args.max_steps is None or training_args.max_steps <= 0:
            raise UsageError("--streaming reads the files as an endless stream: give --max_steps or --max_train_minutes.")
        if data_args.bpe_dropout:
            raise UsageError("--bpe_dropout needs the cached training pairs; drop --streaming or --bpe_dropout.")
        if data_args.max_train_samples is not None:
            raise UsageError("--max_train_samples does not apply to --streaming (give --max_steps).")
        if data_args.verify_corpus:
            raise UsageError("--verify_corpus checks the corpus cache, which --streaming does not use; drop one.")
        _check_pipes(data_args, training_args, (source, target))
        with training_args.main_process_first(desc="checking the training files"):
            corpus.pairs_read = check_pairs(corpus.source, corpus.target, "train")
        return corpus
    _check_pipes(data_args, training_args, (source, target))
    check_cache_dir(cache_dir)
    with training_args.main_process_first(desc="reading the training files"):
        corpus.pairs, corpus.key = read_corpus(corpus.source, corpus.target, "train", cache_dir,
                                               log=_process_log(training_args),
                                               verify=data_args.verify_corpus)
    if data_args.max_train_samples is not None and data_args.max_train_samples < len(corpus.pairs):
        corpus.pairs = corpus.pairs.select(range(data_args.max_train_samples))
    corpus.pairs_read = len(corpus.pairs)
    return corpus


def describe_sample(corpus: TextCorpus, limit: int, seed: int) -> None:
    """Record for the card which sentences the BPE vocabulary is trained on, where it is a sample."""
    if 2 * corpus.pairs_read > limit:
        corpus.tokenizer_sample = (f"a random sample (seed {seed}) of {sample_pairs(corpus.pairs_read, limit):,} "
                                   f"of the {corpus.pairs_read:,} training pairs ({limit:,} sentences)")


def tokenizer_texts(corpus: TextCorpus, data_args, seed: int) -> Iterator[str]:
    """Both sides of the pairs the BPE vocabulary is trained on: all, or, where the corpus has more than
    --tokenizer_sample_lines sentences, a seeded sample of half as many pairs (recorded for the card)."""
    limit = data_args.tokenizer_sample_lines
    describe_sample(corpus, limit, seed)
    if corpus.streaming:
        return sample_file_texts(corpus.source, corpus.target, corpus.pairs_read, limit, seed)
    return sample_texts(corpus.pairs, limit, seed)[0]


def cached_tokenizer(corpus: TextCorpus, data_args, training_args, train):
    """The BPE tokenizer `train(texts)` makes from `tokenizer_texts`, kept in the corpus cache under a fingerprint
    of (pairs, vocabulary size, sample size, seed, maximum length): the main process trains it once, every later
    run and every other process loads it. A cached copy that cannot be loaded is trained again, after a notice."""
    key = hashlib.sha256(json.dumps([*corpus.fingerprint(), data_args.vocab_size,
                                     data_args.tokenizer_sample_lines, training_args.seed,
                                     max(data_args.max_source_length, data_args.max_target_length)]).encode())
    name = f"tokenizer-{key.hexdigest()[:20]}"
    folder = os.path.join(corpus.cache_dir, f"pairs-{corpus.key}", name)
    log = _process_log(training_args)
    describe_sample(corpus, data_args.tokenizer_sample_lines, training_args.seed)  # a reused tokenizer's too
    with training_args.main_process_first(desc="training the BPE tokenizer"):
        if os.path.isdir(folder):
            try:
                tokenizer = AutoTokenizer.from_pretrained(folder)
                log(f"Reusing the BPE tokenizer in {folder}")
                return tokenizer
            except Exception as error:  # tokenizers and transformers raise many kinds for a damaged file
                log(f"The cached BPE tokenizer {folder} is damaged ({' '.join(str(error).split())[:200]}); "
                    "training it again.")
                shutil.rmtree(folder, ignore_errors=True)  # ours: made by this function
        tokenizer = train(tokenizer_texts(corpus, data_args, training_args.seed))
        with staging(corpus.cache_dir, log) as stage:
            tokenizer.save_pretrained(os.path.join(stage, name))
            try:
                os.rename(os.path.join(stage, name), folder)
            except OSError:  # another machine's main process sharing the cache saved the same tokenizer first
                pass
        log(f"Trained the BPE tokenizer, kept in {folder}")
    return tokenizer


def cleaning_line(corpus: TextCorpus, data_args) -> str:
    """What the cleaning of `corpus` (its `cleaning` counts and `pairs_used`) did, in one line."""
    if data_args.no_clean:
        return f"Dropped {corpus.cleaning['empty_side']:,} training pairs with an empty side (--no_clean)."
    return describe_cleaning(corpus.pairs_read, corpus.pairs_used, corpus.cleaning, data_args.max_source_length,
                             data_args.max_target_length)


def cached_training_set(corpus: TextCorpus, tokenizer, data_args, training_args, keep_text: bool):
    """-> (the tokenized (from the cache where it holds them), cleaned training pairs; with `keep_text` their
    `source` and `target` strings too (BPE-dropout segments them anew), (their source lengths, target lengths)).
    The lengths are read once from the cache's Arrow columns, for the cleaning and for the batch sampler."""
    clean = not data_args.no_clean
    with training_args.main_process_first(desc="tokenizing the training pairs"):
        tokenized = tokenize_corpus(corpus.pairs, corpus.key, tokenizer, data_args.max_source_length,
                                    data_args.max_target_length, clean=clean, cache_dir=corpus.cache_dir,
                                    num_proc=data_args.preprocessing_num_workers, log=_process_log(training_args),
                                    source_tag=corpus.tag)
    source, target = length_columns(tokenized)
    tagged = int(corpus.tag is not None)  # the rules look at the source sentence without its tag
    if clean:
        kept, counts = clean_corpus(tokenized, corpus.pairs, data_args.max_source_length - tagged,
                                    data_args.max_target_length, lengths=(source - tagged, target))
    else:
        kept, counts = drop_empty_sides((source - tagged, target))
    corpus.cleaning, corpus.pairs_used = counts, len(kept)
    if len(kept) == 0:
        raise DataError(f"No training pair of {corpus.source} / {corpus.target} is left after cleaning "
                        f"({', '.join(f'{rule} {count:,}' for rule, count in counts.items())}); check the files, "
                        "or keep them with --no_clean.")
    if training_args.process_index == 0:
        if corpus.weight != 1 or corpus.tag is not None or training_corpora(data_args)[1:]:
            print(f"Corpus {corpus.source} / {corpus.target}:", flush=True)
        print(cleaning_line(corpus, data_args), flush=True)
    if keep_text:
        tokenized = datasets.concatenate_datasets([corpus.pairs, tokenized], axis=1)
    return select_kept(tokenized, kept, (source, target))


def corpora_training_set(corpora: Corpora, tokenizer, data_args, training_args):
    """-> (the training pairs of every corpus, each tokenized and cleaned as `cached_training_set` does it alone,
    drawn as its weight says (`weighted_rows`, with --seed), one after the other; their (source, target) lengths).
    The rows are an indices mapping over each corpus's cached Arrow file: nothing is copied."""
    parts, sources, targets = [], [], []
    drawn, limit = 0, memory_limit()
    for index, corpus in enumerate(corpora.parts):
        tokenized, (source, target) = cached_training_set(corpus, tokenizer, data_args, training_args, False)
        pairs = len(tokenized) * corpus.weight
        too_many = (f"--train_weights {corpus.weight:g} draws {pairs:,.0f} pairs of {corpus.source} per epoch, more "
                    "than")
        if pairs >= MAX_DRAWN_PAIRS:  # before numpy is asked for the indices
            raise UsageError(f"{too_many} the {MAX_DRAWN_PAIRS:,} one epoch may hold (8 bytes of index each); give "
                             "it a smaller weight.")
        drawn += pairs  # the epoch holds every corpus's pairs: the ones before this one too
        if limit is not None and drawn * BYTES_PER_DRAWN_PAIR > limit:
            raise UsageError(f"{too_many} this process's memory holds ({drawn * BYTES_PER_DRAWN_PAIR / 2**30:,.1f} "
                             f"GiB for the epoch's {drawn:,.0f} pairs, {limit / 2**30:,.1f} GiB allowed); give it a "
                             "smaller weight.")
        try:
            rows = weighted_rows(len(tokenized), corpus.weight, training_args.seed, index)
            corpus.pairs_drawn = len(rows)
            if len(rows) != len(tokenized) or not np.array_equal(rows, np.arange(len(rows))):
                tokenized, (source, target) = select_kept(tokenized, rows, (source, target))
        except MemoryError:  # memory the estimate above did not see coming (other processes took it)
            raise UsageError(f"{too_many} the memory left holds (8 bytes of index each); give it a smaller "
                             "weight.") from None
        if len(rows):
            parts.append(tokenized)
            sources.append(source)
            targets.append(target)
    if training_args.process_index == 0:
        print("Training corpora (pairs per epoch after the cleaning and --train_weights): " + "; ".join(
            f"{c.source} {c.pairs_drawn:,} (weight {c.weight:g}{f', tag {c.tag}' if c.tag else ''})"
            for c in corpora.parts) + f"; {corpora.pairs_used:,} in all.", flush=True)
    if not parts:
        raise DataError("--train_weights leave no training pair: give a corpus a larger weight.")
    columns = ["input_ids", "labels", "source_length", "target_length", "pair_hash"]
    combined = datasets.concatenate_datasets([part.select_columns(columns) for part in parts])
    return combined, (np.concatenate(sources), np.concatenate(targets))


# from this many training pairs a run trains while they are tokenized (`--train_while_tokenizing` unset): below it,
# tokenizing takes under a minute on 2 cores (1M pairs: 42 s on an Intel Xeon, benchmarks/RESULTS.md "Large corpora")
TRAIN_WHILE_TOKENIZING_PAIRS = 1_000_000


def recorded_choice(checkpoint: str | None) -> bool | None:
    """The `--train_while_tokenizing` choice a checkpoint's run made: True or False, None where it says none. A
    checkpoint without the record was made by a run that waited for the tokenizing (the only way before it)."""
    if checkpoint is None:
        return None
    try:
        with open(os.path.join(checkpoint, BATCHES_RECORD), encoding="utf-8") as f:
            return bool(json.load(f)["train_while_tokenizing"])
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError):
        return None


def trains_while_tokenizing(corpus, data_args, training_args, resume: str | None = None) -> bool:
    """Whether the run trains while its training pairs are tokenized (background_tokens.py): as
    `--train_while_tokenizing` says, or, unset, as the checkpoint `resume` was trained (`recorded_choice`: the
    batches of a resumed run are those of the interrupted one), else for one cached corpus of
    `TRAIN_WHILE_TOKENIZING_PAIRS` pairs or more where the run can take an endless stream of token batches. Asked
    for where it cannot be: one line. A resumed run told otherwise than its checkpoint was trained says so."""
    reasons = []
    if not isinstance(corpus, TextCorpus) or corpus.streaming:
        reasons.append("one training pair of text files read into the corpus cache (not --streaming, not several "
                       "corpora, weights or tags)")
    if data_args.bpe_dropout:
        reasons.append("no --bpe_dropout")
    if not training_args.max_tokens:
        reasons.append("token batches (--max_tokens; the presets give it)")
    if training_args.max_steps is None or training_args.max_steps <= 0:
        reasons.append("--max_steps or --max_train_minutes (the batches are an endless stream)")
    if training_args.world_size > 1:
        reasons.append("a run of one process")
    recorded = recorded_choice(resume) if not reasons else None
    if data_args.train_while_tokenizing is None:
        if recorded is not None:
            return recorded
        return not reasons and corpus.pairs_read >= TRAIN_WHILE_TOKENIZING_PAIRS
    if data_args.train_while_tokenizing and reasons:
        raise UsageError(f"--train_while_tokenizing needs {'; '.join(reasons)}.")
    if recorded is not None and recorded != data_args.train_while_tokenizing:
        _process_log(training_args)(
            f"{resume} was trained with --train_while_tokenizing {str(recorded).lower()}: resumed with "
            f"{str(data_args.train_while_tokenizing).lower()}, the run trains on other batches from here than the "
            "interrupted run would have.")
    return bool(data_args.train_while_tokenizing)


def background_training_set(corpus: TextCorpus, tokenizer, data_args, training_args) -> TrainingWhileTokenizing:
    """The run's endless stream of token batches whose first pass starts while the pairs are tokenized; the
    cleaning's counts reach the corpus (and the card) once the whole corpus is tokenized. A corpus whose every pair
    the cleaning drops is one `DataError` line here, before the run writes anything."""
    clean = not data_args.no_clean
    log = _process_log(training_args)

    def cleaned(kept, counts):
        corpus.cleaning, corpus.pairs_used = counts, len(kept)
        log(cleaning_line(corpus, data_args))

    log(f"Training while the {corpus.pairs_read:,} training pairs are tokenized (--train_while_tokenizing): the "
        "first pass visits them in blocks as they are tokenized.")
    stream = TrainingWhileTokenizing(
        corpus.pairs, corpus.key, tokenizer, max_source_length=data_args.max_source_length,
        max_target_length=data_args.max_target_length, max_tokens=training_args.max_tokens,
        cache_dir=corpus.cache_dir, clean=clean,
        seed=training_args.data_seed if training_args.data_seed is not None else training_args.seed,
        maxi_batch_pairs=data_args.maxi_batch_pairs, log=log, on_cleaned=cleaned)
    stream.check_some_pair_is_kept()  # before the run writes anything
    return stream


def streaming_training_set(corpus: TextCorpus, tokenizer, data_args, training_args) -> StreamingTokenBatches:
    """This process's endless stream of token batches; the run's length comes from --max_steps or the budget. A
    stream whose every pair the cleaning drops is one `DataError` line here, before the run writes anything."""
    stream = StreamingTokenBatches(
        corpus.source, corpus.target, tokenizer, max_source_length=data_args.max_source_length,
        max_target_length=data_args.max_target_length, max_tokens=training_args.max_tokens,
        clean=not data_args.no_clean, seed=training_args.data_seed if training_args.data_seed is not None
        else training_args.seed, rank=training_args.process_index, world_size=training_args.world_size,
        shuffle_buffer_pairs=data_args.shuffle_buffer_pairs, maxi_batch_pairs=data_args.maxi_batch_pairs)
    stream.check_some_pair_is_kept()
    return stream
