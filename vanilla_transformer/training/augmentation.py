"""`--augment`: training pairs changed on the fly so that a model survives ALL-CAPS, Title Case, typing errors and
garbage input, after OpusTrainer's modifiers (hplt-project/OpusTrainer: UpperCase, TitleCase, Typos, Noise).

The option is one string of `NAME=PROBABILITY` items, as Trainer's `--optim_args` (`parse_augment`):

    --augment upper=0.05,title=0.05,typos=0.02,noise=0.01

- `upper`: both sides upper-cased (`str.upper`), as OpusTrainer's UpperCase modifier does to the whole line.
- `title`: both sides title-cased as OpusTrainer's TitleCase: every space-separated word's first character
  upper-cased, the rest of the word kept.
- `typos`: the source side only, the target kept: OpusTrainer's Typos modifier with its defaults, each of the
  nine typing errors of the `typo` package (char_swap, missing_char, extra_char, nearby_char, similar_char,
  skipped_space, random_space, repeated_char, unichar) applied with probability 0.1, in that order.
- `noise`: OpusTrainer's Noise modifier: a pair made of noise is added beside the pair (which stays as it is),
  the same 1 to 6 random "words" on both sides, each 2 to 5 characters of one Unicode block drawn at random
  (`noise_words`), so that the model learns to copy what it cannot translate.

Where it happens. The token caches and the stream hold token ids, so `AugmentingCollator` wraps the run's collator:
for the pairs it changes it decodes their ids into text (`tokenizer.decode`; the run's BPE vocabulary decodes to
its normalised text exactly), changes the text and tokenizes it again, truncated as the training pairs are; every
other pair goes through untouched. A `--train_tags` tag (a special token without a role, first in its source) stays
the source's first token, outside the text that is changed. One place serves the cached corpus, `--streaming`,
datasets in memory and BPE-dropout alike, and only the changed pairs pay for decoding and tokenizing.

Per batch. Upper- and title-casing are drawn once per batch (a batch is upper-cased with probability `upper`, so
a pair is, too): an upper-cased sentence is several times as many tokens with a vocabulary trained on normal text
(3.4 times on Multi30k with the multi30k-pre-ln vocabulary), and one upper-cased pair in a batch would pad the
whole batch to its length; per batch, only the batches drawn pay, in proportion. A batch drawn for both is
upper-cased (title-casing upper-cased text changes nothing, as with OpusTrainer's two modifiers one after the other). Such a batch holds that many more
tokens than `--max_tokens`. Typos and noise change a sentence's length by a few tokens and are drawn per pair, as
OpusTrainer does; a noise pair is shortened (whole words from its end) to the batch's longest sentences, so it adds
no padding. A pair stays as it was where its changed form would exceed `--max_source_length`/`--max_target_length`
tokens, or where it or its changed form holds `<unk>` (a character the vocabulary lacks, e.g. an upper-case letter
never seen in training: decoding would drop it, and the model would learn to read or write `<unk>`). Noise pairs are
OpusTrainer's whatever the vocabulary: characters it lacks are `<unk>` on both sides, which the model learns to copy.

Deterministic. Each batch's draws come from a generator seeded by (the run's seed, the epoch, a hash of the batch's
token ids): the same seed gives the same batches, a resumed run the batches of the interrupted one (the Trainer
skips the batches it already trained on without collating them), and worker processes the same as the main one.
The Trainer tells the collator the epoch (`set_epoch`, trainer.EpochForCollator). The `typo` package draws from
Python's global `random`; `typos` seeds it from the batch's generator and restores it afterwards.
"""

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vanilla_transformer.casing import title_case
from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.extras import check_extra

MODIFIERS = {
    "upper": "both sides upper-cased (per batch)",
    "title": "both sides title-cased (per batch)",
    "typos": "typing errors in the source (per pair)",
    "noise": "a pair of noise added (per pair)",
}

# OpusTrainer's Typos modifier's defaults: each typing error of the `typo` package with probability 0.1, in order.
TYPO_KINDS = ("char_swap", "missing_char", "extra_char", "nearby_char", "similar_char", "skipped_space",
              "random_space", "repeated_char", "unichar")
TYPO_PROBABILITY = 0.1

# The Unicode blocks OpusTrainer's noise draws its characters from (first code point, end exclusive), in its order:
# Basic Latin, Latin-1 Supplement, Greek and Coptic, Cyrillic, Armenian, Hebrew, Arabic, Devanagari, Bengali,
# Gujarati, Thai, Myanmar, Georgian, Khmer, Hiragana, Katakana, CJK Unified Ideographs, Hangul Syllables, Emoticons.
NOISE_BLOCKS = ((0x0020, 0x007F), (0x00A0, 0x00FF), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0530, 0x058F),
                (0x0590, 0x05FF), (0x0600, 0x06FF), (0x0900, 0x097F), (0x0980, 0x09FF), (0x0A80, 0x0AFF),
                (0x0E00, 0x0E7F), (0x1000, 0x109F), (0x10A0, 0x10FF), (0x1780, 0x17FF), (0x3040, 0x309F),
                (0x30A0, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0x1F600, 0x1F64F))
NOISE_WORD_LENGTHS = (2, 5)  # OpusTrainer's Noise defaults: words of 2 to 5 characters, at most 6 words
NOISE_MAX_WORDS = 6


def parse_augment(spec: str) -> dict[str, float]:
    """`"upper=0.05,title=0.05"` -> {"upper": 0.05, "title": 0.05}. ValueError (one line naming the option) for a
    malformed item, an unknown or repeated name, or a probability that is not a number in [0, 1]."""
    probabilities = {}
    for item in spec.split(","):
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name or not value:
            raise ValueError(f"--augment expects NAME=PROBABILITY items separated by commas (e.g. "
                             f"upper=0.05,title=0.05,typos=0.02,noise=0.01), got {item.strip()!r}")
        if name not in MODIFIERS:
            raise ValueError(f"--augment: unknown modifier {name!r}; choose from {', '.join(MODIFIERS)}")
        if name in probabilities:
            raise ValueError(f"--augment: {name} is given twice")
        try:
            probability = float(value)
        except ValueError:
            raise ValueError(f"--augment: {name}={value} is not a number") from None
        if not 0.0 <= probability <= 1.0:  # also NaN
            raise ValueError(f"--augment: {name}={value} must be a probability between 0 and 1")
        probabilities[name] = probability
    return probabilities


def describe_augment(probabilities: dict[str, float]) -> str:
    """The model card's line, e.g. "upper 0.05: both sides upper-cased (per batch); ... (OpusTrainer's modifiers, ...)"."""
    return "; ".join(f"{name} {p:g}: {MODIFIERS[name]}" for name, p in probabilities.items() if p) + \
        " (OpusTrainer's modifiers, training only)"


# ---- The modifiers on text ---------------------------------------------------------------------------------------

def upper_case(text: str) -> str:
    return text.upper()


def typos(text: str, rng: random.Random) -> str:
    """OpusTrainer's Typos modifier (defaults) on `text`, drawn from `rng`: the `typo` package's `StrErrer` seeded
    with `rng.getrandbits(32)`, then each kind of error applied with probability 0.1, in `TYPO_KINDS` order, all
    drawn from Python's global `random` as OpusTrainer draws them (its state is restored afterwards). An error the
    package cannot make (it fails on digits other than 0-9) leaves the text as it was."""
    import typo  # the train extra; checked before training (build.build_trainer)

    seed = rng.getrandbits(32)
    state = random.getstate()
    try:
        errer = typo.StrErrer(text, seed=seed)  # seeds the global random with `seed`
        for kind in TYPO_KINDS:
            if TYPO_PROBABILITY > random.random():
                before = errer.result
                try:
                    getattr(errer, kind)()
                except (KeyError, ValueError):
                    errer.result = before
        return errer.result
    finally:
        random.setstate(state)


def noise_words(rng: random.Random, min_length: int = NOISE_WORD_LENGTHS[0], max_length: int = NOISE_WORD_LENGTHS[1],
                max_words: int = NOISE_MAX_WORDS) -> list[str]:
    """OpusTrainer's noise: 1 to `max_words` words, all of one length drawn from [min_length, max_length], of
    characters drawn from one Unicode block of `NOISE_BLOCKS` (the draws in OpusTrainer's order)."""
    length = rng.randint(min_length, max_length)
    first, end = rng.choice(NOISE_BLOCKS)
    return ["".join(chr(rng.randrange(first, end)) for _ in range(length)) for _ in range(rng.randint(1, max_words))]


# ---- The collator ------------------------------------------------------------------------------------------------

@dataclass
class BatchDraws:
    """What one batch gets: casing for the whole batch, and the pairs given typos and followed by a noise pair."""

    upper: bool
    title: bool
    typos: np.ndarray  # bool per pair
    noise: np.ndarray  # bool per pair
    seeds: np.ndarray  # per pair: the seed of its typos and the seed of its noise pair


class AugmentingCollator:
    """Wraps a collator (DataCollatorForSeq2Seq): changes the drawn pairs of each batch (module docstring), then
    collates. Features are dicts with `input_ids` and `labels` (and `attention_mask`), as the training sets give.

    Args:
        collator: the run's collator, called on the (changed) features.
        tokenizer: the run's tokenizer (decodes the drawn pairs and tokenizes them again).
        probabilities: `parse_augment`'s result.
        seed: the run's data seed.
        max_source_length, max_target_length: the truncation limits of the training pairs.
    """

    def __init__(self, collator: Callable, tokenizer, probabilities: dict[str, float], *, seed: int,
                 max_source_length: int, max_target_length: int):
        self.collator, self.tokenizer = collator, tokenizer
        self.probabilities = {name: probabilities.get(name, 0.0) for name in MODIFIERS}
        self.seed, self.epoch = seed, 0
        self.max_source_length, self.max_target_length = max_source_length, max_target_length
        # the --train_tags tokens: special tokens without a role, put first in a tagged corpus's sources
        roles = {getattr(tokenizer, f"{name}_token_id", None) for name in ("pad", "bos", "eos", "unk")}
        self.tag_ids = set(tokenizer.all_special_ids) - roles

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    # Tokenized as the training pairs are (truncated, with </s>), one token above each limit: a changed sentence that
    # is longer is seen to be, and its pair kept as it was. Methods, not closures: the collator goes to DataLoader
    # workers however they are started.
    def encode_source(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, max_length=self.max_source_length + 1, truncation=True)["input_ids"]

    def encode_target(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(text_target=texts, max_length=self.max_target_length + 1, truncation=True)["input_ids"]

    def draws(self, features: list[dict]) -> BatchDraws:
        """The batch's draws, from (seed, epoch, hash of its token ids): nothing else, so any process at any time
        draws the same for the same batch."""
        digest = hashlib.blake2b(digest_size=16)
        for feature in features:
            for name in ("input_ids", "labels"):
                ids = np.asarray(feature[name], dtype=np.int64)
                digest.update(len(ids).to_bytes(8, "little"))
                digest.update(ids.tobytes())
        words = np.frombuffer(digest.digest(), dtype=np.uint64)
        rng = np.random.default_rng([self.seed, self.epoch, *words.tolist()])
        p, n = self.probabilities, len(features)
        upper, title = bool(rng.random() < p["upper"]), bool(rng.random() < p["title"])
        return BatchDraws(upper, title, rng.random(n) < p["typos"], rng.random(n) < p["noise"],
                          rng.integers(0, 2**63, size=(n, 2)))

    def __call__(self, features: list[dict]):
        draws = self.draws(features)
        if draws.upper or draws.title or draws.typos.any() or draws.noise.any():
            features = self.augment(features, draws)
        return self.collator(features)

    def augment(self, features: list[dict], draws: BatchDraws) -> list[dict]:
        """The batch with the drawn pairs changed and the noise pairs added (`features` itself is not changed)."""
        changed = draws.typos.copy()
        if draws.upper or draws.title:
            changed[:] = True
        unknown = self.tokenizer.unk_token_id
        indices = [i for i in np.flatnonzero(changed).tolist()
                   if unknown is None or (unknown not in features[i]["input_ids"] and unknown not in features[i]["labels"])]
        features = list(features)
        if indices:
            # a source's tag is kept as its first token, outside the text that is changed and tokenized again
            tags = [list(features[i]["input_ids"][:1]) for i in indices]
            tags = [tag if tag and tag[0] in self.tag_ids else [] for tag in tags]
            sources = self.tokenizer.batch_decode([features[i]["input_ids"][len(tag):] for i, tag in zip(indices, tags)],
                                                  skip_special_tokens=True)
            targets = self.tokenizer.batch_decode([features[i]["labels"] for i in indices], skip_special_tokens=True)
            for k, i in enumerate(indices):
                case = upper_case if draws.upper else title_case if draws.title else None
                if case is not None:
                    sources[k], targets[k] = case(sources[k]), case(targets[k])
                if draws.typos[i]:
                    sources[k] = typos(sources[k], random.Random(int(draws.seeds[i, 0])))
            for k, (source_ids, target_ids) in enumerate(zip(self.encode_source(sources), self.encode_target(targets))):
                source_ids = tags[k] + source_ids
                if (len(source_ids) <= self.max_source_length and len(target_ids) <= self.max_target_length
                        and (unknown is None or (unknown not in source_ids and unknown not in target_ids))):
                    features[indices[k]] = self.feature(features[indices[k]], source_ids, target_ids)
        longest = (max(len(f["input_ids"]) for f in features), max(len(f["labels"]) for f in features))
        for i in np.flatnonzero(draws.noise).tolist():
            pair = self.noise_pair(random.Random(int(draws.seeds[i, 1])), *longest)
            if pair is not None:
                features.append(self.feature(features[i], *pair))
        return features

    def noise_pair(self, rng: random.Random, source_limit: int, target_limit: int) -> tuple[list, list] | None:
        """The token ids of a noise pair (`noise_words` on both sides), words dropped from its end (the last one
        shortened) until each side fits its limit; None if nothing fits."""
        words = noise_words(rng)
        while words and words[0]:
            text = " ".join(words)
            source_ids, target_ids = self.encode_source([text])[0], self.encode_target([text])[0]
            if len(source_ids) <= source_limit and len(target_ids) <= target_limit:
                return source_ids, target_ids
            if len(words) > 1:
                words.pop()
            else:
                words[0] = words[0][:-1]
        return None

    @staticmethod
    def feature(like: dict, source_ids: list[int], target_ids: list[int]) -> dict:
        """A feature with the keys of `like` (the attention mask only if it has one)."""
        feature = {"input_ids": list(source_ids), "labels": list(target_ids)}
        if "attention_mask" in like:
            feature["attention_mask"] = [1] * len(source_ids)
        return feature


def augmenting_collator(collator: Callable, tokenizer, data_args, training_args) -> AugmentingCollator | None:
    """The training collator of a run's `--augment` (None without it, or with every probability 0). Needs the `typo`
    package for typos (the train extra); refuses persistent DataLoader workers, which would keep the epoch they
    started with."""
    probabilities = parse_augment(data_args.augment) if data_args.augment else {}
    if not any(probabilities.values()):
        return None
    if probabilities.get("typos"):
        check_extra(["typo"], "train", "--augment typos")
    if training_args.dataloader_persistent_workers and training_args.dataloader_num_workers > 0:
        raise UsageError("--augment draws anew every epoch; drop --dataloader_persistent_workers.")
    seed = training_args.data_seed if training_args.data_seed is not None else training_args.seed
    return AugmentingCollator(collator, tokenizer, probabilities, seed=seed,
                              max_source_length=data_args.max_source_length,
                              max_target_length=data_args.max_target_length)
