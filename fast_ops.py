"""Rewrites of standard TensorFlow/Keras ops, kept only where they pay for themselves.

Each rewrite computes what the standard op computes, faster on this project's train
step; each has a switch in :data:`ENABLED` so that ``bench/train_throughput.py
--ablate NAME`` can turn it off alone and measure it against the standard op in the
same run. The gain quoted in each docstring is the median of 3 interleaved on/off pairs of
``python bench/train_throughput.py --preset multi30k --ablate dense2d,xent_grad`` (small
model, float32, 2-core CPU). Switches are read when a function is traced, so set them
before building the model and the train step.

A rewrite stays only with a median gain of at least 5 % and every pair in its favour, in
float32 or under mixed_bfloat16.
The switches of :data:`PRECISION` (f32_scores, f32_logits) are not rewrites: they buy
float32 accuracy under mixed precision and are measured for their cost instead (see
:func:`logits_product`).
Measured and returned to the standard op: the tied output projection through an
explicit transpose (+0.0 %), the loss over every target position instead of
tf.boolean_mask (+0.9 % / -1.0 %), the XLA output product's rows in blocks of 64
(+0.3 %), the tied output projection and the loss under one custom gradient that
never forms the (M, V) gradient (``output_xent``, commit 80585d2: +1.8 % in float32,
+4.2 % under mixed_bfloat16, every pair in its favour) and W^Q, W^K, W^V as one product
split by one transpose (``fused_qkv``, commit 7fea64c: -1.7 % in float32). The 16-bit-draw dropout
(:class:`Dropout`), the fused Adam (:class:`Adam`) and the written-out LayerNorm
gradient (:class:`LayerNormalization`) are below the bar in float32 and pass it under
mixed_bfloat16. Two switches run C++ kernels of our own (native.py, CPU only, in the train
step only): ``native_ln``, the LayerNorm (+6.4 % float32 with post-norm, +7.5 % with
pre-norm), ``native_residual``, post-norm's LayerNorm(x + Dropout(s)) (+9.8 % under
mixed_bfloat16, +4.7 % float32): :func:`residual_layer_norm`, and ``native_xent``, the
label-smoothed loss (:func:`cross_entropy_terms`).
"""

from __future__ import annotations

import keras
import tensorflow as tf

import native

# name -> use the rewrite (True) or the standard op (False)
ENABLED = {
    "dense2d": True,
    "xent_grad": True,
    "dropout16": True,
    "fused_adam": True,
    "layer_norm": True,
    "native_ln": True,
    "native_residual": True,
    "native_xent": True,
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
    (d_in, d_out) matrix per batch row, summed afterwards. Measured gain: +26.8 % training
    tokens/s (median of 3 on/off pairs: +31.0, +26.8, +26.3 %).
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
    count as correct) and has no gradient. See modules.cross_entropy_terms for the
    formula; this is the switchable implementation.

    On a CPU with ``native_xent`` on: one C++ kernel each way (native.py; the gradient
    recomputes the softmax from the saved logsumexp, so no (M, V) tensor is kept between
    the passes). Measured gain over xent_grad (Intel Xeon with AMX, 2 cores; ``python
    bench/train_throughput.py --preset multi30k --ablate native_xent --paired
    [--precision mixed_bfloat16]``, with native_ln and native_residual on): +6.7 % under
    mixed_bfloat16 (+8.0, +6.0, +6.7 %), +3.8 % in float32 (+2.2, +3.8, +4.1 %).
    """
    logits, labels, epsilon = cast(logits, tf.float32), tf.cast(labels, tf.int32), float(epsilon)
    lib = native_kernels("native_xent")
    if lib is not None:
        return tuple(lib.native_smoothed_xent(logits, labels, epsilon=epsilon)[:3])
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
    p - onehot(y), with p = softmax(z). Measured gain: +14.4 % training tokens/s (median
    of 3 on/off pairs: +8.7, +14.4, +17.3 %). The forward pass keeps p (one fused softmax
    kernel) and reads logsumexp off it: lse = max(z) - log(max(p)), exact because the
    largest logit has the largest probability, at least 1/V, which never underflows.
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
        z = _float32_matmul(tf.reshape(a, (-1, tf.shape(a)[-1])), b, transpose_b, switch)
        return tf.reshape(z, tf.concat([tf.shape(a)[:-1], tf.shape(z)[-1:]], 0))
    if a.shape.rank == b.shape.rank:  # Q K^T, or a 2-D product
        return _float32_matmul(a, b, transpose_b, switch)
    # broadcast batch dimensions (xl's (q + v) R, b (h, d_k, L)): b tiled to a's batch
    # (N, h, d_k, L; its gradient a sum over N), so that the backward stays 16-bit
    batch = tf.shape(a)[: a.shape.rank - 2]
    b = tf.broadcast_to(b, tf.concat([batch, tf.shape(b)[-2:]], 0))
    return _float32_matmul(a, b, transpose_b, switch)


def _float32_matmul(a, b, transpose_b: bool, switch: str):
    """tf.matmul(a, b) of equal batch dimensions, computed and returned in float32; the
    gradients computed in a's 16-bit dtype (b may be a float32 weight: its gradient is then
    returned in float32).

    The forward product: for f32_scores, float32 copies of the operands (exact: a product
    of two 16-bit numbers fits float32's 24 significant bits). For f32_logits, the 16-bit
    operands (the weight rounded as every mixed-precision layer rounds its weights)
    multiplied with float32 accumulation and output by :func:`_float32_out`, one XLA
    kernel, because TensorFlow's CPU kernels have no 16-bit x 16-bit -> float32 matmul and
    a float32 product of the output projection, the model's largest matmul, ran at about
    half the bfloat16 speed.
    """

    @tf.custom_gradient
    def fn(a, b):
        if switch == "f32_logits" and a.dtype in (tf.bfloat16, tf.float16):
            z = _float32_out(a, cast(b, a.dtype), transpose_b)
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


@tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
def _float32_out(a, b, transpose_b):
    """a (M, d) @ b (d, n) (or b (n, d) if ``transpose_b``) of 16-bit operands, accumulated
    and returned in float32 -> (M, n): XLA compiles it once per shape (milliseconds)."""
    return tf.linalg.matmul(a, b, transpose_b=transpose_b, output_type=tf.float32)


# ---------------------------------------------------------------------------------------
# dropout16: dropout from 16 random bits per element
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout (5.4: inverted dropout, P_drop = rate) whose mask, when
    ``dropout16`` is on (read when the train step is traced), comes from 16 random bits
    per element. x: any shape -> the same shape and dtype.

    Rewrite: one 32-bit Philox draw feeds two elements (the rate rounded to 1/65536: 0.1
    keeps 58982 of 65536 values, scaled by 65536/58982), and the mask is one multiplier
    (0 or the scale) that the gradient reuses. Keras draws a uniform number of x's dtype
    per element and applies it through a select in each pass. The same layer, seed
    generator and checkpoints; the masks are other draws. Measured gain (Intel Xeon with
    AMX, 2 cores; ``python bench/train_throughput.py --preset multi30k --ablate dropout16
    --paired [--precision mixed_bfloat16]``, 3 paired windows): +5.4 % training tokens/s
    under mixed_bfloat16 (+0.7, +6.1, +5.4 %), where Keras draws bfloat16 uniforms, and
    +1.6 % in float32 (+2.1, +1.6, +1.4 %).
    """

    def call(self, inputs, training=False):
        rate = float(self.rate)
        if not (ENABLED["dropout16"] and training and 0.0 < rate < 1.0) or self.noise_shape:
            return super().call(inputs, training=training)
        drop = round(rate * 65536)
        seed = tf.cast(self.seed_generator.next(), tf.int32)
        n = tf.size(inputs)
        bits = tf.random.stateless_uniform(
            ((n + 1) // 2,), seed, minval=None, maxval=None, dtype=tf.uint32
        )
        draws = tf.reshape(tf.bitcast(bits, tf.uint16), (-1,))[:n]
        keep = tf.reshape(draws >= drop, tf.shape(inputs))
        scale = tf.constant(65536.0 / (65536 - drop), inputs.dtype)
        return inputs * tf.where(keep, scale, tf.zeros((), inputs.dtype))


# ---------------------------------------------------------------------------------------
# layer_norm: LayerNorm with a hand-written gradient
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """keras.layers.LayerNormalization over the last axis (3.1: gamma * (x - mean) /
    sqrt(var + epsilon) + beta, in float32) whose gradient, when ``layer_norm`` is on
    (read when the train step is traced), is written out. x: (..., d) -> the same shape
    and dtype.

    Rewrite: with x^ = (x - mean) r, r = 1 / sqrt(var + epsilon) and g = dy gamma, the
    input gradient is r (g - mean(g) - x^ mean(g x^)), two row means, and the weights'
    are the column sums of dy x^ and dy; the forward keeps x - mean and r. Autodiff of
    Keras' formula chains the gradients of its moments and broadcasts instead. The forward
    values are Keras' (its arithmetic in its order); a 16-bit input gets them in its own
    dtype, where Keras rounds them to it and returns them in float32 (two casts that every
    caller undoes). The same layer, weights and checkpoints. Measured gain (Intel Xeon with
    AMX, 2 cores; ``python bench/train_throughput.py --preset multi30k --ablate layer_norm
    --paired [--precision mixed_bfloat16]``, 3 paired windows): +5.9 % training tokens/s
    under mixed_bfloat16 (+10.8, +3.6, +5.9 %) and +2.6 % in float32 (+2.4, +3.4, +2.6 %).

    In a training call on a CPU with ``native_ln`` on, the forward and the gradient are
    one C++ kernel each instead (native.py): +6.4 % float32 tokens/s with post-norm
    sublayers (+8.7, +6.4, +6.4 %), +7.5 % with pre-norm (+6.4, +8.8, +7.5 %; ``python
    bench/train_throughput.py --preset multi30k --ablate native_ln --paired [--paired_norm
    pre]``). Other calls (decoding, export) keep TensorFlow's ops.
    """

    def call(self, inputs, training=None):
        if not ENABLED["layer_norm"] or not self.plain(len(inputs.shape)):
            return super().call(inputs)
        x = cast(inputs, tf.float32)
        gamma, beta = self.gamma_beta(x.shape[-1:])
        lib = native_kernels() if training else None
        if lib is not None:
            out = lib.native_layer_norm(x, gamma, beta, epsilon=float(self.epsilon))[0]
        else:
            out = _layer_norm(x, gamma, beta, float(self.epsilon))
        # Keras' values, rounded to a 16-bit input's dtype as Keras rounds them, and left in
        # it (Keras returns them cast back to float32, which every caller casts to 16 bits)
        return cast(out, inputs.dtype)

    def gamma_beta(self, shape):
        """gamma and beta as tensors read off the weights (a distributed variable inside a
        custom gradient would be a variable of its own); ones and zeros where the layer
        has none. shape: (d,)."""
        gamma = tf.ones(shape) if self.gamma is None else tf.identity(self.gamma.value)
        beta = tf.zeros(shape) if self.beta is None else tf.identity(self.beta.value)
        return gamma, beta

    def plain(self, rank: int) -> bool:
        """Normalizes an input of ``rank`` over its last axis, with gamma and beta (what
        the rewrites compute)."""
        return self.axis in ([-1], [rank - 1]) and not self.rms_scaling


def residual_layer_norm(ln: LayerNormalization, dropout: Dropout, x, s, training):
    """LayerNorm(x + Dropout(s)), the end of a post-norm residual sublayer (3.1, 5.4), as
    one fused kernel (``native_residual``): x, s (..., d) float32 or bfloat16 -> (..., d)
    of their dtype, computed in float32. None where the kernel does not apply (not
    training, no kernels, float16, a noise shape): the caller then runs the layers.

    Rewrite: one pass forward and one back instead of the dropout draw, its comparison,
    select and product, the residual sum and the LayerNorm's passes; the mask is drawn
    from (seed, element) inside the kernel, again in the gradient, so it is never
    stored. The masks are other draws than the layers' (the same rate, the same seed
    generator, one seed per call). Measured gain (Intel Xeon with AMX, 2 cores; ``python
    bench/train_throughput.py --preset multi30k --ablate native_residual --paired
    [--precision mixed_bfloat16]``, 3 paired windows, native_ln on in both): +9.8 %
    training tokens/s under mixed_bfloat16 (+9.7, +9.8, +12.9 %), +4.7 % in float32 (+4.7,
    +3.7, +5.0 %).
    """
    kernel_dtype = x.dtype in (tf.float32, tf.bfloat16) and s.dtype == x.dtype
    if not training or not kernel_dtype or not ln.plain(len(x.shape)):
        return None
    rate = float(dropout.rate)
    if dropout.noise_shape or not 0.0 <= rate < 1.0 or not ENABLED["layer_norm"]:
        return None
    lib = native_kernels("native_residual")
    if lib is None:
        return None
    seed = tf.cast(dropout.seed_generator.next(), tf.int32) if rate else tf.zeros(2, tf.int32)
    gamma, beta = ln.gamma_beta(x.shape[-1:])
    out = lib.native_residual_layer_norm(
        x, s, gamma, beta, seed, epsilon=float(ln.epsilon), rate=rate
    )
    return out[0]


def native_kernels(switch: str = "native_ln"):
    """native.ops() where the ``switch`` is on, no GPU is visible (the kernels are
    CPU-only) and no XLA function is being traced (:func:`xla_function`), else None. Read
    when the train step is traced."""
    if not ENABLED[switch] or _XLA_TRACING or tf.config.list_physical_devices("GPU"):
        return None
    return native.ops()


_XLA_TRACING = []  # non-empty while xla_function traces its function


def xla_function(fn, **kwargs):
    """tf.function(fn, jit_compile=True, autograph=False, **kwargs) that traces ``fn`` with
    the native kernels off. XLA compiles a function from the op registry of its own
    kernels (tf2xla) and refuses an op that has none, as the custom ops of native.py have
    none; their work is what XLA fuses by itself (a LayerNorm, dropout and a residual sum
    into one loop), so the traced function uses TensorFlow's ops and the rewrites of this
    module instead."""

    def traced(*args):
        _XLA_TRACING.append(True)
        try:
            return fn(*args)
        finally:
            _XLA_TRACING.pop()

    return tf.function(traced, jit_compile=True, autograph=False, **kwargs)


def _layer_norm(x, gamma, beta, epsilon: float):
    """gamma * (x - mean) / sqrt(var + epsilon) + beta over the last axis of float32 x
    (..., d), with gamma, beta (d,), and the written-out gradient (:class:`LayerNormalization`).
    The forward pass is Keras' arithmetic, in its order (the same float32 values)."""

    @tf.custom_gradient
    def fn(x, gamma, beta):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        centred = x - mean
        r = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True) + epsilon)
        scale = r * gamma

        def grad(dy):
            d = tf.shape(x)[-1]
            normal = centred * r
            d_gamma = tf.reduce_sum(tf.reshape(dy * normal, (-1, d)), axis=0)
            d_beta = tf.reduce_sum(tf.reshape(dy, (-1, d)), axis=0)
            g = dy * gamma
            mean_g = tf.reduce_mean(g, axis=-1, keepdims=True)
            mean_gn = tf.reduce_mean(g * normal, axis=-1, keepdims=True)
            return r * (g - mean_g - normal * mean_gn), d_gamma, d_beta

        return x * scale + (-mean * scale + beta), grad

    return fn(x, gamma, beta)


# ---------------------------------------------------------------------------------------
# fused_adam: Adam's dense update in TensorFlow's fused kernel
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class Adam(keras.optimizers.Adam):
    """keras.optimizers.Adam (5.3) whose dense update is TensorFlow's fused
    ResourceApplyAdam kernel when ``fused_adam`` is on (read when the train step is
    traced).

    Rewrite: one pass over (variable, m, v, gradient) instead of the ten elementwise ops
    and three assignments of Keras' update, each a pass over the whole tensor; the same
    arithmetic (m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
    w -= lr sqrt(1 - beta_2^t) / (1 - beta_1^t) m / (sqrt(v) + epsilon)), the same slot
    variables, so the same checkpoints. Sparse gradients and amsgrad take Keras' path.
    Measured gain (Intel Xeon with AMX, 2 cores; ``python bench/train_throughput.py
    --preset multi30k --ablate fused_adam --paired [--precision mixed_bfloat16]``, 3 paired
    windows): +5.2 % training tokens/s under mixed_bfloat16 (+5.2, +6.8, +5.1 %) and +3.8 %
    in float32 (+5.8, +3.8, +3.3 %).

    It reads Keras' ``_momentums``, ``_velocities`` and ``_get_variable_index``;
    tests/test_fast_ops.py fails loudly if a Keras upgrade renames them.
    """

    def __init__(self, *args, name: str = "adam", **kwargs):
        super().__init__(*args, name=name, **kwargs)
        # True where the caller passes gradients already summed over the replicas
        # (trainer.Trainer, which clips the sum): Keras' own all-reduce is then skipped
        self.summed = False

    def _all_reduce_sum_gradients(self, grads_and_vars):
        """Keras' sum of the replicas' gradients, skipped when they are summed already."""
        if self.summed:
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)

    def update_step(self, gradient, variable, learning_rate):
        var = variable.value if isinstance(variable, keras.Variable) else variable
        fused = ENABLED["fused_adam"] and not self.amsgrad and hasattr(var, "handle")
        if not fused or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index].value, self._velocities[index].value
        dtype = var.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=var.handle,
            m=m.handle,
            v=v.handle,
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype),
            use_locking=False,
        )
