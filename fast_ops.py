"""Rewrites of standard TensorFlow/Keras ops, kept only where they pay for themselves.

Each rewrite computes what the standard op computes, faster on this project's train
step; each has a switch in :data:`ENABLED` so that ``bench/train_throughput.py
--ablate NAME`` can turn it off alone and measure it against the standard op in the
same run. The gain quoted in each docstring is the median of interleaved on/off pairs of
that benchmark (see its docstring for the command). Switches are read when a function is
traced, so set them before building the model and the train step.
"""

from __future__ import annotations

import keras
import tensorflow as tf

# name -> use the rewrite (True) or the standard op (False)
ENABLED = {
    "dense2d": True,
    "dropout16": True,
    "xent_grad": True,
    "logits_transpose": True,
    "fused_adam": True,
}


def cast(x, dtype):
    """tf.cast that adds no op when x already has the dtype."""
    return tf.cast(x, dtype) if x.dtype != dtype else x


# ---------------------------------------------------------------------------------------
# dense2d: projections as one 2-D MatMul
# ---------------------------------------------------------------------------------------
def dense(x, w):
    """x (..., d_in) @ w (d_in, d_out) -> (..., d_out).

    Rewrite: one 2-D MatMul of x reshaped to (-1, d_in). The standard tf.matmul of a 3-D
    x with a 2-D w broadcasts w into a BatchMatMul whose gradient with respect to w is
    one (d_in, d_out) matrix per batch row, summed afterwards.
    """
    if not ENABLED["dense2d"] or x.shape.rank == 2:
        return tf.matmul(x, w)
    lead = tf.shape(x)[:-1]
    y = tf.matmul(tf.reshape(x, (-1, tf.shape(x)[-1])), w)
    return tf.reshape(y, tf.concat([lead, tf.shape(y)[-1:]], 0))


# ---------------------------------------------------------------------------------------
# logits_transpose: the tied output projection x E^T
# ---------------------------------------------------------------------------------------
def output_logits(x, embeddings):
    """x (..., d_model) @ embeddings (V, d_model)^T -> (..., V).

    Rewrite: an explicit (d_model, V) transpose, so that neither MatMul of the gradient
    transposes the large (tokens, V) operand. Standard: matmul with transpose_b.
    """
    if not ENABLED["logits_transpose"]:
        if x.shape.rank == 2:
            return tf.matmul(x, embeddings, transpose_b=True)
        return tf.einsum("...d,vd->...v", x, embeddings)
    return dense(x, tf.transpose(embeddings))


# ---------------------------------------------------------------------------------------
# dropout16: inverted dropout from 16 random bits per element
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class Dropout(keras.layers.Layer):
    """Inverted dropout (5.4, P_drop = rate); identity when not training.

    Rewrite: one Philox word feeds two elements (16 random bits each; the rate is
    rounded to 1/65536: 0.1 keeps 58982/65536 of the values) and the mask is a single
    multiplier (0 or 1 / keep) that the gradient reuses. keras.layers.Dropout draws a
    float32 uniform per element and applies the mask through a select in both passes.
    x: any shape -> the same shape and dtype.
    """

    def __init__(self, rate: float, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.rate, self.seed = float(rate), seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        drop = round(self.rate * 65536)
        self.threshold = drop - 32768  # keep where the int16 draw >= threshold
        self.keep_scale = 65536.0 / (65536 - drop)
        self.supports_masking = True

    def call(self, x, training=False):
        if not training or self.rate == 0.0:
            return x
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
        n = tf.size(x)
        bits = tf.random.stateless_uniform(
            ((n + 1) // 2,), seed, minval=None, maxval=None, dtype=tf.int32
        )
        draws = tf.reshape(tf.bitcast(bits, tf.int16), (-1,))[:n]
        keep = tf.reshape(draws >= self.threshold, tf.shape(x))
        scale = tf.where(keep, tf.constant(self.keep_scale, x.dtype), tf.constant(0.0, x.dtype))
        return x * scale

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


def dropout(rate: float, **kwargs) -> keras.layers.Layer:
    """A dropout layer: :class:`Dropout`, or keras.layers.Dropout when switched off."""
    if ENABLED["dropout16"]:
        return Dropout(rate, **kwargs)
    return keras.layers.Dropout(rate, **kwargs)


# ---------------------------------------------------------------------------------------
# xent_grad: label-smoothed cross-entropy with a hand-written gradient
# ---------------------------------------------------------------------------------------
def cross_entropy_terms(logits, labels, epsilon: float = 0.1):
    """(label-smoothed loss, plain cross-entropy, correct), each (M,) float32, for logits
    (M, V) and labels (M,); correct is 1.0 where the label's logit is the largest (ties
    count as correct) and has no gradient. See modules.cross_entropy_terms for the
    formula; this is the switchable implementation.
    """
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
    p - onehot(y), with p = softmax(z). The forward pass keeps p (one fused softmax
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
# fused_adam: Adam through TensorFlow's fused kernel
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class FusedAdam(keras.optimizers.Adam):
    """keras.optimizers.Adam (5.3) whose dense update is TensorFlow's fused
    ResourceApplyAdam kernel.

    Rewrite: one pass over (variable, m, v, gradient) instead of the ten elementwise
    ops and three assignments of Keras' generic update; the same arithmetic
    (m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
    w -= lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)), the same slot
    variables and checkpoints. Sparse gradients and amsgrad take Keras' path.

    It reads Keras' private ``_momentums``, ``_velocities`` and ``_get_variable_index``;
    tests/test_fast_ops.py fails loudly if a Keras upgrade renames them.
    """

    def __init__(self, *args, name: str = "adam", **kwargs):
        super().__init__(*args, name=name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        var = variable.value if isinstance(variable, keras.Variable) else variable
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices) or not hasattr(var, "handle"):
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


def adam(learning_rate, **kwargs) -> keras.optimizers.Optimizer:
    """Adam: :class:`FusedAdam`, or keras.optimizers.Adam when switched off."""
    if ENABLED["fused_adam"]:
        return FusedAdam(learning_rate, **kwargs)
    return keras.optimizers.Adam(learning_rate, **kwargs)
