"""Rewrites of standard TensorFlow/Keras ops, kept only where they pay for themselves.

Each rewrite computes what the standard op computes, faster on this project's train
step; each has a switch (:data:`SWITCHES`) so that ``bench/train_throughput.py --ablate
NAME --paired`` can turn it off alone and measure it against the standard op in the same
process. The choice is made once per function, when it is built: :meth:`Kernels.resolve`
turns the switches, the device and ``TRANSFORMER_NATIVE`` into one :class:`Kernels`, and
:func:`function` traces the function under it (:func:`kernels` is what the layers read
while it traces, as Keras hands a layer its ``training`` flag).

A rewrite stays only where it passes the benchmark rules of CONTRIBUTING.md on the path
it serves (a median gain of at least 5 %, in float32 or under mixed_bfloat16). The rewrites
kept, their measured gains and how to measure them are in docs/performance.md ("The speed
rewrites"); those measured and returned to the standard op, each with its pairs, are in
docs/journal.md. The kept ones: ``dense2d`` (projections as one 2-D MatMul), ``xent_grad``
(the loss's written-out gradient), ``native_ln`` (the LayerNorm as C++ kernels, native.py,
CPU train step) and ``native_decode`` (a decoding step's one-position attention, its
LayerNorms, the beam's top k and the cache's reorder as C++ kernels, CPU decoders only:
``Kernels.resolve(decoding=True)``).

The switches of :data:`PRECISION` (f32_scores, f32_logits) are not rewrites: they buy
float32 accuracy under mixed precision and are measured for their cost instead (see
:func:`logits_product`).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any

import keras
import tensorflow as tf

from transformer_tf2.kernels import native

# The switches, each on unless a benchmark turns it off (Kernels.resolve's ``off``).
SWITCHES = ("dense2d", "xent_grad", "native_ln", "native_decode", "f32_scores", "f32_logits")
# the switches of TensorFlow-op rewrites (a field of Kernels each); the native_ ones choose
# where the C++ op library goes (Kernels.train_lib, Kernels.decode_lib)
REWRITES = tuple(name for name in SWITCHES if not name.startswith("native_"))
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
    if not kernels().dense2d or x.shape.rank == 2:
        return tf.matmul(x, w, transpose_b=transpose_b)
    # the static sizes where they are known: fewer shape ops to trace (no arithmetic moves)
    d_in = x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
    y = tf.matmul(tf.reshape(x, (-1, d_in)), w, transpose_b=transpose_b)
    return unflatten(y, x)


def unflatten(y, x, last: tuple | None = None, lead: int | None = None):
    """The rows y (M, d_out) of x (..., d_in) reshaped to x's leading dimensions (all
    but its last; ``lead``: its first ``lead``): (..., d_out), or (..., *last) where
    ``last`` is given (attention's heads (h, d_k)). Where those beyond the first and the
    last ones are known statically, as in a decoding step's (N, 1, d_model), one reshape
    to (-1, ..., d_out): no shape ops to trace, nor to run at each step of a decoding
    loop (the same values either way)."""
    rank = x.shape.rank
    if lead is None:
        lead = -1 if rank is None else rank - 1
    last = (y.shape[-1],) if last is None else tuple(last)
    inner = x.shape[1:lead] if rank is not None else None
    if rank is not None and lead >= 1 and all(last) and inner.is_fully_defined() and all(inner):
        return tf.reshape(y, (-1, *inner, *last))
    if all(d is not None for d in last):
        return tf.reshape(y, tf.concat([tf.shape(x)[:lead], last], 0))
    return tf.reshape(y, tf.concat([tf.shape(x)[:lead], tf.shape(y)[-1:]], 0))


# ---------------------------------------------------------------------------------------
# xent_grad: label-smoothed cross-entropy with a hand-written gradient
# ---------------------------------------------------------------------------------------
def cross_entropy_terms(logits, labels, epsilon: float = 0.1):
    """(label-smoothed loss, plain cross-entropy, correct), each (M,) float32, for logits
    (M, V) and labels (M,); correct is 1.0 where the label's logit is the largest (ties
    count as correct) and has no gradient. See optimization.cross_entropy_terms for the
    formula; this is the switchable implementation."""
    logits, labels, epsilon = cast(logits, tf.float32), tf.cast(labels, tf.int32), float(epsilon)
    if kernels().xent_grad:
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
    if not getattr(kernels(), switch) or a.dtype == tf.float32 and b.dtype == tf.float32:
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
    call of a train step whose kernels hold the library (:attr:`Kernels.train_lib`: a CPU,
    ``native_ln`` on, no XLA), the forward and the gradient are one C++ kernel each
    (native.py), whose result keeps x's dtype; so is the forward in a decoder
    (:attr:`Kernels.decode_lib`). Other calls (export, a GPU, an XLA function, a call
    outside a function that :func:`function` built) are Keras'. The same layer, weights
    and checkpoints.

    Rewrite: one pass over each row each way, where Keras' formula and the gradients that
    autodiff chains through its moments make about ten; with x^ = (x - mean) r, r = 1 /
    sqrt(var + epsilon) and g = dy gamma, the input gradient is r (g - mean(g) - x^
    mean(g x^)), and the weights' are the column sums of dy x^ and dy. Measured gain: see
    the module docstring.
    """

    def call(self, inputs, training=None):
        lib = None
        if self.plain(len(inputs.shape)):
            chosen = kernels()
            lib = chosen.train_lib if training else chosen.decode_lib
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


@dataclasses.dataclass(frozen=True)
class Kernels:
    """The kernels that one traced function uses, chosen when the function is built
    (:meth:`resolve`) and read while it traces (:func:`kernels`): a rewrite switch each
    (on: the rewrite, off: the standard op), and the C++ op library (native.py) or None for
    the two places that may use it: ``train_lib`` for a LayerNorm's training calls
    (``native_ln``), ``decode_lib`` for a decoder's LayerNorms, attention of one position,
    the beam's top k and the cache's reorder with its append (``native_decode``).
    ``jit_compile``: the function is compiled by XLA, which never gets a C++ op
    (:func:`function`). ``decoding``: a decoder's function (:func:`decoding_function`),
    whose attention projects straight into heads (attention.MultiHeadAttention._project:
    fewer ops to trace and to set up at a decoder's first call; a train step keeps the
    graph its Grappler rewrites were measured on, which round differently on another).
    ``Kernels()``: every rewrite, no C++ op, what a call outside any built function uses
    (eager code, export.py's SavedModel)."""

    dense2d: bool = True
    xent_grad: bool = True
    f32_scores: bool = True
    f32_logits: bool = True
    train_lib: Any = None
    decode_lib: Any = None
    jit_compile: bool = False
    decoding: bool = False

    @classmethod
    def resolve(cls, off=(), decoding: bool = False, jit_compile: bool = False) -> "Kernels":
        """The kernels of a train step (a decoder with ``decoding``; an XLA function with
        ``jit_compile``), the switches in ``off`` turned off. The one place where the
        device and the environment are read: the C++ ops only on a CPU-only machine,
        outside XLA (no tf2xla kernel), and where native.ops() loads them
        (``TRANSFORMER_NATIVE=0`` turns them off)."""
        off = set(off)
        unknown = sorted(off - set(SWITCHES))
        if unknown:
            raise ValueError(
                f"no kernel switch {', '.join(unknown)}; the switches are {', '.join(SWITCHES)}"
            )
        train, decode = "native_ln" not in off, decoding and "native_decode" not in off
        lib = None
        if (train or decode) and not jit_compile and not tf.config.list_physical_devices("GPU"):
            lib = native.ops()
        rewrites = {name: name not in off for name in REWRITES}
        return cls(
            **rewrites,
            train_lib=lib if train else None,
            decode_lib=lib if decode else None,
            jit_compile=jit_compile,
            decoding=decoding,
        )

    def for_xla(self) -> "Kernels":
        """These kernels for a function that XLA compiles: the same rewrites, no C++ op."""
        return dataclasses.replace(self, train_lib=None, decode_lib=None, jit_compile=True)


class _Active(threading.local):
    """The Kernels of the function this thread is tracing (each thread its own: decoding
    streams and a mirrored strategy's replicas trace on threads of their own)."""

    kernels = None


_ACTIVE = _Active()
_STANDARD = Kernels()


def gather_append(cache, rows, new):
    """The rows ``rows`` (R,) int32 of a self-attention cache (N, h, T, d_k) with a
    decoding step's new position ``new`` (R, h, 1, d_k) appended: (R, h, T + 1, d_k). One
    C++ copy (NativeGatherAppend) where the decoder's kernels hold the library, else a
    gather and a concat: a beam's reorder and the step's append, the same values."""
    lib = kernels().decode_lib
    if lib is not None and new.dtype == tf.float32:
        return lib.native_gather_append(cache, rows, new)
    return tf.concat([tf.gather(cache, rows), new], axis=2)


def kernels() -> Kernels:
    """The Kernels of the function that this thread is tracing (:func:`function`,
    :func:`under`); ``Kernels()`` outside one."""
    return _ACTIVE.kernels or _STANDARD


def under(chosen: Kernels, fn):
    """fn, run with ``chosen`` as this thread's :func:`kernels`: what is traced from it
    uses them (for a function that another thread runs, such as strategy.run's). Inside
    an XLA function's trace, ``chosen`` loses the C++ ops (:meth:`Kernels.for_xla`)."""

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        outer = _ACTIVE.kernels
        inside_xla = outer is not None and outer.jit_compile
        _ACTIVE.kernels = chosen.for_xla() if inside_xla else chosen
        try:
            return fn(*args, **kwargs)
        finally:
            _ACTIVE.kernels = outer

    return traced


def function(fn, chosen: Kernels, **kwargs):
    """tf.function(fn, autograph=False, **kwargs) that traces ``fn`` under the kernels
    ``chosen`` (:meth:`Kernels.resolve`), compiled by XLA where they say ``jit_compile``.
    XLA compiles a function from the op registry of its own kernels (tf2xla) and refuses
    an op that has none, as the custom ops of native.py have none; their work is what XLA
    fuses by itself (a LayerNorm, dropout and a residual sum into one loop), so an XLA
    function's kernels never hold the library (:meth:`Kernels.for_xla`)."""
    if "jit_compile" in kwargs:
        raise ValueError("fast_ops.function compiles with XLA where its kernels say so")
    if chosen.jit_compile:
        if chosen.train_lib is not None or chosen.decode_lib is not None:
            raise ValueError("an XLA function cannot run the C++ ops: use Kernels.for_xla()")
        kwargs["jit_compile"] = True
    return tf.function(under(chosen, fn), autograph=False, **kwargs)


def decoding_function(fn, chosen: Kernels | None = None, **kwargs):
    """:func:`function` of a decoder: under ``chosen``, by default the decoding kernels of
    this machine (``Kernels.resolve(decoding=True)``). Only the decoders of this process
    are built with them: what export.py traces into a SavedModel is Keras' own ops
    (``Kernels()``), so that the exported model never needs the library."""
    return function(fn, chosen or Kernels.resolve(decoding=True), **kwargs)
