"""A shared source/target BPE vocabulary (section 5.1 of the paper), trained with the `tokenizers` library.

Text is NFKC-normalised, every run of whitespace (tabs, newlines, no-break spaces) becomes one space and the ends are
stripped; then it is split on spaces SentencePiece-style (a space becomes the prefix "▁" of the next word), so
decoding restores the normalised text exactly, spacing around punctuation and non-ASCII letters included (a
character never seen in training becomes `<unk>` and is lost). Every sequence ends with `</s>`;
the decoder starts from `<s>`. The result is a standard fast tokenizer: `save_pretrained` writes `tokenizer.json`
and `AutoTokenizer.from_pretrained(dir)` loads it with no custom class.

    python -m vanilla_transformer.training.tokenizer --files train.en train.de --vocab-size 8000 --output-dir tok/
"""

import argparse
import os
from collections.abc import Iterable, Iterator

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from vanilla_transformer.files import reads_once, text_lines

# Words longer than this many characters (a URL, a line without spaces) are cut into pieces of this length while the
# vocabulary is trained: BPE training time grows with the square of a word's length (a 200,000-character word took
# minutes), as SentencePiece's trainer bounds its pieces by max_sentencepiece_length. Encoding is linear in the length
# and sees the words whole.
MAX_WORD_CHARS = 64
# Ids fixed to match VanillaTransformerConfig's defaults (pad 0, bos/decoder start 1, eos 2).
SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def _check_files(files: list[str]) -> None:
    """Fail before training, naming the file, if one is missing, not a file, not UTF-8 text or has no text (a pipe,
    which can be read only once, is checked while it is read)."""
    if not files:
        raise ValueError("No tokenizer training file given.")
    for path in files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"Tokenizer training file not found: {path}")
        if reads_once(path):  # a pipe is read once, while training; its errors come then
            continue
        # read to the end: a byte that is not UTF-8 anywhere in the file stops it here, before any training
        if not sum(1 for line in text_lines(path, "tokenizer training file") if line.strip()):
            raise ValueError(f"Tokenizer training file {path} is empty (no non-blank line).")


def _lines(files: Iterable[str]) -> Iterator[str]:
    for path in files:
        yield from (line for line in text_lines(path, "tokenizer training file") if line.strip())


def train_tokenizer(
    texts: Iterable[str] | None = None,
    *,
    files: Iterable[str] | None = None,
    vocab_size: int = 8000,
    min_frequency: int = 2,
    model_max_length: int = 512,
) -> PreTrainedTokenizerFast:
    """Train one BPE vocabulary on `texts` (an iterable of sentences, both languages) or on text `files`.

    Returns a `PreTrainedTokenizerFast` with `<pad>`=0, `<s>`=1, `</s>`=2, `<unk>`=3.
    """
    if (texts is None) == (files is None):
        raise ValueError("Give exactly one of texts (an iterable of sentences) and files (paths of text files).")
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(f"vocab_size={vocab_size} is too small: it must exceed the {len(SPECIAL_TOKENS)} special tokens.")
    if isinstance(texts, str) or isinstance(files, str):
        raise TypeError("texts and files take a list (of sentences, of paths), not a single string.")
    if files is not None:
        files = [os.fspath(path) for path in files]
        _check_files(files)
    iterator = _lines(files) if files is not None else (t for t in texts if t and t.strip())

    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    )
    words = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    # for training only: each word in pieces of at most MAX_WORD_CHARS characters ("▁" included)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [words, pre_tokenizers.Split(Regex(f".{{1,{MAX_WORD_CHARS}}}"), behavior="isolated")])
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS.values()),
        show_progress=False,
    )
    tokenizer.train_from_iterator(iterator, trainer=trainer)
    tokenizer.pre_tokenizer = words
    if tokenizer.get_vocab_size() <= len(SPECIAL_TOKENS):
        raise ValueError("The tokenizer training data is empty: no non-blank line was found.")
    eos = SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=model_max_length, **SPECIAL_TOKENS)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", nargs="+", required=True, help="text files, one sentence per line (all languages)")
    parser.add_argument("--vocab-size", "--vocab_size", type=int, default=8000)
    parser.add_argument("--min-frequency", "--min_frequency", type=int, default=2)
    parser.add_argument("--model-max-length", "--model_max_length", type=int, default=512)
    parser.add_argument("--output-dir", "--output_dir", required=True)
    args = parser.parse_args(argv)
    if os.path.isfile(args.output_dir):
        parser.error(f"--output-dir {args.output_dir} is a file; give a directory.")
    try:
        tokenizer = train_tokenizer(files=args.files, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                                    model_max_length=args.model_max_length)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    tokenizer.save_pretrained(args.output_dir)
    print(f"Saved a {len(tokenizer)}-token BPE tokenizer to {args.output_dir}")


if __name__ == "__main__":
    main()
