"""Saved folders: what kind a folder is (`kinds`), whether it is complete and loadable (`validate`), and loading it
for translation, plotting or exploring (`load`).

The names the command line's options and the light modules need are here, in a module without torch: the engines a
folder can be run by, and the Auto class that builds each kind of PyTorch folder."""

ENGINES = ("auto", "pytorch", "ctranslate2")

# Which class is in a folder: each PyTorch kind and the transformers Auto class that builds it (from config.json's
# `architectures`). Our classes register with the same Auto classes (`registration.AUTO_CLASSES`), and
# `classes.architecture_kind` reads our classes' kinds from there, so the two tables cannot disagree.
AUTO_CLASS_OF_KIND = {
    "seq2seq": "AutoModelForSeq2SeqLM",
    "causal-lm": "AutoModelForCausalLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "masked-lm": "AutoModelForMaskedLM",
}
