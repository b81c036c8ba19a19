"""LoRA with PEFT, written as Marian/BART users write it: `target_modules=["q_proj", "v_proj"]` adapts every self- and
encoder-decoder attention, Seq2SeqTrainer fine-tunes through the adapter, and the saved adapter reloads onto a fresh
base, merges, and generates."""

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

from translation_fixtures import ENGLISH, GERMAN, tiny_tokenizer, tiny_translator

peft = pytest.importorskip("peft")
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from peft.tuners.lora import LoraLayer  # noqa: E402

from vanilla_transformer import VanillaTransformerForConditionalGeneration  # noqa: E402


def lora_config(**overrides) -> LoraConfig:
    return LoraConfig(**{"task_type": "SEQ_2_SEQ_LM", "target_modules": ["q_proj", "v_proj"], "r": 4,
                         "lora_alpha": 8, "lora_dropout": 0.0, **overrides})


def lora_wrapped(model) -> dict[str, LoraLayer]:
    return {name.split("base_model.model.", 1)[-1]: module for name, module in model.named_modules()
            if isinstance(module, LoraLayer)}


def test_lora_on_q_and_v_adapts_every_self_and_cross_attention(seed):
    model = tiny_translator(seed)
    config = model.config
    peft_model = get_peft_model(model, lora_config())
    expected = set()
    for i in range(config.encoder_layers):
        expected |= {f"model.encoder.layers.{i}.self_attn.{p}" for p in ("q_proj", "v_proj")}
    for i in range(config.decoder_layers):
        expected |= {f"model.decoder.layers.{i}.{a}.{p}" for a in ("self_attn", "encoder_attn")
                     for p in ("q_proj", "v_proj")}
    assert set(lora_wrapped(peft_model)) == expected
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert trainable == len(expected) * 4 * (config.d_model + config.d_model)  # r * (d_in + d_out) per matrix


def train_base(tokenizer, steps: int = 60):
    """A tiny model trained (all weights, plain Adam) on the first three sentence pairs."""
    torch.manual_seed(0)
    model = tiny_translator(0).train()
    batch = tokenizer(GERMAN[:3], text_target=ENGLISH[:3], return_tensors="pt", padding=True)
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    return model.eval()


def training_loss(model, batch) -> float:
    with torch.no_grad():
        return model(**batch).loss.item()


def test_lora_fine_tune_saves_reloads_merges_and_generates(tmp_path):
    tokenizer = tiny_tokenizer()
    train_base(tokenizer).save_pretrained(tmp_path / "base")

    # LoRA fine-tuning on the other three pairs, through Seq2SeqTrainer
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "base")
    peft_model = get_peft_model(model, lora_config())
    features = [dict(tokenizer(source, text_target=target)) for source, target in zip(GERMAN[3:], ENGLISH[3:])]
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    batch = collator(features)
    before = training_loss(peft_model, batch)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=3, max_steps=40, learning_rate=1e-2,
        weight_decay=0.0, logging_steps=10, save_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True,
        seed=0, dataloader_num_workers=0,
    )
    Seq2SeqTrainer(model=peft_model, args=args, train_dataset=features, data_collator=collator).train()
    peft_model.eval()
    after = training_loss(peft_model, batch)
    assert after < 0.5 * before, (before, after)

    inputs = tokenizer(GERMAN[3:], return_tensors="pt", padding=True)
    decoder_input_ids = batch["decoder_input_ids"]
    with torch.no_grad():
        adapted = peft_model(**inputs, decoder_input_ids=decoder_input_ids).logits
    with torch.no_grad(), peft_model.disable_adapter():
        base_logits = peft_model(**inputs, decoder_input_ids=decoder_input_ids).logits
    assert (adapted - base_logits).abs().max() > 1e-2  # the adapter changed the function

    # the adapter alone is saved, and reloads onto a fresh base
    peft_model.save_pretrained(tmp_path / "adapter")
    assert not (tmp_path / "adapter" / "model.safetensors").exists()
    fresh = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "base")
    reloaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        reloaded_logits = reloaded(**inputs, decoder_input_ids=decoder_input_ids).logits
        generated = reloaded.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=12)
        beams = reloaded.generate(**inputs, max_new_tokens=12)  # the paper's beam search, from generation_config
    torch.testing.assert_close(reloaded_logits, adapted, atol=1e-6, rtol=0)

    merged = reloaded.merge_and_unload()
    assert type(merged) is VanillaTransformerForConditionalGeneration and not lora_wrapped(merged)
    with torch.no_grad():
        merged_logits = merged(**inputs, decoder_input_ids=decoder_input_ids).logits
        assert torch.equal(merged.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=12), generated)
        assert torch.equal(merged.generate(**inputs, max_new_tokens=12), beams)
    torch.testing.assert_close(merged_logits, adapted, atol=1e-5, rtol=0)
