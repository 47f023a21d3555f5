"""Numerical tests of modules.py and model.py (tiny models, CPU, well under 90 s).

Each test checks real numbers: the worked self-attention example, the sinusoid formula,
causality, padding invariance, incremental == full decoding, label smoothing, the
learning-rate schedules, the exact parameter count, serialization, mixed-precision masks
and a small training run that has to learn a toy mapping.
"""
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

import model as MD  # noqa: E402
import modules as M  # noqa: E402
from prepro import BOS_ID, EOS_ID, PAD_ID  # noqa: E402


def tiny(src_vocab=23, tgt_vocab=23, seed=0, **kw):
    """A small built Transformer with random weights (dropout is off at inference)."""
    keras.utils.set_random_seed(seed)
    args = dict(d_model=32, d_ff=64, num_blocks=2, num_heads=4,
                share_embeddings=src_vocab == tgt_vocab)
    args.update(kw)
    m = MD.Transformer(src_vocab, tgt_vocab, **args)
    m.build_all()
    return m


def rand_ids(rng, shape, vocab, low=4):
    """Random real tokens (no PAD/BOS/EOS/UNK)."""
    return rng.integers(low, vocab, size=shape).astype(np.int32)


# ---------------------------------------------------------------------------------------
# masks
# ---------------------------------------------------------------------------------------
def test_padding_mask_shape_and_values():
    ids = tf.constant([[5, 7, 0, 0], [4, 0, 6, 0]], tf.int32)
    mask = M.padding_mask(ids)
    assert mask.shape == (2, 1, 1, 4)
    assert mask.dtype == tf.bool
    np.testing.assert_array_equal(
        mask.numpy()[:, 0, 0], [[True, True, False, False], [True, False, True, False]])


def test_causal_mask_shape_and_values():
    mask = M.causal_mask(4)
    assert mask.shape == (1, 1, 4, 4)
    assert mask.dtype == tf.bool
    np.testing.assert_array_equal(mask.numpy()[0, 0], np.tril(np.ones((4, 4), bool)))
    # also with a dynamic (tensor) length, as used by Transformer.decode
    np.testing.assert_array_equal(M.causal_mask(tf.constant(3)).numpy()[0, 0],
                                  np.tril(np.ones((3, 3), bool)))


# ---------------------------------------------------------------------------------------
# 1. the worked self-attention example, through MultiHeadAttention's own code path
# ---------------------------------------------------------------------------------------
X_EX = np.array([[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]], np.float32)
WK_EX = np.array([[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]], np.float32)
WQ_EX = np.array([[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]], np.float32)
WV_EX = np.array([[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]], np.float32)
OUT_EX = np.array([[1.9366, 6.6831, 1.5951],
                   [2.0, 7.9640, 0.0540],
                   [1.9997, 7.7599, 0.3584]], np.float32)


def _pad_col(w):
    """4x3 -> 4x4 with a zero 4th column (the layer's weights are d_model x d_model)."""
    return np.concatenate([w, np.zeros((4, 1), np.float32)], axis=1)


def test_worked_self_attention_example():
    layer = M.MultiHeadAttention(d_model=4, num_heads=1, scale=False)
    layer.build((None, None, 4), (None, None, 4))
    layer.w_q.assign(_pad_col(WQ_EX))
    layer.w_k.assign(_pad_col(WK_EX))
    layer.w_v.assign(_pad_col(WV_EX))
    layer.w_o.assign(np.eye(4, dtype=np.float32))
    x = tf.constant(X_EX[None])                                    # (1, 3, 4)
    out, weights = layer(x, x, return_attention=True)
    out, weights = out.numpy()[0], weights.numpy()[0, 0]
    assert out.shape == (3, 4) and weights.shape == (3, 3)
    np.testing.assert_allclose(out[:, :3], OUT_EX, atol=1e-4)
    np.testing.assert_allclose(out[:, 3], 0.0, atol=1e-6)          # the zero padding column
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
    q, k, v = (tf.constant(rng.normal(size=(2, 3, 5, 8)).astype(np.float32))
               for _ in range(3))
    out_s, w_s = M.scaled_dot_product_attention(q, k, v, scale=True)
    out_u, w_u = M.scaled_dot_product_attention(q / math.sqrt(8.0), k, v, scale=False)
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
    positions = np.array([0, 1, 37, 500, 2000])
    pe = M.sinusoid_encoding(tf.constant(positions), d_model).numpy()
    assert pe.shape == (len(positions), d_model) and pe.dtype == np.float32
    dims = np.arange(d_model)
    angle = positions[:, None].astype(np.float64) / 10000.0 ** (2 * (dims // 2) / d_model)
    ref = np.where(dims % 2 == 0, np.sin(angle), np.cos(angle))
    # float32 angles: absolute error grows like pos * eps
    tol = 1e-6 + 1e-7 * positions[:, None]
    assert np.all(np.abs(pe - ref) <= tol), np.max(np.abs(pe - ref))
    # explicit spot checks
    np.testing.assert_allclose(pe[0, 0::2], 0.0, atol=1e-7)               # sin(0)
    np.testing.assert_allclose(pe[0, 1::2], 1.0, atol=1e-7)               # cos(0)
    np.testing.assert_allclose(pe[1, 0], math.sin(1.0), atol=1e-6)
    np.testing.assert_allclose(pe[1, 1], math.cos(1.0), atol=1e-6)
    np.testing.assert_allclose(pe[2, 2], math.sin(37 / 10000 ** (2 / d_model)), atol=1e-5)
    np.testing.assert_allclose(pe[3, 5], math.cos(500 / 10000 ** (4 / d_model)), atol=1e-4)
    np.testing.assert_allclose(pe[4, d_model - 1],
                               math.cos(2000 / 10000 ** ((d_model - 2) / d_model)), atol=1e-4)


def test_token_embedding_scaling_pad_and_tied_logits():
    emb = M.TokenEmbedding(6, 4)
    emb.build()
    assert emb.embeddings.shape == (8, 4)      # rows rounded up to a multiple of 8
    table = np.arange(32, dtype=np.float32).reshape(8, 4) / 10.0
    emb.embeddings.assign(table)
    ids = tf.constant([[3, 0, 5]])
    out = emb(ids).numpy()[0]
    np.testing.assert_allclose(out[0], table[3] * 2.0, atol=1e-6)      # * sqrt(d_model)
    np.testing.assert_array_equal(out[1], 0.0)                          # PAD gives zeros
    np.testing.assert_allclose(out[2], table[5] * 2.0, atol=1e-6)
    h = np.array([[1.0, -1.0, 0.5, 2.0]], np.float32)
    logits = emb.logits(tf.constant(h))
    assert logits.dtype == tf.float32 and logits.shape == (1, 6)   # the 6 real ids only
    np.testing.assert_allclose(logits.numpy(), h @ table[:6].T, atol=1e-5)
    # a vocabulary that is a multiple of 8 gets no extra rows
    emb16 = M.TokenEmbedding(16, 4)
    emb16.build()
    assert emb16.embeddings.shape == (16, 4)


def test_positional_encoding_layer_offset():
    """PositionalEncoding adds rows starting at ``offset`` (used by decode_step)."""
    layer = M.PositionalEncoding(16, "sinusoid")
    x = tf.zeros((2, 3, 16))
    out = layer(x, offset=1998).numpy()
    ref = M.sinusoid_encoding(tf.range(1998, 2001), 16).numpy()
    np.testing.assert_allclose(out[0], ref, atol=1e-6)
    np.testing.assert_allclose(out[1], ref, atol=1e-6)
    # learned table: positions past the table reuse its last row
    learned = M.PositionalEncoding(4, "learned", max_position=5)
    learned.build((None, None, 4))
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    learned.table.assign(table)
    out = learned(tf.zeros((1, 4, 4)), offset=3).numpy()[0]
    np.testing.assert_array_equal(out, table[[3, 4, 4, 4]])


# ---------------------------------------------------------------------------------------
# 3-4. causality and padding invariance
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_is_causal(norm):
    V = 23
    m = tiny(V, V, norm=norm)
    rng = np.random.default_rng(2)
    src = rand_ids(rng, (2, 6), V)
    tgt = rand_ids(rng, (2, 7), V)
    base = m((src, tgt)).numpy()
    for t in (0, 3, 5):
        changed = tgt.copy()
        changed[:, t + 1:] = rand_ids(rng, changed[:, t + 1:].shape, V)
        changed[:, t + 1:] = np.where(changed[:, t + 1:] == tgt[:, t + 1:],
                                      (changed[:, t + 1:] - 4 + 1) % (V - 4) + 4,
                                      changed[:, t + 1:])
        assert np.all(changed[:, t + 1:] != tgt[:, t + 1:])
        out = m((src, changed)).numpy()
        np.testing.assert_allclose(out[:, :t + 1], base[:, :t + 1], atol=1e-5)
        # and the change is visible later (the test is not vacuous)
        assert np.max(np.abs(out[:, t + 1:] - base[:, t + 1:])) > 1e-3


def test_padding_invariance():
    V = 23
    m = tiny(V, V)
    rng = np.random.default_rng(3)
    src = rand_ids(rng, (2, 5), V)
    tgt = rand_ids(rng, (2, 6), V)
    base = m((src, tgt)).numpy()
    # PAD appended to the source changes nothing
    src_padded = np.concatenate([src, np.zeros((2, 4), np.int32)], axis=1)
    np.testing.assert_allclose(m((src_padded, tgt)).numpy(), base, atol=1e-5)
    # PAD appended to the target input leaves the real positions unchanged
    tgt_padded = np.concatenate([tgt, np.zeros((2, 3), np.int32)], axis=1)
    out = m((src, tgt_padded)).numpy()
    assert out.shape == (2, 9, V)
    np.testing.assert_allclose(out[:, :6], base, atol=1e-5)
    # a different real source token does change the output (not vacuous)
    other = src.copy()
    other[:, 2] = (other[:, 2] - 4 + 1) % (V - 4) + 4
    assert np.max(np.abs(m((other, tgt)).numpy() - base)) > 1e-3
    # batch padding: a short sentence padded in a batch equals it alone
    short = src[:1, :3]
    alone = m((short, tgt[:1])).numpy()
    in_batch = m((np.concatenate([np.pad(short, ((0, 0), (0, 2))), src[1:]]), tgt)).numpy()
    np.testing.assert_allclose(in_batch[:1], alone, atol=1e-5)


# ---------------------------------------------------------------------------------------
# 5. incremental decoding
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm,position", [("post", "sinusoid"), ("pre", "sinusoid"),
                                           ("post", "learned"), ("pre", "learned")])
def test_incremental_decoding_matches_full(norm, position):
    V = 19
    m = tiny(V, V, norm=norm, position=position, seed=5)
    rng = np.random.default_rng(4)
    src = rand_ids(rng, (3, 7), V)
    src[0, 4:] = PAD_ID      # lengths 4, 7, 2
    src[2, 2:] = PAD_ID
    T2 = 6
    tgt = np.concatenate([np.full((3, 1), BOS_ID, np.int32), rand_ids(rng, (3, T2 - 1), V)],
                         axis=1)
    check_cached_equals_full(m, src, tgt)


def check_cached_equals_full(m, src, tgt):
    """decode_step with the cache gives the logits of the full teacher-forced pass."""
    full = m((src, tgt)).numpy()
    memory, mask = m.encode(src)
    cache = m.init_cache(memory, mask, tgt.shape[1])
    for t in range(tgt.shape[1]):
        logits, cache = m.decode_step(tf.constant(tgt[:, t]), cache)
        assert logits.shape == full[:, t].shape and logits.dtype == tf.float32
        np.testing.assert_allclose(logits.numpy(), full[:, t], atol=1e-5,
                                   err_msg=f"position {t}")
    assert int(cache["step"]) == tgt.shape[1]


@pytest.mark.parametrize("position,max_position", [("sinusoid", 1024), ("learned", 6)])
def test_greedy_decoder_matches_naive(position, max_position):
    V = 11
    m = tiny(V, V, seed=7, position=position, max_position=max_position)
    rng = np.random.default_rng(8)
    src = rand_ids(rng, (3, 5), V)
    src[1, 3:] = PAD_ID
    extra = 3
    # the budget is source length + extra, capped by a learned position table
    L = min(src.shape[1] + extra, max_position)
    limits = np.minimum((src != PAD_ID).sum(axis=1) + extra, max_position)
    fast = MD.greedy_decoder(m)(tf.constant(src), tf.constant(extra, tf.int32)).numpy()
    slow = MD.naive_greedy(m, src, L, limits)
    assert slow.shape == (3, L)
    assert 1 <= fast.shape[1] <= L
    np.testing.assert_array_equal(fast, slow[:, :fast.shape[1]])
    # the cached decoder stops early only when every row has emitted </S>
    if fast.shape[1] < L:
        assert np.all((fast == EOS_ID).any(axis=1))
        assert np.all(slow[:, fast.shape[1]:] == PAD_ID)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_mixed_bfloat16_model(norm):
    """Under mixed_bfloat16 the logits are float32, close to the float32 model with the
    same weights, and incremental decoding still matches the full pass."""
    V = 19
    rng = np.random.default_rng(19)
    src = rand_ids(rng, (3, 6), V)
    src[0, 3:] = PAD_ID
    tgt = rand_ids(rng, (3, 5), V)
    ref_model = tiny(V, V, norm=norm, seed=20)
    ref = ref_model((src, tgt)).numpy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        m = tiny(V, V, norm=norm, seed=21)
        m.set_weights(ref_model.get_weights())
        assert m.tgt_embedding.compute_dtype == "bfloat16"
        full = m((src, tgt))
        assert full.dtype == tf.float32
        full = full.numpy()
        memory, mask = m.encode(src)
        cache = m.init_cache(memory, mask, 5)
        for t in range(5):
            logits, cache = m.decode_step(tf.constant(tgt[:, t]), cache)
            assert logits.dtype == tf.float32
            np.testing.assert_allclose(logits.numpy(), full[:, t], atol=2e-2)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.all(np.isfinite(full))
    # bfloat16 has 8 bits of mantissa: agree with float32 to a few percent of the scale
    assert np.max(np.abs(full - ref)) < 0.1 * max(1.0, np.max(np.abs(ref))), \
        np.max(np.abs(full - ref))


# ---------------------------------------------------------------------------------------
# 6. label smoothing
# ---------------------------------------------------------------------------------------
def test_smooth_labels_kyubyong_example():
    onehot = tf.constant([[0, 0, 1], [0, 1, 0], [1, 0, 0]], tf.float32)
    out = M.smooth_labels(onehot, 0.1).numpy()
    np.testing.assert_allclose(out, [[0.0333, 0.0333, 0.9333],
                                     [0.0333, 0.9333, 0.0333],
                                     [0.9333, 0.0333, 0.0333]], atol=1e-4)
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-6)


def test_smoothed_cross_entropy_matches_direct():
    rng = np.random.default_rng(9)
    V, n = 7, 10
    logits = tf.constant(rng.normal(scale=3.0, size=(n, V)).astype(np.float32))
    labels = tf.constant(rng.integers(0, V, size=n).astype(np.int32))
    for eps in (0.1, 0.3):
        direct = -tf.reduce_sum(M.smooth_labels(tf.one_hot(labels, V), eps)
                                * tf.nn.log_softmax(logits), axis=-1)
        got = M.smoothed_cross_entropy(logits, labels, eps)
        assert got.shape == (n,)
        np.testing.assert_allclose(got.numpy(), direct.numpy(), atol=1e-5)
    sparse = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    np.testing.assert_allclose(M.smoothed_cross_entropy(logits, labels, 0.0).numpy(),
                               sparse.numpy(), atol=1e-5)
    loss, nll = M.smoothed_cross_entropy(logits, labels, 0.1, with_nll=True)
    np.testing.assert_allclose(nll.numpy(), sparse.numpy(), atol=1e-5)
    np.testing.assert_allclose(loss.numpy(),
                               M.smoothed_cross_entropy(logits, labels, 0.1).numpy(), atol=1e-6)
    assert np.all(np.abs(loss.numpy() - nll.numpy()) > 1e-4)   # smoothing does something


def test_smoothed_cross_entropy_extreme_logits():
    """lse is read off the softmax (max(z) - log(max(p))): still exact when the label's
    probability underflows to 0 in float32, and for huge logits."""
    logits = tf.constant([[0.0, 300.0, -50.0], [1e4, 1e4 - 150.0, 1e4 - 1.0]], tf.float32)
    labels = tf.constant([2, 1], tf.int32)
    loss, nll = M.smoothed_cross_entropy(logits, labels, 0.1, with_nll=True)
    np.testing.assert_allclose(nll.numpy(), [350.0, 150.0 + np.log1p(np.exp(-1.0))],
                               rtol=1e-5)
    lse = np.array([300.0, 1e4 + np.log1p(np.exp(-1.0))])
    mean = logits.numpy().astype(np.float64).mean(-1)
    np.testing.assert_allclose(loss.numpy(), 0.9 * nll.numpy() + 0.1 * (lse - mean),
                               rtol=1e-5)


def test_cross_entropy_terms_correct():
    """The third term is 1 where the label's logit is the largest (ties included), and
    the first two are smoothed_cross_entropy's."""
    logits = tf.constant([[1.0, 3.0, 2.0], [2.0, 2.0, 0.0], [5.0, 1.0, 4.9],
                          [0.0, 0.0, 0.1]])
    labels = tf.constant([1, 0, 2, 1])
    loss, nll, correct = M.cross_entropy_terms(logits, labels, 0.1)
    np.testing.assert_array_equal(correct.numpy(), [1.0, 1.0, 0.0, 0.0])
    ref_loss, ref_nll = M.smoothed_cross_entropy(logits, labels, 0.1, with_nll=True)
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
    a = tf.constant(rng.uniform(0.5, 2.0, size=n).astype(np.float32))   # weights
    b = tf.constant(rng.uniform(0.0, 1.0, size=n).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        loss, nll = M.smoothed_cross_entropy(logits, labels, eps, with_nll=True)
        ours = tf.reduce_sum(a * loss + b * nll)
        logp = tf.nn.log_softmax(logits)
        onehot = tf.one_hot(labels, V)
        direct = tf.reduce_sum(-a * tf.reduce_sum(M.smooth_labels(onehot, eps) * logp, -1)
                               - b * tf.reduce_sum(onehot * logp, -1))
    g_ours, g_direct = tape.gradient(ours, logits), tape.gradient(direct, logits)
    np.testing.assert_allclose(float(ours), float(direct), rtol=1e-5)
    np.testing.assert_allclose(g_ours.numpy(), g_direct.numpy(), atol=1e-5)
    p = tf.nn.softmax(logits).numpy()
    analytic = a.numpy()[:, None] * (p - (1 - eps) * onehot.numpy() - eps / V) \
        + b.numpy()[:, None] * (p - onehot.numpy())
    np.testing.assert_allclose(g_ours.numpy(), analytic, atol=1e-5)


# ---------------------------------------------------------------------------------------
# 7. learning-rate schedules
# ---------------------------------------------------------------------------------------
def test_noam_schedule():
    d, w = 512, 4000
    sched = M.TransformerSchedule("noam", d_model=d, warmup_steps=w)
    steps = np.arange(1, 20001)
    lr = sched(tf.constant(steps - 1)).numpy()                # iterations count from 0
    assert int(steps[np.argmax(lr)]) == w
    for s in (1, 100, 3999, 4000, 4001, 10000, 20000):
        ref = d ** -0.5 * min(s ** -0.5, s * w ** -1.5)
        np.testing.assert_allclose(lr[s - 1], ref, rtol=1e-5)
        np.testing.assert_allclose(float(sched(s - 1)), ref, rtol=1e-5)
    np.testing.assert_allclose(lr.max(), d ** -0.5 * w ** -0.5, rtol=1e-5)
    assert np.all(np.diff(lr[:w]) > 0) and np.all(np.diff(lr[w:]) < 0)
    # a keras optimizer variable (int64 iterations) works too
    np.testing.assert_allclose(float(sched(tf.Variable(0, dtype=tf.int64))),
                               d ** -0.5 * w ** -1.5, rtol=1e-5)


def test_kyubyong_and_constant_schedules():
    w, peak = 400, 5e-4
    ky = M.TransformerSchedule("kyubyong", d_model=128, warmup_steps=w, lr=peak)
    lr = ky(tf.range(0, 5000)).numpy()
    assert int(np.argmax(lr)) + 1 == w
    np.testing.assert_allclose(lr.max(), peak, rtol=1e-5)
    np.testing.assert_allclose(lr[w - 1], peak, rtol=1e-5)
    np.testing.assert_allclose(lr[99], peak * w ** 0.5 * 100 * w ** -1.5, rtol=1e-5)
    np.testing.assert_allclose(lr[3999], peak * w ** 0.5 * 4000 ** -0.5, rtol=1e-5)
    const = M.TransformerSchedule("constant", lr=3e-4)
    c = const(tf.range(0, 1000)).numpy()
    np.testing.assert_allclose(c, 3e-4, rtol=1e-6)


def test_schedule_config_round_trip():
    for kind in ("noam", "kyubyong", "constant"):
        s = M.TransformerSchedule(kind, d_model=256, warmup_steps=123, lr=7e-4)
        cfg = s.get_config()
        assert cfg == {"kind": kind, "d_model": 256, "warmup_steps": 123, "lr": 7e-4}
        s2 = M.TransformerSchedule.from_config(cfg)
        steps = tf.constant([0, 50, 122, 500])
        np.testing.assert_array_equal(s(steps).numpy(), s2(steps).numpy())
        s3 = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(s))
        assert isinstance(s3, M.TransformerSchedule)
        np.testing.assert_array_equal(s(steps).numpy(), s3(steps).numpy())


# ---------------------------------------------------------------------------------------
# 8. parameter count
# ---------------------------------------------------------------------------------------
def analytic_count(src_vocab, tgt_vocab, d, d_ff, n, share=True, position="sinusoid",
                   max_position=1024, norm="post"):
    ln = 2 * d                                        # gamma and beta
    ffn = d * d_ff + d_ff + d_ff * d + d              # two Dense layers with biases
    enc_layer = 4 * d * d + ffn + 2 * ln              # W^Q, W^K, W^V, W^O; no biases
    dec_layer = 8 * d * d + ffn + 3 * ln              # self + cross attention
    def rows(v):                                      # rounded up to a multiple of 8
        return -(-v // 8) * 8
    emb = rows(tgt_vocab) * d if share else (rows(src_vocab) + rows(tgt_vocab)) * d
    pos = 2 * max_position * d if position == "learned" else 0      # src and tgt tables
    final = 2 * ln if norm == "pre" else 0
    return emb + pos + n * (enc_layer + dec_layer) + final


def test_parameter_count_base_model():
    m = MD.Transformer(32000, 32000, d_model=512, d_ff=2048, num_blocks=6, num_heads=8,
                       share_embeddings=True)
    m.build()
    expected = analytic_count(32000, 32000, 512, 2048, 6)
    # 16,384,000 + 6 * (3,150,336 + 4,199,936) = 60,485,632
    assert expected == 60_485_632
    assert m.count_params() == expected
    assert sum(int(np.prod(v.shape)) for v in m.weights) == expected
    assert m.src_embedding is m.tgt_embedding


@pytest.mark.parametrize("kw", [
    dict(src_vocab=301, tgt_vocab=257, share=False),
    dict(src_vocab=300, tgt_vocab=300, position="learned", max_position=64),
    dict(src_vocab=300, tgt_vocab=300, norm="pre"),
    dict(src_vocab=301, tgt_vocab=257, share=False, position="learned", max_position=50,
         norm="pre"),
])
def test_parameter_count_variants(kw):
    d, d_ff, n = 48, 96, 3
    m = MD.Transformer(kw["src_vocab"], kw["tgt_vocab"], d_model=d, d_ff=d_ff, num_blocks=n,
                       num_heads=4, share_embeddings=kw.get("share", True),
                       position=kw.get("position", "sinusoid"),
                       max_position=kw.get("max_position", 1024),
                       norm=kw.get("norm", "post"))
    m.build()
    expected = analytic_count(kw["src_vocab"], kw["tgt_vocab"], d, d_ff, n,
                              share=kw.get("share", True),
                              position=kw.get("position", "sinusoid"),
                              max_position=kw.get("max_position", 1024),
                              norm=kw.get("norm", "post"))
    assert m.count_params() == expected


def test_share_embeddings_requires_joint_vocab():
    with pytest.raises(ValueError):
        MD.Transformer(10, 12, d_model=8, d_ff=16, num_blocks=1, num_heads=2,
                       share_embeddings=True)


def test_summary_lines_end_with_total():
    m = tiny(23, 29)
    lines = m.summary_lines()
    total = sum(int(np.prod(v.shape)) for v in m.weights)
    assert total == analytic_count(23, 29, 32, 64, 2, share=False)
    assert lines[-1] == f"total parameters: {total:,}"
    assert len(lines) == len(m.weights) + 1


# ---------------------------------------------------------------------------------------
# 9. serialization
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("vocabs,kw", [((23, 23), dict(norm="pre", position="learned")),
                                       ((23, 29), dict())])
def test_checkpoint_round_trip(tmp_path, vocabs, kw):
    V1, V2 = vocabs
    rng = np.random.default_rng(10)
    src, tgt = rand_ids(rng, (2, 5), V1), rand_ids(rng, (2, 4), V2)
    m = tiny(V1, V2, seed=11, **kw)
    ref = m((src, tgt)).numpy()
    path = tf.train.Checkpoint(model=m).write(str(tmp_path / "ckpt"))
    fresh = tiny(V1, V2, seed=12, **kw)
    assert np.max(np.abs(fresh((src, tgt)).numpy() - ref)) > 1e-3   # different weights
    status = tf.train.Checkpoint(model=fresh).read(path)
    status.assert_existing_objects_matched()
    np.testing.assert_array_equal(fresh((src, tgt)).numpy(), ref)
    for a, b in zip(m.weights, fresh.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_keras_save_and_load(tmp_path):
    V1, V2 = 23, 29
    rng = np.random.default_rng(13)
    src, tgt = rand_ids(rng, (2, 5), V1), rand_ids(rng, (2, 4), V2)
    m = tiny(V1, V2, seed=14)
    ref = m((src, tgt)).numpy()
    path = str(tmp_path / "m.keras")
    m.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, MD.Transformer)
    assert loaded.get_config()["tgt_vocab_size"] == V2
    np.testing.assert_array_equal(loaded((src, tgt)).numpy(), ref)


def test_keras_save_and_load_shared_embeddings(tmp_path):
    V = 23
    rng = np.random.default_rng(15)
    src, tgt = rand_ids(rng, (2, 5), V), rand_ids(rng, (2, 4), V)
    m = tiny(V, V, seed=16)
    ref = m((src, tgt)).numpy()
    path = str(tmp_path / "m.keras")
    m.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.src_embedding is loaded.tgt_embedding
    np.testing.assert_array_equal(loaded((src, tgt)).numpy(), ref)


# ---------------------------------------------------------------------------------------
# 10. mask value under reduced precision
# ---------------------------------------------------------------------------------------
def test_mask_value_finite_in_half_precision():
    assert np.isfinite(np.float16(M.MASK_VALUE))
    assert np.isfinite(tf.cast(tf.constant(M.MASK_VALUE), tf.bfloat16).numpy().astype(np.float32))
    assert np.isfinite(tf.cast(tf.constant(M.MASK_VALUE), tf.float16).numpy())
    assert math.exp(M.MASK_VALUE) == 0.0 or math.exp(M.MASK_VALUE) < 1e-300


def test_attention_mask_in_bfloat16():
    rng = np.random.default_rng(17)
    q, k, v = (tf.constant(rng.normal(scale=4.0, size=(2, 2, 4, 8)), tf.bfloat16)
               for _ in range(3))
    visible = 2
    mask = tf.constant(np.arange(4) == visible)[None, None, None, :]   # (1, 1, 1, T_k)
    # make one masked key very attractive: masking must still win
    k = tf.tensor_scatter_nd_update(k, [[0, 0, 0]],
                                    tf.fill((1, 8), tf.constant(30.0, tf.bfloat16)))
    out, weights = M.scaled_dot_product_attention(q, k, v, mask=mask)
    assert weights.dtype == tf.float32 and out.dtype == tf.bfloat16
    w = weights.numpy()
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w[..., visible], 1.0, atol=1e-6)
    np.testing.assert_allclose(np.delete(w, visible, axis=-1), 0.0, atol=1e-6)
    expected = np.broadcast_to(v.numpy().astype(np.float32)[:, :, visible:visible + 1], out.shape)
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected, rtol=1e-2, atol=1e-2)


def test_mixed_bfloat16_layer_padding():
    """A MultiHeadAttention under the mixed_bfloat16 policy ignores PAD keys."""
    layer = M.MultiHeadAttention(16, 2, dtype="mixed_bfloat16")
    rng = np.random.default_rng(18)
    x = tf.constant(rng.normal(size=(1, 5, 16)).astype(np.float32))
    ids = tf.constant([[5, 6, 0, 0, 0]])
    out, w = layer(x, x, M.padding_mask(ids), return_attention=True)
    assert out.dtype == tf.bfloat16
    np.testing.assert_allclose(w.numpy()[..., 2:], 0.0, atol=1e-6)
    np.testing.assert_allclose(w.numpy().sum(-1), 1.0, atol=1e-5)


# ---------------------------------------------------------------------------------------
# 11. a real learning check
# ---------------------------------------------------------------------------------------
def test_training_learns_toy_mapping():
    keras.utils.set_random_seed(21)
    rng = np.random.default_rng(21)
    V, n_pairs, T1, T2 = 16, 20, 7, 7          # tokens 4..13 in the source, +1 in the target
    src = np.zeros((n_pairs, T1), np.int32)
    tgt_in = np.zeros((n_pairs, T2), np.int32)
    tgt_out = np.zeros((n_pairs, T2), np.int32)
    targets = []
    for i in range(n_pairs):
        n = int(rng.integers(3, 7))
        s = rng.integers(4, 14, size=n)
        y = list(s[::-1] + 1)
        src[i, :n], src[i, n] = s, EOS_ID
        tgt_in[i, :n + 1] = [BOS_ID] + y
        tgt_out[i, :n + 1] = y + [EOS_ID]
        targets.append(y + [EOS_ID])
    model = MD.Transformer(V, V, d_model=32, d_ff=64, num_blocks=1, num_heads=4,
                           dropout_rate=0.0, share_embeddings=True)
    model.build_all()
    opt = keras.optimizers.Adam(3e-3, beta_2=0.98, epsilon=1e-9)
    src_t, tin_t, tout_t = (tf.constant(a) for a in (src, tgt_in, tgt_out))

    def mean_loss(training):
        logits = model((src_t, tin_t), training=training)
        keep = tf.not_equal(tout_t, PAD_ID)
        return tf.reduce_mean(M.smoothed_cross_entropy(
            tf.boolean_mask(logits, keep), tf.boolean_mask(tout_t, keep), 0.0))

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = mean_loss(True)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    first = float(train_step())
    for step in range(600):
        loss = float(train_step())
        if step > 50 and loss < 0.02:
            break
    final = float(mean_loss(False))
    assert first > 1.5, first                    # started near log(V)
    assert final < 0.1, (step, final)
    out = MD.greedy_decoder(model)(src_t, tf.constant(5, tf.int32)).numpy()
    correct = 0
    for row, y in zip(out, targets):
        got = list(row[:len(y)])
        correct += got == y
    assert correct >= 18, (correct, out)


@pytest.mark.parametrize("jit", [False, True])
def test_fused_adam_matches_keras_adam(jit):
    """FusedAdam (ResourceApplyAdam) gives Keras Adam's updates step for step, with a
    schedule, under tf.function and XLA, and keeps the same slot variables."""
    rng = np.random.default_rng(11)
    shapes = [(3, 4), (5,)]
    init = [rng.normal(size=s).astype(np.float32) for s in shapes]
    grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(6)]
    results = []
    for cls in (keras.optimizers.Adam, M.FusedAdam):
        params = [keras.Variable(x, name=f"w{i}") for i, x in enumerate(init)]
        opt = cls(M.TransformerSchedule("noam", 64, 4), beta_1=0.9, beta_2=0.98,
                  epsilon=1e-9)
        opt.build(params)
        step = tf.function(lambda gs: opt.apply_gradients(zip(gs, params)), jit_compile=jit)
        for gs in grads:
            step([tf.constant(g) for g in gs])
        results.append(([p.numpy() for p in params],
                        [(v.path.split("/", 1)[1], v.numpy()) for v in opt.variables]))
    (p_keras, s_keras), (p_fused, s_fused) = results
    for a, b, x in zip(p_keras, p_fused, init):
        assert np.abs(a - x).max() > 1e-3                    # the parameters moved
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)
    assert [n for n, _ in s_fused] == [n for n, _ in s_keras]
    for (_, a), (_, b) in zip(s_keras, s_fused):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-9)


def test_dropout_statistics_and_gradient():
    """Dropout keeps ~(1 - rate) of the values scaled by 1/keep, is the identity when not
    training, draws a new mask on every call, and its gradient is the same mask."""
    layer = M.Dropout(0.1, seed=3)
    x = tf.ones((400, 513))                       # odd size: the last draw is half used
    y1 = layer(x, training=True).numpy()
    y2 = layer(x, training=True).numpy()
    keep = 1 - round(0.1 * 65536) / 65536
    for y in (y1, y2):
        assert abs((y > 0).mean() - keep) < 0.004               # 205,200 draws: 4.7 sigma
        np.testing.assert_allclose(np.unique(y), [0.0, 1 / keep], rtol=1e-6)
        assert abs(y.mean() - 1.0) < 0.005
    assert 0.75 < ((y1 > 0) == (y2 > 0)).mean() < 0.87         # independent masks: ~0.82
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(M.Dropout(0.0)(x, training=True).numpy(), x.numpy())
    v = tf.Variable(tf.random.normal((64, 32)))
    with tf.GradientTape() as tape:
        y = layer(v, training=True)
        s = tf.reduce_sum(y * 3.0)
    g = tape.gradient(s, v).numpy()
    mask = (y.numpy() != 0) * (1 / keep)
    np.testing.assert_allclose(g, 3.0 * mask, rtol=1e-6)
    half = M.Dropout(0.5, dtype="mixed_bfloat16")(tf.ones((8, 64)), training=True)
    assert half.dtype == tf.bfloat16
    with pytest.raises(ValueError, match="dropout rate"):
        M.Dropout(1.0)
