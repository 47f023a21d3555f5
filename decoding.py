"""Decoding: the greedy and beam-search loops, the Translator that batches them, loading a
trained run (its checkpoints are checkpoints.py's), and the BLEU figures of its
translations. Used by train.py (dev BLEU),
eval.py, translate.py, export.py and average_checkpoints.py.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import sacrebleu
import tensorflow as tf
from tqdm import tqdm

import checkpoints
import data_load
import devices
import fast_ops
import hparams
import recurrence
from hparams import UserError
from model import Transformer


# ---------------------------------------------------------------------------------------
# Decoding loops (compiled)
# ---------------------------------------------------------------------------------------
def max_decode_len(model, src_len, extra, max_len: int = 0):
    """Decoding budget: source length + extra, capped by ``max_len`` (if > 0) and by the
    position family's longest length (a learned table's rows)."""
    limit = src_len + extra
    if max_len > 0:
        limit = tf.minimum(limit, max_len)
    if model.max_length is not None:
        limit = tf.minimum(limit, model.max_length)
    return limit


def stream_count(hp: hparams.Hparams) -> int:
    """Batches decoded at once: ``hp.decode_streams``, or where it is 0 one per CPU core
    this process may use on a CPU-only machine and 1 with a GPU."""
    if hp.decode_streams > 0:
        return hp.decode_streams
    if tf.config.list_physical_devices("GPU"):
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def one_thread_per_stream(hp: hparams.Hparams, sentences: int | None = None) -> int:
    """Gives each decoding stream one thread, the fastest layout on a CPU (several
    batches at once, 1 intra-op thread each: docs/performance.md, "Decoding speed"), and
    returns the number of streams. Call it before TensorFlow runs its first op (eval.py
    and translate.py do, before loading the run); once TensorFlow has started, or with a
    GPU, or with one stream, the threads stay as they are. ``sentences``: how many will be
    decoded, where known; fewer batches of ``eval_batch_size`` than streams keep
    TensorFlow's threads (a batch alone decodes faster on every core)."""
    streams = stream_count(hp)
    if sentences is not None:
        streams = min(streams, max(1, -(-sentences // hp.eval_batch_size)))
    if streams > 1 and not tf.config.list_physical_devices("GPU"):
        try:
            tf.config.threading.set_intra_op_parallelism_threads(1)
            tf.config.threading.set_inter_op_parallelism_threads(streams)
        except RuntimeError:  # TensorFlow is already running: its thread pools are fixed
            pass
    return streams


def source_limit(model) -> int:
    """Longest source (</S> included) decoded; longer ones are cut: the position family's
    longest length (a learned table's size), else 1024 tokens (far beyond any training
    sentence)."""
    return 1024 if model.max_length is None else model.max_length


def decode_budgets(model, src, extra, max_len: int = 0):
    """Per-sentence budgets (N,) from each source's own length (non-PAD tokens, </S>
    included), so that a sentence decodes the same whatever batch it is in; and their
    maximum, the length of the output buffers."""
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(src, data_load.PAD_ID), tf.int32), axis=1)
    limits = max_decode_len(model, lengths, extra, max_len)
    return limits, tf.reduce_max(limits)


def init_cache(model, memory, mask, context=None):
    """model.init_cache, with the decoder's memory ``context`` when there is one (a model
    without document memory need not take it)."""
    if context is None:
        return model.init_cache(memory, mask)
    return model.init_cache(memory, mask, context)


def greedy_loop(model, src, extra, max_len: int = 0, encoded=None, context=None):
    """Greedy autoregressive decoding of src (N, T1) -> (N, L) ids, PAD after </S>.

    Encodes once, computes the cross-attention keys/values once, and appends one
    position per step to the self-attention cache. A sentence stops at </S> or after
    ``its source length + extra`` tokens, and leaves the batch at once: the later steps
    compute (and copy the caches of) the sentences still running only, so that one long
    or runaway sentence does not keep the whole batch busy. The loop ends when every
    sentence has stopped. Meant to run inside a tf.function (``model`` needs encode /
    init_cache / decode_step / select_rows / cache_shapes). ``encoded``: src's (memory,
    mask) when the caller encoded it (in its document's context); ``context``: the
    decoder's memory of earlier target sentences (Transformer.init_cache).
    """
    memory, mask = model.encode(src) if encoded is None else encoded
    n = tf.shape(src)[0]
    limits, longest = decode_budgets(model, src, extra, max_len)
    cache = init_cache(model, memory, mask, context)
    rows = tf.range(n)  # the batch row of each sentence still running
    tokens = tf.fill((n,), data_load.BOS_ID)
    out = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None])

    def cond(i, rows, tokens, limits, out, cache):
        return tf.logical_and(i < longest, tf.size(rows) > 0)

    def body(i, rows, tokens, limits, out, cache):
        logits, cache = model.decode_step(tokens, cache)
        nxt = tf.argmax(logits, axis=-1, output_type=tf.int32)
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


def greedy_decoder(model, max_len: int = 0):
    """A compiled ``fn(src (N, T1) int32, extra scalar int32) -> (N, L) int32``.

    A tf.function graph, without XLA: the batch shrinks and the caches grow from step to
    step, which XLA's static shapes do not allow (the earlier XLA loop over fixed-size
    buffers decoded 3x slower on CPU: each new source shape compiled a program). Traced
    without autograph: the loop is an explicit tf.while_loop and the layers branch only
    on Python values, so there is nothing to convert, and the trace takes half the time
    (the wait before the first translation)."""
    spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
    return fast_ops.decoding_function(
        lambda src, extra: greedy_loop(model, src, extra, max_len), input_signature=spec
    )


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


def length_penalty(length, alpha: float):
    """((5 + |Y|) / 6) ^ alpha of Wu et al. 2016 (GNMT), |Y| counting </S>."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


NEG = -1e9  # the log-probability of an empty beam slot


def beam_loop(
    model,
    src,
    extra,
    beam_size: int,
    alpha: float = 0.6,
    max_len: int = 0,
    encoded=None,
    context=None,
):
    """Batched beam search (Vaswani et al. 7: k = 4, alpha = 0.6) in one tf.while_loop.

    src (N, T1) -> (ids (N, k, L) best first, PAD after </S>; scores (N, k)), where a
    score is the sum of token log-probabilities divided by the length penalty.
    At each step every alive hypothesis is extended by every token and the k best
    extensions are kept; those ending in </S> move to a separate finished set (scored
    with the length penalty at their own length), so a shorter finished hypothesis is
    never pushed out by longer, worse alive ones, and their slot stays empty. A
    sentence's search stops when no alive hypothesis can beat its k-th finished one,
    when none is alive, or after ``its source length + extra`` steps; its k best are
    then written out and its rows leave the batch, so that later steps compute (and
    reorder the caches of) the sentences still searching only, as in
    :func:`greedy_loop`. The first step, where a sentence's k hypotheses are all <S>,
    runs once per sentence, as do the encoder-side keys/values of the cache; both are
    then repeated for the k hypotheses. With k = 1 this is exactly greedy decoding.
    ``model`` needs
    encode / init_cache / decode_step / reorder_cache / select_rows; ``encoded`` and
    ``context`` as in :func:`greedy_loop` (a document's context enters the encoder once
    per sentence, and the beams share its output; the keys/values of the decoder's
    memory are computed once per sentence and never reordered).
    """
    k = beam_size
    memory, mask = model.encode(src) if encoded is None else encoded
    n = tf.shape(src)[0]
    limits, longest = decode_budgets(model, src, extra, max_len)
    cache = init_cache(model, memory, mask, context)  # N rows until the first step's end
    search = first_search(n, k, limits, longest)
    done = (tf.zeros((n, k, longest), tf.int32), tf.fill((n, k), NEG))  # the results

    def cond(i, search, done, cache):
        return tf.logical_and(i < longest, tf.size(search[0]) > 0)

    def body(i, search, done, cache):
        logits, cache = model.decode_step(search[2], cache)
        logits, cache = tf.cond(
            tf.equal(i, 0),
            lambda: hypotheses_of_first(model, logits, cache, k),
            lambda: (logits, cache),
        )
        search, source_rows = beam_step(i, logits, search, alpha)
        still = searching(i + 1, search, alpha)  # (R,)
        all_still = tf.reduce_all(still)
        done = tf.cond(
            all_still,
            lambda: done,
            lambda: write_finished(i + 1, search, still, done, alpha),
        )
        cache = model.reorder_cache(cache, source_rows)
        search, cache = tf.cond(
            all_still,
            lambda: (search, cache),
            lambda: drop_sentences(model, search, cache, still, k),
        )
        return i + 1, search, done, cache

    free = tf.TensorShape([None])
    seqs, scores = tf.TensorShape([None, k, None]), tf.TensorShape([None, k])
    shapes = (
        tf.TensorShape([]),
        (free, free, free, seqs, scores, seqs, scores),
        (done[0].shape, done[1].shape),
        model.cache_shapes(cache),  # the batch shrinks, the self-attention keys grow
    )
    loop_vars = (tf.constant(0), search, done, cache)
    i, _, (seqs, scores), _ = tf.while_loop(cond, body, loop_vars, shape_invariants=shapes)
    return seqs[:, :, :i], scores


def first_search(n, k: int, limits, longest):
    """The search state of :func:`beam_loop` before its first step, for n sentences with
    budgets limits (n,) and buffers of ``longest`` tokens: (their index in src (n,),
    limits, each hypothesis's last token (<S>, one per sentence until the first step's
    end), alive hypotheses (n, k, longest) and their log-probabilities (n, k: 0 for <S>,
    NEG for the k - 1 empty slots), finished hypotheses (n, k, longest) and their scores
    (n, k), none yet)."""
    return (
        tf.range(n),
        limits,
        tf.fill((n,), data_load.BOS_ID),
        tf.zeros((n, k, longest), tf.int32),
        tf.tile(tf.concat([[0.0], tf.fill([k - 1], NEG)], 0)[None], (n, 1)),
        tf.zeros((n, k, longest), tf.int32),
        tf.fill((n, k), NEG),
    )


def hypotheses_of_first(model, logits, cache, k: int):
    """The first step's logits (N, V) and cache, of one row per sentence, as its k
    hypotheses' (N * k rows, each sentence's k together)."""
    rows = tf.repeat(tf.range(tf.shape(logits)[0]), k)
    return tf.gather(logits, rows), model.select_rows(cache, rows)


def beam_step(i, logits, search: tuple, alpha: float):
    """One step of :func:`beam_loop` for R sentences still searching: the logits (R * k,
    V) of their alive hypotheses extend them; returns the new search state and, for each
    new alive hypothesis, the row of the hypothesis it extends (R * k,), which its cache
    must follow."""
    sent, limits, _, alive_seq, alive_logp, fin_seq, fin_score = search
    r, k = tf.shape(alive_logp)[0], alive_logp.shape[1]
    top_logp, beam, tok = best_extensions(logits, alive_logp)
    seq = tf.gather(alive_seq, beam, batch_dims=1)
    # position i of each (N, k, L) row becomes its token (a select, not keras'
    # slice_update: an XLA op that TensorFlow compiles and runs apart at every step)
    seq = tf.where(tf.equal(tf.range(tf.shape(seq)[2]), i), tok[:, :, None], seq)
    ended = tf.logical_or(tf.equal(tok, data_load.EOS_ID), top_logp <= NEG / 2)
    fin_seq, fin_score = merge_finished(fin_seq, fin_score, seq, tok, top_logp, i, alpha)
    # alive set: the extensions that did not end; ended slots become empty
    alive_logp = tf.where(ended, NEG, top_logp)
    order = tf.argsort(alive_logp, axis=1, direction="DESCENDING", stable=True)
    alive_logp = tf.gather(alive_logp, order, batch_dims=1)
    alive_seq = tf.gather(seq, order, batch_dims=1)
    tokens = tf.reshape(tf.gather(tok, order, batch_dims=1), (-1,))
    source_beam = tf.gather(beam, order, batch_dims=1)
    source_rows = tf.reshape(source_beam + (tf.range(r) * k)[:, None], (-1,))
    # (every sentence here is within its budget: one leaves the search at its limit)
    return (sent, limits, tokens, alive_seq, alive_logp, fin_seq, fin_score), source_rows


def best_extensions(logits, alive_logp):
    """The k best extensions of each sentence's k alive hypotheses (log-probabilities
    alive_logp (R, k)) by one token, from the logits (R * k, V): (their log-probabilities,
    the hypothesis each extends, the token), each (R, k), best first. A hypothesis's own
    k best tokens hold every one of those, so the top-k runs over k * k candidates, the
    log-softmax over those alone: (z - max z) - log sum exp(z - max z), the arithmetic of
    tf.nn.log_softmax (one C++ kernel where fast_ops.decode_kernels() gives it)."""
    r, k = tf.shape(alive_logp)[0], alive_logp.shape[1]
    lib = fast_ops.decode_kernels()
    if lib is not None and logits.dtype == tf.float32:
        row_logp, row_tok = lib.native_top_log_softmax(logits, k=k)  # (R * k, k)
    else:
        z_max = tf.reduce_max(logits, axis=-1, keepdims=True)
        log_sum = tf.math.log(tf.reduce_sum(tf.exp(logits - z_max), axis=-1, keepdims=True))
        row_z, row_tok = tf.math.top_k(logits, k=k)
        row_logp = (row_z - z_max) - log_sum
    cand = tf.reshape(alive_logp[:, :, None] + tf.reshape(row_logp, (r, k, k)), (r, k * k))
    top_logp, top_idx = tf.math.top_k(cand, k=k)
    tok = tf.gather(tf.reshape(row_tok, (r, k * k)), top_idx, batch_dims=1)
    return top_logp, top_idx // k, tok


def searching(i, search: tuple, alpha: float):
    """(R,) bool: which sentences search on at step i: one with an alive hypothesis that
    can still beat its k-th finished one (even at its longest, where the length penalty
    divides the least), within its budget."""
    _, limits, _, _, alive_logp, _, fin_score = search
    best_possible = alive_logp[:, 0] / length_penalty(limits, alpha)
    open_ = tf.logical_and(alive_logp[:, 0] > NEG / 2, best_possible > fin_score[:, -1])
    return tf.logical_and(open_, i < limits)


def write_finished(i, search: tuple, still, done: tuple, alpha: float) -> tuple:
    """``done`` (the results, (N, k, L) and (N, k)) with the k best of each sentence that
    stops searching after i steps (``still`` false) written into its row."""
    sent, limits, _, alive_seq, alive_logp, fin_seq, fin_score = search
    stop = tf.cast(tf.where(tf.logical_not(still))[:, 0], tf.int32)
    picked = [tf.gather(t, stop) for t in (limits, alive_seq, alive_logp, fin_seq, fin_score)]
    k = alive_logp.shape[1]
    seqs, scores = final_beams(i, picked[0], alpha, k, *picked[1:])
    rows = tf.gather(sent, stop)[:, None]
    seqs = tf.pad(seqs, [[0, 0], [0, 0], [0, tf.shape(done[0])[2] - tf.shape(seqs)[2]]])
    return (
        tf.tensor_scatter_nd_update(done[0], rows, seqs),
        tf.tensor_scatter_nd_update(done[1], rows, scores),
    )


def drop_sentences(model, search: tuple, cache, still, k: int):
    """The search state and the cache of the sentences that search on (``still``) only."""
    keep = tf.cast(tf.where(still)[:, 0], tf.int32)
    rows = tf.reshape(keep[:, None] * k + tf.range(k)[None, :], (-1,))
    sent, limits, tokens, *state = search
    kept = [tf.gather(t, keep) for t in (sent, limits, *state)]
    return (*kept[:2], tf.gather(tokens, rows), *kept[2:]), model.select_rows(cache, rows)


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


def beam_decoder(model, beam_size: int, alpha: float = 0.6, max_len: int = 0):
    """A compiled ``fn(src (N, T1) int32, extra int32) -> (ids (N, k, L), scores (N, k))``.

    A tf.function graph; unlike the greedy loop it is not XLA-compiled: with its
    data-dependent buffer sizes, XLA on CPU (TF 2.21) crashed on it. Traced without
    autograph, as the greedy loop.
    """
    spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
    return fast_ops.decoding_function(
        lambda src, extra: beam_loop(model, src, extra, beam_size, alpha, max_len),
        input_signature=spec,
    )


def document_decoder(model, beam_size: int = 1, alpha: float = 0.6, max_len: int = 0):
    """For a model with document memory: a compiled ``fn(src (N, T1) int32, extra int32,
    states (L, N, T_m, d_model) float32, mask (N, T_m) bool, tgt_states (L, N, T_e,
    d_model) float32, tgt_mask (N, T_e) bool) -> (what :func:`greedy_decoder` or
    :func:`beam_decoder` returns, src's states (L, N, T1, d_model) float32, its
    translation's states (L, N, T_t, d_model) float32)``.

    With ``memory_sentences``, each encoder layer l attends also to ``states[l]``, its
    inputs for the earlier sentences of each row's document (left-padded: real where
    ``mask``); with ``target_memory_sentences``, each decoder layer l attends also to
    ``tgt_states[l]``, its inputs for the earlier sentences' translations. The states
    returned are what later sentences keep: src's encoder layer inputs
    (Transformer.encode's ``layer_inputs``, from the same pass: Transformer-XL's reuse,
    nothing recomputed), and the decoder layer inputs of <S> and the best translation's
    tokens before </S> (:func:`translation_states`, one teacher-forced pass; none
    without a target memory). The context enters the encoder once per sentence; the
    beams share its output."""

    def decode(src, extra, states, mask, tgt_states, tgt_mask):
        encoded, inputs = encode_in_window(model, src, states, mask)
        context = (
            window_context(model, tgt_states, tgt_mask) if model.target_memory_sentences else None
        )
        if beam_size > 1:
            out = beam_loop(model, src, extra, beam_size, alpha, max_len, encoded, context)
            best = out[0][:, 0]
        else:
            out = best = greedy_loop(model, src, extra, max_len, encoded, context)
        if model.target_memory_sentences:
            translated = translation_states(model, best, encoded, context)
        else:
            translated = tf.zeros((model.num_blocks, tf.shape(src)[0], 0, model.d_model))
        return out, inputs, translated

    return fast_ops.decoding_function(decode, input_signature=document_spec(model))


def translation_states(model, ids, encoded, context):
    """The decoder layer inputs (L, N, 1 + T, d_model) float32 of the translations ids
    (N, T) (PAD after </S>) fed after <S>, </S> left out, as a training pair's context
    holds its reference (data_load.context_batch): what a later sentence's decoder memory
    keeps of this one, from one teacher-forced pass under the same ``encoded`` source and
    ``context`` (recurrence.target_states)."""
    fed = tf.where(tf.equal(ids, data_load.EOS_ID), data_load.PAD_ID, ids)
    tgt_in = tf.concat([tf.fill((tf.shape(ids)[0], 1), data_load.BOS_ID), fed], axis=1)
    states, _ = recurrence.target_states(model, tgt_in, encoded, context)
    return tf.cast(tf.stack(states), tf.float32)


def document_spec(model) -> list:
    """The input signature of :func:`document_decoder`'s function."""
    window = tf.TensorSpec([model.num_blocks, None, None, model.d_model], tf.float32)
    mask = tf.TensorSpec([None, None], tf.bool)
    return [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)] + [
        window,
        mask,
    ] * 2


def window_context(model, states, mask) -> list:
    """A lanes' window (states (L, N, T_m, d_model) float32, mask (N, T_m) bool) as the
    per-layer context a stack takes (Transformer.encode / decode ``context``)."""
    states = tf.cast(states, model.compute_dtype)
    return [(states[i], mask[:, None, None, :]) for i in range(model.num_blocks)]


def encode_in_window(model, src, states, mask):
    """src (N, T1) encoded with each layer l attending also to ``states[l]`` (N, T_m,
    d_model), real where ``mask`` (N, T_m) (a model without ``memory_sentences`` reads
    none): ((memory, key mask), src's layer inputs (L, N, T1, d_model) float32)."""
    context = window_context(model, states, mask) if model.memory_sentences else None
    inputs = []
    encoded = model.encode(src, context=context, layer_inputs=inputs)
    return encoded, tf.cast(tf.stack(inputs), tf.float32)


def documents_of_lines(lines: list[str]) -> np.ndarray:
    """(n,) document index of each line: a blank line ends a document and is one of its
    own, which no other sentence reads (an empty source gives an empty line)."""
    docs, doc = np.zeros(len(lines), np.int32), 0
    for i, line in enumerate(lines):
        blank = not line.strip()
        doc += blank  # a document of its own, the next one after it
        docs[i] = doc
        doc += blank
    return docs


def document_runs(docs) -> list[np.ndarray]:
    """The sentence indices of each document, in order: runs of equal ``docs`` values."""
    docs = np.asarray(docs)
    if not len(docs):
        return []
    starts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
    return np.split(np.arange(len(docs)), starts[1:])


def window_encoder(model):
    """For a model with document memory: a compiled ``fn(context (N, K, T_c) int32,
    context_tgt (N, K_t, T_t) int32) -> (states (M, L, N, T_c, d_model) float32, mask
    (M, N, T_c) bool, tgt_states (M_t, L, N, T_t, d_model) float32, tgt_mask (M_t, N,
    T_t) bool)``: the encoder-layer inputs of the last M of the K sentences and the
    decoder-layer inputs of the last M_t of their targets (K, K_t:
    Transformer.context_depths), each computed in order under the context of the ones
    before it, as training computes them (recurrence.document_windows): for a lane that
    starts inside a document, or that recomputes every sentence's context."""
    depth, target_depth = model.context_depths
    spec = [
        tf.TensorSpec([None, depth, None], tf.int32),
        tf.TensorSpec([None, target_depth, None], tf.int32),
    ]

    def stacked(window, n):
        if not window:
            shape = (0, model.num_blocks, n, 1, model.d_model)
            return tf.zeros(shape), tf.zeros(shape[:1] + shape[2:4], tf.bool)
        states = tf.stack([tf.cast(tf.stack(layers), tf.float32) for layers, _ in window])
        return states, tf.stack([mask[:, 0, 0] for _, mask in window])

    def window(context, context_tgt):
        enc, dec = recurrence.document_windows(
            model, context, context_tgt if target_depth else None
        )
        n = tf.shape(context)[0]
        return (*stacked(enc, n), *stacked(dec, n))

    return tf.function(window, input_signature=spec, autograph=False)


class Lanes:
    """Documents decoded side by side, one lane per document piece, each in its own order
    (Transformer-XL's evaluation, with a sentence as the segment): a round decodes the
    next sentence of every lane in one batch, and each lane keeps the encoder-layer
    inputs of its last ``sentences`` sentences, and the decoder-layer inputs of its last
    ``targets`` translations, as the context of its next one. A lane whose piece ends
    takes the next (longest first, so that the batch stays full).

    ``chunk`` > 0 cuts each document into pieces of that many sentences, so that a few
    long documents still fill a batch; a piece that starts inside its document needs the
    states of the sentences before it first (:func:`window_encoder`): ``chunk`` = 1
    recomputes the context of every sentence, as training does. (A decoder memory reads
    the lane's own earlier translations: its documents are not cut.)"""

    def __init__(self, runs: list, lanes: int, sentences: int, chunk: int = 0, targets: int = 0):
        pieces = [
            (run, start, min(start + (chunk or len(run)), len(run)))
            for run in runs
            for start in range(0, len(run), chunk or len(run))
        ]
        self.todo = sorted(pieces, key=lambda p: p[2] - p[1])  # pop() takes the longest
        self.size, self.sentences, self.targets = lanes, sentences, targets
        # [document's sentences, next position, end, window, translations' window]
        self.active: list[list] = []

    def next_round(self) -> tuple[list | None, list]:
        """(The lanes of the next round, refilled, or None when every piece is done;
        the new lanes that start inside their document, whose windows are empty yet)."""
        self.active = [lane for lane in self.active if lane[1] < lane[2]]
        inside = []
        while len(self.active) < self.size and self.todo:
            run, start, end = self.todo.pop()
            self.active.append([run, start, end, [], []])
            if start:
                inside.append(self.active[-1])
        return self.active or None, inside

    @staticmethod
    def context(lanes: list, layers: int, d_model: int, slot: int = 3):
        """The lanes' windows (``slot`` 3: the sources', 4: the translations') as (states
        (L, N, T_m, d_model), mask (N, T_m)), each row left-padded so that its last
        context token sits at position -1 (T_m >= 1: a round without context has one
        masked column)."""
        widths = [sum(s.shape[1] for s in lane[slot]) for lane in lanes]
        width = max([1] + widths)
        states = np.zeros((layers, len(lanes), width, d_model), np.float32)
        mask = np.zeros((len(lanes), width), bool)
        for r, (lane, w) in enumerate(zip(lanes, widths)):
            if w:
                states[:, r, width - w :] = np.concatenate(lane[slot], axis=1)
                mask[r, width - w :] = True
        return states, mask

    def advance(
        self, lanes: list, states: np.ndarray, lengths: list, translated=None, fed=None
    ) -> None:
        """Each lane keeps its sentence's states (L, T_r, d_model; real tokens only) and,
        with ``targets``, its translation's: ``translated`` (L, N, T_t, d_model), of
        which each row's first ``fed[r]`` positions are real; then moves to its next
        sentence."""
        for r, lane in enumerate(lanes):
            if self.sentences:
                lane[3] = (lane[3] + [states[:, r, : lengths[r]]])[-self.sentences :]
            if self.targets:
                lane[4] = (lane[4] + [translated[:, r, : fed[r]]])[-self.targets :]
            lane[1] += 1


# ---------------------------------------------------------------------------------------
# Batched translation, scores, loading a run
# ---------------------------------------------------------------------------------------
class Translator:
    """Batched translation with one compiled decoding loop: greedy, or beam search when
    ``hp.beam_size`` > 1. Used by train.py (dev BLEU), eval.py and translate.py.

    A model with ``key_mask_defect`` attends to padding, so its sources are padded as in
    training, to a multiple of ``pad_multiple``.

    A model with document memory (``memory_sentences``, ``target_memory_sentences``)
    translates documents (``docs``: the document index of each sentence; None: each
    sentence its own): each in order, as a lane of :class:`Lanes`, its earlier
    sentences' encoder states and its own earlier translations' decoder states reused.
    ``chunk``: the sentences of a lane (see :meth:`_translate_documents`).

    Args:
        model: a built :class:`model.Transformer`.
        tok: the run's data_load.Tokenizer (None: ids in and out, :meth:`translate_ids`).
        hp: the decoding settings: ``beam_size``, ``length_penalty`` (Wu et al. 2016's
            alpha), ``max_len_extra`` and ``max_len`` (each sentence stops at </S> or
            after its source length + max_len_extra tokens), ``eval_batch_size``
            (sentences per batch) and ``decode_streams`` (batches decoded at once).

    Example:

    >>> import hparams, decoding
    >>> from model import Transformer
    >>> sizes = {"d_model": 16, "num_heads": 4, "d_ff": 32, "num_blocks": 1}
    >>> hp = hparams.apply(hparams.Hparams(), {**sizes, "beam_size": 2, "max_len_extra": 5})
    >>> model = Transformer.from_hparams(hp, 24, 24)
    >>> translator = decoding.Translator(model, None, hp)
    >>> outs = translator.translate_ids([[5, 6, 7], [], [8, 9]])  # (no </S>)
    >>> outs[1] is None  # an empty source
    True
    >>> ids, scores = outs[0]  # the beam's 2 hypotheses, best first
    >>> ids.shape[0], scores.shape, bool(scores[0] >= scores[1])
    (2, (2,), True)

    References:
        Vaswani et al. 2017, "Attention Is All You Need": 6.1 (beam search of size 4,
        length penalty 0.6, at most 50 tokens beyond the source); Wu et al. 2016,
        section 7 (the length penalty).
    """

    def __init__(self, model, tok, hp: hparams.Hparams, chunk: int | None = None):
        self.model, self.tok, self.hp = model, tok, hp
        self.multiple = hp.pad_multiple if model.key_mask_defect else 1
        self.k = max(hp.beam_size, 1)
        self.streams = stream_count(hp)
        self.memory, self.chunk = model.memory_sentences, chunk
        self.targets = model.target_memory_sentences
        if model.reads_documents:
            self.depth = model.num_blocks * self.memory  # what a sentence's context reads
            self.decode_in_context = document_decoder(model, self.k, hp.length_penalty, hp.max_len)
            self.window = window_encoder(model)
        if self.k > 1:
            self.decode = beam_decoder(model, self.k, hp.length_penalty, hp.max_len)
        else:
            self.decode = greedy_decoder(model, hp.max_len)

    def _run(self, fn, batch, *args):
        """fn(batch, extra, *args), an out-of-memory error as one line."""
        extra = tf.constant(self.hp.max_len_extra, tf.int32)
        try:
            return fn(tf.constant(batch), extra, *args)
        except tf.errors.ResourceExhaustedError:
            raise UserError(
                f"out of memory decoding a batch of shape {batch.shape} (sentences x "
                f"source tokens; eval_batch_size={self.hp.eval_batch_size}, beam_size="
                f"{self.k}): lower --eval_batch_size"
            ) from None

    def _best(self, result, rows: int):
        """(ids (rows, k, L), scores (rows, k)) of a decoding function's result."""
        if self.k > 1:
            return result[0].numpy(), result[1].numpy()
        return result.numpy()[:, None], np.zeros((rows, 1), np.float32)

    def translate_ids(
        self, src_ids: list, progress: bool = False, width: int = 0, docs=None
    ) -> list:
        """Source id lists (no </S>) -> per sentence (ids (k, L), scores (k,)), best
        first, in the input order; an empty source gives None. Sources are cut to
        :func:`source_limit`; greedy scores are 0. ``width`` > 0 pads every source to
        that width and decodes empty sources too (from </S> alone), as the TF1 eval.py.
        ``docs``: see the class."""
        if self.model.reads_documents:
            return self._translate_documents(src_ids, progress, docs)
        out: list = [None] * len(src_ids)
        real = [i for i, s in enumerate(src_ids) if len(s) or width]
        batches = list(
            data_load.eval_batches(
                [src_ids[i] for i in real],
                self.hp.eval_batch_size,
                source_limit(self.model),
                self.multiple,
                width,
            )
        )
        for idx, (seqs, scores) in self._decode_batches(batches, progress):
            for row, i in enumerate(idx):
                out[real[i]] = (seqs[row], scores[row])
        return out

    def _decode_batches(self, batches: list, progress: bool):
        """(indices, (ids, scores)) of each batch, in order: ``self.streams`` batches at once,
        each on a thread of its own (TensorFlow releases the GIL while a graph runs), so
        that a batch's serial steps overlap another's; the outputs are those of one stream."""

        def one(item):
            idx, batch = item
            return idx, self._best(self._run(self.decode, batch), len(idx))

        bar = tqdm(batches, disable=not progress, file=sys.stderr, unit="batch")
        if self.streams == 1 or len(batches) <= 1:
            yield from map(one, bar)
            return
        with ThreadPoolExecutor(min(self.streams, len(batches))) as pool:
            for done in pool.map(one, batches):
                bar.update(1)
                yield done
        bar.close()

    def _translate_documents(self, src_ids: list, progress: bool, docs) -> list:
        """translate_ids for a model with memory: documents as :class:`Lanes`, cut into
        pieces of ``self.chunk`` sentences (0: whole; None: at least 2 L M sentences and
        enough pieces to fill a batch). With a decoder memory, which reads the lane's own
        translations, documents stay whole, and ``chunk`` = 1 recomputes every sentence's
        context (sources and own translations) as training does. An empty source is
        encoded as </S> alone (as a training context holds it) and gives None; its
        translation is empty (<S> alone)."""
        out: list = [None] * len(src_ids)
        limit = source_limit(self.model) - 1
        eos = np.array([data_load.EOS_ID], np.int32)
        seqs = [np.concatenate([np.asarray(s[:limit], np.int32), eos]) for s in src_ids]
        docs = np.arange(len(src_ids)) if docs is None else docs[: len(src_ids)]
        layers, d_model, depth = self.model.num_blocks, self.model.d_model, self.depth
        chunk, recompute = self.chunk, self.targets and self.chunk == 1
        if self.targets:
            chunk = 0
        elif chunk is None:
            chunk = max(2 * depth, -(-len(seqs) // self.hp.eval_batch_size))
        runs, size = document_runs(docs), self.hp.eval_batch_size
        lanes = Lanes(runs, size, self.memory, chunk, self.targets)
        bar = tqdm(total=len(src_ids), disable=not progress, file=sys.stderr, unit="sentence")
        # each sentence's translation as the decoder's memory reads it: the best
        # hypothesis's tokens before </S> (training's context holds the reference), none
        # for an empty line
        translations: list = [None] * len(src_ids)
        while True:
            active, inside = lanes.next_round()
            if active is None:
                break
            if recompute or inside:
                self._recompute_windows(active if recompute else inside, seqs, translations)
            idx = [lane[0][lane[1]] for lane in active]
            batch = data_load.pad_batch([seqs[i] for i in idx], self.multiple)
            windows = [
                *Lanes.context(active, layers, d_model),
                *Lanes.context(active, layers, d_model, 4),
            ]
            result, new, translated = self._run(self.decode_in_context, batch, *windows)
            ids, scores = self._best(result, len(idx))
            for row, i in enumerate(idx):
                best = ids[row][0]
                stops = np.flatnonzero(np.isin(best, (data_load.PAD_ID, data_load.EOS_ID)))
                translations[i] = best[: stops[0] if len(stops) else len(best)]
                if len(src_ids[i]):
                    out[i] = (ids[row], scores[row])
                else:
                    translations[i] = best[:0]
            fed = [1 + len(translations[i]) for i in idx]  # <S> and the tokens
            lengths = [len(seqs[i]) for i in idx]
            lanes.advance(active, new.numpy(), lengths, translated.numpy(), fed)
            bar.update(len(idx))
        bar.close()
        return out

    def _recompute_windows(self, lanes: list, seqs: list, translations: list) -> None:
        """The windows of ``lanes`` (that start inside their document, or every lane when
        the context of every sentence is recomputed) from the sentences before each, and
        for a decoder memory their ``translations``, all-PAD ones where the document has
        fewer, as training reads them (:func:`window_encoder`)."""
        (depth, target_depth), empty = self.model.context_depths, np.zeros(0, np.int32)
        bos = np.array([data_load.BOS_ID], np.int32)
        flat, flat_tgt = [], []
        for run, pos, *_ in lanes:
            before = [seqs[i] for i in run[max(0, pos - depth) : pos]]
            flat += [empty] * (depth - len(before)) + before
            if target_depth:
                own = [np.r_[bos, translations[i]] for i in run[max(0, pos - target_depth) : pos]]
                flat_tgt += [empty] * (target_depth - len(own)) + own
        # at least one column: every lane may be at its document's start
        width = max(1, *map(len, flat))
        context = data_load.pad_batch(flat, width=width).reshape(len(lanes), depth, -1)
        tgt = np.zeros((len(lanes), 0, 1), np.int32)
        if target_depth:
            width = max(1, *map(len, flat_tgt))
            tgt = data_load.pad_batch(flat_tgt, width=width).reshape(len(lanes), target_depth, -1)
        states, mask, tgt_states, tgt_mask = (
            x.numpy() for x in self.window(tf.constant(context), tf.constant(tgt))
        )
        for r, lane in enumerate(lanes):
            lane[3] = [states[j][:, r, :n] for j, n in enumerate(mask[:, r].sum(1)) if n]
            lane[4] = [tgt_states[j][:, r, :n] for j, n in enumerate(tgt_mask[:, r].sum(1)) if n]

    def translate_nbest(
        self,
        sentences: list[str],
        n: int = 1,
        progress: bool = False,
        src_ids: list | None = None,
        docs=None,
    ) -> list:
        """Per sentence the n best (translation, score) pairs; [] for an empty line.
        ``src_ids``, if given, are the sentences already encoded; ``docs`` as in the class."""
        if src_ids is None:
            src_ids = self.tok.encode_src(sentences)
        outs = self.translate_ids(src_ids, progress, docs=docs)
        return [
            [] if o is None else [(self.tok.decode_tgt(o[0][r]), float(o[1][r])) for r in range(n)]
            for o in outs
        ]

    def translate(self, sentences: list[str], docs=None) -> list[str]:
        """The best translation of each sentence; an empty line gives ''."""
        return self.translate_counted(sentences, docs)[0]

    def translate_counted(self, sentences: list[str], docs=None) -> tuple[list[str], list[int]]:
        """The best translation of each sentence, and the indices of the runaway ones:
        those that hit their length limit without producing </S>."""
        outs = self.translate_ids(self.tok.encode_src(sentences), docs=docs)
        hyps = ["" if o is None else self.tok.decode_tgt(o[0][0]) for o in outs]
        return hyps, runaways(outs)


def runaways(outs: list) -> list[int]:
    """Indices of :meth:`Translator.translate_ids` outputs whose best hypothesis has no
    </S>: it reached its length limit (a degenerate, repeating output, as a rule)."""
    return [i for i, o in enumerate(outs) if o is not None and data_load.EOS_ID not in o[0][0]]


def legacy_bleu(hyps: list[str], refs: list[str], clean_hyps: bool = True) -> float:
    """The TF1 eval.py BLEU: see eval.py's docstring. ``clean_hyps`` False keeps the
    hypotheses' words as they are (the TF1 protocol: ``<UNK>`` stays)."""
    list_of_refs, hypotheses = [], []
    for hyp, ref in zip(hyps, refs):
        r, h = data_load.clean(ref).split(), (data_load.clean(hyp) if clean_hyps else hyp).split()
        if len(r) > 3 and len(h) > 3:
            list_of_refs.append([r])
            hypotheses.append(h)
    if not hypotheses:
        return 0.0
    # imported here: nltk's package import takes 0.6 s (scipy), which translate.py skips
    from nltk.translate.bleu_score import corpus_bleu

    return 100 * corpus_bleu(list_of_refs, hypotheses)


def scores(hyps: list[str], refs: list[str]) -> dict:
    """Every figure of eval.py's docstring for detokenized hypotheses and references."""
    std = sacrebleu.metrics.BLEU()
    raw = sacrebleu.metrics.BLEU(tokenize="none")
    chrf = sacrebleu.metrics.CHRF()
    b = std.corpus_score(hyps, [refs])
    return {
        "legacy_bleu": legacy_bleu(hyps, refs),
        "sacrebleu": b.score,
        "sacrebleu_signature": str(std.get_signature()),
        "bleu_tokenize_none": raw.corpus_score(hyps, [refs]).score,
        "bleu_tokenize_none_signature": str(raw.get_signature()),
        "chrf": chrf.corpus_score(hyps, [refs]).score,
        "chrf_signature": str(chrf.get_signature()),
    }


def length_bucket_names(edges: tuple[int, ...]) -> list[str]:
    """Bucket names of ascending edges: (16, 24) -> ['<=16', '17-24', '>=25']."""
    lows = [1] + [e + 1 for e in edges]
    names = [f"{lo}-{hi}" for lo, hi in zip(lows[1:], edges[1:])]
    return [f"<={edges[0]}", *names, f">={edges[-1] + 1}"]


def bleu_by_length(
    hyps: list[str],
    refs: list[str],
    lengths: list[int],
    edges: tuple[int, ...],
    resamples: int = 1000,
    seed: int = 0,
) -> list[dict]:
    """sacreBLEU (as :func:`scores`) of each bucket of source length (``lengths``, in
    tokens; buckets from the ascending ``edges``, :func:`length_bucket_names`), with its
    sentence count and a 95% percentile bootstrap interval: ``resamples`` resamplings of
    the bucket's sentences with replacement (numpy seed ``seed``), each scored from the
    sentences' n-gram statistics. An empty bucket has a score and interval of None."""
    corpus = sacrebleu.metrics.BLEU()
    per_sentence = sacrebleu.metrics.BLEU(effective_order=True)  # its counts, not its scores
    stats = []
    for h, r in zip(hyps, refs):
        b = per_sentence.sentence_score(h, [r])
        stats.append([b.sys_len, b.ref_len, *b.counts, *b.totals])
    stats = np.array(stats, np.int64).reshape(-1, 10)
    bucket = np.searchsorted(np.asarray(edges), np.asarray(lengths), side="left")
    rng = np.random.default_rng(seed)

    def bleu(rows) -> float:
        total = rows.sum(0)
        return corpus.compute_bleu(
            total[2:6].tolist(),
            total[6:10].tolist(),
            int(total[0]),
            int(total[1]),
            smooth_method=corpus.smooth_method,
            smooth_value=corpus.smooth_value,
        ).score

    out = []
    for b, name in enumerate(length_bucket_names(tuple(edges))):
        rows = stats[bucket == b]
        entry = {"bucket": name, "sentences": len(rows), "sacrebleu": None, "ci95": None}
        if len(rows):
            draws = rng.integers(0, len(rows), size=(resamples, len(rows)))
            scores_ = [bleu(rows[d]) for d in draws]
            entry.update(
                sacrebleu=bleu(rows), ci95=[float(x) for x in np.percentile(scores_, [2.5, 97.5])]
            )
        out.append(entry)
    return out


# ---------------------------------------------------------------------------------------
# The TF1 eval.py protocol (eval.py --legacy_protocol true)
# ---------------------------------------------------------------------------------------
def legacy_subset(
    tok, sources: list[str], refs: list[str], hp: hparams.Hparams
) -> tuple[list[int], int]:
    """The pairs the TF1 eval.py scored: (their indices in file order, the number of pairs
    within maxlen). A pair is within maxlen when source and reference fit the training
    filter with </S> counted (tokens + 1 <= maxlen1 and maxlen2; TF1: max(len(x), len(y))
    <= maxlen); of those, whole batches of ``batch_size`` are scored (TF1 dropped the last
    partial batch)."""
    if hp.batch_size <= 0:
        raise UserError(
            "--legacy_protocol drops the last partial batch of batch_size sentences, but "
            "this run trained with token batches (batch_size 0); pass --legacy_protocol false"
        )
    src, tgt = tok.encode_src(sources), tok.encode_tgt(refs)
    within = [
        i
        for i in range(len(sources))
        if len(src[i]) + 1 <= hp.maxlen1 and len(tgt[i]) + 1 <= hp.maxlen2
    ]
    return within[: len(within) // hp.batch_size * hp.batch_size], len(within)


def legacy_words(tok, ids) -> list[str]:
    """A TF1 eval.py hypothesis: the target tokens before the first </S>, literally
    (``<UNK>``, and ``<PAD>`` or ``<S>`` should the model predict them); for a BPE
    vocabulary, the cleaned words of the detokenized text."""
    ids = [int(i) for i in ids]
    if data_load.EOS_ID in ids:
        ids = ids[: ids.index(data_load.EOS_ID)]
    if tok.kind == "bpe":
        return data_load.clean(tok.decode_tgt(ids)).split()
    return [tok.tgt_words[i] for i in ids]


def legacy_translate(
    model, tok, hp: hparams.Hparams, sources: list[str]
) -> tuple[list[str], list[int]]:
    """Hypotheses decoded as the TF1 eval.py did: greedy, for maxlen2 tokens, sources
    padded to maxlen1; each is its :func:`legacy_words` joined by spaces. Also the
    indices of the :func:`runaways`."""
    if hp.beam_size > 1:
        raise UserError("--legacy_protocol decodes greedily, as the TF1 eval.py: drop --beam_size")
    hp = hparams.apply(hp, {"max_len": hp.maxlen2, "max_len_extra": hp.maxlen2})
    outs = Translator(model, tok, hp).translate_ids(tok.encode_src(sources), width=hp.maxlen1)
    return [" ".join(legacy_words(tok, ids[0])) for ids, _ in outs], runaways(outs)


def load_run(logdir: str, overrides: dict, ckpt: str = "", who: str = "eval"):
    """Hparams, tokenizer and restored model of a training run.

    ``overrides`` may change decoding settings; changing the model's shape is an error.
    """
    saved = hparams.load(os.path.join(logdir, "hparams.json"))
    wanted = hparams.apply(saved, overrides)
    hparams.check_same(
        saved,
        wanted,
        hparams.MODEL_KEYS,
        f"the checkpoint in {logdir}",
        "evaluate with the settings it was trained with (drop those options)",
    )
    ignored = sorted(
        k for k in overrides if k not in hparams.DECODE_KEYS + hparams.MODEL_KEYS + ("logdir",)
    )
    if ignored:
        print(
            f"{who}: ignoring {', '.join('--' + k for k in ignored)}: the run's own "
            f"settings in {logdir}/hparams.json are used",
            file=sys.stderr,
        )
    decode = {k: v for k, v in overrides.items() if k in hparams.DECODE_KEYS}
    # float32 unless asked: a run trained in mixed precision saved that policy
    hp = hparams.apply(saved, {"precision": "float32", **decode, "logdir": logdir})
    tok = data_load.load_tokenizer(hp)
    data_load.check_vocab_fingerprint(hp)
    devices.setup_devices(hp, who)
    model = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
    path, why = checkpoints.choose_checkpoint(logdir, ckpt)
    checkpoints.restore_checkpoint(
        tf.train.Checkpoint(model=model), path, "was it trained with other hparams?"
    )
    print(f"{who}: model {path} ({why})", file=sys.stderr)
    return hp, tok, model, path
