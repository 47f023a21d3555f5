"""Document context in the encoder (Transformer-XL's segment-level recurrence, Dai et al.
2019, 3.2, with a sentence as the segment): model.Transformer.encode_in_context,
sentence_states and context_of."""

import numpy as np
import pytest
import tensorflow as tf

import positions
from helpers import rand_ids, relative_model

RELATIVE = [name for name, family in positions.REGISTRY.items() if family.relative]
LAYERS = 2  # tiny_model's num_blocks


def document(seed, rows=2, sentences=6, vocab=23):
    """``sentences`` batches (rows, T_k) of ids, one per sentence of ``rows`` documents
    read in parallel: each sentence of its own length (some rows padded), widths vary."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(sentences):
        width = int(rng.integers(3, 7))
        ids = rand_ids(rng, (rows, width), vocab)
        for r in range(rows):
            ids[r, int(rng.integers(1, width + 1)) :] = 0  # at least one real token
        out.append(tf.constant(ids))
    return out


def real(out, ids):
    """The encoder output (N, T, d_model) at the real tokens of ids (PAD positions zeroed:
    nothing reads them, and with alibi_dir a PAD query's right-looking heads see only
    masked keys, whose count the context changes)."""
    return out.numpy() * (ids.numpy() != 0)[:, :, None]


def in_order(model, doc, sentences):
    """Each sentence's encoder output when the document is read in order, every
    sentence's states kept for the next ones (decoding's reuse)."""
    window, outs = [], []
    for ids in doc:
        context = model.context_of(window)
        outs.append(real(model.encode(ids, context=context)[0], ids))
        window = (window + [model.sentence_states(ids, context)])[-sentences:]
    return outs


def recomputed(model, doc, k, sentences, depth):
    """Sentence k encoded with only the ``depth`` sentences before it as its context
    (training's recomputation), all-PAD sentences where the document has fewer."""
    before = doc[max(0, k - depth) : k]
    pad = [tf.zeros_like(doc[0][:, :1])] * (depth - len(before))
    return real(model.encode_in_context(doc[k], pad + before, sentences)[0], doc[k])


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("kind", RELATIVE)
def test_recomputed_context_equals_reused_states(kind, norm):
    """With the num_blocks * M sentences before it, a sentence's context recomputed from
    scratch (training) gives the states of reading the whole document in order
    (decoding), to 1e-5; with only M it does not (the layer inputs of the earlier
    sentences depend on their own context)."""
    model = relative_model(kind, seed=1, norm=norm)
    doc = document(seed=2)
    for m in (1, 2):
        reused = in_order(model, doc, m)
        for k in range(len(doc)):
            got = recomputed(model, doc, k, m, LAYERS * m)
            np.testing.assert_allclose(got, reused[k], atol=1e-5, err_msg=f"M={m} k={k}")
        short = recomputed(model, doc, len(doc) - 1, 1, 1)
        assert np.abs(short - reused[-1]).max() > 1e-3


def test_weighted_layers_take_the_context():
    model = relative_model("shaw", seed=3, model_type="weighted")
    doc = document(seed=4, sentences=4)
    reused = in_order(model, doc, 1)
    np.testing.assert_allclose(recomputed(model, doc, 3, 1, LAYERS), reused[3], atol=1e-5)
    with pytest.raises(ValueError, match="Universal"):
        relative_model("shaw", model_type="universal").sentence_states(doc[0])


def test_context_changes_the_output_and_empty_context_is_none():
    """The earlier sentence is attended to; a row whose earlier sentences are all PAD (the
    start of its document) is encoded as without context, whatever the other rows hold."""
    model = relative_model("t5", seed=5)
    src, before = document(seed=6, sentences=2)
    alone = model.encode(src)[0].numpy()
    with_context = model.encode_in_context(src, [before], 1)[0].numpy()
    assert np.abs(with_context - alone).max() > 1e-2
    reset = before.numpy().copy()
    reset[0] = 0  # row 0 starts its document here
    mixed = model.encode_in_context(src, [tf.constant(reset)], 1)[0].numpy()
    np.testing.assert_allclose(mixed[0], alone[0], atol=1e-6)
    np.testing.assert_allclose(mixed[1], with_context[1], atol=1e-6)
    np.testing.assert_array_equal(model.encode_in_context(src, [before], 0)[0].numpy(), alone)


def test_context_is_left_aligned_whatever_the_padding():
    """The earlier sentences' tokens are moved to the right end of the context in order,
    so that padding a context sentence wider changes nothing."""
    model = relative_model("xl", seed=7)
    a = tf.constant([[5, 6, 0, 0], [7, 8, 9, 10]])
    b = tf.constant([[11, 0], [12, 13]])
    window = [model.sentence_states(a), model.sentence_states(b)]
    context = model.context_of(window)
    states, mask = context[0]
    assert mask.shape == (2, 1, 1, 6)
    np.testing.assert_array_equal(
        mask[:, 0, 0].numpy(), [[False, False, False, True, True, True], [True] * 6]
    )
    embedded = [window[0][0][0].numpy(), window[1][0][0].numpy()]  # layer 0: the embeddings
    np.testing.assert_array_equal(
        states[0, 3:].numpy(), np.concatenate([embedded[0][0, :2], embedded[1][0, :1]])
    )
    np.testing.assert_array_equal(
        states[1].numpy(), np.concatenate([embedded[0][1], embedded[1][1]])
    )
    src = tf.constant([[14, 15, 16], [17, 18, 0]])
    narrow = model.encode_in_context(src, [a, b], 2)[0].numpy()
    wide = model.encode_in_context(
        src, [tf.pad(a, [[0, 0], [0, 3]]), tf.pad(b, [[0, 0], [0, 5]])], 2
    )[0].numpy()
    np.testing.assert_allclose(wide, narrow, atol=1e-6)


def test_no_gradient_reaches_the_context():
    """The context is stop-gradient (Dai et al. 3.2): the embedding rows of tokens that
    only the earlier sentence holds get no gradient, although the output depends on them;
    the weights still train through the current sentence."""
    model = relative_model("rotary", seed=8, share_embeddings=True)
    src = tf.constant([[5, 6, 7, 0], [8, 9, 10, 11]])
    before = tf.constant([[20, 21, 0], [20, 22, 21]])  # tokens 20..22 are only here
    with tf.GradientTape() as tape:
        out = model.encode_in_context(src, [before], 1, training=False)[0]
        loss = tf.reduce_sum(out**2)
    grads = dict(
        zip(
            [v.path for v in model.trainable_variables],
            tape.gradient(loss, model.trainable_variables),
        )
    )
    emb = tf.convert_to_tensor(grads[model.src_embedding.embeddings.path])
    assert np.abs(emb.numpy()[20:23]).max() == 0.0
    assert np.abs(emb.numpy()[5:12]).max() > 0.0
    other = tf.constant([[20, 20, 0], [22, 22, 22]])
    moved = model.encode_in_context(src, [other], 1)[0]
    assert np.abs((moved - out).numpy()).max() > 1e-3
