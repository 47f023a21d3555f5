"""TensorBoard summaries of a training run: the training scalars, the dev figures, sample
translations and attention images. Every function writes inside the caller's
``writer.as_default(step=...)`` context.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import data_load


def train_scalars(means: dict, grad_norm: float, lr: float) -> None:
    """train/loss, nll, accuracy, tokens_per_sec (means over the window since the last
    log, see train.Window), grad_norm of the last update and lr."""
    tf.summary.scalar("train/loss", means["loss"])
    tf.summary.scalar("train/nll", means["nll"])
    tf.summary.scalar("train/accuracy", means["accuracy"])
    tf.summary.scalar("train/grad_norm", grad_norm)
    tf.summary.scalar("train/lr", lr)
    tf.summary.scalar("train/tokens_per_sec", means["tokens_per_sec"])


def skipped_updates(skipped: int, loss_scale: float | None = None) -> None:
    """train/skipped_steps: the updates skipped so far for a NaN or Inf (loss-scale
    overflows excluded); train/loss_scale under mixed_float16."""
    tf.summary.scalar("train/skipped_steps", skipped)
    if loss_scale is not None:
        tf.summary.scalar("train/loss_scale", loss_scale)


def dev_figures(dev_loss: float, dev_nll: float, scores: dict) -> None:
    """dev/loss, dev/nll (per token, no dropout), dev/bleu (sacreBLEU) and dev/chrf."""
    tf.summary.scalar("dev/loss", dev_loss)
    tf.summary.scalar("dev/nll", dev_nll)
    tf.summary.scalar("dev/bleu", scores["sacrebleu"])
    tf.summary.scalar("dev/chrf", scores["chrf"])


def sample_translations(sources, refs, hyps, count: int = 5) -> None:
    """A markdown table of the first ``count`` dev sentences (dev/translations)."""
    rows = [f"| {s} | {r} | {h} |" for s, r, h in zip(sources[:count], refs[:count], hyps[:count])]
    table = ["| source | reference | translation |", "|---|---|---|"] + rows
    tf.summary.text("dev/translations", "\n".join(table))


def attention_images(model, tok, src_text: str, ref_text: str, scale: int = 8) -> dict:
    """Last-layer attention maps for one sentence pair, teacher-forced on the reference.

    Returns {name: (num_heads, T_q * scale, T_k * scale, 1) float images in [0, 1]} for
    encoder_self, decoder_self and decoder_cross.
    """
    src_ids = tok.encode_src([src_text])[0] + [data_load.EOS_ID]
    tgt_ids = [data_load.BOS_ID] + tok.encode_tgt([ref_text])[0]
    src = np.asarray(src_ids, np.int32)[None]
    tgt = np.asarray(tgt_ids, np.int32)[None]
    memory, mask, enc_w = model.encode(tf.constant(src), return_attention=True)
    _, dec_w = model.decode(tf.constant(tgt), memory, mask, return_attention=True)
    maps = {"encoder_self": enc_w[-1], "decoder_self": dec_w[-1][0], "decoder_cross": dec_w[-1][1]}
    out = {}
    for name, w in maps.items():
        w = w.numpy()[0]  # (h, T_q, T_k)
        w = np.repeat(np.repeat(w, scale, axis=1), scale, axis=2)
        out[name] = w[..., None].astype(np.float32)
    return out


def attention(model, tok, src_text: str, ref_text: str) -> None:
    """attention/<name>: one image per head of each last-layer map."""
    for key, image in attention_images(model, tok, src_text, ref_text).items():
        tf.summary.image(f"attention/{key}", image, max_outputs=image.shape[0])
