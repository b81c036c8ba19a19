"""The model class a PyTorch folder holds, ours or transformers', from the class name config.json's `architectures`
gives: transformers' tables of the classes each Auto class builds, and the classes themselves. Imported for PyTorch
folders only (`kinds.folder_kind`, `validate`, the PyTorch loader): it imports transformers' model code and torch.
"""

import transformers
from transformers.models.auto import modeling_auto

from vanilla_transformer import modeling_vanilla_transformer
from vanilla_transformer.checkpoints import AUTO_CLASS_OF_KIND
from vanilla_transformer.registration import AUTO_CLASSES

# transformers' own table of the classes each Auto class builds (model_type -> class name), for folders of other models
_MAPPING_NAMES_OF_KIND = {
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
}


def architecture_kind(name: str) -> str | None:
    """The kind (one of `kinds.PYTORCH_KINDS`) of the model class called `name`, ours or transformers'; None if
    none."""
    ours = {model_class.__name__: auto_class.__name__ for auto_class, model_class in AUTO_CLASSES}
    for kind, auto_class in AUTO_CLASS_OF_KIND.items():
        if ours.get(name) == auto_class or name in getattr(modeling_auto, _MAPPING_NAMES_OF_KIND[kind]).values():
            return kind
    return None


def model_class(config):
    """The model class named first in `config.architectures` (ours or transformers'), or None when it names none."""
    for name in getattr(config, "architectures", None) or []:
        for module in (modeling_vanilla_transformer, transformers):
            cls = getattr(module, name, None)
            if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
                return cls
    return None


__all__ = ["architecture_kind", "model_class"]
