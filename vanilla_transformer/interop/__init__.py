"""Other formats and engines: converting Marian and FSMT checkpoints (`convert`), exporting to CTranslate2
(`export_ctranslate2`, translated by `ctranslate2_runtime`) and to a MarianMTModel (`export_marian`).

What the command line offers of them is named here, in a module without torch, so that its options are built without
importing the converters: the checkpoint families `convert` reads (`FAMILIES`) and the weight types `export
ctranslate2` writes (`QUANTIZATIONS`)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    title: str  # for messages and the model card
    model_type: str  # config.json "model_type" of the source
    architecture: str  # the transformers class that holds the source weights
    tokenizer_files: tuple[str, ...]  # files without which its tokenizer cannot load
    tokenizer_package: str  # the package its (slow) tokenizer imports


FAMILIES = {
    "marian": Family("Marian (OPUS-MT)", "marian", "MarianMTModel", ("source.spm", "target.spm", "vocab.json"),
                     "sentencepiece"),
    "fsmt": Family("FSMT (fairseq)", "fsmt", "FSMTForConditionalGeneration",
                   ("vocab-src.json", "vocab-tgt.json", "merges.txt"), "sacremoses"),
}

# CTranslate2's weight types (its `quantization` argument)
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "float16", "bfloat16", "int8_bfloat16")
