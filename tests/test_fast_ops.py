"""fast_ops.py: every rewrite computes what its standard op computes.

Each test runs the rewrite and the standard op (its switch in fast_ops.ENABLED set to
False through monkeypatch, which restores it) on the same inputs and compares values and
gradients; the rewrites that draw random numbers are compared by their statistics.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import fast_ops
import modules


def both_ways(monkeypatch, name, fn):
    """fn() with the rewrite ``name`` on, then with the standard op."""
    assert fast_ops.ENABLED[name], f"{name} is on by default"
    with monkeypatch.context() as patch:
        patch.setitem(fast_ops.ENABLED, name, True)
        fast = fn()
    with monkeypatch.context() as patch:
        patch.setitem(fast_ops.ENABLED, name, False)
        standard = fn()
    return fast, standard


def values_and_grads(fn, *inputs):
    """fn(*inputs) and the gradients of a weighted sum of its output w.r.t. each input."""
    inputs = [tf.constant(x) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        out = fn(*inputs)
        weights = tf.cast(tf.range(1, tf.size(out) + 1) % 7 - 3, out.dtype)
        total = tf.reduce_sum(out * tf.reshape(weights, tf.shape(out)))
    return out.numpy(), [g.numpy() for g in tape.gradient(total, inputs)]


def test_switches_cover_every_rewrite():
    assert set(fast_ops.ENABLED) == {
        "dense2d",
        "dropout16",
        "xent_grad",
        "logits_transpose",
        "fused_adam",
    }


# ---------------------------------------------------------------------------------------
# dense2d
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 5, 8), (3, 8), (2, 1, 3, 8)])
def test_dense2d_same_values_and_gradients(monkeypatch, shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    w = rng.normal(size=(8, 6)).astype(np.float32)
    (y_fast, g_fast), (y_std, g_std) = both_ways(
        monkeypatch, "dense2d", lambda: values_and_grads(fast_ops.dense, x, w)
    )
    assert y_fast.shape == shape[:-1] + (6,)
    np.testing.assert_allclose(y_fast, y_std, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_fast, x @ w, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_fast, g_std):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_dense2d_with_unknown_shapes_in_a_graph():
    rng = np.random.default_rng(1)
    w = tf.constant(rng.normal(size=(8, 6)).astype(np.float32))
    fn = tf.function(
        lambda x: fast_ops.dense(x, w), input_signature=[tf.TensorSpec([None, None, 8], tf.float32)]
    )
    x = rng.normal(size=(3, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(fn(x).numpy(), x @ w.numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------
# logits_transpose
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 5, 16), (7, 16)])
def test_logits_transpose_same_values_and_gradients(monkeypatch, shape):
    rng = np.random.default_rng(2)
    x = rng.normal(size=shape).astype(np.float32)
    emb = rng.normal(size=(24, 16)).astype(np.float32)
    (y_fast, g_fast), (y_std, g_std) = both_ways(
        monkeypatch, "logits_transpose", lambda: values_and_grads(fast_ops.output_logits, x, emb)
    )
    assert y_fast.shape == shape[:-1] + (24,)
    np.testing.assert_allclose(y_fast, y_std, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(y_fast, x @ emb.T, rtol=1e-5, atol=1e-4)
    for a, b in zip(g_fast, g_std):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------
# xent_grad
# ---------------------------------------------------------------------------------------
def xent_values_and_grads(logits, labels, eps):
    """(loss, nll, correct) and the gradient of sum(a * loss + b * nll) w.r.t. logits."""
    logits = tf.constant(logits)
    n = logits.shape[0]
    a = tf.linspace(0.5, 2.0, n)
    b = tf.linspace(1.0, 0.0, n)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss, nll, correct = fast_ops.cross_entropy_terms(logits, tf.constant(labels), eps)
        total = tf.reduce_sum(a * loss + b * nll + correct)
    return [t.numpy() for t in (loss, nll, correct, tape.gradient(total, logits))]


RNG = np.random.default_rng(3)
XENT_CASES = {
    "random": (
        RNG.normal(scale=3.0, size=(12, 9)).astype(np.float32),
        RNG.integers(0, 9, size=12).astype(np.int32),
    ),
    # the label's probability underflows to 0 in float32; huge logits; ties
    "extreme": (
        np.array(
            [
                [0.0, 300.0, -50.0],
                [1e4, 1e4 - 150.0, 1e4 - 1.0],
                [2.0, 2.0, 0.0],
                [-80.0, 0.0, 80.0],
            ],
            np.float32,
        ),
        np.array([2, 1, 0, 0], np.int32),
    ),
}


@pytest.mark.parametrize("case", sorted(XENT_CASES))
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_xent_grad_equals_autodiff_of_the_standard_formula(monkeypatch, case, eps):
    logits, labels = XENT_CASES[case]
    fast, standard = both_ways(
        monkeypatch, "xent_grad", lambda: xent_values_and_grads(logits, labels, eps)
    )
    for name, a, b in zip(("loss", "nll", "correct", "gradient"), fast, standard):
        assert np.all(np.isfinite(a)), name
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)
    # the standard formula itself, in float64
    z = logits.astype(np.float64)
    lse = z.max(-1) + np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1))
    nll = lse - z[np.arange(len(z)), labels]
    np.testing.assert_allclose(fast[1], nll, rtol=1e-5)
    np.testing.assert_allclose(fast[0], (1 - eps) * nll + eps * (lse - z.mean(-1)), rtol=1e-5)
    np.testing.assert_array_equal(fast[2], z[np.arange(len(z)), labels] >= z.max(-1))


def test_modules_cross_entropy_follows_the_switch(monkeypatch):
    """modules.cross_entropy_terms goes through the switchable implementation."""
    logits, labels = XENT_CASES["random"]
    fast, standard = both_ways(
        monkeypatch,
        "xent_grad",
        lambda: [t.numpy() for t in modules.cross_entropy_terms(logits, labels, 0.1)],
    )
    for a, b in zip(fast, standard):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------
# dropout16
# ---------------------------------------------------------------------------------------
def test_dropout_statistics_and_gradient():
    """Dropout keeps ~(1 - rate) of the values scaled by 1/keep, is the identity when not
    training, draws a new mask on every call, and its gradient is the same mask."""
    layer = fast_ops.Dropout(0.1, seed=3)
    x = tf.ones((400, 513))  # odd size: the last draw is half used
    y1 = layer(x, training=True).numpy()
    y2 = layer(x, training=True).numpy()
    keep = 1 - round(0.1 * 65536) / 65536
    for y in (y1, y2):
        assert abs((y > 0).mean() - keep) < 0.004  # 205,200 draws: 4.7 sigma
        np.testing.assert_allclose(np.unique(y), [0.0, 1 / keep], rtol=1e-6)
        assert abs(y.mean() - 1.0) < 0.005
    assert 0.75 < ((y1 > 0) == (y2 > 0)).mean() < 0.87  # independent masks: ~0.82
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(fast_ops.Dropout(0.0)(x, training=True).numpy(), x.numpy())
    v = tf.Variable(tf.random.normal((64, 32)))
    with tf.GradientTape() as tape:
        y = layer(v, training=True)
        s = tf.reduce_sum(y * 3.0)
    g = tape.gradient(s, v).numpy()
    mask = (y.numpy() != 0) * (1 / keep)
    np.testing.assert_allclose(g, 3.0 * mask, rtol=1e-6)
    half = fast_ops.Dropout(0.5, dtype="mixed_bfloat16")(tf.ones((8, 64)), training=True)
    assert half.dtype == tf.bfloat16
    for rate in (1.0, -0.1):
        with pytest.raises(ValueError, match="dropout rate"):
            fast_ops.Dropout(rate)


def test_dropout16_against_keras_dropout(monkeypatch):
    """The factory gives the rewrite or keras.layers.Dropout; both keep the same fraction,
    scale by 1/keep, and are the identity when not training."""
    fast, standard = both_ways(monkeypatch, "dropout16", lambda: fast_ops.dropout(0.25, seed=4))
    assert isinstance(fast, fast_ops.Dropout)
    assert isinstance(standard, keras.layers.Dropout)
    x = tf.ones((300, 257))
    for layer in (fast, standard):
        y = layer(x, training=True).numpy()
        assert abs((y > 0).mean() - 0.75) < 0.005, type(layer)
        np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.75], rtol=1e-4)
        np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())


def test_dropout16_config_round_trip():
    layer = fast_ops.Dropout(0.3, seed=7, name="drop")
    again = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(again, fast_ops.Dropout)
    assert (again.rate, again.seed, again.name) == (0.3, 7, "drop")


# ---------------------------------------------------------------------------------------
# fused_adam
# ---------------------------------------------------------------------------------------
def compiled_update(opt, params, jit):
    return tf.function(lambda grads: opt.apply_gradients(zip(grads, params)), jit_compile=jit)


@pytest.mark.parametrize("jit", [False, True])
def test_fused_adam_matches_keras_adam(jit):
    """FusedAdam (ResourceApplyAdam) gives Keras Adam's updates step for step, with a
    schedule, under tf.function and XLA, and keeps the same slot variables."""
    rng = np.random.default_rng(11)
    shapes = [(3, 4), (5,)]
    init = [rng.normal(size=s).astype(np.float32) for s in shapes]
    grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(6)]
    results = []
    for cls in (keras.optimizers.Adam, fast_ops.FusedAdam):
        params = [keras.Variable(x, name=f"w{i}") for i, x in enumerate(init)]
        opt = cls(modules.TransformerSchedule("noam", 64, 4), beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        opt.build(params)
        step = compiled_update(opt, params, jit)
        for gs in grads:
            step([tf.constant(g) for g in gs])
        results.append(
            (
                [p.numpy() for p in params],
                [(v.path.split("/", 1)[1], v.numpy()) for v in opt.variables],
            )
        )
    (p_keras, s_keras), (p_fused, s_fused) = results
    for a, b, x in zip(p_keras, p_fused, init):
        assert np.abs(a - x).max() > 1e-3  # the parameters moved
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)
    assert [n for n, _ in s_fused] == [n for n, _ in s_keras]
    for (_, a), (_, b) in zip(s_keras, s_fused):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-9)


def test_fused_adam_factory(monkeypatch):
    fast, standard = both_ways(
        monkeypatch, "fused_adam", lambda: fast_ops.adam(1e-3, beta_2=0.98, epsilon=1e-9)
    )
    assert isinstance(fast, fast_ops.FusedAdam)
    assert type(standard) is keras.optimizers.Adam
    for opt in (fast, standard):
        assert (opt.beta_2, opt.epsilon) == (0.98, 1e-9)


def test_keras_adam_still_has_the_private_attributes_fused_adam_reads():
    """FusedAdam.update_step reads keras.optimizers.Adam's private ``_momentums``,
    ``_velocities`` and ``_get_variable_index``; a Keras upgrade that renames them must
    fail here, with the fix in the message, not silently in training."""
    params = [
        keras.Variable(np.zeros((3, 4), np.float32), name="w"),
        keras.Variable(np.zeros((5,), np.float32), name="b"),
        keras.Variable(np.zeros((2, 7), np.float32), name="e"),
    ]
    opt = keras.optimizers.Adam(1e-3)
    opt.build(params)
    fix = (
        f"keras {keras.__version__} changed keras.optimizers.Adam's private state that "
        f"fast_ops.FusedAdam reads; update FusedAdam.update_step to the new names, or "
        f"set fast_ops.ENABLED['fused_adam'] = False"
    )
    for name in ("_momentums", "_velocities", "_get_variable_index"):
        assert hasattr(opt, name), f"no Adam.{name}: {fix}"
    for name in ("_momentums", "_velocities"):
        slots = getattr(opt, name)
        assert len(slots) == len(params), f"Adam.{name} is not one per variable: {fix}"
        for param, slot in zip(params, slots):
            assert isinstance(slot, keras.Variable), f"Adam.{name} holds {type(slot)}: {fix}"
            assert tuple(slot.shape) == tuple(param.shape), (
                f"Adam.{name} is not aligned with the variables: {fix}"
            )
            assert hasattr(slot.value, "handle"), f"Adam.{name} has no resource handle: {fix}"
    for i, param in enumerate(params):
        assert opt._get_variable_index(param) == i, f"Adam._get_variable_index: {fix}"
    assert (opt.beta_1, opt.beta_2, opt.epsilon, opt.amsgrad) == (0.9, 0.999, 1e-7, False), fix
