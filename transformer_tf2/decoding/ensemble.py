"""Several trained runs decoded as one model (fairseq's ``--path a.pt:b.pt``, Marian's
``--models``): at each step the mixture of their next-token distributions, each run with
its own cache. Loaded by :func:`load_ensemble` (translate.py and eval.py ``--ensemble``).

The mixture averages probabilities, not log-probabilities: p(y) = 1/M sum_m p_m(y),
returned as its logarithm, a normalized distribution, as fairseq's ensemble does. A token
that one run finds implausible keeps the others' mass, where the average of
log-probabilities (a product of experts, renormalized) would let that one run veto it.
"""

from __future__ import annotations

import math
import os
import sys

import tensorflow as tf

from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.models import checkpoints


def mixture(log_probs: list):
    """log(1/M sum_m exp(log_probs[m])) of M log-probability tensors of one shape."""
    stacked = tf.stack([tf.cast(lp, tf.float32) for lp in log_probs])
    return tf.reduce_logsumexp(stacked, axis=0) - math.log(len(log_probs))


class Ensemble:
    """M :class:`model.Transformer` of one vocabulary as one model of the decoding
    protocol that the search loops take (encode / init_cache / decode_step / select_rows /
    cache_shapes, and a teacher-forced call): each step's "logits" (N, V)
    are the mixture's log-probabilities (:func:`mixture`); the caches are a tuple, one per
    run. Sources are cut to the shortest ``max_length`` of the runs."""

    reads_documents = False
    memory_sentences = target_memory_sentences = 0

    def __init__(self, models: list):
        self.models = list(models)
        lengths = [m.max_length for m in self.models if m.max_length is not None]
        self.max_length = min(lengths) if lengths else None
        self.key_mask_defect = any(m.key_mask_defect for m in self.models)
        self.num_blocks = self.models[0].num_blocks

    def encode(self, src):
        """src (N, T1) -> (memories, key masks): a tuple of each run's."""
        encoded = [m.encode(src) for m in self.models]
        return tuple(e[0] for e in encoded), tuple(e[1] for e in encoded)

    def init_cache(self, memories, masks):
        return tuple(m.init_cache(x, k) for m, x, k in zip(self.models, memories, masks))

    def pin_output(self) -> None:
        """Each run's output matrix transposed once (model.Transformer.pin_output)."""
        for m in self.models:
            m.pin_output()

    def decode_step(self, tokens, caches):
        """tokens (R,) -> (the mixture's log-probabilities (R, V) float32, new caches)."""
        log_probs, new = [], []
        for m, cache in zip(self.models, caches):
            logits, cache = m.decode_step(tokens, cache)
            log_probs.append(tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1))
            new.append(cache)
        return mixture(log_probs), tuple(new)

    def select_rows(self, caches, index):
        return tuple(m.select_rows(c, index) for m, c in zip(self.models, caches))

    def cache_shapes(self, caches):
        return tuple(m.cache_shapes(c) for m, c in zip(self.models, caches))

    def __call__(self, inputs, training=False):
        """Teacher forced: (src (N, T1), tgt_in (N, T2)) -> the mixture's log-probabilities
        (N, T2, V) at every position."""
        return mixture([tf.nn.log_softmax(m(inputs), axis=-1) for m in self.models])


def vocabulary_difference(hp_a, hp_b) -> str | None:
    """How two runs' vocabularies differ (kind, size, or the files' fingerprint), or None."""
    for key in ("vocab_type", "src_lang", "tgt_lang"):
        if getattr(hp_a, key) != getattr(hp_b, key):
            return f"{key} {getattr(hp_a, key)} against {getattr(hp_b, key)}"
    a, b = data_load.vocab_fingerprint(hp_a), data_load.vocab_fingerprint(hp_b)
    if a != b:
        return (
            f"the vocabularies of {hp_a.prepro_dir} and {hp_b.prepro_dir} differ (sha256 "
            f"{a[:12]}... against {b[:12]}...)"
        )
    return None


def load_ensemble(logdirs: list[str], overrides: dict, ckpt: str = "", who: str = "eval"):
    """(hparams, tokenizer, model, checkpoint paths) of the runs ``logdirs`` as one
    :class:`Ensemble` (one run: that run's model itself); the hparams and tokenizer are
    the first run's. Runs of different vocabularies, and runs with document memory, are
    each refused in one line."""
    if len(logdirs) == 1:
        hp, tok, model, path = checkpoints.load_run(logdirs[0], overrides, ckpt, who)
        return hp, tok, model, [path]
    runs = []
    for logdir in logdirs:
        if not os.path.exists(os.path.join(logdir, "hparams.json")):
            raise UserError(f"--ensemble: {logdir} holds no trained run (no hparams.json)")
        runs.append(checkpoints.load_run(logdir, overrides, ckpt, who))
    hp, tok = runs[0][0], runs[0][1]
    for logdir, (other, *_rest) in zip(logdirs[1:], runs[1:]):
        why = vocabulary_difference(hp, other)
        if why:
            raise UserError(
                f"--ensemble: {logdirs[0]} and {logdir} have different vocabularies ({why}): "
                "an ensemble's runs must share one"
            )
    for logdir, (_, _, model, _) in zip(logdirs, runs):
        if model.reads_documents:
            raise UserError(
                f"--ensemble: {logdir} reads document context (memory_sentences or "
                "target_memory_sentences), which an ensemble does not decode: leave it out"
            )
    print(f"{who}: an ensemble of {len(runs)} runs (probabilities averaged)", file=sys.stderr)
    return hp, tok, Ensemble([r[2] for r in runs]), [r[3] for r in runs]
