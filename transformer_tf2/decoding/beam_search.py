"""Beam search (Vaswani et al. 2017, 6.1; the length penalty of Wu et al. 2016, 7) in one
compiled loop, over the same model step as greedy_search.py's greedy loop."""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from transformer_tf2.data import data_load
from transformer_tf2.decoding.greedy_search import (
    Prefix,
    decode_budgets,
    decoder_signature,
    init_cache,
)
from transformer_tf2.kernels import fast_ops


def length_penalty(length, alpha: float):
    """((5 + |Y|) / 6) ^ alpha of Wu et al. 2016 (GNMT), |Y| counting </S>."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


NEG = -1e9  # the log-probability of an empty beam slot


class BeamState(NamedTuple):
    """The search state of :func:`beam_loop` over the R sentences still searching, each
    with k slots of hypotheses; the decoder computes the n live ones (not empty) only."""

    sentence: tf.Tensor  # (R,) int32: each one's row in src
    limits: tf.Tensor  # (R,) int32: its budget (steps)
    rows: tf.Tensor  # (n,) int32: each live hypothesis's slot r * k + j: the cache's rows
    tokens: tf.Tensor  # (n,) int32: each live hypothesis's last token
    alive_seq: tf.Tensor  # (R, k, L) int32: the alive hypotheses
    alive_logp: tf.Tensor  # (R, k) float32: their log-probabilities (NEG: an empty slot)
    fin_seq: tf.Tensor  # (R, k, L) int32: the finished hypotheses (ended by </S>)
    fin_score: tf.Tensor  # (R, k) float32: their scores, length-penalized (NEG: none)

    @staticmethod
    def shapes(k: int) -> BeamState:
        """The loop's shape invariants: the sentences leave, the buffers keep L."""
        free, seqs, scores = [tf.TensorShape(s) for s in ([None], [None, k, None], [None, k])]
        return BeamState(free, free, free, free, seqs, scores, seqs, scores)


def beam_loop(
    model,
    src,
    extra,
    beam_size: int,
    alpha: float = 0.6,
    max_len: int = 0,
    encoded=None,
    context=None,
    prefix: Prefix | None = None,
    n_best: int = 1,
):
    """Batched beam search (Vaswani et al. 7: k = 4, alpha = 0.6) in one tf.while_loop.

    src (N, T1) -> (ids (N, n_best, L) best first, PAD after </S>; scores (N, n_best)),
    where a score is the sum of token log-probabilities divided by the length penalty.
    At each step every alive hypothesis is extended by every token and the k best
    extensions are kept; those ending in </S> move to a separate finished set (scored
    with the length penalty at their own length), so a shorter finished hypothesis is
    never pushed out by longer, worse alive ones, and their slot stays empty, as does
    the slot of an alive hypothesis that can no longer beat the ``n_best``-th finished
    one (:func:`beam_step`). The decoder computes the live slots only: one per sentence
    at the first step (its k hypotheses are all <S>), then those neither empty nor
    beaten. A sentence stops once its ``n_best`` (1 <= n_best <= k) best are final
    (:func:`searching`) or after ``its source length + extra`` steps; they are then
    written out and its rows leave the batch, as in :func:`greedy_loop`. With k = 1
    this is exactly greedy decoding. ``model`` needs encode / init_cache / decode_step /
    select_rows / cache_shapes (model.Transformer's; where it reads the encoder's side
    of the cache in place, its ``memory_rows``, a sentence's hypotheses share one copy
    of it); ``encoded`` and ``context`` as in :func:`greedy_loop` (a document's context
    enters the encoder once per sentence). ``prefix``: a :class:`greedy_search.Prefix`
    each sentence's search is forced through first (one hypothesis, scored with the
    prefix tokens' log-probabilities), then searches freely.
    """
    k = beam_size
    if not 1 <= n_best <= k:
        raise ValueError(f"n_best must be in [1, beam_size={k}]; got {n_best}")
    memory, mask = model.encode(src) if encoded is None else encoded
    n = tf.shape(src)[0]
    limits, longest = decode_budgets(model, src, extra, max_len, prefix)
    cache = init_cache(model, memory, mask, context)  # one row per live hypothesis
    search = first_search(n, k, limits, longest)
    done = (tf.zeros((n, k, longest), tf.int32), tf.fill((n, k), NEG))  # the results

    def cond(i, search, done, cache):
        return tf.logical_and(i < longest, tf.size(search.sentence) > 0)

    def body(i, search, done, cache):
        logits, cache = model.decode_step(search.tokens, cache)
        forced = None
        if prefix is not None:
            forced = prefix.forced(i, tf.gather(search.sentence, search.rows // k))
        search, cache_rows = beam_step(i, logits, search, alpha, n_best, forced)
        still = searching(i + 1, search)  # (R,)
        all_still = tf.reduce_all(still)
        done = tf.cond(
            all_still,
            lambda: done,
            lambda: write_finished(i + 1, search, still, done, alpha),
        )
        search, cache_rows = tf.cond(
            all_still,
            lambda: (search, cache_rows),
            lambda: drop_sentences(search, cache_rows, still, k),
        )
        return i + 1, search, done, model.select_rows(cache, cache_rows)

    loop_vars = (tf.constant(0), search, done, cache)
    shapes = loop_shapes(model, k, done, cache)
    i, _, (seqs, scores), _ = tf.while_loop(cond, body, loop_vars, shape_invariants=shapes)
    return seqs[:, :n_best, :i], scores[:, :n_best]


def loop_shapes(model, k: int, done: tuple, cache) -> tuple:
    """The shape invariants of :func:`beam_loop`'s (step, search, done, cache): the batch
    shrinks, the self-attention keys grow, the results keep their shape."""
    done_shapes = (done[0].shape, done[1].shape)
    return tf.TensorShape([]), BeamState.shapes(k), done_shapes, model.cache_shapes(cache)


def first_search(n, k: int, limits, longest):
    """The :class:`BeamState` before the first step, for n sentences with budgets limits
    (n,) and buffers of ``longest`` tokens: each sentence's k hypotheses <S>, the first
    (log-probability 0) live, k - 1 empty slots, none finished."""
    return BeamState(
        tf.range(n),
        limits,
        tf.range(n) * k,
        tf.fill((n,), data_load.BOS_ID),
        tf.zeros((n, k, longest), tf.int32),
        tf.tile(tf.concat([[0.0], tf.fill([k - 1], NEG)], 0)[None], (n, 1)),
        tf.zeros((n, k, longest), tf.int32),
        tf.fill((n, k), NEG),
    )


def beam_step(i, logits, search: BeamState, alpha: float, n_best: int = 1, forced=None):
    """One step of :func:`beam_loop` for R sentences still searching: the logits (n, V)
    of their live hypotheses extend them (``forced``: see :func:`best_extensions`);
    returns the new :class:`BeamState` and, for each new live hypothesis, the row of the
    hypothesis it extends (n',), which its cache must follow. A new alive hypothesis
    that cannot beat its sentence's ``n_best``-th finished one, even at its longest
    (:func:`can_win`), leaves its slot empty: neither it nor what it would push out of
    the beam could, so the n_best best are those of the beam that keeps it."""
    alive_logp, fin_seq, fin_score = search.alive_logp, search.fin_seq, search.fin_score
    r, k = tf.shape(alive_logp)[0], alive_logp.shape[1]
    top_logp, beam, tok = best_extensions(logits, alive_logp, search.rows, forced)
    seq = tf.gather(search.alive_seq, beam, batch_dims=1)
    # position i of each (N, k, L) row becomes its token (a select, not keras'
    # slice_update: an XLA op that TensorFlow compiles and runs apart at every step)
    seq = tf.where(tf.equal(tf.range(tf.shape(seq)[2]), i), tok[:, :, None], seq)
    ended = tf.logical_or(tf.equal(tok, data_load.EOS_ID), top_logp <= NEG / 2)
    fin_seq, fin_score = merge_finished(fin_seq, fin_score, seq, tok, top_logp, i, alpha)
    # alive set: the extensions that did not end and can win; the others' slots are empty
    beaten = tf.logical_not(can_win(top_logp, search.limits, fin_score, alpha, n_best))
    alive_logp = tf.where(tf.logical_or(ended, beaten), NEG, top_logp)
    order = tf.argsort(alive_logp, axis=1, direction="DESCENDING", stable=True)
    alive_logp = tf.gather(alive_logp, order, batch_dims=1)
    alive_seq = tf.gather(seq, order, batch_dims=1)
    source_beam = tf.gather(beam, order, batch_dims=1)
    source_slots = tf.reshape(source_beam + (tf.range(r) * k)[:, None], (-1,))
    live = tf.cast(tf.where(tf.reshape(alive_logp, (-1,)) > NEG / 2)[:, 0], tf.int32)
    # the cache row of each slot of the step (of a live one: the others are never read)
    row_of_slot = tf.scatter_nd(search.rows[:, None], tf.range(tf.size(search.rows)), [r * k])
    cache_rows = tf.gather(row_of_slot, tf.gather(source_slots, live))
    tokens = tf.gather(tf.reshape(tf.gather(tok, order, batch_dims=1), (-1,)), live)
    # (every sentence here is within its budget: one leaves the search at its limit)
    state = search._replace(rows=live, tokens=tokens, alive_seq=alive_seq, alive_logp=alive_logp)
    return state._replace(fin_seq=fin_seq, fin_score=fin_score), cache_rows


def best_extensions(logits, alive_logp, rows, forced=None):
    """The k best extensions of each sentence's k alive hypotheses (log-probabilities
    alive_logp (R, k)) by one token, from the logits (n, V) of the live ones, in slots
    ``rows`` (n,) (an empty slot has none): (their log-probabilities, the hypothesis each
    extends, the token), each (R, k), best first. A hypothesis's own k best tokens hold
    every one of those, so the top-k runs over k * k candidates, the log-softmax over
    those alone: (z - max z) - log sum exp(z - max z), the arithmetic of
    tf.nn.log_softmax (one C++ kernel where the decoder's kernels hold the library).
    ``forced``: (inside (n,) bool, token (n,) int32) of a target prefix: a hypothesis
    inside its prefix has one extension, by the prefix's token, at its log-probability
    (:class:`greedy_search.Prefix`)."""
    r, k = tf.shape(alive_logp)[0], alive_logp.shape[1]
    lib = fast_ops.kernels().decode_lib
    if lib is not None and logits.dtype == tf.float32:
        row_logp, row_tok = lib.native_top_log_softmax(logits, k=k)  # (n, k)
    else:
        z_max = tf.reduce_max(logits, axis=-1, keepdims=True)
        log_sum = tf.math.log(tf.reduce_sum(tf.exp(logits - z_max), axis=-1, keepdims=True))
        row_z, row_tok = tf.math.top_k(logits, k=k)
        row_logp = (row_z - z_max) - log_sum
    if forced is not None:
        row_logp, row_tok = forced_extensions(logits, row_logp, row_tok, *forced)
    # each slot's k extensions, (R * k, k): an empty slot's at NEG + 0, behind every other
    row_logp = tf.scatter_nd(rows[:, None], row_logp, [r * k, k])
    row_tok = tf.scatter_nd(rows[:, None], row_tok, [r * k, k])
    cand = tf.reshape(alive_logp[:, :, None] + tf.reshape(row_logp, (r, k, k)), (r, k * k))
    top_logp, top_idx = tf.math.top_k(cand, k=k)
    tok = tf.gather(tf.reshape(row_tok, (r, k * k)), top_idx, batch_dims=1)
    return top_logp, top_idx // k, tok


def forced_extensions(logits, row_logp, row_tok, inside, token):
    """(row_logp, row_tok) (R * k, k) of :func:`best_extensions` where the rows
    ``inside`` their prefix have one extension, by ``token`` (R * k,), at its
    log-probability under ``logits`` (R * k, V), and k - 1 empty ones (NEG)."""
    z = tf.cast(logits, tf.float32)
    picked = tf.gather(z, token[:, None], batch_dims=1) - tf.reduce_logsumexp(z, -1, True)
    empty = tf.fill(tf.shape(row_logp) - [0, 1], NEG)
    one_logp = tf.concat([picked, empty], axis=1)
    one_tok = tf.concat([token[:, None], tf.zeros_like(row_tok[:, 1:])], axis=1)
    return (
        tf.where(inside[:, None], one_logp, row_logp),
        tf.where(inside[:, None], one_tok, row_tok),
    )


def can_win(logp, limits, fin_score, alpha: float, n_best: int):
    """(R, k) bool: whether each alive hypothesis (log-probabilities ``logp`` (R, k), NEG:
    an empty slot) can still beat its sentence's ``n_best``-th finished one (scores
    ``fin_score`` (R, k)), even at its longest (budget ``limits`` (R,)), where the length
    penalty divides the least: a later token only lowers its log-probability."""
    best_possible = logp / length_penalty(limits, alpha)[:, None]
    return tf.logical_and(logp > NEG / 2, best_possible > fin_score[:, n_best - 1 : n_best])


def searching(i, search: BeamState):
    """(R,) bool: which sentences search on at step i: one with a live hypothesis (one
    that can still beat its ``n_best``-th finished one: :func:`beam_step` empties the
    others' slots), within its budget. A finished hypothesis's score never changes and
    a later one only ties it at best (ties keep the earlier), so the n_best best stay as
    they are once none can."""
    return tf.logical_and(search.alive_logp[:, 0] > NEG / 2, i < search.limits)


def write_finished(i, search: BeamState, still, done: tuple, alpha: float) -> tuple:
    """``done`` (the results, (N, k, L) and (N, k)) with the k best of each sentence that
    stops searching after i steps (``still`` false) written into its row."""
    stop = tf.cast(tf.where(tf.logical_not(still))[:, 0], tf.int32)
    fields = ("limits", "alive_seq", "alive_logp", "fin_seq", "fin_score")
    picked = [tf.gather(getattr(search, f), stop) for f in fields]
    k = search.alive_logp.shape[1]
    seqs, scores = final_beams(i, picked[0], alpha, k, *picked[1:])
    rows = tf.gather(search.sentence, stop)[:, None]
    seqs = tf.pad(seqs, [[0, 0], [0, 0], [0, tf.shape(done[0])[2] - tf.shape(seqs)[2]]])
    return (
        tf.tensor_scatter_nd_update(done[0], rows, seqs),
        tf.tensor_scatter_nd_update(done[1], rows, scores),
    )


def drop_sentences(search: BeamState, cache_rows, still, k: int):
    """The search state of the sentences that search on (``still`` (R,)) only, and the
    cache rows (n',) of its live hypotheses among ``cache_rows``."""
    keep = tf.cast(tf.where(still)[:, 0], tf.int32)
    position = tf.cumsum(tf.cast(still, tf.int32), exclusive=True)  # each one's new row
    sentence = search.rows // k
    picked = tf.cast(tf.where(tf.gather(still, sentence))[:, 0], tf.int32)
    rows = tf.gather(position, tf.gather(sentence, picked)) * k + tf.gather(search.rows, picked) % k
    per_sentence = ("sentence", "limits", "alive_seq", "alive_logp", "fin_seq", "fin_score")
    kept = search._replace(**{f: tf.gather(getattr(search, f), keep) for f in per_sentence})
    kept = kept._replace(rows=rows, tokens=tf.gather(search.tokens, picked))
    return kept, tf.gather(cache_rows, picked)


def merge_finished(fin_seq, fin_score, seq, tok, top_logp, i, alpha: float):
    """The finished set of a beam step: the k best of the finished hypotheses (N, k, L)
    with scores (N, k) and the step's extensions seq (N, k, L) that end in </S> (tok
    (N, k), log-probabilities top_logp (N, k)), scored with the length penalty at their
    length i + 1. Returns (fin_seq, fin_score)."""
    k = fin_score.shape[1]
    new_score = tf.where(
        tf.logical_and(tf.equal(tok, data_load.EOS_ID), top_logp > NEG / 2),
        top_logp / length_penalty(i + 1, alpha),
        NEG,
    )
    all_score = tf.concat([fin_score, new_score], axis=1)
    all_seq = tf.concat([fin_seq, seq], axis=1)
    fin_score, keep = tf.math.top_k(all_score, k=k)
    return tf.gather(all_seq, keep, batch_dims=1), fin_score


def final_beams(i, limits, alpha: float, k: int, alive_seq, alive_logp, fin_seq, fin_score):
    """The k best of a beam search that ran i steps (:func:`beam_loop`): (ids (N, k, i),
    PAD after </S>; scores (N, k)). Sentences with fewer than k finished hypotheses are
    completed from the alive (unfinished) ones, which always rank after every finished
    hypothesis, each scored at its length (at most its sentence's limit)."""
    alive_len = tf.minimum(i, limits)[:, None]
    alive_score = tf.where(alive_logp > NEG / 2, alive_logp / length_penalty(alive_len, alpha), NEG)
    all_score = tf.concat([fin_score, alive_score], axis=1)
    rank = tf.concat(
        [fin_score, tf.where(alive_score > NEG / 2, alive_score + NEG / 4, NEG)], axis=1
    )
    all_seq = tf.concat([fin_seq, alive_seq], axis=1)
    _, keep = tf.math.top_k(rank, k=k)
    scores = tf.gather(all_score, keep, batch_dims=1)
    seqs = tf.gather(all_seq, keep, batch_dims=1)[:, :, :i]
    # PAD everything after the first </S>
    after = (
        tf.cumsum(tf.cast(tf.equal(seqs, data_load.EOS_ID), tf.int32), axis=-1, exclusive=True) > 0
    )
    return tf.where(after, data_load.PAD_ID, seqs), scores


def beam_decoder(
    model,
    beam_size: int,
    alpha: float = 0.6,
    max_len: int = 0,
    prefix: bool = False,
    kernels=None,
    n_best: int = 1,
):
    """A compiled ``fn(src (N, T1) int32, extra int32[, prefix tokens (N, P) int32, prefix
    lengths (N,) int32]) -> (ids (N, n_best, L), scores (N, n_best))`` (:func:`beam_loop`):
    the beam's n_best best hypotheses, best first.

    A tf.function graph, without XLA, as the greedy loop (greedy_search.greedy_decoder):
    the live hypotheses, the sentences and the caches change size from step to step,
    which XLA's static shapes do not allow. Traced without autograph, as the greedy loop.
    ``kernels``: a fast_ops.Kernels (this machine's decoding kernels by default).
    """

    def decode(src, extra, *forced):
        forced = Prefix(*forced) if prefix else None
        return beam_loop(model, src, extra, beam_size, alpha, max_len, prefix=forced, n_best=n_best)

    spec = decoder_signature(prefix=prefix)
    return fast_ops.decoding_function(decode, kernels, input_signature=spec)
