"""Named starting points for `python -m training.train --preset NAME`: model size, token budget and schedule.

Every value here is only a default: any flag on the command line (a model/data option or any Trainer flag such as
`--max_steps`, `--warmup_steps`, `--learning_rate`, `--save_steps`) overrides it.

The recipe shared by all presets is the paper's (section 5): Adam with beta = (0.9, 0.98) and epsilon = 1e-9, no
weight decay, label smoothing 0.1, dropout 0.1 (0.3 for the big model on en-de), batches of about `max_tokens`
source and target tokens, and the learning rate

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)                                   (equation 3)

which is Trainer's `inverse_sqrt` schedule with a peak learning rate of (d_model * warmup)^-0.5: during warmup
HF's schedule is lr * step / warmup and after it lr * sqrt(warmup / step). A preset without `learning_rate` gets
that peak, computed while the options are parsed from the final `d_model` and `--warmup_steps` (unless
`--learning_rate` is given). The paper warms up for 4000 steps of 25k-token batches; the demo trains for far fewer
steps and scales the warmup down with them. `multi30k` keeps the paper's model and optimiser but
not its schedule: its schedule is made for a time budget and chosen on `val` (benchmarks/experiments/). The `tiny` preset is
not the paper's: it is the small-data recipe of the literature (Transformer-Tiny), with a schedule made for a time
budget.
"""

from dataclasses import dataclass, field

from vanilla_transformer.configuration_vanilla_transformer import PAPER_PRESETS

# The paper's optimisation recipe, as Seq2SeqTrainingArguments defaults.
PAPER_RECIPE = dict(
    # With weight_decay=0 AdamW is exactly Adam. The fused kernel (CPU and GPU) updates all parameters in one pass,
    # faster than the per-parameter loop (benchmarks/experiments/loss-and-optimiser.md).
    optim="adamw_torch_fused",
    adam_beta1=0.9,
    adam_beta2=0.98,
    adam_epsilon=1e-9,
    weight_decay=0.0,
    lr_scheduler_type="inverse_sqrt",
    warmup_steps=4000,
    label_smoothing_factor=0.1,
    max_grad_norm=0.0,  # the paper does not clip gradients
    predict_with_generate=True,  # evaluation decodes with the checkpoint's generation config and scores BLEU
    save_strategy="steps",
    logging_strategy="steps",
)


@dataclass(frozen=True)
class Preset:
    """Defaults, each dict named for the dataclass it fills (a key that is not a field of it is an error, checked in
    tests/test_training.py)."""

    description: str
    model: dict = field(default_factory=dict)  # VanillaTransformerConfig values (the architecture)
    data: dict = field(default_factory=dict)  # training.arguments.DataArguments defaults (data, vocabulary, BLEU)
    training: dict = field(default_factory=dict)  # TranslationTrainingArguments defaults, on top of PAPER_RECIPE
    generation: dict = field(default_factory=dict)  # GenerationConfig values of the trained model (decoding defaults)

    def training_defaults(self) -> dict:
        return {**PAPER_RECIPE, **self.training}


# The paper's model and optimiser at Multi30k size, with a schedule made for a time budget (peak 0.0014 after 40 % of
# the steps, linear to 0, the average of the last 2 checkpoints 2 % of the run apart): the best of the schedules
# replayed on val for a 30-minute CPU run (benchmarks/experiments/recipe-sweep.md). Without --max_train_minutes the
# same shape spans --max_steps. Decoding: length penalty 1.4 (beam 4), chosen on val: outputs of length near the
# references' (benchmarks/experiments/decoding.md).
MULTI30K = Preset(
    description="A small Transformer for Multi30k-sized data (29k sentence pairs) with a schedule for a time "
                "budget (--max_train_minutes): peak 0.0014 after two fifths of the steps, linear decay, average of "
                "the last 2 checkpoints; chosen on val (docs/train.md).",
    model=dict(d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024, dropout=0.1),
    data=dict(vocab_size=8000, max_source_length=128, max_target_length=128),
    training=dict(max_tokens=2048, max_steps=20000, learning_rate=0.0014, lr_scheduler_type="linear",
                  warmup_steps=0.4, average_last_n_checkpoints=2, averaging_span=0.02, logging_steps=100,
                  save_steps=500, save_total_limit=10, eval_strategy="no", per_device_eval_batch_size=64),
    generation=dict(length_penalty=1.4),
)


MULTI30K_PRE_LN = Preset(
    description="`multi30k` with pre-LayerNorm blocks (not the paper's layout), d_ff 512, a 6,000-token "
                "vocabulary, dropout 0.2 and peak 0.003: more BLEU per CPU-minute than `multi30k` on small data; "
                "cannot be exported to MarianMTModel (docs/train.md).",
    model={**MULTI30K.model, "normalize_before": True, "encoder_ffn_dim": 512, "decoder_ffn_dim": 512,
           "dropout": 0.2},
    data={**MULTI30K.data, "vocab_size": 6000},
    training={**MULTI30K.training, "learning_rate": 0.003}, generation=dict(MULTI30K.generation),
)

PRESETS: dict[str, Preset] = {
    "demo": Preset(
        description="English -> German number words made with num2words; trains in a few minutes on 2 CPU cores.",
        model=dict(d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512, dropout=0.1,
                   max_position_embeddings=128),
        data=dict(vocab_size=1000, max_source_length=64, max_target_length=64,
                  num_sample_translations=6, bleu_tokenize="char",  # German number words have no spaces
                  watch_steps=0.05),  # 20 recordings of the run for `vanilla-transformer explore --training`
        training=dict(max_tokens=2048, max_steps=1500, warmup_steps=300, logging_steps=100, save_steps=500,
                      save_total_limit=2, eval_strategy="no", per_device_eval_batch_size=100),
    ),
    "multi30k": MULTI30K,
    # `multi30k` with pre-LayerNorm blocks (x + Sublayer(LayerNorm(x)), a final LayerNorm on each stack; Wang et al.
    # 2019, Xiong et al. 2020) -- not the paper's layout, kept apart so that `multi30k` stays the paper's model (and
    # exports to MarianMTModel, which is post-LayerNorm only). Pre-LN trains stably at the higher peak 0.003, and so
    # scores more in a time budget (benchmarks/experiments/pre-layernorm.md); d_ff 512 and 6,000 tokens make a model a
    # quarter smaller that takes more steps in a budget at the same score (smaller-ffn-and-vocabulary.md there);
    # dropout 0.2 because a 30-minute run makes many passes over Multi30k (dropout-30-minutes.md there).
    "multi30k-pre-ln": MULTI30K_PRE_LN,
    # The student of sequence-level knowledge distillation (Kim & Rush 2016; `vanilla-transformer distill`):
    # `multi30k-pre-ln`'s recipe (pre-LN blocks, d_ff 512, 6,000 tokens, its schedule) with a deep encoder and a
    # one-layer decoder (Kasai et al. 2021, "Deep Encoder, Shallow Decoder": the encoder runs once per sentence, the
    # decoder once per output token) at d_model 192. Chosen on val among 6+1 students trained for the same minutes
    # on a teacher's translations (benchmarks/experiments/student-shape.md): d_model 192 scored more than 256 (more
    # steps in the budget) and decodes 1.8-2.0x as fast as `multi30k-pre-ln` with CTranslate2 int8 at one thread;
    # a 3,000-token vocabulary scored less at no gain in speed (longer outputs offset the smaller output layer).
    "multi30k-student": Preset(
        description="The student for `vanilla-transformer distill` on Multi30k-sized data: `multi30k-pre-ln`'s "
                    "recipe with a deep encoder and a one-layer decoder (6+1, Kasai et al. 2021) at d_model 192, "
                    "chosen on val; about 2x the int8 speed of `multi30k-pre-ln` (docs/small-and-fast.md).",
        model={**MULTI30K_PRE_LN.model, "d_model": 192, "encoder_layers": 6, "decoder_layers": 1},
        data=dict(MULTI30K_PRE_LN.data), training=dict(MULTI30K_PRE_LN.training),
        generation=dict(MULTI30K_PRE_LN.generation),
    ),
    # Transformer-Tiny of Wu et al. (2021), the literature's text-only Transformer on Multi30k: 4+4 layers, d_model
    # 128, d_ff 256, 4 heads, dropout 0.3, shared embeddings, 4,096-token batches, the average of the last 10
    # checkpoints. Small data wants a small, strongly regularised model (Araabi & Monz 2020; Sennrich & Zhang 2019).
    # Their ~8,000 updates do not fit in a CPU budget of minutes, so the schedule decays linearly to zero at the end
    # of the run (with --max_train_minutes: at the end of the steps that fit, see training/budget.py), after a warmup
    # of a fifth of it to 0.003, and the 10 averaged checkpoints lie in its last fifth. Experimental: in 30 minutes on
    # 2 CPU cores it trains far less than `multi30k` (benchmarks/experiments/tiny-preset.md).
    "tiny": Preset(
        description="Transformer-Tiny (Wu et al. 2021) for small data such as Multi30k (~30k sentence pairs), with a "
                    "schedule for a time budget (--max_train_minutes); experimental: its 30-minute CPU run stalled.",
        model=dict(d_model=128, encoder_layers=4, decoder_layers=4, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, dropout=0.3),
        data=dict(vocab_size=8000, max_source_length=128, max_target_length=128, literature_bleu=True),
        training=dict(max_tokens=4096, max_steps=8000, learning_rate=0.003, lr_scheduler_type="linear",
                      warmup_steps=0.2, average_last_n_checkpoints=10, averaging_span=0.2, logging_steps=100,
                      save_steps=160, save_total_limit=10, eval_strategy="no", per_device_eval_batch_size=128),
    ),
    # Table 3 of the paper, WMT14 en-de: 8 GPUs x ~3125 tokens = ~25k source + 25k target tokens per step. With
    # fewer devices raise --gradient_accumulation_steps to keep the step size. The paper saved a checkpoint every
    # 10 minutes and averaged the last 5 (base) or 20 (big); at its speed that is every ~1500 / ~600 steps.
    "base": Preset(
        description="The paper's base model (Table 3): 100k steps of ~25k-token batches on 8 GPUs.",
        model=PAPER_PRESETS["base"],
        data=dict(vocab_size=37000, max_source_length=256, max_target_length=256),
        training=dict(max_tokens=3125, max_steps=100_000, warmup_steps=4000, average_last_n_checkpoints=5,
                      logging_steps=100, save_steps=1500, save_total_limit=5, eval_strategy="no",
                      per_device_eval_batch_size=32),
    ),
    "big": Preset(
        description="The paper's big model (Table 3): 300k steps of ~25k-token batches on 8 GPUs, dropout 0.3.",
        model=PAPER_PRESETS["big"],
        data=dict(vocab_size=37000, max_source_length=256, max_target_length=256),
        training=dict(max_tokens=3125, max_steps=300_000, warmup_steps=4000, average_last_n_checkpoints=20,
                      logging_steps=100, save_steps=600, save_total_limit=20, eval_strategy="no",
                      per_device_eval_batch_size=32),
    ),
}


def paper_learning_rate(d_model: int, warmup_steps: int) -> float:
    """Peak of equation 3, reached at step = warmup: (d_model * warmup)^-0.5."""
    if d_model <= 0 or warmup_steps <= 0:
        raise ValueError(f"The paper's schedule needs d_model > 0 and warmup_steps > 0, got {d_model} and {warmup_steps}.")
    return (d_model * warmup_steps) ** -0.5
