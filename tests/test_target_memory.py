"""The decoder's memory of earlier target sentences (``target_memory_sentences``, as
Transformer-XL's language model, Dai et al. 2019, 3.2): model.recurrence.target_states,
document_windows and forward, the cached decoder steps, the lanes of translator.Translator,
and the training batches that carry the earlier targets."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import check_beam_scores, rand_ids, relative_model
from test_context import corpus_of, document, norms_in_turn, three_documents
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import greedy_search, translator
from transformer_tf2.layers import recurrence

# every family once in each test, the norms in turn, the other way round in each: the
# file runs every (family, norm) pair once
PAIRS = norms_in_turn("post", "pre")
OTHER_PAIRS = norms_in_turn("pre", "post")


def targets(seed, rows=2, sentences=6, vocab=23):
    """Decoder inputs (<S> first, then PAD-padded tokens) of ``sentences`` target
    sentences of ``rows`` documents, as :func:`test_context.document` makes sources."""
    bos = np.full((rows, 1), data_load.BOS_ID, np.int32)
    return [
        tf.constant(np.concatenate([bos, ids.numpy()], 1))
        for ids in document(seed, rows, sentences, vocab)
    ]


def real(out, ids):
    return out.numpy() * (ids.numpy() != 0)[:, :, None]


def in_order(model, src, tgt, m, mt):
    """Each sentence's decoder output when the document is read in order, every
    sentence's encoder and decoder states kept for the next ones (decoding's reuse)."""
    enc_window, dec_window, outs = [], [], []
    for s, t in zip(src, tgt):
        inputs = []
        encoded = model.encode(s, context=recurrence.context_of(enc_window), layer_inputs=inputs)
        dec_context = recurrence.context_of(dec_window)
        outs.append(real(model.decode(t, *encoded, context=dec_context), t))
        if m:
            enc_window = (enc_window + [(inputs, encoded[1])])[-m:]
        dec_window = (dec_window + [recurrence.target_states(model, t, encoded, dec_context)])[-mt:]
    return outs


def recomputed(model, src, tgt, k, depth, target_depth):
    """Sentence k's decoder output from training's recomputation: the ``depth`` sources
    and ``target_depth`` targets before it (all-PAD where the document has fewer)."""
    pad = [tf.zeros_like(src[0][:, :1])] * depth
    before = (pad + src[:k])[-depth:]
    tgt_before = ([tf.zeros_like(tgt[0][:, :1])] * target_depth + tgt[:k])[-target_depth:]
    return real(model.forward(src[k], tgt[k], before, tgt_before), tgt[k])


@pytest.mark.slow
@pytest.mark.parametrize("kind,norm", PAIRS)
def test_recomputed_target_context_equals_reused_states(kind, norm):
    """With the sentences recurrence.context_needs names, a sentence's decoder output from
    training's recomputation equals reading the document in order, to 1e-5, for a
    decoder memory alone and with the encoder's; a context one sentence short differs."""
    src, tgt = document(seed=2), targets(seed=3)
    for m, mt in ((0, 1), (1, 1)):
        model = relative_model(
            kind, seed=1, norm=norm, memory_sentences=m, target_memory_sentences=mt
        )
        depth, target_depth = model.context_depths
        assert (depth, target_depth) == ((2, 2) if m == 0 else (3, 2))
        reused = in_order(model, src, tgt, m, mt)
        for k in range(len(src)):
            got = recomputed(model, src, tgt, k, depth, target_depth)
            np.testing.assert_allclose(got, reused[k], atol=1e-5, err_msg=f"M={m} k={k}")
        last = len(src) - 1
        short = recomputed(model, src, tgt, last, depth - 1, min(target_depth, depth - 1))
        assert np.abs(short - reused[last]).max() > 1e-3


def test_context_needs():
    """What each earlier sentence must give (encoder layer inputs, L + 1: its output too;
    decoder layer inputs), nearest first."""
    assert recurrence.context_needs(2, 1, 0) == ([2, 1], [0, 0])
    assert recurrence.context_needs(2, 0, 1) == ([3, 0], [2, 1])
    assert recurrence.context_needs(2, 1, 1) == ([3, 2, 1], [2, 1, 0])
    assert recurrence.context_needs(3, 1, 1) == ([4, 4, 3, 2, 1], [3, 2, 1, 0, 0])
    assert recurrence.context_needs(2, 0, 0) == ([], [])
    assert recurrence.context_depths(3, 1, 1) == (5, 3)


@pytest.mark.slow
def test_target_memory_changes_the_output_and_resets_at_document_starts():
    """The earlier target sentence is attended to; a row whose earlier sentences are all
    PAD (the start of its document) decodes as without context."""
    model = relative_model("alibi", seed=5, target_memory_sentences=1)
    (src, before), (tgt, tgt_before) = document(seed=6, sentences=2), targets(7, sentences=2)
    alone = model.forward(src, tgt).numpy()
    with_context = model.forward(src, tgt, [before, before], [tgt_before, tgt_before]).numpy()
    keep = (tgt.numpy() != 0)[:, :, None]
    assert np.abs((with_context - alone) * keep).max() > 1e-2
    reset = [
        tf.constant(np.where(np.arange(2)[:, None] == 0, 0, x.numpy()))
        for x in (before, tgt_before)
    ]
    mixed = model.forward(src, tgt, [reset[0]] * 2, [reset[1]] * 2).numpy()
    np.testing.assert_allclose((mixed * keep)[0], (alone * keep)[0], atol=1e-5)
    np.testing.assert_allclose((mixed * keep)[1], (with_context * keep)[1], atol=1e-5)


@pytest.mark.slow
def test_no_gradient_reaches_the_target_memory():
    """The earlier targets are stop-gradient: embedding rows that only they hold get no
    gradient, although the output depends on them."""
    model = relative_model("rotary", seed=8, share_embeddings=True, target_memory_sentences=1)
    src = tf.constant([[5, 6, 7, 0], [8, 9, 10, 11]])
    tgt = tf.constant([[2, 5, 6, 0], [2, 8, 9, 10]])
    before = tf.constant([[2, 20, 21, 0], [2, 20, 22, 21]])  # tokens 20..22 only here
    with tf.GradientTape() as tape:
        out = model.forward(src, tgt, [src, src], [before, before])
        loss = tf.reduce_sum(out**2)
    emb = model.tgt_embedding.embeddings
    grad = tf.convert_to_tensor(tape.gradient(loss, emb)).numpy()
    assert np.abs(grad[20:23]).max() == 0.0 and np.abs(grad[5:12]).max() > 0.0
    other = tf.constant([[2, 20, 20, 0], [2, 22, 22, 22]])
    moved = model.forward(src, tgt, [src, src], [other, other])
    assert np.abs((moved - out).numpy()).max() > 1e-3


def test_training_batches_carry_the_earlier_targets():
    """context_batch(target=True): <S> and the target, the first max_len tokens; the
    batch of a decoder-memory run ends with it (data_load.batch_spec)."""
    src = [np.array([5, 6]), np.array([7]), np.array([8, 9, 10]), np.array([11])]
    corpus = corpus_of([src[:3], src[3:]])  # targets: one token each (see corpus_of)
    got = data_load.context_batch(corpus, np.array([2, 3]), 2, target=True)
    bos = data_load.BOS_ID
    tgt = [corpus.tgt(i)[0] for i in range(4)]
    np.testing.assert_array_equal(got[0], [[bos, tgt[0]], [bos, tgt[1]]])
    np.testing.assert_array_equal(got[1], [[0, 0], [0, 0]])  # a document's first pair
    cut = data_load.context_batch(corpus, np.array([2]), 1, max_len=1, target=True)
    np.testing.assert_array_equal(cut[0], [[bos]])
    hp = hparams.apply(
        hparams.Hparams(), {"position": "xl", "target_memory_sentences": 1, "memory_sentences": 1}
    )
    assert data_load.context_depths(hp) == (3, 2)
    batch = data_load.build_batch(corpus, np.array([2]), depth=3, target_depth=2)
    assert [b.shape[:2] for b in batch[3:]] == [(1, 3), (1, 2)]
    assert [s.shape.rank for s in data_load.batch_spec(hp)] == [2, 2, 2, 3, 3]


@pytest.mark.slow
@pytest.mark.parametrize("kind,norm", OTHER_PAIRS)
def test_documents_decode_with_own_translations_as_recomputed(kind, norm):
    """Documents decoded as lanes (2 at a time), each sentence's decoder attending to the
    states of its lane's own earlier translations (one teacher-forced pass each, kept),
    equal training's recomputation from those translations: greedy by the naive
    full-pass decoder, and every beam hypothesis re-scored by the teacher-forced pass
    with the beam run's own earlier translations as the targets' context, to 1e-4."""
    model = relative_model(kind, seed=9, norm=norm, memory_sentences=1, target_memory_sentences=1)
    depth, target_depth = model.context_depths
    corpus, src_ids, hp, src, context, limits = three_documents(depth)
    idx, eos = np.arange(len(corpus)), data_load.EOS_ID

    def own_targets(best: list) -> tf.Tensor:
        """The context's targets from the translations ``best`` (</S> and after dropped),
        as data_load.context_batch(target=True) holds the references."""
        cut = []
        for b in best:  # the tokens before the first </S> or PAD, as the lanes keep them
            stops = [j for j, t in enumerate(b) if t in (eos, data_load.PAD_ID)]
            cut.append(np.array(b[: stops[0]] if stops else b, np.int32))
        own = data_load.Corpus(
            corpus.src_ids,
            corpus.src_off,
            np.concatenate(cut),
            np.cumsum([0] + [len(c) for c in cut]),
            corpus.doc,
        )
        return tf.constant(data_load.context_batch(own, idx, target_depth, target=True))

    greedy = translator.Translator(model, None, hp).translate_ids(src_ids, docs=corpus.docs)
    best = [list(g[0][0]) for g in greedy]
    windows = recurrence.document_windows(model, context, own_targets(best))
    encoded = model.encode(src, context=recurrence.context_of(windows[0]))
    dec_context = recurrence.context_of(windows[1])
    naive = greedy_search.naive_greedy(model, src, int(limits.max()), limits, encoded, dec_context)
    for i, (row, ref) in enumerate(zip(best, naive)):
        n = row.index(eos) + 1 if eos in row else len(row)
        np.testing.assert_array_equal(row[:n], ref[:n], err_msg=f"sentence {i}")
    beam_hp = hparams.apply(hp, {"beam_size": 3})
    beams = translator.Translator(model, None, beam_hp).translate_ids(src_ids, docs=corpus.docs)
    ids, scores = [b[0] for b in beams], [b[1] for b in beams]
    tgt_context = own_targets([list(b[0]) for b in ids])
    check_beam_scores(model, src, ids, scores, limits, context, tgt_context)


@pytest.mark.slow
def test_recomputing_every_context_translates_as_reusing_the_states():
    """A decoder-memory model's documents translated with the states kept (reuse) and
    with every sentence's context recomputed from the sources and the lanes' own
    translations (chunk 1, as training reads a pair) give the same translations, and
    scores to 1e-4 in beam search; an empty line in a document stays empty."""
    # xl: its terms index the first and last positions, which an empty context lacks
    model = relative_model("xl", seed=12, memory_sentences=1, target_memory_sentences=1)
    rng = np.random.default_rng(13)
    docs = [[rand_ids(rng, (int(rng.integers(2, 7)),), 23) for _ in range(n)] for n in (5, 2, 3)]
    docs[0][2] = docs[0][2][:0]  # an empty line inside a document
    corpus = corpus_of([[s if len(s) else np.array([4]) for s in d] for d in docs])
    src_ids = [s for d in docs for s in d]
    for beam in (1, 3):
        hp = hparams.apply(
            hparams.Hparams(), {"eval_batch_size": 2, "max_len_extra": 4, "beam_size": beam}
        )
        reuse, again = (
            translator.Translator(model, None, hp, chunk).translate_ids(src_ids, docs=corpus.docs)
            for chunk in (None, 1)
        )
        assert reuse[2] is None and again[2] is None
        for i, (a, b) in enumerate(zip(reuse, again)):
            if a is not None:
                np.testing.assert_array_equal(a[0], b[0], err_msg=f"sentence {i}")
                np.testing.assert_allclose(a[1], b[1], atol=1e-4)
