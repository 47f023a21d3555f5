"""Decoding documents in order for a model with document memory (Transformer-XL's
evaluation, a sentence as the segment): the compiled decoder that takes a lane's context,
the encoder of a lane's window, and :class:`Lanes`, the documents decoded side by side;
and :func:`document_loop`, one document's sentences in one tf.while_loop, for the
SavedModel (export.py), which holds no Python to drive the lanes."""

from __future__ import annotations

import sys

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from transformer_tf2.data import data_load
from transformer_tf2.decoding.beam_search import beam_loop
from transformer_tf2.decoding.greedy_search import greedy_loop, source_limit
from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers import recurrence


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
            # all k exact: translate.py's --n_best reads up to k of a document's sentences
            out = beam_loop(
                model, src, extra, beam_size, alpha, max_len, encoded, context, n_best=beam_size
            )
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


class DocumentTranslation:
    """Documents translated in order by a model with document memory (``memory_sentences``,
    ``target_memory_sentences``): each a lane of :class:`Lanes`, its earlier sentences'
    encoder states and its own earlier translations' decoder states reused. ``k``: the
    beam size (1: greedy); ``multiple``: what sources are padded to a multiple of;
    ``chunk``: the sentences of a lane (see :meth:`translate`)."""

    def __init__(self, model, hp, k: int, multiple: int, chunk: int | None):
        self.model, self.k, self.multiple, self.chunk = model, k, multiple, chunk
        self.batch_size = hp.eval_batch_size
        self.memory, self.targets = model.memory_sentences, model.target_memory_sentences
        self.depth = model.num_blocks * self.memory  # what a sentence's context reads
        self.decode = document_decoder(model, k, hp.length_penalty, hp.max_len)
        self.window = window_encoder(model)

    def translate(self, src_ids: list, progress: bool, docs, run) -> list:
        """Translator.translate_ids for a model with memory. ``run(fn, batch, *args)``:
        the Translator's run of a decoding function on a batch, ((ids (N, k, L), scores
        (N, k)), the batch's states, its translations' states). Documents are
        :class:`Lanes`, cut into pieces of ``self.chunk`` sentences (0: whole; None: at
        least 2 L M sentences and enough pieces to fill a batch). With a decoder memory,
        which reads the lane's own translations, documents stay whole, and ``chunk`` = 1
        recomputes every sentence's context (sources and own translations) as training
        does. An empty source is encoded as </S> alone (as a training context holds it)
        and gives None; its translation is empty (<S> alone)."""
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
            chunk = max(2 * depth, -(-len(seqs) // self.batch_size))
        runs, size = document_runs(docs), self.batch_size
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
                self.recompute_windows(active if recompute else inside, seqs, translations)
            idx = [lane[0][lane[1]] for lane in active]
            batch = data_load.pad_batch([seqs[i] for i in idx], self.multiple)
            windows = [
                *Lanes.context(active, layers, d_model),
                *Lanes.context(active, layers, d_model, 4),
            ]
            (ids, scores), new, translated = run(self.decode, batch, *windows)
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

    def recompute_windows(self, lanes: list, seqs: list, translations: list) -> None:
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


def document_loop(model, src, best, to_text):
    """The rows of src (N, T), one document's sentences, translated in order in one
    tf.while_loop: ``best(sentence (1, T_i), (memory, mask), context) -> ids (1, L)``,
    ``to_text(ids) -> strings (1,)``;
    each sentence encoded with the window of each encoder layer's inputs for the last M
    (memory_sentences) sentences, and decoded with the window of each decoder layer's
    inputs for the last M_t (target_memory_sentences) translations (their <S> and tokens
    before </S>: :func:`translation_states`; an empty sentence's, <S> alone), each window
    after one masked column (:meth:`Lanes.context`'s layout for one lane).
    Returns the translations (N,)."""
    layers, d = model.num_blocks, model.d_model
    m, mt = model.memory_sentences, model.target_memory_sentences
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(src, data_load.PAD_ID), tf.int32), 1)
    first = tf.zeros((layers, 1, 1, d), model.compute_dtype)

    def context(window):
        states = tf.concat([first, window], axis=2)
        mask = tf.concat([[False], tf.ones([tf.shape(window)[2]], tf.bool)], 0)[None, None, None]
        return [(states[k], mask) for k in range(layers)]

    def slide(window, sizes, new, size):
        """The window without its oldest sentence's states, with ``new`` (L, 1, size, d)."""
        window = tf.concat([window[:, :, sizes[0] :], new[:, :, :size]], axis=2)
        return window, tf.reshape(tf.concat([sizes[1:], [size]], 0), tf.shape(sizes))

    def body(i, window, sizes, tgt_window, tgt_sizes, out):
        sentence = src[i : i + 1, : lengths[i]]
        inputs = []
        encoded = model.encode(
            sentence, context=context(window) if m else None, layer_inputs=inputs
        )
        tgt_context = context(tgt_window) if mt else None
        ids = best(sentence, encoded, tgt_context)
        out = out.write(i, to_text(ids)[0])
        if m:
            window, sizes = slide(window, sizes, tf.stack(inputs), lengths[i])
        if mt:
            states = translation_states(model, ids, encoded, tgt_context)
            stops = tf.logical_or(
                tf.equal(ids[0], data_load.EOS_ID), tf.equal(ids[0], data_load.PAD_ID)
            )
            fed = 1 + tf.reduce_min(tf.where(stops, tf.range(tf.shape(ids)[1]), tf.shape(ids)[1]))
            fed = tf.where(lengths[i] > 1, fed, 1)  # an empty line: <S> alone (as Translator)
            states = tf.cast(states, model.compute_dtype)
            tgt_window, tgt_sizes = slide(tgt_window, tgt_sizes, states, fed)
        return i + 1, window, sizes, tgt_window, tgt_sizes, out

    empty = tf.zeros((layers, 1, 0, d), model.compute_dtype)
    loop = (
        tf.constant(0),
        empty,
        tf.zeros([max(m, 1)], tf.int32),
        empty,
        tf.zeros([max(mt, 1)], tf.int32),
        tf.TensorArray(tf.string, size=tf.shape(src)[0]),
    )
    window = tf.TensorShape([layers, 1, None, d])
    shapes = (
        tf.TensorShape([]),
        window,
        tf.TensorShape([max(m, 1)]),
        window,
        tf.TensorShape([max(mt, 1)]),
        tf.TensorShape(None),
    )
    *_, out = tf.while_loop(lambda i, *_: i < tf.shape(src)[0], body, loop, shape_invariants=shapes)
    return out.stack()
