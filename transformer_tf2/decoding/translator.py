"""The Translator: batches of sentences (or documents) decoded with one compiled loop,
several batches at once on a CPU (streams): greedy, beam search or sampling, an ensemble
of runs as one model, a forced target prefix per sentence, given translations scored, and
word alignments. Used by train.py (dev BLEU), eval.py and translate.py."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from transformer_tf2.config import hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.decoding import scoring
from transformer_tf2.decoding.beam_search import beam_decoder
from transformer_tf2.decoding.document_decoding import DocumentTranslation
from transformer_tf2.decoding.greedy_search import Sampling, argmax, greedy_decoder, source_limit
from transformer_tf2.decoding.plan import Plan, forced_prefixes, plan_rows, regroup


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


def decoding_process(hp: hparams.Hparams, sentences: int | None = None) -> int:
    """Sets up a process that only decodes (eval.py, translate.py): one thread per stream
    (:func:`one_thread_per_stream`, whose ``sentences`` it takes, so call it before
    TensorFlow runs its first op) and, on a CPU-only machine, no Grappler pass over the
    graphs it runs. Returns the number of streams.

    Grappler rewrites a function's graph on its first call. Without it a decoder's first
    call takes half the time (0.27 s -> 0.13 s greedy on the ``multi30k`` preset, ``python
    bench/startup.py --logdir LOGDIR --tree OLD``: part of every eval.py and translate.py
    wait), and its rewrites bought no decoding speed. The tokens are the same; a beam's
    scores, and translate.py --score's, move in their last bits, as Grappler's arithmetic
    rewrites round differently (tests/test_streams.py). Training keeps Grappler (its fused
    kernels pay at every step), and so does a GPU (docs/performance.md)."""
    streams = one_thread_per_stream(hp, sentences)
    if not tf.config.list_physical_devices("GPU"):
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    return streams


class Translator:
    """Batched translation with one compiled decoding loop: greedy, beam search when
    ``hp.beam_size`` > 1, or sampling when ``hp.sampling_topk`` is not 1. Used by
    train.py (dev BLEU), eval.py and translate.py.

    A model with ``key_mask_defect`` attends to padding, so its sources are padded as in
    training, to a multiple of ``pad_multiple``.

    A model with document memory (``memory_sentences``, ``target_memory_sentences``)
    translates documents (``docs``: the document index of each sentence; None: each
    sentence its own): each in order, as a lane of :class:`document_decoding.Lanes`, its
    earlier sentences' encoder states and its own earlier translations' decoder states
    reused. ``chunk``: the sentences of a lane (:class:`DocumentTranslation`).

    Args:
        model: a built :class:`model.Transformer`, or an :class:`ensemble.Ensemble`.
        tok: the run's data_load.Tokenizer (None: ids in and out, :meth:`translate_ids`).
        hp: the decoding settings: ``beam_size``, ``length_penalty`` (Wu et al. 2016's
            alpha), ``max_len_extra`` and ``max_len`` (each sentence stops at </S> or
            after its source length + max_len_extra tokens), ``eval_batch_size``
            (sentences per batch), ``decode_streams`` (batches decoded at once), and
            ``sampling_topk``, ``sampling_topp``, ``sampling_temperature`` and ``seed``
            (:class:`greedy_search.Sampling`).

    Example:

    >>> from transformer_tf2.config import hparams
    >>> from transformer_tf2.decoding import translator
    >>> from transformer_tf2.models.model import Transformer
    >>> sizes = {"d_model": 16, "num_heads": 4, "d_ff": 32, "num_blocks": 1}
    >>> hp = hparams.apply(hparams.Hparams(), {**sizes, "beam_size": 2, "max_len_extra": 5})
    >>> model = Transformer.from_hparams(hp, 24, 24)
    >>> t = translator.Translator(model, None, hp)
    >>> outs = t.translate_ids([[5, 6, 7], [], [8, 9]], n=2)  # (no </S>)
    >>> outs[1] is None  # an empty source
    True
    >>> ids, scores = outs[0]  # the beam's 2 best hypotheses, best first
    >>> ids.shape[0], scores.shape, bool(scores[0] >= scores[1])
    (2, (2,), True)
    >>> forced = t.translate_ids([[5, 6, 7]], prefixes=[[9, 10]], n=2)[0][0]
    >>> [hyp[:2].tolist() for hyp in forced]  # every hypothesis starts with the prefix
    [[9, 10], [9, 10]]

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
        self.strategy = argmax
        if hp.sampling_topk != 1:
            self.strategy = Sampling(
                hp.sampling_topk, hp.sampling_topp, hp.sampling_temperature, hp.seed
            )
        self.documents = None
        if model.reads_documents:
            if self.sampling:
                raise UserError(
                    "sampling is not for a model with document memory (memory_sentences, "
                    "target_memory_sentences): drop --sampling_topk"
                )
            self.documents = DocumentTranslation(model, hp, self.k, self.multiple, chunk)
        # the output matrix transposed once for every decoding of this translator (the
        # weights are those of now: a subclass whose model trains pins again before
        # each decoding, evaluation.dev.DevTranslator)
        model.pin_output()
        self.decode = self._decoder(prefix=False)
        self._compiled: dict = {}  # prefixed and n-best decoders, the scorer, the aligner
        self._building = threading.Lock()  # threads decoding at once (serve.py's workers)

    def before_decoding(self) -> None:
        """Runs first in every decoding entry point (:meth:`translate_ids`,
        :meth:`score_ids`, :meth:`align_ids`): nothing here; a subclass whose model's
        weights change between decodings refreshes what it keeps of them
        (evaluation.dev.DevTranslator)."""

    @property
    def sampling(self) -> bool:
        return self.strategy is not argmax

    @property
    def traces(self) -> int:
        """How many times this translator's compiled functions have traced (each of its
        decoders once per input signature: a count that grows under load re-traces)."""
        functions = [self.decode, *self._compiled.values()]
        return sum(
            f.experimental_get_tracing_count()
            for f in functions
            if hasattr(f, "experimental_get_tracing_count")
        )

    def _decoder(self, prefix: bool, n: int = 1):
        """The compiled search; a beam gives its ``n`` best hypotheses."""
        if self.k > 1:
            hp = self.hp
            return beam_decoder(self.model, self.k, hp.length_penalty, hp.max_len, prefix, n_best=n)
        return greedy_decoder(self.model, self.hp.max_len, self.strategy, prefix)

    def _once(self, name: str, build):
        """A compiled function built on its first use (each traces on its first call,
        under tf.function's own lock), once even when several threads ask at once."""
        with self._building:
            if name not in self._compiled:
                self._compiled[name] = build()
            return self._compiled[name]

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
        """(ids (rows, n, L), scores (rows, n)) of a decoding function's result (n: 1 for
        greedy decoding, the n best of a beam)."""
        if self.k > 1:
            return result[0].numpy(), result[1].numpy()
        return result.numpy()[:, None], np.zeros((rows, 1), np.float32)

    def _run_documents(self, fn, batch, *windows):
        result, new, translated = self._run(fn, batch, *windows)
        return self._best(result, len(batch)), new, translated

    def translate_ids(
        self,
        src_ids: list,
        progress: bool = False,
        width: int = 0,
        docs=None,
        prefixes: list | None = None,
        n: int = 1,
    ) -> list:
        """Source id lists (no </S>) -> per sentence (ids (k, L), scores (k,)), best
        first, in the input order; an empty source gives None. Sources are cut to
        :func:`source_limit`; greedy and sampling scores are 0. ``width`` > 0 pads every
        source to that width and decodes empty sources too (from </S> alone), as the TF1
        eval.py. ``docs``: see the class. ``prefixes``: per sentence the target ids its
        translations start with (empty or None: none). ``n`` > 1 with sampling: n samples
        per sentence, (ids (n, L), scores (n,)), drawn with ids sentence * n + j; with a
        beam, its n best (ids (n, L), scores (n,)): it stops once they are final.

        One step per job: the rows and their batches (:meth:`plan`), each batch decoded
        (:meth:`_decode_rows`) on the streams (:meth:`_map_batches`), the rows regrouped
        per sentence (:func:`plan.regroup`); documents go to :class:`DocumentTranslation`."""
        self.before_decoding()
        if self.documents is not None:
            return self._translate_documents(src_ids, progress, docs, prefixes)
        plan = self.plan(src_ids, width, prefixes, n)
        decoded = self._map_batches(partial(self._decode_rows, plan), plan.batches, progress)
        return regroup(decoded, plan.sentences, plan.draws, len(src_ids))

    def _translate_documents(self, src_ids: list, progress: bool, docs, prefixes) -> list:
        """translate_ids for a model with document memory (:class:`DocumentTranslation`):
        per sentence (ids (k, L), scores (k,)); no target prefix."""
        if prefixes is not None:
            raise UserError("a target prefix is not for a model with document memory")
        return self.documents.translate(src_ids, progress, docs, self._run_documents)

    def plan(self, src_ids: list, width: int = 0, prefixes: list | None = None, n: int = 1) -> Plan:
        """What :meth:`translate_ids` decodes (without document memory), its arguments as
        there: the rows (:func:`plan.plan_rows`: with sampling, n draws per sentence),
        their sources in batches (data_load.eval_batches: cut to :func:`source_limit`,
        padded to a multiple of ``self.multiple`` and to ``width``), and the decoder: a
        beam's n best or greedy search, prefixed where a sentence has a prefix."""
        draws = n if self.sampling else 1
        sentences = plan_rows(src_ids, width, draws)
        srcs = [src_ids[i] for i in sentences]
        size, limit = self.hp.eval_batch_size, source_limit(self.model)
        batches = list(data_load.eval_batches(srcs, size, limit, self.multiple, width))
        prefixes = forced_prefixes(prefixes)
        decode = self._search(prefixes is not None, n if self.k > 1 else 1)
        return Plan(sentences, draws, batches, decode, prefixes, self.sampling)

    def _search(self, prefix: bool, best: int):
        """The compiled decoder: ``self.decode`` without a prefix for the best
        hypothesis alone, else one built on first use (a beam searches until its
        ``best`` best are final)."""
        if not prefix and best == 1:
            return self.decode
        return self._once(f"prefix={prefix},n={best}", partial(self._decoder, prefix, best))

    def _decode_rows(self, plan: Plan, idx, batch: np.ndarray):
        """(ids (N, n, L), scores (N, n)) of the plan's rows ``idx`` (N,), their
        sources ``batch`` (N, T)."""
        inputs = [tf.constant(a) for a in plan.inputs(idx)]
        return self._best(self._run(plan.decode, batch, *inputs), len(idx))

    def _map_batches(self, fn, batches: list, progress: bool):
        """(indices, fn(indices, batch)) of each (indices, batch): ``self.streams``
        batches at once, each on a thread of its own (TensorFlow releases the GIL while a
        graph runs), so that a batch's serial steps overlap another's; the outputs are
        those of one stream. Several streams take the batches largest first
        (:func:`largest_first`), so that no stream is left alone with the longest one at
        the end; the results come in that order, each with its indices."""

        def one(item):
            idx, batch = item
            return idx, fn(idx, batch)

        bar = tqdm(batches, disable=not progress, file=sys.stderr, unit="batch")
        if self.streams == 1 or len(batches) <= 1:
            yield from map(one, bar)
            return
        batches = largest_first(batches)
        with ThreadPoolExecutor(min(self.streams, len(batches))) as pool:
            for done in pool.map(one, batches):
                bar.update(1)
                yield done
        bar.close()

    def _pair_batches(self, src_ids: list, tgt_ids: list) -> list:
        """(indices, (src (N, T1) with </S>, decoder inputs, labels)) batches of the pairs,
        sources sorted by length as for decoding (empty sources are </S> alone)."""
        limit = source_limit(self.model)
        size, multiple = self.hp.eval_batch_size, self.multiple
        out = []
        for idx, src in data_load.eval_batches(src_ids, size, limit, multiple):
            fed, labels = scoring.teacher_forced([tgt_ids[i] for i in idx])
            out.append((idx, (src, fed, labels)))
        return out

    def score_ids(self, src_ids: list, tgt_ids: list, progress: bool = False) -> list:
        """Per pair the log-probability of each target token (T + 1,) float32, </S>
        included, given its source (id lists without </S>): CTranslate2's
        ``score_batch``. A translation's score is their sum."""
        self.before_decoding()
        if self.documents is not None:
            raise UserError(
                "scoring given translations is not for a model with document memory: "
                "eval.py --contrastive scores them in their documents"
            )
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"{len(src_ids)} sources against {len(tgt_ids)} targets")
        score = self._once("scorer", lambda: scoring.scorer(self.model))
        out: list = [None] * len(src_ids)

        def one(idx, arrays):
            return score(*(tf.constant(a) for a in arrays)).numpy()

        for idx, logp in self._map_batches(one, self._pair_batches(src_ids, tgt_ids), progress):
            for row, i in enumerate(idx):
                out[i] = logp[row, : len(tgt_ids[i]) + 1]
        return out

    def align_ids(self, src_ids: list, tgt_ids: list, layer: int | None = None) -> list:
        """Per pair the cross-attention (T2, T1) of :func:`scoring.aligner` (decoder layer
        ``layer``; None: the aligning one) for the target tokens (T2 = its tokens, </S>
        left out) over the source tokens (T1, </S> left out); an ensemble aligns with its
        first model."""
        self.before_decoding()
        if self.documents is not None:
            raise UserError(
                "alignments are not for a model with document memory (its attention reads "
                "each sentence's context): drop --alignments"
            )
        model = getattr(self.model, "models", [self.model])[0]
        align = self._once(f"aligner{layer}", lambda: scoring.aligner(model, layer))
        out: list = [None] * len(src_ids)
        longest = source_limit(self.model) - 1
        for idx, (src, fed, _) in self._pair_batches(src_ids, tgt_ids):
            weights = align(tf.constant(src), tf.constant(fed)).numpy()
            for row, i in enumerate(idx):
                out[i] = weights[row, : len(tgt_ids[i]), : min(len(src_ids[i]), longest)]
        return out

    def alignments(self, src_ids: list, outs: list) -> list[str]:
        """The Pharaoh word alignment (:func:`scoring.hard_alignment`) of each source (id
        list) and its best translation in ``outs`` (:meth:`translate_ids`; None: '')."""
        best = [[] if o is None else _tokens(o[0][0]) for o in outs]
        weights = self.align_ids(src_ids, best)
        kind = self.tok.kind
        return [
            ""
            if o is None
            else scoring.hard_alignment(
                w,
                scoring.word_index(self.tok.src_tokens(s), kind),
                scoring.word_index(self.tok.tgt_tokens(t), kind),
            )
            for o, w, s, t in zip(outs, weights, src_ids, best)
        ]

    def translate_nbest(
        self,
        sentences: list[str],
        n: int = 1,
        progress: bool = False,
        src_ids: list | None = None,
        docs=None,
        prefixes: list[str] | None = None,
    ) -> list:
        """Per sentence the n best (translation, score) pairs (with sampling, n samples,
        each scored as :meth:`score_ids` scores it); [] for an empty line. ``src_ids``, if
        given, are the sentences already encoded; ``docs`` as in the class;
        ``prefixes``: per sentence the text its translations start with ('' for none)."""
        if src_ids is None:
            src_ids = self.tok.encode_src(sentences)
        forced = None if prefixes is None else self.tok.encode_tgt(prefixes)
        outs = self.translate_ids(src_ids, progress, docs=docs, prefixes=forced, n=n)
        if self.sampling and any(o is not None for o in outs):
            outs = self.scored_samples(src_ids, outs)
        return [
            [] if o is None else [(self.tok.decode_tgt(o[0][r]), float(o[1][r])) for r in range(n)]
            for o in outs
        ]

    def scored_samples(self, src_ids: list, outs: list) -> list:
        """``outs`` of sampling with each sample's score: its summed log-probability."""
        pairs = [(i, r) for i, o in enumerate(outs) if o is not None for r in range(len(o[0]))]
        logp = self.score_ids(
            [src_ids[i] for i, _ in pairs], [_tokens(outs[i][0][r]) for i, r in pairs]
        )
        scored = [None if o is None else (o[0], np.zeros(len(o[0]), np.float32)) for o in outs]
        for (i, r), lp in zip(pairs, logp):
            scored[i][1][r] = lp.sum()
        return scored

    def translate(self, sentences: list[str], docs=None) -> list[str]:
        """The best translation of each sentence; an empty line gives ''."""
        return self.translate_counted(sentences, docs)[0]

    def translate_counted(self, sentences: list[str], docs=None) -> tuple[list[str], list[int]]:
        """The best translation of each sentence, and the indices of the runaway ones:
        those that hit their length limit without producing </S>."""
        outs = self.translate_ids(self.tok.encode_src(sentences), docs=docs)
        hyps = ["" if o is None else self.tok.decode_tgt(o[0][0]) for o in outs]
        return hyps, runaways(outs)


def largest_first(batches: list) -> list:
    """(indices, batch) pairs, the batch an array or a tuple of arrays, in decreasing
    order of size (elements in all), ties in their order: the longest-job-first order
    of batches for several streams. Batches of sorted sources grow longest last
    (data_load.eval_batches); a greedy or beam batch runs as many steps as its longest
    budget, so the last one takes the most time, and taken last, it ran alone on one
    core at the end. Largest first, every stream stays busy to the end (the same
    outputs; docs/performance.md, "Decoding speed")."""

    def size(item) -> int:
        batch = item[1]
        return sum(np.size(a) for a in batch) if isinstance(batch, tuple) else np.size(batch)

    return sorted(batches, key=size, reverse=True)


def _tokens(ids) -> list[int]:
    """A hypothesis's tokens before its </S> (or PAD)."""
    ids = [int(i) for i in ids]
    for stop in (data_load.EOS_ID, data_load.PAD_ID):
        if stop in ids:
            ids = ids[: ids.index(stop)]
    return ids


def runaways(outs: list) -> list[int]:
    """Indices of :meth:`Translator.translate_ids` outputs whose best hypothesis has no
    </S>: it reached its length limit (a degenerate, repeating output, as a rule)."""
    return [i for i, o in enumerate(outs) if o is not None and data_load.EOS_ID not in o[0][0]]


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
