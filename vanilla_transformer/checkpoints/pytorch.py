"""Loading a PyTorch folder written by `save_pretrained` (`load.load_checkpoint` calls it for those folders only):
the device checked, the folder checked once (`validate.check_checkpoint`), the model built by the Auto class of its
kind in eval mode, and its tokenizer. The model is registered with transformers first (`registration.register`),
so that the Auto classes know our model type whoever imported the package."""

import torch
import transformers

from vanilla_transformer.checkpoints import AUTO_CLASS_OF_KIND
from vanilla_transformer.checkpoints.kinds import tokenizer_errors
from vanilla_transformer.checkpoints.validate import check_checkpoint
from vanilla_transformer.registration import register


def pick_device(device: str | torch.device | None = None) -> str:
    """`device` checked (a torch device this machine has), or CUDA when available, else the CPU."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {str(device)!r} is not a torch device (cpu, cuda, cuda:1, mps, ...)") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r}: CUDA is not available on this machine")
    return str(parsed)


def load_pytorch_folder(path: str, kind: str, device: str | torch.device | None, need_tokenizer: bool):
    """-> (model in eval mode on the device, its tokenizer or None, the device)."""
    device = pick_device(device)
    register()  # the check reads the config through AutoConfig
    check_checkpoint(path, need_tokenizer=need_tokenizer)
    auto_class = getattr(transformers, AUTO_CLASS_OF_KIND[kind])
    model = auto_class.from_pretrained(path).to(device).eval()
    tokenizer = None
    if need_tokenizer:
        with tokenizer_errors(path):  # a damaged tokenizer file: one line naming it
            tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    return model, tokenizer, device


__all__ = ["load_pytorch_folder", "pick_device"]
