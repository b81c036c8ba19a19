"""The embedded demo corpus: English number words -> German number words, generated offline with `num2words`.

    342    "three hundred and forty-two"  ->  "dreihundertzweiundvierzig"
    1342   "one thousand, three hundred and forty-two"  ->  "eintausenddreihundertzweiundvierzig"

German writes units before tens ("zweiundvierzig" = two-and-forty) and glues the whole number into one word, so the
model must reorder and compose, not copy word by word. Numbers go from 0 to 999,999. Each split draws the number
of digits uniformly, then a number of that many digits, so short numbers are as frequent as long ones. The
validation and test numbers have 3 to 6 digits, are distinct and never occur in the training set: they test
composition (the 100 numbers below 100 are the building blocks, all of them in the training set). The same seed
gives the same corpus on any machine.
"""

import random
from functools import lru_cache

MAX_DIGITS = 6  # up to 999,999; a million is "eine Million", two words with a capital, another pattern
MIN_HELD_OUT_DIGITS = 3  # a number held out must be composed from parts seen in training


@lru_cache(maxsize=None)
def number_to_words(number: int, lang: str) -> str:
    from num2words import num2words

    return num2words(number, lang=lang)


def _digits_range(digits: int) -> tuple[int, int]:
    return (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1


def _sample_numbers(rng: random.Random, count: int, exclude: set[int], distinct: bool) -> list[int]:
    """`count` numbers not in `exclude`, their number of digits uniform over the classes allowed.

    Distinct samples (held-out splits) have MIN_HELD_OUT_DIGITS digits or more, and take at most a tenth of each
    digit class; training samples have any number of digits and may repeat (short numbers then recur often).
    """
    chosen: list[int] = []
    seen = set(exclude)
    quota = {}
    for digits in range(MIN_HELD_OUT_DIGITS if distinct else 1, MAX_DIGITS + 1):
        low, high = _digits_range(digits)
        quota[digits] = (high - low + 1) // 10 if distinct else float("inf")
    if distinct and count > sum(quota.values()):
        raise ValueError(f"Cannot hold out {count} distinct numbers below {10**MAX_DIGITS:,}.")
    taken = dict.fromkeys(quota, 0)
    while len(chosen) < count:
        digits = rng.choice(list(quota))
        if taken[digits] >= quota[digits]:
            continue
        number = rng.randint(*_digits_range(digits))
        if number in exclude or (distinct and number in seen):
            continue
        seen.add(number)
        taken[digits] += 1
        chosen.append(number)
    return chosen


def number_translation_splits(
    train_size: int = 50_000, validation_size: int = 500, test_size: int = 500, seed: int = 0,
    source_lang: str = "en", target_lang: str = "de",
) -> dict[str, dict[str, list[str]]]:
    """{"train"|"validation"|"test": {"source": [...], "target": [...]}} with disjoint numbers across splits.

    The held-out splits are drawn first, so they do not change with `train_size`.
    """
    rng = random.Random(seed)
    held_out: set[int] = set()
    numbers: dict[str, list[int]] = {}
    for split, size in (("test", test_size), ("validation", validation_size)):
        numbers[split] = _sample_numbers(rng, size, held_out, distinct=True)
        held_out.update(numbers[split])
    numbers["train"] = _sample_numbers(rng, train_size, held_out, distinct=False)
    return {
        split: {
            "source": [number_to_words(n, source_lang) for n in values],
            "target": [number_to_words(n, target_lang) for n in values],
        }
        for split, values in numbers.items()
    }
