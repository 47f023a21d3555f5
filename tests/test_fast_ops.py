"""fast_ops.py: every rewrite computes what its standard op computes.

Each test runs the rewrite and the standard op (under fast_ops.Kernels with its switch
on, then off) on the same inputs and compares values and gradients.
"""

import numpy as np
import pytest
import tensorflow as tf

from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers import attention, embeddings, optimization, positions


def both_ways(name, fn):
    """fn() under kernels with the rewrite ``name`` on, then under the standard op."""
    assert getattr(fast_ops.Kernels(), name), f"{name} is on by default"
    fast = fast_ops.under(fast_ops.Kernels(), fn)()
    standard = fast_ops.under(
        fast_ops.dataclasses.replace(fast_ops.Kernels(), **{name: False}), fn
    )()
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


def test_a_decoding_trace_is_seen_by_the_thread_that_traces_only(monkeypatch):
    """A decoder's kernels are the tracing thread's own: a decoding stream tracing on its
    thread does not hand the C++ ops to a function that another thread traces meanwhile
    (export.py's, say), which gets Kernels() (no library)."""
    import threading

    sentinel = object()
    monkeypatch.setattr(fast_ops.native, "ops", lambda: sentinel)
    monkeypatch.setattr(fast_ops.tf.config, "list_physical_devices", lambda kind=None: [])
    inside, release, seen = threading.Event(), threading.Event(), {}

    def body():
        seen["tracer"] = fast_ops.kernels().decode_lib
        inside.set()
        release.wait(30)
        return tf.constant(1)

    tracer = threading.Thread(target=fast_ops.decoding_function(body))
    tracer.start()
    assert inside.wait(30)
    seen["other"] = fast_ops.kernels().decode_lib
    release.set()
    tracer.join(30)
    assert seen == {"tracer": sentinel, "other": None}
    assert fast_ops.kernels() == fast_ops.Kernels()


def test_switches_cover_every_rewrite():
    names = {"dense2d", "xent_grad", "native_ln", "native_decode", "f32_scores", "f32_logits"}
    assert set(fast_ops.SWITCHES) == names
    assert set(fast_ops.PRECISION) <= set(fast_ops.SWITCHES)
    fields = {f.name for f in fast_ops.dataclasses.fields(fast_ops.Kernels)}
    assert fields == set(fast_ops.REWRITES) | {"train_lib", "decode_lib", "jit_compile", "decoding"}
    assert set(fast_ops.REWRITES) == names - {"native_ln", "native_decode"}


def test_kernels_resolve_once_from_the_switches_the_device_and_the_environment(monkeypatch):
    """Kernels.resolve is where the choice is made: a switch turned off, a visible GPU, an
    XLA function, a decoder or not; an unknown switch is one clear error."""
    sentinel, gpus = object(), []
    monkeypatch.setattr(fast_ops.native, "ops", lambda: sentinel)
    monkeypatch.setattr(fast_ops.tf.config, "list_physical_devices", lambda kind=None: gpus)
    train, decode = fast_ops.Kernels.resolve(), fast_ops.Kernels.resolve(decoding=True)
    assert (train.train_lib, train.decode_lib) == (sentinel, None)
    assert (decode.train_lib, decode.decode_lib) == (sentinel, sentinel)
    off = fast_ops.Kernels.resolve(["native_ln", "dense2d"], decoding=True)
    assert (train.decoding, decode.decoding, off.decoding) == (False, True, True)
    assert (off.train_lib, off.decode_lib, off.dense2d, off.xent_grad) == (
        None, sentinel, False, True,
    )  # fmt: skip
    xla = fast_ops.Kernels.resolve(decoding=True, jit_compile=True)
    assert (xla.train_lib, xla.decode_lib, xla.jit_compile) == (None, None, True)
    assert decode.for_xla() == fast_ops.dataclasses.replace(xla, dense2d=decode.dense2d)
    gpus.append("GPU:0")
    gpu = fast_ops.Kernels.resolve(decoding=True)
    assert (gpu.train_lib, gpu.decode_lib) == (None, None)
    with pytest.raises(ValueError, match="no kernel switch fused_qkv; the switches are dense2d"):
        fast_ops.Kernels.resolve(["fused_qkv"])


# ---------------------------------------------------------------------------------------
# dense2d
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 5, 8), (3, 8), (2, 1, 3, 8)])
def test_dense2d_same_values_and_gradients(shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    w = rng.normal(size=(8, 6)).astype(np.float32)
    (y_fast, g_fast), (y_std, g_std) = both_ways(
        "dense2d", lambda: values_and_grads(fast_ops.dense, x, w)
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


@pytest.mark.parametrize("shape", [(2, 5, 16), (7, 16)])
def test_dense2d_transpose_b_is_the_tied_output_projection(shape):
    """dense(x, E, transpose_b=True) = x E^T (TokenEmbedding.logits), both ways."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=shape).astype(np.float32)
    emb = rng.normal(size=(24, 16)).astype(np.float32)

    def project(a, b):
        return fast_ops.dense(a, b, transpose_b=True)

    (y_fast, g_fast), (y_std, g_std) = both_ways(
        "dense2d", lambda: values_and_grads(project, x, emb)
    )
    assert y_fast.shape == shape[:-1] + (24,)
    np.testing.assert_allclose(y_fast, y_std, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(y_fast, x @ emb.T, rtol=1e-5, atol=1e-4)
    for a, b in zip(g_fast, g_std):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------
# xent_grad
# ---------------------------------------------------------------------------------------
def xent_values_and_grads(logits, labels, eps, terms=fast_ops.cross_entropy_terms):
    """(loss, nll, correct) of ``terms`` and the gradient of sum(a * loss + b * nll) w.r.t.
    logits."""
    logits = tf.constant(logits)
    n = logits.shape[0]
    a = tf.linspace(0.5, 2.0, n)
    b = tf.linspace(1.0, 0.0, n)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss, nll, correct = terms(logits, tf.constant(labels), eps)
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
def test_xent_grad_equals_autodiff_of_the_standard_formula(case, eps):
    """xent_grad, the loss and gradient of every run, against autodiff of the standard
    formula and that formula in float64."""
    logits, labels = XENT_CASES[case]
    fast, standard = both_ways("xent_grad", lambda: xent_values_and_grads(logits, labels, eps))
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
    """optimization.cross_entropy_terms goes through the switchable implementation: the
    written-out gradient where xent_grad is on, the standard ops where it is off, with the
    same values."""
    calls = []
    written_out = fast_ops._xent_custom_gradient

    def counted(*args):
        calls.append(1)
        return written_out(*args)

    monkeypatch.setattr(fast_ops, "_xent_custom_gradient", counted)
    logits, labels = XENT_CASES["random"]
    runs = []

    def run():
        runs.append(len(calls))
        return xent_values_and_grads(logits, labels, 0.1, terms=optimization.cross_entropy_terms)

    fast, standard = both_ways("xent_grad", run)
    assert runs == [0, 1] and len(calls) == 1  # on: once; off: not at all
    for a, b in zip(fast, standard):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------
# f32_scores, f32_logits: scores and logits float32 all the way under mixed precision
# ---------------------------------------------------------------------------------------
BF16 = tf.bfloat16


def bf16(x):
    return tf.constant(np.asarray(x, np.float32), BF16)


@pytest.mark.parametrize("batched", [False, True])
def test_logits_product_accumulates_in_float32(batched):
    """16-bit operands, float32 products: 256 + 0.5 stays 256.5 (bfloat16 has 8
    significant bits and rounds it to 256); the switch off gives the rounded product."""
    a = bf16([[1.0, 1.0], [1.0, -1.0]])
    b = bf16([[256.0, 256.0], [0.5, 0.0]])
    if batched:
        a, b = a[None], b[None]
    exact, rounded = both_ways("f32_scores", lambda: fast_ops.logits_product(a, b))
    assert exact.dtype == rounded.dtype == tf.float32
    np.testing.assert_array_equal(np.reshape(exact, (2, 2)), [[256.5, 256.0], [255.5, 256.0]])
    assert np.reshape(rounded, (2, 2))[0, 0] == 256.0  # the 16-bit rounding


@pytest.mark.parametrize(
    "a_shape, b_shape, transpose_b",
    [
        ((2, 3, 8), (5, 8), True),
        ((6, 8), (8, 5), False),
        ((2, 2, 3, 8), (2, 2, 4, 8), True),
        ((2, 3, 8), (5, 8), "weight"),  # b the float32 weight itself (the output logits)
        ((3, 2, 4, 8), (2, 8, 7), False),  # xl's (q + v) R: b broadcast over the batch
    ],
)
def test_logits_product_gradients_are_the_16bit_products(a_shape, b_shape, transpose_b):
    """Forward in float32, backward as every mixed-precision matmul: the gradients equal
    those of the float32 product to bfloat16's precision, in the operands' dtype."""
    b_dtype = tf.float32 if transpose_b == "weight" else BF16
    transpose_b = bool(transpose_b)
    rng = np.random.default_rng(3)
    a = rng.normal(size=a_shape).astype(np.float32)
    b = rng.normal(size=b_shape).astype(np.float32)

    def grads(fn, dtype, b_dtype=None):
        x, y = tf.constant(a, dtype), tf.constant(b, b_dtype or dtype)
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            z = fn(x, y)
            total = tf.reduce_sum(tf.cast(z, tf.float32) ** 2)
        return z, tape.gradient(total, [x, y])

    def product(x, y):
        if len(b_shape) == 2:
            return fast_ops.dense(x, y, transpose_b)
        return tf.matmul(x, y, transpose_b=transpose_b)

    z, (da, db) = grads(lambda x, y: fast_ops.logits_product(x, y, transpose_b), BF16, b_dtype)
    _, (ra, rb) = grads(product, tf.float32)
    assert z.dtype == tf.float32 and da.dtype == BF16 and db.dtype == b_dtype
    scale = max(np.abs(ra.numpy()).max(), np.abs(rb.numpy()).max())
    np.testing.assert_allclose(tf.cast(da, tf.float32), ra, atol=0.02 * scale)
    np.testing.assert_allclose(tf.cast(db, tf.float32), rb, atol=0.02 * scale)


def test_attention_scores_are_float32_under_bfloat16():
    """Keys whose scores differ by 0.5 out of 256 get different weights: softmax of
    (256.5, 256) / sqrt(2), not the (0.5, 0.5) of the rounded scores."""
    q, k = bf16([[[[1.0, 1.0]]]]), bf16([[[[256.0, 0.5], [256.0, 0.0]]]])
    v = bf16([[[[1.0, 0.0], [0.0, 1.0]]]])
    exact, rounded = both_ways(
        "f32_scores", lambda: attention.scaled_dot_product_attention(q, k, v)[1]
    )
    p = 1.0 / (1.0 + np.exp(-0.5 / np.sqrt(2.0)))
    np.testing.assert_allclose(exact.numpy()[0, 0, 0], [p, 1.0 - p], rtol=1e-4)
    np.testing.assert_array_equal(rounded.numpy()[0, 0, 0], [0.5, 0.5])


@pytest.mark.parametrize("layer", ["tied", "own"])
def test_output_logits_are_float32_under_bfloat16(layer):
    """The pre-softmax projection (3.4) of a mixed_bfloat16 model: logits 256.5 and 256."""
    if layer == "tied":
        out = embeddings.TokenEmbedding(8, 2, dtype="mixed_bfloat16")
        out.build()
        out.embeddings.assign(np.array([[256.0, 0.5], [256.0, 0.0]] + [[0.0, 0.0]] * 6))
    else:
        out = embeddings.OutputProjection(8, 2, dtype="mixed_bfloat16")
        out.build()
        out.kernel.assign(np.array([[256.0, 256.0] + [0.0] * 6, [0.5, 0.0] + [0.0] * 6]))
    x = bf16([[1.0, 1.0]])
    exact, rounded = both_ways("f32_logits", lambda: out.logits(x))
    np.testing.assert_array_equal(exact.numpy()[0, :2], [256.5, 256.0])
    assert rounded.numpy()[0, 0] == 256.0


def test_shaw_and_xl_logit_terms_are_float32_under_bfloat16():
    """Shaw's q a^K and Transformer-XL's (q + v) (R W_R) accumulate in float32 from the
    16-bit operands, as the float64 product of those operands."""
    stack = positions.StackPosition("shaw", 2, 1, max_relative_position=1)
    shaw = positions.LayerPosition(stack)
    shaw.build()
    shaw.a_k.assign(np.array([[256.0, 0.5], [256.0, 0.0], [256.0, -0.5]]))
    q, pos = bf16([[[[1.0, 1.0]]]]), tf.constant([1])
    exact, rounded = both_ways(
        "f32_scores", lambda: shaw.family.terms(shaw, q, pos, tf.range(3), 1.0)[1]
    )
    np.testing.assert_array_equal(exact.numpy()[0, 0, 0], [256.5, 256.0, 255.5])
    assert rounded.numpy()[0, 0, 0, 0] == 256.0

    stack = positions.StackPosition("xl", 2, 1)
    stack.build()
    xl = positions.LayerPosition(stack)
    xl.build()
    xl.w_r.assign(np.eye(2))  # R_d W_R = (sin d, cos d), rounded to 16 bits
    q_values = np.array([[300.0, 200.0], [100.0, -250.0], [-64.0, 128.0]], np.float32)
    q = bf16(q_values[None, None])
    exact, rounded = both_ways(
        "f32_scores", lambda: xl.family.terms(xl, q, tf.range(3), tf.range(3), 1.0)[1]
    )
    d = np.arange(3)[:, None] - np.arange(3)[None]  # i - j
    r = tf.cast(bf16(np.stack([np.sin(d), np.cos(d)], -1)), tf.float32).numpy()
    want = np.einsum("ic,ijc->ij", q_values.astype(np.float64), r.astype(np.float64))
    np.testing.assert_allclose(exact.numpy()[0, 0], want, rtol=1e-6, atol=1e-4)
    assert np.abs(rounded.numpy()[0, 0] - want).max() > 0.1


def test_broadcast_logits_product_has_a_16bit_backward():
    """xl's (q + v) R, b (h, d_k, L) broadcast over the batch: the forward is one product
    of bfloat16 operands with a float32 output (in its XLA function); the two gradient
    matmuls run in bfloat16."""
    a = tf.TensorSpec((3, 2, 4, 8), BF16)
    b = tf.TensorSpec((2, 8, 7), BF16)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            total = tf.reduce_sum(fast_ops.logits_product(x, y) ** 2)
        return tape.gradient(total, [x, y])

    graph = step.get_concrete_function(a, b).graph
    found = []  # (operand dtype, output dtype) of every matmul, nested functions included
    for op in graph.get_operations():
        if op.type in ("BatchMatMulV2", "BatchMatMulV3", "MatMul"):
            dtype = op.get_attr("Ta") if op.type == "BatchMatMulV3" else op.get_attr("T")
            found.append((dtype.name, op.outputs[0].dtype.name))
    for function in graph._functions.values():
        for node in function.definition.node_def:
            if node.op == "BatchMatMulV3":
                found.append(
                    (
                        tf.as_dtype(node.attr["Ta"].type).name,
                        tf.as_dtype(node.attr["Tout"].type).name,
                    )
                )
    assert sorted(found) == [("bfloat16", "bfloat16")] * 2 + [("bfloat16", "float32")]


def test_an_xla_function_traces_without_the_native_kernels(monkeypatch):
    """XLA cannot compile the C++ ops (no tf2xla kernel): a function compiled by XLA
    traces under kernels without them, even inside a train step that has them, and one
    handed the library is refused."""
    sentinel = object()
    monkeypatch.setattr(fast_ops.native, "ops", lambda: sentinel)
    monkeypatch.setattr(fast_ops.tf.config, "list_physical_devices", lambda kind=None: [])
    seen = []

    def step(x):
        seen.append(fast_ops.kernels().train_lib)
        return 2.0 * x

    train = fast_ops.Kernels.resolve()
    xla = fast_ops.function(step, train.for_xla())
    outer = fast_ops.function(lambda x: xla(x) + step(x), train)
    assert float(outer(tf.constant(1.5))) == 6.0
    assert seen == [None, sentinel]
    assert fast_ops.kernels().train_lib is None  # outside any function: Kernels()
    with pytest.raises(ValueError, match="XLA function cannot run the C.. ops"):
        fast_ops.function(step, fast_ops.dataclasses.replace(train, jit_compile=True))
    with pytest.raises(ValueError, match="compiles with XLA where its kernels say so"):
        fast_ops.function(step, train, jit_compile=True)
    # a function built with the library but traced inside an XLA function loses it
    seen.clear()
    nested = fast_ops.function(lambda x: fast_ops.under(train, step)(x), train.for_xla())
    assert float(nested(tf.constant(1.0))) == 2.0 and seen == [None]


def _op_types(fn, *specs) -> list[str]:
    return [op.type for op in fn.get_concrete_function(*specs).graph.get_operations()]


def test_a_decoding_steps_projections_trace_no_shape_ops():
    """dense of one position (N, 1, d_in), N unknown, reshapes back with its static sizes
    (fast_ops.unflatten): the values of x @ w, and no Shape, StridedSlice or ConcatV2 op
    to trace, nor to run at every step of a decoding loop; T unknown keeps them."""
    rng = np.random.default_rng(3)
    w = tf.constant(rng.normal(size=(8, 6)).astype(np.float32))
    fn = tf.function(lambda x: fast_ops.dense(x, w))
    step = tf.TensorSpec([None, 1, 8], tf.float32)
    types = _op_types(fn, step)
    assert "MatMul" in types
    assert not {"Shape", "StridedSlice", "ConcatV2"} & set(types)
    assert {"Shape", "ConcatV2"} <= set(_op_types(fn, tf.TensorSpec([None, None, 8], tf.float32)))
    x = rng.normal(size=(5, 1, 8)).astype(np.float32)
    np.testing.assert_allclose(fn(x).numpy(), x @ w.numpy(), rtol=1e-5, atol=1e-5)


def test_unflatten_reshapes_rows_to_the_leading_dimensions_known_or_not():
    """fast_ops.unflatten: rows (M, d) back to x's leading dimensions (all but the last,
    or the first ``lead``), ending in d or in ``last``; x of unknown rank too."""
    y = tf.reshape(tf.range(60.0), (10, 6))
    cases = [  # (x's spec, last, lead, the shape out)
        (tf.TensorSpec(None), None, None, (2, 5, 6)),
        (tf.TensorSpec([None, None, 4]), (2, 3), None, (2, 5, 2, 3)),
        (tf.TensorSpec([None, 5, 4]), (2, 3), None, (2, 5, 2, 3)),
        (tf.TensorSpec([None, None, 7, 4]), None, 2, (2, 5, 6)),
    ]
    for spec, last, lead, shape in cases:
        fn = tf.function(lambda x, last=last, lead=lead: fast_ops.unflatten(y, x, last, lead))
        x = tf.zeros((2, 5, 7, 4) if lead == 2 else (2, 5, 4))
        out = fn.get_concrete_function(spec)(x)
        np.testing.assert_array_equal(tf.reshape(out, (10, 6)), y)
        assert out.shape == shape


@pytest.mark.parametrize("output_projection", [True, False])
def test_an_attention_step_traces_no_shape_ops_and_attends_as_the_full_layer(output_projection):
    """MultiHeadAttention.attend_step of one query position over cached heads: the full
    layer's output for that position, with no shape op in its graph (the rows of a step
    are its heads: one reshape each way)."""
    layer = attention.MultiHeadAttention(16, 4, output_projection=output_projection)
    rng = np.random.default_rng(4)
    memory = tf.constant(rng.normal(size=(3, 5, 16)).astype(np.float32))
    query = tf.constant(rng.normal(size=(3, 1, 16)).astype(np.float32))
    full = layer(query, memory)
    k, v = layer.keys_values(memory)
    fn = tf.function(layer.attend_step)
    heads = tf.TensorSpec([None, 4, None, 4], tf.float32)
    types = _op_types(fn, tf.TensorSpec([None, 1, 16], tf.float32), heads, heads)
    assert not {"Shape", "StridedSlice", "ConcatV2"} & set(types)
    np.testing.assert_allclose(fn(query, k, v).numpy(), full.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("output_projection", [True, False])
def test_a_decoders_attention_projects_straight_into_heads(output_projection):
    """In a decoder (Kernels' ``decoding``), attention over T unknown positions
    (the encoder's, and its keys/values for the decoder) multiplies the rows (N * T,
    d_model) and reshapes them straight into heads: the train step's values bit for bit,
    with half the shape ops; a train step keeps its graph (its Grappler rewrites)."""
    layer = attention.MultiHeadAttention(16, 4, output_projection=output_projection)
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(3, 5, 16)).astype(np.float32))
    spec = tf.TensorSpec([None, None, 16], tf.float32)
    fn = {}
    for decoding in (False, True):
        chosen = fast_ops.Kernels(decoding=decoding)
        fn[decoding] = tf.function(fast_ops.under(chosen, lambda q: layer(q, q)))
    np.testing.assert_array_equal(fn[True](x).numpy(), fn[False](x).numpy())
    shapes = {d: _op_types(f, spec).count("Shape") for d, f in fn.items()}
    # one Shape per projection and one for the merge, from two each (W^O's unflatten
    # included; without W^O, the merge has one either way, and the layer one of its own)
    assert shapes == ({False: 8, True: 4} if output_projection else {False: 7, True: 4})
