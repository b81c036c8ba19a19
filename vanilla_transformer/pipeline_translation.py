"""`pipeline("translation")` for transformers 5, which removed it.

`TranslationPipeline` behaves like the one transformers 4 shipped: a string or a list of strings in,
`[{"translation_text": ...}]` out (one dict per input), `batch_size`, generation parameters (`num_beams`,
`max_new_tokens`, ...) passed through to `generate`, and `src_lang` / `tgt_lang` (or a task named
`"translation_xx_to_yy"`) handed to multilingual tokenizers that use them (mBART, M2M100, NLLB). It works with any
encoder-decoder model (`AutoModelForSeq2SeqLM`). Two differences from v4, both about bad input: an input longer
than the model accepts is truncated with a warning (v4 passed it on and the model failed), and an empty string,
None or a non-string raises an error that says so (v4 translated "" into whatever the model made of `</s>`).

Importing `vanilla_transformer` registers this class for the `"translation"` task. A saved checkpoint carries this
file and names it in `config.json` (`custom_pipelines`), so that without the package
`pipeline("translation", model=folder_or_repo, trust_remote_code=True)` works too. It is therefore Hub remote code
and imports only torch, transformers and its siblings `casing.py`, `compat.py` and `decoding.py` (saved with it).
ALL-CAPS and Title Case inputs are recased for our models (`recase=False` translates them as written; casing.py).
"""

import copy
from typing import Any

import torch
from transformers import GenerationConfig, Pipeline
from transformers.utils import ModelOutput, logging

from .casing import STYLES, restore_case
from .casing import recase as recase_texts
from .compat import pipeline_merges_generate_kwargs
from .decoding import check_generation_parameters, longest_input, positions_read

logger = logging.get_logger(__name__)


class TranslationPipeline(Pipeline):
    """Translate text with an encoder-decoder model.

    ```python
    >>> translator = pipeline("translation", model="path/or/repo")  # with `import vanilla_transformer`
    >>> translator("Ein Mann fährt Fahrrad.", num_beams=4, max_new_tokens=64)
    [{'translation_text': 'A man rides a bicycle.'}]
    ```

    Call parameters (also accepted by `pipeline(...)`, where they become defaults):
        truncation (`bool`, defaults to `True`): shorten inputs longer than the model's limit (the smaller of the
            tokenizer's `model_max_length` and the model's `max_position_embeddings`), with a warning.
        src_lang, tgt_lang (`str`): the language codes, for tokenizers that need them; models trained for one
            direction ignore them.
        return_tensors (`bool`): return `translation_token_ids` (the generated ids) instead of text.
        clean_up_tokenization_spaces (`bool`): passed to `tokenizer.decode`.
        batch_size (`int`): how many inputs are padded into one `generate` call.
        any parameter of `generate` / `GenerationConfig` (`num_beams`, `max_new_tokens`, `do_sample`,
            `num_return_sequences`, `generation_config`, ...).

    With `num_return_sequences=n > 1`, each input gives a list of `n` dicts.
    """

    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True
    # transformers 4's defaults for text-to-text pipelines, used only where the model's generation config sets nothing
    _default_generation_config = GenerationConfig(max_new_tokens=256, num_beams=4)

    # the head names of single-stack classes (transformers' naming): a folder saved from one of them has no encoder or
    # no decoder for the encoder-decoder class `pipeline` builds from it, which would translate with random weights
    _SINGLE_STACK_HEADS = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForSequenceClassification",
                           "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice")

    def __init__(self, *args, **kwargs):
        self._check_saved_class(kwargs["model"] if "model" in kwargs else args[0] if args else None)
        super().__init__(*args, **kwargs)
        if not getattr(self.model.config, "is_encoder_decoder", False):
            raise ValueError(
                f"The translation pipeline needs an encoder-decoder model (AutoModelForSeq2SeqLM), but "
                f"{type(self.model).__name__} is not one. For a chat model, use pipeline('text-generation')."
            )
        if self.tokenizer is None:
            raise ValueError("The translation pipeline needs a tokenizer: pass tokenizer=... to pipeline().")

    @classmethod
    def _check_saved_class(cls, model) -> None:
        """Refuse, in one line, a model loaded from a folder of another kind: `pipeline("translation", model=folder)`
        builds the encoder-decoder class from any folder with its model_type, so a decoder-only or encoder-only
        folder gives a model whose missing stack is random or empty ("Cannot copy out of meta tensor"). (Our own
        classes refuse such a folder in `from_pretrained` already.)"""
        config = getattr(model, "config", None)
        saved = (getattr(config, "architectures", None) or [None])[0]
        if not isinstance(saved, str) or saved == type(model).__name__:
            return
        empty = any(parameter.is_meta for parameter in model.parameters())
        if empty or saved.endswith(cls._SINGLE_STACK_HEADS):
            where = getattr(config, "_name_or_path", "") or "the model folder"
            kind = ("a decoder-only model" if saved.endswith(("ForCausalLM", "LMHeadModel")) else
                    "an encoder-only model" if saved.endswith(cls._SINGLE_STACK_HEADS) else "another kind of model")
            raise ValueError(
                f"{where} holds {kind} ({saved}, in config.json's architectures), not a translation model: the "
                f"translation pipeline needs an encoder-decoder (seq2seq) model folder, saved from "
                f"{type(model).__name__} or another AutoModelForSeq2SeqLM class."
            )

    # -- parameters ---------------------------------------------------------------------------------------------

    def _sanitize_parameters(
        self,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        truncation: bool | None = None,
        return_tensors: bool | None = None,
        return_text: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
        recase: bool | None = None,
        **generate_kwargs,
    ):
        preprocess_params: dict[str, Any] = {}
        if recase is not None:
            preprocess_params["recase"] = bool(recase)
        if truncation is not None:
            preprocess_params["truncation"] = bool(truncation)
        for name, value in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
            if value is not None:
                if not isinstance(value, str) or not value:
                    raise ValueError(f"{name} must be a language code (a non-empty string), got {value!r}.")
                preprocess_params[name] = value
        if src_lang is None and tgt_lang is None:
            # v4: a task named "translation_en_to_de" sets the languages
            parts = (self.task or "").split("_")
            if len(parts) == 4 and parts[0] == "translation" and parts[2] == "to":
                preprocess_params["src_lang"], preprocess_params["tgt_lang"] = parts[1], parts[3]

        postprocess_params: dict[str, Any] = {}
        if return_tensors is not None:
            postprocess_params["return_tensors"] = bool(return_tensors)
        if return_text is not None and return_tensors is None:
            postprocess_params["return_tensors"] = not return_text
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces

        return preprocess_params, generate_kwargs, postprocess_params

    # -- input checks -------------------------------------------------------------------------------------------

    @staticmethod
    def _check_text(text: Any, where: str = "the input") -> None:
        if text is None:
            raise ValueError(f"Nothing to translate: {where} is None; pass a string or a list of strings.")
        if not isinstance(text, str):
            raise TypeError(
                f"The translation pipeline translates strings, but {where} is of type {type(text).__name__} "
                f"({text!r:.80}); "
                "pass a string or a list of strings."
            )
        if not text.strip():
            raise ValueError(f"Nothing to translate: {where} is an empty string{' (only whitespace)' if text else ''}.")

    def __call__(self, inputs: str | list[str], **kwargs):
        """Translate `inputs`, a string or a list of strings (a generator or a dataset streams its results).

        Returns `[{"translation_text": ...}]` for a string and one such dict per string for a list.
        """
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if isinstance(inputs, list):
            if not inputs:
                return []
            for index, text in enumerate(inputs):
                self._check_text(text, where=f"item {index} of the input list")
        elif inputs is None or not _is_stream(inputs):
            self._check_text(inputs)
        results = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(result) == 1 for result in results):
            return [result[0] for result in results]  # as v4: one dict per input unless several are asked for
        return results

    # -- the three stages ---------------------------------------------------------------------------------------

    def _max_input_length(self) -> int | None:
        """The longest input the model takes: the tokenizer's `model_max_length` and the model's positions (as every
        engine reads them, `decoding.positions_read`)."""
        return longest_input(positions_read(self.model.config), self.tokenizer)

    def preprocess(self, text: str, truncation: bool = True, src_lang: str | None = None, tgt_lang: str | None = None,
                   recase: bool | None = None):
        self._check_text(text)
        # An ALL-CAPS or Title Case text is translated recased, and its translation given its case (casing.py): by
        # default for our models, whose vocabularies are learnt from ordinary text; other models' as they were.
        if recase is None:
            recase = getattr(self.model.config, "model_type", None) == "vanilla_transformer"
        (text,), (style,) = recase_texts([text], self.tokenizer) if recase else ((text,), (None,))
        text = (self.prefix or "") + text
        max_length = self._max_input_length()
        tokenizer_kwargs: dict[str, Any] = {"return_tensors": "pt"}

        def tokenize(**extra):
            if hasattr(self.tokenizer, "_build_translation_inputs"):  # multilingual tokenizers: language codes
                return self.tokenizer._build_translation_inputs(
                    text, src_lang=src_lang, tgt_lang=tgt_lang, **tokenizer_kwargs, **extra
                )
            return self.tokenizer(text, **tokenizer_kwargs, **extra)

        inputs = tokenize()
        length = inputs["input_ids"].shape[-1]
        if truncation and max_length is not None and length > max_length:
            logger.warning(
                f"The input is {length} tokens long but the model takes at most {max_length}: it was truncated to "
                f"{max_length} tokens, so the end of it is not translated. Split long texts into sentences, or pass "
                "truncation=False to keep them whole."
            )
            inputs = tokenize(truncation=True, max_length=max_length)
        inputs.pop("token_type_ids", None)
        # tensors, so that batching stacks them instead of making lists
        inputs["case_style"] = torch.tensor([0 if style is None else 1 + STYLES.index(style)])
        if "forced_bos_token_id" in inputs:
            inputs["forced_bos_token_id"] = torch.tensor([inputs["forced_bos_token_id"]])
        return dict(inputs)

    def _forward(self, model_inputs: dict, **generate_kwargs):
        case_style = model_inputs.pop("case_style", None)
        forced_bos = model_inputs.pop("forced_bos_token_id", None)
        if forced_bos is not None and "forced_bos_token_id" not in generate_kwargs:
            generate_kwargs["forced_bos_token_id"] = int(forced_bos.flatten()[0])  # one target language per call
        batch_size = model_inputs["input_ids"].shape[0]
        generate_kwargs = self._generate_kwargs_for_call(generate_kwargs)
        output = self.model.generate(**model_inputs, **generate_kwargs)
        output_ids = output.sequences if isinstance(output, ModelOutput) else output  # (B * n, T)
        outputs = {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}  # (B, n, T)
        if case_style is not None:
            outputs["case_style"] = case_style.reshape(batch_size)
        return outputs

    def _generate_kwargs_for_call(self, generate_kwargs: dict) -> dict:
        """`generate()`'s arguments for one call: the call's parameters, over those given to `pipeline(...)`, over the
        model's generation config, over `_default_generation_config`. Parameters that cannot work raise ValueError."""
        if pipeline_merges_generate_kwargs(Pipeline):  # transformers >= 5.20 (see compat)
            generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
            check_generation_parameters(self.model.generation_config, generate_kwargs)
            return generate_kwargs
        # transformers 5.18 - 5.19: `Pipeline.__init__` merged the other three into (public) `self.generation_config`.
        check_generation_parameters(self.generation_config, generate_kwargs)
        if "generation_config" in generate_kwargs:
            return generate_kwargs
        generation_config = copy.deepcopy(self.generation_config)
        others = generation_config.update(**generate_kwargs)  # returns what is not a generation parameter
        return {**others, "generation_config": generation_config}

    def postprocess(self, model_outputs: dict, return_tensors: bool = False,
                    clean_up_tokenization_spaces: bool = False):
        records = []
        code = int(model_outputs["case_style"].flatten()[0]) if "case_style" in model_outputs else 0
        style = STYLES[code - 1] if code else None
        for output_ids in model_outputs["output_ids"][0]:  # the n sequences of one input
            if return_tensors:
                records.append({"translation_token_ids": output_ids})
            else:
                text = self.tokenizer.decode(
                    output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
                records.append({"translation_text": restore_case(text, style)})
        return records


def _is_stream(inputs: Any) -> bool:
    """A generator, a `datasets.Dataset` or a `KeyDataset`: checked item by item as the pipeline reads it."""
    return hasattr(inputs, "__iter__") and not isinstance(inputs, (str, bytes, dict))


__all__ = ["TranslationPipeline", "check_generation_parameters"]
