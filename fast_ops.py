"""Rewrites of standard TensorFlow/Keras ops, kept only where they pay for themselves.

Each rewrite computes what the standard op computes, faster on this project's train
step; each has a switch in :data:`ENABLED` so that ``bench/train_throughput.py --ablate
NAME --paired`` can turn it off alone and measure it against the standard op in the same
process. Switches are read when a function is traced, so set them before building the
model and the train step.

A rewrite stays only with a median gain of at least 5 % on the path it serves, in float32
or under mixed_bfloat16. Kept, re-measured on a 2-core AMD EPYC (CPU family 25, model 17)
with 3 paired windows each (``python bench/train_throughput.py --preset multi30k --ablate
NAME --paired [--precision mixed_bfloat16] [--paired_norm pre]``; the table is in
docs/performance.md):

* ``dense2d``, projections as one 2-D MatMul: +38.8 % float32, +47.7 % mixed_bfloat16;
* ``xent_grad``, the loss's written-out gradient (the path of every run):
  +8.4 % float32, +14.5 % mixed_bfloat16 (measured with ``TRANSFORMER_NATIVE=0``);
* ``native_ln``, the LayerNorm as C++ kernels (native.py, CPU only, train step only), on
  pre-norm's LayerNorms: +10.0 % float32, +6.4 % mixed_bfloat16;
* ``native_decode``, a decoding step's attention of one position, its LayerNorms and the
  beam's top k as C++ kernels (native.py, CPU only, inside :func:`decoding_function`
  only): beam 4 +41 %, greedy +31 % sentences/s one batch at a time; +31 % and +9 % two
  batches at once (``python bench/decode.py --preset multi30k --logdir LOGDIR
  --ablate native_decode``, docs/performance.md).

The switches of :data:`PRECISION` (f32_scores, f32_logits) are not rewrites: they buy
float32 accuracy under mixed precision and are measured for their cost instead (see
:func:`logits_product`).

Measured and returned to the standard op, each below the bar in both precisions over 6
paired windows: the 16-bit-draw dropout (``dropout16``), Adam through TensorFlow's fused
kernel (``fused_adam``), the LayerNorm with its gradient written out (``layer_norm``, on
the path without the C++ kernels), post-norm's LayerNorm(x + Dropout(s)) as one C++
kernel (``native_residual``) and the label-smoothed loss as C++ kernels
(``native_xent``); earlier, the tied output projection through an explicit transpose,
the loss over every target position instead of tf.boolean_mask, the XLA output
product's rows in blocks of 64, the output projection and the loss under one custom
gradient (``output_xent``) and W^Q, W^K, W^V as one product (``fused_qkv``).
"""

from __future__ import annotations

import threading

import keras
import tensorflow as tf

import native

# name -> use the rewrite (True) or the standard op (False)
ENABLED = {
    "dense2d": True,
    "xent_grad": True,
    "native_ln": True,
    "native_decode": True,
    "f32_scores": True,
    "f32_logits": True,
}
# Switches that buy accuracy, not speed: their cost is measured the same way and must stay
# within PRECISION_COST_BAR of the tokens/s without them (the median of the pairs).
PRECISION = ("f32_scores", "f32_logits")
PRECISION_COST_BAR = 0.03


def cast(x, dtype):
    """tf.cast that adds no op when x already has the dtype."""
    return tf.cast(x, dtype) if x.dtype != dtype else x


# ---------------------------------------------------------------------------------------
# dense2d: projections as one 2-D MatMul
# ---------------------------------------------------------------------------------------
def dense(x, w, transpose_b: bool = False):
    """x (..., d_in) @ w (d_in, d_out) -> (..., d_out) (w (d_out, d_in) if ``transpose_b``).

    Rewrite: one 2-D MatMul of x reshaped to (-1, d_in). The standard tf.matmul of a 3-D x
    with a 2-D w broadcasts w into a BatchMatMul whose gradient with respect to w is one
    (d_in, d_out) matrix per batch row, summed afterwards. Measured gain: +38.8 % training
    tokens/s in float32, +47.7 % under mixed_bfloat16 (medians of 3 on/off pairs, the
    module docstring's command).
    """
    if not ENABLED["dense2d"] or x.shape.rank == 2:
        return tf.matmul(x, w, transpose_b=transpose_b)
    lead = tf.shape(x)[:-1]
    y = tf.matmul(tf.reshape(x, (-1, tf.shape(x)[-1])), w, transpose_b=transpose_b)
    return tf.reshape(y, tf.concat([lead, tf.shape(y)[-1:]], 0))


# ---------------------------------------------------------------------------------------
# xent_grad: label-smoothed cross-entropy with a hand-written gradient
# ---------------------------------------------------------------------------------------
def cross_entropy_terms(logits, labels, epsilon: float = 0.1):
    """(label-smoothed loss, plain cross-entropy, correct), each (M,) float32, for logits
    (M, V) and labels (M,); correct is 1.0 where the label's logit is the largest (ties
    count as correct) and has no gradient. See optimization.cross_entropy_terms for the
    formula; this is the switchable implementation."""
    logits, labels, epsilon = cast(logits, tf.float32), tf.cast(labels, tf.int32), float(epsilon)
    if ENABLED["xent_grad"]:
        return _xent_custom_gradient(logits, labels, epsilon)
    logp = tf.nn.log_softmax(logits, axis=-1)
    nll = -tf.gather(logp, labels, axis=-1, batch_dims=1)
    loss = (1.0 - epsilon) * nll - epsilon * tf.reduce_mean(logp, axis=-1) if epsilon else nll
    z_y = tf.gather(logits, labels, axis=-1, batch_dims=1)
    correct = tf.stop_gradient(tf.cast(z_y >= tf.reduce_max(logits, axis=-1), tf.float32))
    return loss, nll, correct


def _xent_custom_gradient(logits, labels, epsilon: float):
    """Rewrite: d loss / d z = p - (1 - eps) onehot(y) - eps / V and d nll / d z =
    p - onehot(y), with p = softmax(z). Measured gain: +8.4 % training tokens/s in
    float32, +14.5 % under mixed_bfloat16 (medians of 3 on/off pairs with
    ``TRANSFORMER_NATIVE=0``, the module docstring's command). The forward pass keeps p
    (one fused softmax kernel) and reads logsumexp off it: lse = max(z) - log(max(p)),
    exact because the largest logit has the largest probability, at least 1/V, which never
    underflows.
    The gradient is a scale of p and a scatter of M values, instead of the gather,
    logsumexp and mean gradients that autodiff chains (the gather's densifies an (M, V)
    tensor through UnsortedSegmentSum).
    """

    @tf.custom_gradient
    def fn(z):
        p = tf.nn.softmax(z, axis=-1)  # (M, V)
        z_max = tf.reduce_max(z, axis=-1)
        lse = z_max - tf.math.log(tf.reduce_max(p, axis=-1))
        z_y = tf.gather(z, labels, axis=-1, batch_dims=1)
        nll = lse - z_y
        if epsilon:
            loss = (1.0 - epsilon) * nll + epsilon * (lse - tf.reduce_mean(z, axis=-1))
        else:
            loss = nll
        correct = tf.cast(z_y >= z_max, tf.float32)

        def grad(d_loss, d_nll, d_correct=None):
            g = d_loss + d_nll  # (M,)
            q = p * g[:, None]
            if epsilon:
                q = q - (epsilon / tf.cast(tf.shape(z)[-1], z.dtype)) * d_loss[:, None]
            rows = tf.range(tf.shape(z)[0])
            at = tf.stack([rows, labels], axis=1)
            return tf.tensor_scatter_nd_sub(q, at, (1.0 - epsilon) * d_loss + d_nll)

        return (loss, nll, correct), grad

    return fn(logits)


# ---------------------------------------------------------------------------------------
# f32_scores, f32_logits: products that become softmax logits, computed in float32
# ---------------------------------------------------------------------------------------
def logits_product(a, b, transpose_b: bool = False, switch: str = "f32_scores"):
    """a @ b as float32 logits: a (..., d) with b (d, n) (or (n, d) if ``transpose_b``),
    through :func:`dense`, or a batched b (..., d, n) through tf.matmul.

    For the products that feed a softmax under mixed precision: the attention scores
    Q K^T (3.2.1), the relative-position logit terms (positions.py) and the output logits
    (3.4). The operands are the layer's 16-bit values (a 2-D b may also be the float32
    weight, rounded to a's dtype for the product as every mixed-precision layer rounds its
    weights), and the product is accumulated and returned in float32 - not rounded to 8
    significant bits
    (bfloat16) before the cast, and not overflowing float16's 65504 before the 1/sqrt(d_k)
    scale. Under float32 it is the plain product. The gradients run in the operands'
    16-bit dtype, as every other matmul gradient of mixed precision does: only the
    forward values need float32, and the largest matmul of the model (the output
    projection) keeps its 16-bit backward; a b broadcast over a's batch (xl's (q + v) R)
    is tiled to it first, its gradient a sum over the batch. Two switches: ``switch``
    f32_scores (the default: the attention scores and the relative-position terms) and
    f32_logits (the output projection, the model's largest matmul). Off: the product in
    the operands' dtype, then cast (the rounding of earlier versions; kept to measure the
    cost: ``python bench/train_throughput.py --preset multi30k --ablate
    f32_scores,f32_logits --precision mixed_bfloat16 --paired``).
    """
    if not ENABLED[switch] or a.dtype == tf.float32 and b.dtype == tf.float32:
        b = cast(b, a.dtype)
        if b.shape.rank == 2:
            return cast(dense(a, b, transpose_b), tf.float32)
        return cast(tf.matmul(a, b, transpose_b=transpose_b), tf.float32)
    if b.shape.rank == 2 and a.shape.rank > 2:  # one 2-D product, as dense() makes it
        z = _float32_matmul(tf.reshape(a, (-1, tf.shape(a)[-1])), b, transpose_b)
        return tf.reshape(z, tf.concat([tf.shape(a)[:-1], tf.shape(z)[-1:]], 0))
    if a.shape.rank == b.shape.rank:  # Q K^T, or a 2-D product
        return _float32_matmul(a, b, transpose_b)
    # broadcast batch dimensions (xl's (q + v) R, b (h, d_k, L)): b tiled to a's batch
    # (N, h, d_k, L; its gradient a sum over N), so that the backward stays 16-bit
    batch = tf.shape(a)[: a.shape.rank - 2]
    b = tf.broadcast_to(b, tf.concat([batch, tf.shape(b)[-2:]], 0))
    return _float32_matmul(a, b, transpose_b)


def _float32_matmul(a, b, transpose_b: bool):
    """tf.matmul(a, b) of equal batch dimensions, computed and returned in float32; the
    gradients computed in a's 16-bit dtype (b may be a float32 weight: its gradient is then
    returned in float32).

    The forward product: the 16-bit operands (a 2-D weight rounded as every
    mixed-precision layer rounds its weights) multiplied with float32 accumulation and
    output by :func:`_float32_out`, one XLA kernel, because TensorFlow's CPU kernels have
    no 16-bit x 16-bit -> float32 matmul: float32 copies of the operands (exact, as a
    product of two 16-bit numbers fits float32's 24 significant bits) ran the product at
    the float32 speed, about half the bfloat16 one. The same for both switches; float32
    operands take the plain float32 product.
    """

    @tf.custom_gradient
    def fn(a, b):
        if a.dtype in (tf.bfloat16, tf.float16):  # (grad below: no tape through it)
            z = _float32_out(tf.stop_gradient(a), tf.stop_gradient(cast(b, a.dtype)), transpose_b)
        else:
            z = tf.matmul(cast(a, tf.float32), cast(b, tf.float32), transpose_b=transpose_b)

        def grad(dz):
            g = cast(dz, a.dtype)
            da = tf.matmul(g, cast(b, a.dtype), transpose_b=not transpose_b)
            if transpose_b:  # z = a b^T: db = g^T a
                db = tf.matmul(g, a, transpose_a=True)
            else:  # z = a b: db = a^T g
                db = tf.matmul(a, g, transpose_a=True)
            return da, cast(db, b.dtype)

        return z, grad

    return fn(a, b)


_FLOAT32_OUT = {}  # (rank, transpose_b) -> its XLA function


def _float32_out(a, b, transpose_b: bool):
    """a (..., M, d) @ b (..., d, n) (or b (..., n, d) if ``transpose_b``) of 16-bit
    operands, accumulated and returned in float32 -> (..., M, n): one XLA function per
    rank and orientation, compiled once per shape (milliseconds)."""
    key = (a.shape.rank, bool(transpose_b))
    if key not in _FLOAT32_OUT:
        _FLOAT32_OUT[key] = tf.function(
            lambda x, y: tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=tf.float32, adj_y=key[1]),
            jit_compile=True,
            autograph=False,
            reduce_retracing=True,
        )
    return _FLOAT32_OUT[key](a, b)


# ---------------------------------------------------------------------------------------
# native_ln: the train step's LayerNorm as C++ kernels
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """keras.layers.LayerNormalization over the last axis (3.1: gamma * (x - mean) /
    sqrt(var + epsilon) + beta, in float32). x: (..., d) -> the same shape; in a training
    call on a CPU with ``native_ln`` on (read when the train step is traced), the forward
    and the gradient are one C++ kernel each (native.py), whose result keeps x's dtype;
    so is the forward in a decoding function (:func:`decode_kernels`). Other calls
    (export, a GPU, an XLA function) are Keras'. The same layer, weights and
    checkpoints.

    Rewrite: one pass over each row each way, where Keras' formula and the gradients that
    autodiff chains through its moments make about ten; with x^ = (x - mean) r, r = 1 /
    sqrt(var + epsilon) and g = dy gamma, the input gradient is r (g - mean(g) - x^
    mean(g x^)), and the weights' are the column sums of dy x^ and dy. Measured gain: see
    the module docstring.
    """

    def call(self, inputs, training=None):
        lib = None
        if self.plain(len(inputs.shape)):
            lib = native_kernels() if training else decode_kernels()
        if lib is None:
            return super().call(inputs)
        x = cast(inputs, tf.float32)
        gamma, beta = self.gamma_beta(x.shape[-1:])
        out = lib.native_layer_norm(x, gamma, beta, epsilon=float(self.epsilon))[0]
        return cast(out, inputs.dtype)

    def gamma_beta(self, shape):
        """gamma and beta as tensors read off the weights (a distributed variable inside a
        custom op's gradient would be a variable of its own); ones and zeros where the
        layer has none. shape: (d,)."""
        gamma = tf.ones(shape) if self.gamma is None else tf.identity(self.gamma.value)
        beta = tf.zeros(shape) if self.beta is None else tf.identity(self.beta.value)
        return gamma, beta

    def plain(self, rank: int) -> bool:
        """Normalizes an input of ``rank`` over its last axis, with gamma and beta (what
        the kernels compute)."""
        return self.axis in ([-1], [rank - 1]) and not self.rms_scaling


def native_kernels():
    """native.ops() where ``native_ln`` is on, no GPU is visible (the kernels are CPU-only)
    and no XLA function is being traced (:func:`xla_function`), else None. Read when the
    train step is traced."""
    if not ENABLED["native_ln"] or _XLA_TRACING.depth or tf.config.list_physical_devices("GPU"):
        return None
    return native.ops()


class _Tracing(threading.local):
    """How many functions of one kind this thread is tracing (each thread its own count:
    decoding streams trace on threads of their own)."""

    depth = 0


_XLA_TRACING = _Tracing()  # xla_function's functions
_DECODING = _Tracing()  # decoding_function's functions


def decode_kernels():
    """native.ops() inside a function that :func:`decoding_function` traces, where
    ``native_decode`` is on, no GPU is visible and no XLA function is being traced; else
    None (TensorFlow's ops). Read when the decoding function is traced."""
    if not _DECODING.depth or _XLA_TRACING.depth or not ENABLED["native_decode"]:
        return None
    return None if tf.config.list_physical_devices("GPU") else native.ops()


def decoding_function(fn, **kwargs):
    """tf.function(fn, autograph=False, **kwargs) whose trace may use the decoding
    kernels (:func:`decode_kernels`). Only the decoders of this process trace through it:
    what export.py traces into a SavedModel keeps TensorFlow's ops, so that the exported
    model never needs the library."""
    return tf.function(_flagged(fn, _DECODING), autograph=False, **kwargs)


def _flagged(fn, tracing: _Tracing):
    """fn, run with ``tracing`` counted up in this thread: what a function traced from it
    reads."""

    def traced(*args):
        tracing.depth += 1
        try:
            return fn(*args)
        finally:
            tracing.depth -= 1

    return traced


def xla_function(fn, **kwargs):
    """tf.function(fn, jit_compile=True, autograph=False, **kwargs) that traces ``fn`` with
    the native kernels off. XLA compiles a function from the op registry of its own
    kernels (tf2xla) and refuses an op that has none, as the custom ops of native.py have
    none; their work is what XLA fuses by itself (a LayerNorm, dropout and a residual sum
    into one loop), so the traced function uses TensorFlow's ops and the rewrites of this
    module instead."""
    return tf.function(_flagged(fn, _XLA_TRACING), jit_compile=True, autograph=False, **kwargs)
