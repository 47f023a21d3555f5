"""The checks of a set of hyperparameters (hparams.apply runs them on every script's
settings before TensorFlow starts): every numeric setting within its range and every float
one finite, sampling's settings, T5's buckets, and the combinations that cannot build a
model or a vocabulary. Each failure is one UserError line naming the option.
"""

from __future__ import annotations

import math

from transformer_tf2.utils.errors import UserError


def check(values: dict) -> None:
    """Every check of this module on ``values`` (an Hparams as a dict)."""
    check_ranges(values)
    if values["d_model"] % values["num_heads"]:
        raise UserError(
            f"d_model ({values['d_model']}) must be divisible by num_heads ({values['num_heads']})"
        )
    if values["model_type"] == "weighted" and values["d_ff"] % values["num_heads"]:
        raise UserError(
            f"model_type=weighted splits d_ff ({values['d_ff']}) into num_heads "
            f"({values['num_heads']}) branch FFNs: d_ff must be divisible by it"
        )
    if values["model_type"] == "weighted" and not values["output_projection"]:
        raise UserError(
            "model_type=weighted projects each head by its rows of W^O: it needs "
            "output_projection=true"
        )
    if values["bpe_dropout"] and values["vocab_type"] != "bpe":
        raise UserError(
            f"--bpe_dropout drops BPE merges; vocab_type={values['vocab_type']} has none: "
            "use --vocab_type bpe or --bpe_dropout 0"
        )
    check_t5(values)


def check_ranges(values: dict) -> None:
    """Each numeric hyperparameter within its range, and every float one finite: a
    one-line UserError naming it."""
    for key, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"--{key} must be a finite number; got {value}")
    for key in (
        "d_model",
        "d_ff",
        "num_blocks",
        "num_epochs",
        "num_heads",
        "vocab_size",
        "maxlen1",
        "maxlen2",
        "tokens_per_batch",
        "eval_batch_size",
        "max_position",
        "max_relative_position",
        "accum_steps",
        "warmup_steps",
        "branch_warmup_steps",
        "ut_max_steps",
        "pad_multiple",
        "beam_size",
        "keep_ckpts",
    ):
        if values[key] < 1:
            raise UserError(f"--{key} must be a positive integer; got {values[key]}")
    for key in (
        "max_len_extra",
        "max_len",
        "batch_size",
        "max_steps",
        "ckpt_every_steps",
        "early_stopping",
        "dev_bleu_sents",
        "max_bad_steps",
        "decode_streams",
        "memory_sentences",
        "target_memory_sentences",
    ):
        if values[key] < 0:
            raise UserError(f"--{key} must not be negative; got {values[key]}")
    if not 0 <= values["demo_documents"] < 1:
        raise UserError(f"--demo_documents must be in [0, 1); got {values['demo_documents']}")
    for key in ("cooldown", "eval_share"):
        if not 0 < values[key] <= 1:
            raise UserError(f"--{key} must be in (0, 1]; got {values[key]}")
    if values["average"] < 0:
        raise UserError(f"--average must not be negative; got {values['average']}")
    for key in (
        "dropout_rate",
        "attention_dropout",
        "label_smoothing",
        "act_epsilon",
        "bpe_dropout",
    ):
        if not 0 <= values[key] < 1:
            raise UserError(f"--{key} must be in [0, 1); got {values[key]}")
    for key in ("act_loss_weight", "clip_norm", "max_minutes", "length_penalty"):
        if values[key] < 0:
            raise UserError(f"--{key} must not be negative; got {values[key]:g}")
    for key in ("lr", "adam_epsilon"):
        if not values[key] > 0:
            raise UserError(f"--{key} must be positive; got {values[key]:g}")
    for key in ("adam_beta1", "adam_beta2", "ema_decay"):
        if not 0 <= values[key] < 1:
            raise UserError(f"--{key} must be in [0, 1); got {values[key]:g}")
    for key in ("embedding_dropout", "residual_dropout"):
        if not values[key] < 1:
            raise UserError(
                f"--{key} must be in [0, 1), or negative to follow dropout_rate; got {values[key]}"
            )
    if not values["layer_norm_epsilon"] > 0:
        raise UserError(
            f"--layer_norm_epsilon must be positive; got {values['layer_norm_epsilon']:g}"
        )
    check_sampling(values)


def check_sampling(values: dict) -> None:
    """Sampling's settings in range, and sampling (sampling_topk other than 1, as in
    CTranslate2) without a beam."""
    topk, topp, temperature = (values[f"sampling_{k}"] for k in ("topk", "topp", "temperature"))
    if topk < 0:
        raise UserError(f"--sampling_topk must not be negative (0: every token); got {topk}")
    if not 0 < topp <= 1:
        raise UserError(f"--sampling_topp must be in (0, 1]; got {topp}")
    if not 0 < temperature < float("inf"):
        raise UserError(f"--sampling_temperature must be positive; got {temperature}")
    if topk == 1 and (topp < 1 or temperature != 1):
        raise UserError(
            "--sampling_topp and --sampling_temperature shape sampling, which --sampling_topk "
            "1 (the default: greedy) turns off: add --sampling_topk 0 (every token) or K > 1"
        )
    if topk != 1 and values["beam_size"] > 1:
        raise UserError(
            f"--sampling_topk {topk} samples one token at a time: drop --beam_size "
            f"{values['beam_size']} (or use --sampling_topk 1 for beam search)"
        )


def check_t5(values: dict) -> None:
    """T5's buckets split into exact and log-spaced ones (the causal decoder has
    t5_buckets / 2 exact ones, which t5_max_distance must pass)."""
    buckets, far = values["t5_buckets"], values["t5_max_distance"]
    if buckets < 4 or buckets % 2:
        raise UserError(f"--t5_buckets must be an even number >= 4; got {buckets}")
    if far <= buckets // 2:
        raise UserError(
            f"--t5_max_distance ({far}) must exceed t5_buckets / 2 ({buckets // 2}), the "
            "distances with a bucket of their own; raise it or lower --t5_buckets"
        )
