"""Numerical tests of modules.py, the layers of the paper (tiny sizes, CPU).

Each test checks real numbers: the masks, the worked self-attention example, the sinusoid
formula, the embeddings, label smoothing and the loss, the learning-rate schedules, the
mask value under reduced precision, the model-variant hook's defaults, and the
feed-forward network and Adam against Keras' own, bit for bit. The model
built from these layers is tested in test_model.py, the decoding loops in
test_decoding.py, the rewrites of fast_ops.py in test_fast_ops.py.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import graph_nodes
from transformer_tf2.layers import attention, embeddings, modules, optimization, positions
from transformer_tf2.models import variants


# ---------------------------------------------------------------------------------------
# masks
# ---------------------------------------------------------------------------------------
def test_padding_mask_shape_and_values():
    ids = tf.constant([[5, 7, 0, 0], [4, 0, 6, 0]], tf.int32)
    mask = attention.padding_mask(ids)
    assert mask.shape == (2, 1, 1, 4)
    assert mask.dtype == tf.bool
    np.testing.assert_array_equal(
        mask.numpy()[:, 0, 0], [[True, True, False, False], [True, False, True, False]]
    )


def test_causal_mask_shape_and_values():
    mask = attention.causal_mask(4)
    assert mask.shape == (1, 1, 4, 4)
    assert mask.dtype == tf.bool
    np.testing.assert_array_equal(mask.numpy()[0, 0], np.tril(np.ones((4, 4), bool)))
    # also with a dynamic (tensor) length, as used by Transformer.decode
    np.testing.assert_array_equal(
        attention.causal_mask(tf.constant(3)).numpy()[0, 0], np.tril(np.ones((3, 3), bool))
    )


# ---------------------------------------------------------------------------------------
# 1. the worked self-attention example, through MultiHeadAttention's own code path
# ---------------------------------------------------------------------------------------
X_EX = np.array([[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]], np.float32)
WK_EX = np.array([[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]], np.float32)
WQ_EX = np.array([[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]], np.float32)
WV_EX = np.array([[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]], np.float32)
OUT_EX = np.array(
    [[1.9366, 6.6831, 1.5951], [2.0, 7.9640, 0.0540], [1.9997, 7.7599, 0.3584]], np.float32
)


def _pad_col(w):
    """4x3 -> 4x4 with a zero 4th column (the layer's weights are d_model x d_model)."""
    return np.concatenate([w, np.zeros((4, 1), np.float32)], axis=1)


def test_worked_self_attention_example():
    layer = attention.MultiHeadAttention(d_model=4, num_heads=1, scale=False)
    layer.build((None, None, 4), (None, None, 4))
    layer.w_q.assign(_pad_col(WQ_EX))
    layer.w_k.assign(_pad_col(WK_EX))
    layer.w_v.assign(_pad_col(WV_EX))
    layer.w_o.assign(np.eye(4, dtype=np.float32))
    x = tf.constant(X_EX[None])  # (1, 3, 4)
    out, weights = layer(x, x, return_attention=True)
    out, weights = out.numpy()[0], weights.numpy()[0, 0]
    assert out.shape == (3, 4) and weights.shape == (3, 3)
    np.testing.assert_allclose(out[:, :3], OUT_EX, atol=1e-4)
    np.testing.assert_allclose(out[:, 3], 0.0, atol=1e-6)  # the zero padding column
    # scores of input 1 are q1 . k_j = [2, 4, 4]
    q = layer._project(x, layer.w_q)
    k, _ = layer.keys_values(x)
    scores = tf.matmul(q, k, transpose_b=True).numpy()[0, 0]
    np.testing.assert_allclose(scores[0], [2.0, 4.0, 4.0], atol=1e-6)
    e = np.exp(np.array([2.0, 4.0, 4.0]) - 4.0)
    np.testing.assert_allclose(weights[0], e / e.sum(), atol=1e-6)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)


def test_attention_scale_divides_by_sqrt_dk():
    """scale=True (the paper) equals the unscaled attention of q / sqrt(d_k)."""
    rng = np.random.default_rng(1)
    q, k, v = (tf.constant(rng.normal(size=(2, 3, 5, 8)).astype(np.float32)) for _ in range(3))
    out_s, w_s = attention.scaled_dot_product_attention(q, k, v, scale=True)
    out_u, w_u = attention.scaled_dot_product_attention(q / math.sqrt(8.0), k, v, scale=False)
    np.testing.assert_allclose(w_s.numpy(), w_u.numpy(), atol=1e-6)
    np.testing.assert_allclose(out_s.numpy(), out_u.numpy(), atol=1e-5)
    # and a direct numpy reference
    s = np.einsum("nhqd,nhkd->nhqk", q.numpy(), k.numpy()) / math.sqrt(8.0)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(w_s.numpy(), p, atol=1e-6)
    np.testing.assert_allclose(out_s.numpy(), p @ v.numpy(), atol=1e-5)


# ---------------------------------------------------------------------------------------
# 2. sinusoidal encoding
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("d_model", [16, 512])
def test_sinusoid_encoding_formula(d_model):
    pos = np.array([0, 1, 37, 500, 2000])
    pe = positions.sinusoid_encoding(tf.constant(pos), d_model).numpy()
    assert pe.shape == (len(pos), d_model) and pe.dtype == np.float32
    dims = np.arange(d_model)
    angle = pos[:, None].astype(np.float64) / 10000.0 ** (2 * (dims // 2) / d_model)
    ref = np.where(dims % 2 == 0, np.sin(angle), np.cos(angle))
    # float32 angles: absolute error grows like pos * eps
    tol = 1e-6 + 1e-7 * pos[:, None]
    assert np.all(np.abs(pe - ref) <= tol), np.max(np.abs(pe - ref))
    # explicit spot checks
    np.testing.assert_allclose(pe[0, 0::2], 0.0, atol=1e-7)  # sin(0)
    np.testing.assert_allclose(pe[0, 1::2], 1.0, atol=1e-7)  # cos(0)
    np.testing.assert_allclose(pe[1, 0], math.sin(1.0), atol=1e-6)
    np.testing.assert_allclose(pe[1, 1], math.cos(1.0), atol=1e-6)
    np.testing.assert_allclose(pe[2, 2], math.sin(37 / 10000 ** (2 / d_model)), atol=1e-5)
    np.testing.assert_allclose(pe[3, 5], math.cos(500 / 10000 ** (4 / d_model)), atol=1e-4)
    np.testing.assert_allclose(
        pe[4, d_model - 1], math.cos(2000 / 10000 ** ((d_model - 2) / d_model)), atol=1e-4
    )


def test_token_embedding_scaling_pad_and_tied_logits():
    emb = embeddings.TokenEmbedding(6, 4)
    emb.build()
    assert emb.embeddings.shape == (8, 4)  # rows rounded up to a multiple of 8
    table = np.arange(32, dtype=np.float32).reshape(8, 4) / 10.0
    emb.embeddings.assign(table)
    ids = tf.constant([[3, 0, 5]])
    out = emb(ids).numpy()[0]
    np.testing.assert_allclose(out[0], table[3] * 2.0, atol=1e-6)  # * sqrt(d_model)
    np.testing.assert_array_equal(out[1], 0.0)  # PAD gives zeros
    np.testing.assert_allclose(out[2], table[5] * 2.0, atol=1e-6)
    h = np.array([[1.0, -1.0, 0.5, 2.0]], np.float32)
    logits = emb.logits(tf.constant(h))
    assert logits.dtype == tf.float32 and logits.shape == (1, 6)  # the 6 real ids only
    np.testing.assert_allclose(logits.numpy(), h @ table[:6].T, atol=1e-5)
    # a vocabulary that is a multiple of 8 gets no extra rows
    emb16 = embeddings.TokenEmbedding(16, 4)
    emb16.build()
    assert emb16.embeddings.shape == (16, 4)


def test_positional_encoding_layer_offset():
    """PositionalEncoding adds rows starting at ``offset`` (used by decode_step)."""
    layer = embeddings.PositionalEncoding(16, "sinusoid")
    x = tf.zeros((2, 3, 16))
    out = layer(x, offset=1998).numpy()
    ref = positions.sinusoid_encoding(tf.range(1998, 2001), 16).numpy()
    np.testing.assert_allclose(out[0], ref, atol=1e-6)
    np.testing.assert_allclose(out[1], ref, atol=1e-6)
    # learned table: positions past the table reuse its last row
    learned = embeddings.PositionalEncoding(4, "learned", max_position=5)
    learned.build((None, None, 4))
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    learned.table.assign(table)
    out = learned(tf.zeros((1, 4, 4)), offset=3).numpy()[0]
    np.testing.assert_array_equal(out, table[[3, 4, 4, 4]])


# ---------------------------------------------------------------------------------------
# 6. label smoothing
# ---------------------------------------------------------------------------------------
def test_smooth_labels_kyubyong_example():
    onehot = tf.constant([[0, 0, 1], [0, 1, 0], [1, 0, 0]], tf.float32)
    out = optimization.smooth_labels(onehot, 0.1).numpy()
    np.testing.assert_allclose(
        out,
        [[0.0333, 0.0333, 0.9333], [0.0333, 0.9333, 0.0333], [0.9333, 0.0333, 0.0333]],
        atol=1e-4,
    )
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-6)


def test_smoothed_cross_entropy_matches_direct():
    rng = np.random.default_rng(9)
    V, n = 7, 10
    logits = tf.constant(rng.normal(scale=3.0, size=(n, V)).astype(np.float32))
    labels = tf.constant(rng.integers(0, V, size=n).astype(np.int32))
    for eps in (0.1, 0.3):
        direct = -tf.reduce_sum(
            optimization.smooth_labels(tf.one_hot(labels, V), eps) * tf.nn.log_softmax(logits),
            axis=-1,
        )
        got = optimization.smoothed_cross_entropy(logits, labels, eps)
        assert got.shape == (n,)
        np.testing.assert_allclose(got.numpy(), direct.numpy(), atol=1e-5)
    sparse = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    np.testing.assert_allclose(
        optimization.smoothed_cross_entropy(logits, labels, 0.0).numpy(), sparse.numpy(), atol=1e-5
    )
    loss, nll = optimization.smoothed_cross_entropy(logits, labels, 0.1, with_nll=True)
    np.testing.assert_allclose(nll.numpy(), sparse.numpy(), atol=1e-5)
    np.testing.assert_allclose(
        loss.numpy(), optimization.smoothed_cross_entropy(logits, labels, 0.1).numpy(), atol=1e-6
    )
    assert np.all(np.abs(loss.numpy() - nll.numpy()) > 1e-4)  # smoothing does something


def test_smoothed_cross_entropy_extreme_logits():
    """lse is read off the softmax (max(z) - log(max(p))): still exact when the label's
    probability underflows to 0 in float32, and for huge logits."""
    logits = tf.constant([[0.0, 300.0, -50.0], [1e4, 1e4 - 150.0, 1e4 - 1.0]], tf.float32)
    labels = tf.constant([2, 1], tf.int32)
    loss, nll = optimization.smoothed_cross_entropy(logits, labels, 0.1, with_nll=True)
    np.testing.assert_allclose(nll.numpy(), [350.0, 150.0 + np.log1p(np.exp(-1.0))], rtol=1e-5)
    lse = np.array([300.0, 1e4 + np.log1p(np.exp(-1.0))])
    mean = logits.numpy().astype(np.float64).mean(-1)
    np.testing.assert_allclose(loss.numpy(), 0.9 * nll.numpy() + 0.1 * (lse - mean), rtol=1e-5)


def test_cross_entropy_terms_correct():
    """The third term is 1 where the label's logit is the largest (ties included), and
    the first two are smoothed_cross_entropy's."""
    logits = tf.constant([[1.0, 3.0, 2.0], [2.0, 2.0, 0.0], [5.0, 1.0, 4.9], [0.0, 0.0, 0.1]])
    labels = tf.constant([1, 0, 2, 1])
    loss, nll, correct = optimization.cross_entropy_terms(logits, labels, 0.1)
    np.testing.assert_array_equal(correct.numpy(), [1.0, 1.0, 0.0, 0.0])
    ref_loss, ref_nll = optimization.smoothed_cross_entropy(logits, labels, 0.1, with_nll=True)
    np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), rtol=1e-6)
    np.testing.assert_allclose(nll.numpy(), ref_nll.numpy(), rtol=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_smoothed_cross_entropy_gradient(eps):
    """The hand-written gradient equals autodiff of the direct one-hot formula, for any
    mix of the loss and nll outputs, and the analytic form p - (1-eps) onehot - eps/V."""
    rng = np.random.default_rng(10)
    V, n = 9, 12
    logits = tf.constant(rng.normal(scale=3.0, size=(n, V)).astype(np.float32))
    labels = tf.constant(rng.integers(0, V, size=n).astype(np.int32))
    a = tf.constant(rng.uniform(0.5, 2.0, size=n).astype(np.float32))  # weights
    b = tf.constant(rng.uniform(0.0, 1.0, size=n).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        loss, nll = optimization.smoothed_cross_entropy(logits, labels, eps, with_nll=True)
        ours = tf.reduce_sum(a * loss + b * nll)
        logp = tf.nn.log_softmax(logits)
        onehot = tf.one_hot(labels, V)
        direct = tf.reduce_sum(
            -a * tf.reduce_sum(optimization.smooth_labels(onehot, eps) * logp, -1)
            - b * tf.reduce_sum(onehot * logp, -1)
        )
    g_ours, g_direct = tape.gradient(ours, logits), tape.gradient(direct, logits)
    np.testing.assert_allclose(float(ours), float(direct), rtol=1e-5)
    np.testing.assert_allclose(g_ours.numpy(), g_direct.numpy(), atol=1e-5)
    p = tf.nn.softmax(logits).numpy()
    analytic = a.numpy()[:, None] * (p - (1 - eps) * onehot.numpy() - eps / V) + b.numpy()[
        :, None
    ] * (p - onehot.numpy())
    np.testing.assert_allclose(g_ours.numpy(), analytic, atol=1e-5)


# ---------------------------------------------------------------------------------------
# 7. learning-rate schedules
# ---------------------------------------------------------------------------------------
def test_noam_schedule():
    d, w = 512, 4000
    sched = optimization.TransformerSchedule("noam", d_model=d, warmup_steps=w)
    steps = np.arange(1, 20001)
    lr = sched(tf.constant(steps - 1)).numpy()  # iterations count from 0
    assert int(steps[np.argmax(lr)]) == w
    for s in (1, 100, 3999, 4000, 4001, 10000, 20000):
        ref = d**-0.5 * min(s**-0.5, s * w**-1.5)
        np.testing.assert_allclose(lr[s - 1], ref, rtol=1e-5)
        np.testing.assert_allclose(float(sched(s - 1)), ref, rtol=1e-5)
    np.testing.assert_allclose(lr.max(), d**-0.5 * w**-0.5, rtol=1e-5)
    assert np.all(np.diff(lr[:w]) > 0) and np.all(np.diff(lr[w:]) < 0)
    # a keras optimizer variable (int64 iterations) works too
    np.testing.assert_allclose(
        float(sched(tf.Variable(0, dtype=tf.int64))), d**-0.5 * w**-1.5, rtol=1e-5
    )


def test_kyubyong_and_constant_schedules():
    w, peak = 400, 5e-4
    ky = optimization.TransformerSchedule("kyubyong", d_model=128, warmup_steps=w, lr=peak)
    lr = ky(tf.range(0, 5000)).numpy()
    assert int(np.argmax(lr)) + 1 == w
    np.testing.assert_allclose(lr.max(), peak, rtol=1e-5)
    np.testing.assert_allclose(lr[w - 1], peak, rtol=1e-5)
    np.testing.assert_allclose(lr[99], peak * w**0.5 * 100 * w**-1.5, rtol=1e-5)
    np.testing.assert_allclose(lr[3999], peak * w**0.5 * 4000**-0.5, rtol=1e-5)
    const = optimization.TransformerSchedule("constant", lr=3e-4)
    c = const(tf.range(0, 1000)).numpy()
    np.testing.assert_allclose(c, 3e-4, rtol=1e-6)


def test_schedule_config_round_trip():
    for kind in ("noam", "kyubyong", "constant"):
        s = optimization.TransformerSchedule(kind, d_model=256, warmup_steps=123, lr=7e-4)
        cfg = s.get_config()
        assert cfg == {
            "kind": kind,
            "d_model": 256,
            "warmup_steps": 123,
            "lr": 7e-4,
            "cooldown": 0.2,
        }
        s2 = optimization.TransformerSchedule.from_config(cfg)
        steps = tf.constant([0, 50, 122, 500])
        np.testing.assert_array_equal(s(steps).numpy(), s2(steps).numpy())
        s3 = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(s))
        assert isinstance(s3, optimization.TransformerSchedule)
        np.testing.assert_array_equal(s(steps).numpy(), s3(steps).numpy())


# ---------------------------------------------------------------------------------------
# 10. mask value under reduced precision
# ---------------------------------------------------------------------------------------
def test_mask_value_finite_in_half_precision():
    assert np.isfinite(np.float16(attention.MASK_VALUE))
    bf16 = tf.cast(tf.constant(attention.MASK_VALUE), tf.bfloat16)
    assert np.isfinite(bf16.numpy().astype(np.float32))
    assert np.isfinite(tf.cast(tf.constant(attention.MASK_VALUE), tf.float16).numpy())
    assert math.exp(attention.MASK_VALUE) == 0.0 or math.exp(attention.MASK_VALUE) < 1e-300


def test_attention_mask_in_bfloat16():
    rng = np.random.default_rng(17)
    q, k, v = (tf.constant(rng.normal(scale=4.0, size=(2, 2, 4, 8)), tf.bfloat16) for _ in range(3))
    visible = 2
    mask = tf.constant(np.arange(4) == visible)[None, None, None, :]  # (1, 1, 1, T_k)
    # make one masked key very attractive: masking must still win
    k = tf.tensor_scatter_nd_update(k, [[0, 0, 0]], tf.fill((1, 8), tf.constant(30.0, tf.bfloat16)))
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask=mask)
    assert weights.dtype == tf.float32 and out.dtype == tf.bfloat16
    w = weights.numpy()
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w[..., visible], 1.0, atol=1e-6)
    np.testing.assert_allclose(np.delete(w, visible, axis=-1), 0.0, atol=1e-6)
    expected = np.broadcast_to(v.numpy().astype(np.float32)[:, :, visible : visible + 1], out.shape)
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected, rtol=1e-2, atol=1e-2)


def test_mixed_bfloat16_layer_padding():
    """A MultiHeadAttention under the mixed_bfloat16 policy ignores PAD keys."""
    layer = attention.MultiHeadAttention(16, 2, dtype="mixed_bfloat16")
    rng = np.random.default_rng(18)
    x = tf.constant(rng.normal(size=(1, 5, 16)).astype(np.float32))
    ids = tf.constant([[5, 6, 0, 0, 0]])
    out, w = layer(x, x, attention.padding_mask(ids), return_attention=True)
    assert out.dtype == tf.bfloat16
    np.testing.assert_allclose(w.numpy()[..., 2:], 0.0, atol=1e-6)
    np.testing.assert_allclose(w.numpy().sum(-1), 1.0, atol=1e-5)


def test_attention_bias_is_added_to_the_logits():
    """``bias`` enters before the softmax (and the mask): zeros change nothing, a large
    negative bias on a key works like masking it, and the result is the numpy formula."""
    rng = np.random.default_rng(21)
    q, k, v = (tf.constant(rng.normal(size=(1, 2, 3, 4)).astype(np.float32)) for _ in range(3))
    bias = rng.normal(size=(1, 2, 3, 3)).astype(np.float32)
    plain, w_plain = attention.scaled_dot_product_attention(q, k, v)
    zero, w_zero = attention.scaled_dot_product_attention(q, k, v, bias=tf.zeros((1, 1, 3, 3)))
    np.testing.assert_array_equal(zero.numpy(), plain.numpy())
    np.testing.assert_array_equal(w_zero.numpy(), w_plain.numpy())
    out, w = attention.scaled_dot_product_attention(q, k, v, bias=tf.constant(bias))
    s = np.einsum("nhqd,nhkd->nhqk", q.numpy(), k.numpy()) / 2.0 + bias
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(w.numpy(), p, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), p @ v.numpy(), atol=1e-5)
    hide = np.zeros((1, 1, 1, 3), np.float32)
    hide[..., 1] = attention.MASK_VALUE
    mask = tf.constant([True, False, True])[None, None, None, :]
    masked, _ = attention.scaled_dot_product_attention(q, k, v, mask=mask)
    biased, _ = attention.scaled_dot_product_attention(q, k, v, bias=tf.constant(hide))
    np.testing.assert_allclose(biased.numpy(), masked.numpy(), atol=1e-6)


def test_decoder_layer_step_appends_and_reads_memory_rows():
    """A decoding step appends one position of self-attention keys/values; with
    memory_rows, row r attends over row memory_rows[r] of the cross-attention keys/values
    and of the memory mask, as a step over those rows gathered does."""
    layer = modules.DecoderLayer(d_model=8, num_heads=2, d_ff=16, dropout_rate=0.0)
    layer.build((None, None, 8), (None, None, 8))
    cache = layer.init_cache(tf.random.normal((3, 4, 8)))
    # nothing decoded yet: no self-attention keys; the memory's 4 positions cached
    assert cache["k"].shape == (3, 2, 0, 4) and cache["cross_k"].shape == (3, 2, 4, 4)
    mask = tf.constant([[True] * 4, [True, True, False, False], [True] * 3 + [False]])
    mask = mask[:, None, None, :]
    for step in range(5):
        _, cache = layer.step(tf.random.normal((3, 1, 8)), cache, step, mask)
    assert cache["k"].shape == (3, 2, 5, 4)  # one position appended per step
    rows = tf.constant([2, 1, 1, 0])
    x = tf.random.normal((4, 1, 8))
    picked = dict(cache, k=tf.gather(cache["k"], rows), v=tf.gather(cache["v"], rows))
    out, _ = layer.step(x, picked, 5, mask, memory_rows=rows)
    gathered = {key: tf.gather(t, rows) for key, t in cache.items()}
    expected, _ = layer.step(x, gathered, 5, tf.gather(mask, rows))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), atol=1e-6)
    unread, _ = layer.step(x, picked, 5, mask, memory_rows=tf.constant([0, 1, 1, 0]))
    assert np.abs(unread.numpy()[0] - out.numpy()[0]).max() > 1e-3  # the rows matter


# ---------------------------------------------------------------------------------------
# the model-variant hook
# ---------------------------------------------------------------------------------------
def test_variant_defaults_are_the_papers_transformer():
    """The base hook builds the paper's layers and adds nothing: no extra loss, no
    optimizer groups, no summaries, no specs lines."""
    variant = variants.Variant()
    assert variant.name == "transformer"
    args = dict(d_model=16, num_heads=2, d_ff=32, dropout_rate=0.1)
    encoder = variant.encoder_layer(**args, name="encoder_0")
    decoder = variant.decoder_layer(**args, name="decoder_0")
    assert type(encoder) is modules.EncoderLayer and type(decoder) is modules.DecoderLayer
    assert isinstance(encoder.ffn, modules.FeedForward)
    assert isinstance(decoder.cross_attn, attention.MultiHeadAttention)
    extra = variant.training.extra_loss(None, {})
    assert extra.dtype == tf.float32 and float(extra) == 0.0
    assert variant.training.optimizer_groups(None, None) == {}
    assert variant.specs_lines(None) == []
    assert variant.training.summaries(None, 1, {}) is None


def op_count(fn, *specs) -> int:
    """How many ops fn's trace on ``specs`` has, its inner functions' included."""
    return len(graph_nodes(tf.function(fn).get_concrete_function(*specs).graph.as_graph_def()))


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_feed_forward_is_two_keras_dense_layers_bit_for_bit_with_fewer_ops(policy):
    """FFN (3.3) gives the output and every gradient of keras.layers.Dense(d_ff, relu)
    then Dense(d_model) on its own weights exactly, with fewer ops in a trace. (The
    policy is global, as train.py sets it: the Dense layers take it too.)"""
    keras.mixed_precision.set_global_policy(policy)  # the conftest fixture restores it
    ffn = modules.FeedForward(16, 40)
    ffn.build((None, None, 16))
    x = tf.constant(np.random.default_rng(5).normal(size=(3, 7, 16)).astype(np.float32))

    def with_gradients(layers):
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.cast(layers(x), tf.float32)
                loss = tf.reduce_sum(y * y)
            return [y, *tape.gradient(loss, [x, *ffn.trainable_variables])]

        return run

    def dense(x):
        return ffn.outer(ffn.inner(x))

    spec = tf.TensorSpec((None, None, 16))
    for ours, keras_value in zip(
        tf.function(with_gradients(ffn))(x), tf.function(with_gradients(dense))(x)
    ):
        np.testing.assert_array_equal(ours.numpy(), keras_value.numpy())
    assert op_count(ffn, spec) < 0.6 * op_count(dense, spec)


def test_adam_updates_as_keras_adam_bit_for_bit_with_fewer_ops():
    """optimization.Adam computes the step's scalars once per dtype: every weight and slot
    equals keras.optimizers.Adam's exactly over 3 steps (float32 and float16 weights, the
    paper's betas and epsilon, a schedule), and a traced update has fewer ops."""
    rng = np.random.default_rng(0)
    shapes = [((5, 3), "float32"), ((7,), "float32"), ((4, 2), "float16")] * 4
    inits = [rng.normal(size=s).astype(d) for s, d in shapes]
    grads = [[rng.normal(size=s).astype(d) for s, d in shapes] for _ in range(3)]
    schedule = optimization.TransformerSchedule("noam", d_model=32, warmup_steps=4)
    runs, ops = [], []
    for cls in (keras.optimizers.Adam, optimization.Adam):
        weights = [keras.Variable(w, dtype=w.dtype) for w in inits]
        opt = cls(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        opt.build(weights)
        step = tf.function(updater(opt, weights))
        for g in grads:
            step([tf.constant(x) for x in g])
        ops.append(op_count(updater(opt, weights), [tf.constant(x) for x in grads[0]]))
        runs.append([w.numpy() for w in weights + opt.variables])
    for keras_value, ours in zip(*runs):
        np.testing.assert_array_equal(ours, keras_value)
    assert ops[1] < 0.75 * ops[0], ops


def updater(optimizer, weights):
    """A function of the gradients that applies them to ``weights``."""

    def update(grads):
        optimizer.apply(grads, weights)

    return update
