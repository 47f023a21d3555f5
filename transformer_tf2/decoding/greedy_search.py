"""The search over a model's next-token distributions with one hypothesis per sentence, and
what every search shares: the decoding budgets, a forced target prefix, the cache's start.

One compiled loop (:func:`greedy_loop`) runs every strategy that picks one next token per
sentence: :func:`argmax` (greedy decoding) or :class:`Sampling` (top-k, top-p and a
temperature, as CTranslate2's ``sampling_topk``, ``sampling_topp`` and
``sampling_temperature``). A new strategy is a function ``(logits (R, V), step, ids (R,))
-> tokens (R,)``, not a copy of the loop. Beam search is beam_search.py's; documents are
document_decoding.py's; the Translator (translator.py) batches them.

A loop needs from ``model`` only encode / init_cache / decode_step / select_rows /
cache_shapes: model.Transformer, or ensemble.Ensemble.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from transformer_tf2.data import data_load
from transformer_tf2.kernels import fast_ops


def max_decode_len(model, src_len, extra, max_len: int = 0):
    """Decoding budget: source length + extra, capped by ``max_len`` (if > 0) and by the
    position family's longest length (a learned table's rows)."""
    limit = src_len + extra
    if max_len > 0:
        limit = tf.minimum(limit, max_len)
    if model.max_length is not None:
        limit = tf.minimum(limit, model.max_length)
    return limit


def source_limit(model) -> int:
    """Longest source (</S> included) decoded; longer ones are cut: the position family's
    longest length (a learned table's size), else 1024 tokens (far beyond any training
    sentence)."""
    return 1024 if model.max_length is None else model.max_length


def decode_budgets(model, src, extra, max_len: int = 0, prefix=None):
    """Per-sentence budgets (N,) from each source's own length (non-PAD tokens, </S>
    included), so that a sentence decodes the same whatever batch it is in, each long
    enough for its ``prefix`` (:class:`Prefix`) and a token after it; and their maximum,
    the length of the output buffers."""
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(src, data_load.PAD_ID), tf.int32), axis=1)
    limits = max_decode_len(model, lengths, extra, max_len)
    if prefix is not None:
        limits = prefix.budgets(model, limits)
    return limits, tf.reduce_max(limits)


def init_cache(model, memory, mask, context=None):
    """model.init_cache, with the decoder's memory ``context`` when there is one (a model
    without document memory need not take it)."""
    if context is None:
        return model.init_cache(memory, mask)
    return model.init_cache(memory, mask, context)


class Prefix(NamedTuple):
    """Target prefixes that the search is forced through before it searches freely
    (CTranslate2's ``target_prefix``): ``tokens`` (N, P) int32, P >= 1, each row's first
    ``lengths`` (N,) int32 entries real (0: no prefix), PAD after them."""

    tokens: tf.Tensor
    lengths: tf.Tensor

    @staticmethod
    def spec() -> list:
        """The input signature of a prefix: tokens, lengths."""
        return [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)]

    def forced(self, step, rows):
        """(inside (R,) bool: whether each of ``rows`` (R,) int32, rows of the batch, is
        still in its prefix at ``step``; the prefix's token there (R,) int32)."""
        column = tf.minimum(step, tf.shape(self.tokens)[1] - 1)
        token = tf.gather(tf.gather(self.tokens, column, axis=1), rows)
        return step < tf.gather(self.lengths, rows), token

    def budgets(self, model, limits):
        """Per-sentence budgets (N,) long enough for each prefix and a token after it."""
        longer = self.lengths + 1
        if model.max_length is not None:
            longer = tf.minimum(longer, model.max_length)
        return tf.maximum(limits, longer)


def argmax(logits, step, ids):
    """Greedy decoding's strategy: the most probable token of each row (R, V) -> (R,),
    the lowest id among equals."""
    del step, ids
    return tf.argmax(logits, axis=-1, output_type=tf.int32)


_MASK32 = 0xFFFFFFFF


def _mix(x):
    """A 32-bit integer hash (two multiply-xorshift rounds) of int64 values in [0, 2^32),
    computed in int64 so that no product overflows (the constant is under 2^28)."""
    shift = tf.constant(16, tf.int64)
    for _ in range(2):
        x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, shift))
        x = tf.bitwise.bitwise_and(x * 0x45D9F3B, _MASK32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, shift))


def uniform_noise(seed: int, ids, step, tokens):
    """Uniform draws in (0, 1), (R, K) float32, one per (seed, ids (R,), step, tokens (R,
    K)): a hash of the four, so that a draw does not depend on which batch, row or stream
    decodes the sentence, nor on the draws before it."""
    h = _mix(tf.constant(seed & _MASK32, tf.int64))
    h = _mix(tf.bitwise.bitwise_xor(h, tf.cast(ids, tf.int64)))[:, None]
    h = _mix(tf.bitwise.bitwise_xor(h, tf.cast(step, tf.int64)))
    h = _mix(tf.bitwise.bitwise_xor(h, tf.cast(tokens, tf.int64)))
    top24 = tf.bitwise.right_shift(h, tf.constant(8, tf.int64))
    return (tf.cast(top24, tf.float32) + 0.5) / float(1 << 24)


class Sampling:
    """Random sampling of the next token (back-translation's decoding): the logits are
    divided by ``temperature``; ``topk`` > 0 keeps the k most probable tokens (0: the
    whole vocabulary); ``topp`` < 1 then keeps the smallest set of the most probable ones
    whose probability, renormalized over what top-k kept, reaches ``topp``, every token
    as probable as the last one kept included (ties). <PAD> and <S> are never drawn. A
    token is drawn from what is kept in proportion to its probability by the Gumbel-max
    trick: the argmax of the logits plus Gumbel noise -log(-log(u)), u from
    :func:`uniform_noise` keyed on ``seed``, the sentence's draw id, the step and the
    token, so that the same seed gives the same samples whatever the batches and the
    number of streams. CTranslate2's ``sampling_topk``, ``sampling_topp`` and
    ``sampling_temperature``; with topk 1 it is greedy decoding."""

    def __init__(self, topk: int = 0, topp: float = 1.0, temperature: float = 1.0, seed=0):
        self.topk, self.topp, self.temperature, self.seed = topk, topp, temperature, seed

    def candidates(self, logits):
        """(scores (R, K) float32: the tempered logits of the K candidates, -inf where
        top-p drops one; their tokens (R, K) int32), most probable first where top-k or
        top-p sorted them."""
        z = tf.cast(logits, tf.float32) / self.temperature
        # never <PAD> or <S>: a model trained with label smoothing gives them a little mass
        never = tf.one_hot(data_load.PAD_ID, tf.shape(z)[1], on_value=np.inf)
        never += tf.one_hot(data_load.BOS_ID, tf.shape(z)[1], on_value=np.inf)
        z = z - never
        if self.topk <= 0 and self.topp >= 1.0:
            tokens = tf.broadcast_to(tf.range(tf.shape(z)[1]), tf.shape(z))
            return z, tokens
        k = self.topk if self.topk > 0 else tf.shape(z)[1]
        z, tokens = tf.math.top_k(z, k=k)  # the lower id first among equals
        if self.topp < 1.0:
            z = tf.where(top_p_mask(tf.nn.softmax(z), self.topp), z, -np.inf)
        return z, tokens

    def __call__(self, logits, step, ids):
        z, tokens = self.candidates(logits)
        u = uniform_noise(self.seed, ids, step, tokens)
        pick = tf.argmax(z - tf.math.log(-tf.math.log(u)), axis=-1, output_type=tf.int32)
        return tf.gather(tokens, pick, batch_dims=1)


def top_p_mask(probs, topp: float):
    """(R, K) bool over probabilities sorted in descending order (R, K): the smallest
    leading set whose mass reaches ``topp``, and every later entry equal to its last."""
    keep = tf.math.cumsum(probs, axis=-1, exclusive=True) < topp
    last = tf.reduce_min(tf.where(keep, probs, np.inf), axis=-1, keepdims=True)
    return tf.logical_or(keep, probs >= last)


def greedy_loop(
    model,
    src,
    extra,
    max_len: int = 0,
    encoded=None,
    context=None,
    strategy=argmax,
    ids=None,
    prefix: Prefix | None = None,
):
    """Autoregressive decoding of src (N, T1) -> (N, L) ids, PAD after </S>, one
    hypothesis per sentence, each next token picked by ``strategy`` (:func:`argmax`:
    greedy decoding, section 6.1 without the beam; :class:`Sampling`).

    Encodes once, computes the cross-attention keys/values once, and appends one
    position per step to the self-attention cache. A sentence stops at </S> or after
    ``its source length + extra`` tokens, and leaves the batch at once: the later steps
    compute (and copy the caches of) the sentences still running only, so that one long
    or runaway sentence does not keep the whole batch busy. The loop ends when every
    sentence has stopped. Meant to run inside a tf.function (``model`` needs encode /
    init_cache / decode_step / select_rows / cache_shapes). ``encoded``: src's (memory,
    mask) when the caller encoded it (in its document's context); ``context``: the
    decoder's memory of earlier target sentences (Transformer.init_cache). ``ids`` (N,)
    int32: each sentence's draw id, which a sampling strategy keys its noise on (default:
    its row). ``prefix``: a :class:`Prefix` each sentence is forced through first.
    """
    memory, mask = model.encode(src) if encoded is None else encoded
    n = tf.shape(src)[0]
    limits, longest = decode_budgets(model, src, extra, max_len, prefix)
    if ids is None and strategy is not argmax:
        ids = tf.range(n)
    cache = init_cache(model, memory, mask, context)
    rows = tf.range(n)  # the batch row of each sentence still running
    tokens = tf.fill((n,), data_load.BOS_ID)
    out = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None])

    def cond(i, rows, tokens, limits, out, cache):
        return tf.logical_and(i < longest, tf.size(rows) > 0)

    def body(i, rows, tokens, limits, out, cache):
        logits, cache = model.decode_step(tokens, cache)
        nxt = strategy(logits, i, rows if ids is None else tf.gather(ids, rows))
        if prefix is not None:
            inside, forced = prefix.forced(i, rows)
            nxt = tf.where(inside, forced, nxt)
        out = out.write(i, tf.scatter_nd(rows[:, None], nxt, [n]))  # PAD for stopped rows
        going = tf.logical_and(tf.not_equal(nxt, data_load.EOS_ID), i + 1 < limits)

        def drop_stopped():
            keep = tf.cast(tf.where(going)[:, 0], tf.int32)
            picked = [tf.gather(x, keep) for x in (rows, nxt, limits)]
            return (*picked, model.select_rows(cache, keep))

        state = (rows, nxt, limits, cache)
        state = tf.cond(tf.reduce_all(going), lambda: state, drop_stopped)
        return (i + 1, *state[:3], out, state[3])

    free = tf.TensorShape([None])
    shapes = (tf.TensorShape([]), free, free, free, tf.TensorShape(None), model.cache_shapes(cache))
    loop_vars = (tf.constant(0), rows, tokens, limits, out, cache)
    i, *_, out, _ = tf.while_loop(cond, body, loop_vars, shape_invariants=shapes)
    # (i, N) -> (N, i) by index: oneDNN logs an error line for a tf.transpose of integers
    flat = tf.reshape(out.stack(), [-1])
    return tf.gather(flat, tf.range(i)[None, :] * n + tf.range(n)[:, None])


def decoder_signature(sampling: bool = False, prefix: bool = False) -> list:
    """The input signature of a compiled decoder: src (N, T1) int32, extra int32; with
    ``sampling``, the draw ids (N,) int32; with ``prefix``, a :class:`Prefix`."""
    spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
    if sampling:
        spec.append(tf.TensorSpec([None], tf.int32))
    return spec + (Prefix.spec() if prefix else [])


def greedy_decoder(model, max_len: int = 0, strategy=argmax, prefix: bool = False, kernels=None):
    """A compiled ``fn(src (N, T1) int32, extra scalar int32[, ids (N,) int32 where
    ``strategy`` samples][, prefix tokens (N, P) int32, prefix lengths (N,) int32]) ->
    (N, L) int32`` (:func:`greedy_loop`).

    A tf.function graph, without XLA: the batch shrinks and the caches grow from step to
    step, which XLA's static shapes do not allow (the earlier XLA loop over fixed-size
    buffers decoded 3x slower on CPU: each new source shape compiled a program). Traced
    without autograph: the loop is an explicit tf.while_loop and the layers branch only
    on Python values, so there is nothing to convert, and the trace takes half the time
    (the wait before the first translation). ``kernels``: a fast_ops.Kernels (this
    machine's decoding kernels by default)."""
    sampling = strategy is not argmax

    def decode(src, extra, *args):
        ids = args[0] if sampling else None
        forced = Prefix(*args[-2:]) if prefix else None
        return greedy_loop(model, src, extra, max_len, strategy=strategy, ids=ids, prefix=forced)

    spec = decoder_signature(sampling, prefix)
    return fast_ops.decoding_function(decode, kernels, input_signature=spec)


def naive_greedy(model, src, max_len: int, limits=None, encoded=None, context=None):
    """Reference decoder of the original code: re-runs the full decoder over the whole
    prefix at every step, for max_len steps, without early stopping. (N, max_len) ids.
    ``limits`` (N,), if given, PADs each row past its own budget (as the cached loop);
    ``encoded`` and ``context`` (the decoder's, as Transformer.decode takes it) as in
    :func:`greedy_loop`."""
    memory, mask = model.encode(src) if encoded is None else encoded
    out = np.full((src.shape[0], max_len + 1), data_load.PAD_ID, np.int32)
    out[:, 0] = data_load.BOS_ID
    for t in range(max_len):
        hidden = model.decode(tf.constant(out[:, : t + 1]), memory, mask, context=context)
        logits = model.logits(hidden)
        out[:, t + 1] = tf.argmax(logits[:, -1], axis=-1).numpy()
    result = out[:, 1:]
    # PAD everything after the first </S>, as the cached decoder does
    ended = np.cumsum(result == data_load.EOS_ID, axis=1) - (result == data_load.EOS_ID) > 0
    result[ended] = data_load.PAD_ID
    if limits is not None:
        result[np.arange(max_len)[None, :] >= np.asarray(limits)[:, None]] = data_load.PAD_ID
    return result
