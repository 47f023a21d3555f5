"""TensorBoard summaries of a training run: the training scalars, the dev figures, sample
translations and attention images. Every function writes inside the caller's
``writer.as_default(step=...)`` context.
"""

from __future__ import annotations

import contextlib
import os

import tensorflow as tf

from transformer_tf2.config import hparams
from transformer_tf2.decoding import plots
from transformer_tf2.utils import files


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


def dev_figures(dev_loss: float, dev_nll: float, scores: dict | None) -> None:
    """dev/loss, dev/nll (per token, no dropout), and where ``scores`` are given (dev
    BLEU was computed) dev/bleu (sacreBLEU) and dev/chrf."""
    tf.summary.scalar("dev/loss", dev_loss)
    tf.summary.scalar("dev/nll", dev_nll)
    if scores is not None:
        tf.summary.scalar("dev/bleu", scores["sacrebleu"])
        tf.summary.scalar("dev/chrf", scores["chrf"])


def budget(used: float, seconds: float) -> None:
    """train/budget_used: the fraction of the run's budget used (budget.Budget), and
    train/minutes: its wall time over all resumes."""
    tf.summary.scalar("train/budget_used", used)
    tf.summary.scalar("train/minutes", seconds / 60)


def sample_translations(sources, refs, hyps, count: int = 5) -> None:
    """A markdown table of the first ``count`` dev sentences (dev/translations)."""
    rows = [f"| {s} | {r} | {h} |" for s, r, h in zip(sources[:count], refs[:count], hyps[:count])]
    table = ["| source | reference | translation |", "|---|---|---|"] + rows
    tf.summary.text("dev/translations", "\n".join(table))


def attention(model, tok, sentence: str, max_len_extra: int, layers="last", greedy=None):
    """attention/<map> (or attention/layer<k>/<map> with ``layers='all'``): the labelled
    figures of plots.py for one sentence and the model's greedy translation, one panel per
    head. Returns the plots.Attention drawn."""
    att = plots.attention(model, tok, sentence, max_len_extra, greedy)
    for tag, fig in plots.figures(att, layers).items():
        image = tf.image.decode_png(plots.png(fig), channels=3)[None]  # (1, H, W, 3) uint8
        tf.summary.image(f"attention/{tag}", image, description=f"{sentence} -> {att.text}")
    return att


@contextlib.contextmanager
def summaries_at(writer, step: int, hp: hparams.Hparams, lost: str):
    """``writer.as_default(step)``; a full disk under its events is one UserError line
    that says what is ``lost`` (run_state.RunState.unsaved)."""
    events = os.path.join(hp.logdir, "train")
    with files.reporting(events, lost):
        with writer.as_default(step=step):
            yield
        writer.flush()  # here, where a write error is reported
