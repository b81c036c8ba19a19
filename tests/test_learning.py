"""The model learns: Seq2SeqTrainer trains a small model to reverse sequences, and generate() then solves unseen ones."""

import random

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast, Seq2SeqTrainer, Seq2SeqTrainingArguments

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

SYMBOLS = [chr(ord("a") + i) for i in range(12)]


def word_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3} | {s: 4 + i for i, s in enumerate(SYMBOLS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def reversal_examples(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        words = [rng.choice(SYMBOLS) for _ in range(rng.randint(3, 8))]
        examples.append((" ".join(words), " ".join(reversed(words))))
    return examples


@pytest.mark.slow  # a long training
def test_seq2seq_trainer_learns_to_reverse_sequences(tmp_path):
    torch.manual_seed(0)
    tokenizer = word_tokenizer()
    train = reversal_examples(4000, seed=1)
    held_out = [pair for pair in reversal_examples(300, seed=2) if pair not in set(train)][:200]
    features = [
        dict(tokenizer(source, text_target=target)) for source, target in train
    ]
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer), d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, dropout=0.0, max_position_embeddings=32,
    )
    model = VanillaTransformerForConditionalGeneration(config)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=64, max_steps=500, learning_rate=2e-3,
        lr_scheduler_type="inverse_sqrt", warmup_steps=100, adam_beta2=0.98, adam_epsilon=1e-9,
        label_smoothing_factor=0.1, weight_decay=0.0, logging_steps=50, save_strategy="no", report_to=[],
        disable_tqdm=True, use_cpu=True, seed=0, dataloader_num_workers=0,
    )
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=features,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model))
    trainer.train()

    model.eval()
    sources = [source for source, _ in held_out]
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch, num_beams=1, max_new_tokens=12)
    predictions = tokenizer.batch_decode(generated, skip_special_tokens=True)
    accuracy = sum(p == target for p, (_, target) in zip(predictions, held_out)) / len(held_out)
    print(f"held-out exact-match accuracy on sequence reversal: {accuracy:.3f}")
    assert accuracy >= 0.95, list(zip(predictions[:5], held_out[:5]))
