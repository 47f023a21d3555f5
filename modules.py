"""Building blocks of the Transformer (Vaswani et al. 2017, "Attention Is All You Need").

Keras 3 layers with build()/get_config(), usable under mixed precision: matmuls run in
the layer's compute dtype, while softmax, LayerNorm and the loss run in float32. Shapes in
the docstrings use N (batch), T1 (source length), T2 (target length), h (num_heads),
d_k = d_model / h, V (vocabulary size).

Where Kyubyong's TF1 code differs from the paper, the docstring says so.
"""
from __future__ import annotations

import math

import keras
import tensorflow as tf

# Masked attention logits get this value: exp() of it is 0 in float32, and it stays finite
# in float16 (max 65504) and bfloat16, unlike -1e9 or -inf.
MASK_VALUE = -3.0e4


def _cast(x, dtype):
    return tf.cast(x, dtype) if x.dtype != dtype else x


def dense(x, w, transpose_b: bool = False):
    """x (..., d_in) @ w (d_in, d_out) -> (..., d_out) as one 2-D MatMul.

    tf.matmul of a 3-D x with a 2-D w broadcasts w into a BatchMatMul, whose gradient
    with respect to w is one (d_in, d_out) matrix per batch row, summed afterwards: on
    CPU that made the attention projections several times slower than this reshape.
    """
    rank = x.shape.rank
    if rank == 2:
        return tf.matmul(x, w, transpose_b=transpose_b)
    lead = tf.shape(x)[:-1]
    y = tf.matmul(tf.reshape(x, (-1, tf.shape(x)[-1])), w, transpose_b=transpose_b)
    return tf.reshape(y, tf.concat([lead, tf.shape(y)[-1:]], 0))


@keras.saving.register_keras_serializable(package="transformer")
class Dropout(keras.layers.Layer):
    """Inverted dropout (5.4, P_drop = rate) drawing 16 random bits per element.

    keras.layers.Dropout draws a float32 uniform per element and applies the mask through
    a select in both passes; here one Philox word feeds two elements (rate rounded to
    1/65536: 0.1 keeps 58982/65536 of the values) and the mask is a single
    multiplier, (0 or 1 / keep) per element, that the gradient reuses. Identity when not
    training. x: any shape -> the same shape and dtype.
    """

    def __init__(self, rate: float, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.rate, self.seed = float(rate), seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        drop = round(self.rate * 65536)
        self.threshold = drop - 32768           # keep where the int16 draw >= threshold
        self.keep_scale = 65536.0 / (65536 - drop)
        self.supports_masking = True

    def call(self, x, training=False):
        if not training or self.rate == 0.0:
            return x
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1),
                       tf.int32)
        n = tf.size(x)
        bits = tf.random.stateless_uniform(((n + 1) // 2,), seed, minval=None, maxval=None,
                                           dtype=tf.int32)
        draws = tf.reshape(tf.bitcast(bits, tf.int16), (-1,))[:n]
        keep = tf.reshape(draws >= self.threshold, tf.shape(x))
        return x * tf.where(keep, tf.constant(self.keep_scale, x.dtype),
                            tf.constant(0.0, x.dtype))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


# ---------------------------------------------------------------------------------------
# Embedding (3.4) and positional encoding (3.5)
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class TokenEmbedding(keras.layers.Layer):
    """Token embedding scaled by sqrt(d_model); the PAD row (id 0) gives zeros. See 3.4.

    The same matrix is the pre-softmax projection (:meth:`logits`), as in the paper.
    Kyubyong zeroes the PAD row by concatenating a constant zero row; here the output at
    PAD positions is masked, which has the same effect and keeps one plain matrix.

    The matrix has V8 = V rounded up to a multiple of 8 rows, so that the output
    projection's matmul has a width that suits Tensor Cores (and vector units); the
    extra rows belong to no token, and their logits are cut off after the matmul.

    call: ids (N, T) int -> (N, T, d_model).  logits: (..., d_model) -> (..., V) float32.
    """

    ROW_MULTIPLE = 8

    def __init__(self, vocab_size: int, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.d_model = vocab_size, d_model
        self.rows = -(-vocab_size // self.ROW_MULTIPLE) * self.ROW_MULTIPLE

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.rows, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))

    def call(self, ids):
        w = _cast(self.embeddings.value, self.compute_dtype)
        x = tf.gather(w, ids) * math.sqrt(self.d_model)
        return x * _cast(tf.not_equal(ids, 0)[..., None], x.dtype)

    def logits(self, x):
        """Pre-softmax linear transformation with the shared weights; float32 output."""
        w = _cast(self.embeddings.value, self.compute_dtype)
        # x @ w^T through an explicit (d_model, V) transpose: the MatMul gradients then
        # never transpose the large (M, V) operand (measured faster on CPU)
        z = _cast(dense(_cast(x, w.dtype), tf.transpose(w)), tf.float32)
        return z if self.rows == self.vocab_size else z[..., :self.vocab_size]

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model}


def sinusoid_encoding(positions, d_model: int, dtype=tf.float32):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same). See 3.5.

    positions: (T,) int -> (T, d_model). Works for any position, not a fixed table; the
    original TF1 code precomputed maxlen rows and failed on longer test sentences.
    """
    pos = tf.cast(positions, tf.float32)[:, None]                       # (T, 1)
    i = tf.range(d_model) // 2                                          # 0 0 1 1 2 2 ...
    angle_rates = tf.pow(10000.0, -tf.cast(2 * i, tf.float32) / d_model)
    angles = pos * angle_rates[None, :]                                 # (T, d_model)
    even = tf.equal(tf.range(d_model) % 2, 0)
    return tf.cast(tf.where(even[None, :], tf.sin(angles), tf.cos(angles)), dtype)


@keras.saving.register_keras_serializable(package="transformer")
class PositionalEncoding(keras.layers.Layer):
    """Adds position information to (N, T, d_model) embeddings, starting at ``offset``.

    kind='sinusoid': the fixed encoding of 3.5 (no weights).
    kind='learned': a (max_position, d_model) table, as the legacy ``sinusoid=False``;
    positions past the table reuse its last row.
    """

    def __init__(self, d_model: int, kind: str = "sinusoid", max_position: int = 1024,
                 **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.kind, self.max_position = d_model, kind, max_position

    def build(self, input_shape=None):
        if self.kind == "learned":
            self.table = self.add_weight(
                name="table", shape=(self.max_position, self.d_model),
                initializer=keras.initializers.RandomNormal(stddev=0.02))

    def call(self, x, offset=0):
        positions = tf.range(tf.shape(x)[1]) + offset
        if self.kind == "learned":
            pe = tf.gather(_cast(self.table.value, x.dtype),
                           tf.minimum(positions, self.max_position - 1))
        else:
            pe = sinusoid_encoding(positions, self.d_model, x.dtype)
        return x + pe[None]

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "kind": self.kind,
                "max_position": self.max_position}


# ---------------------------------------------------------------------------------------
# Attention (3.2)
# ---------------------------------------------------------------------------------------
def padding_mask(ids):
    """(N, T) ids -> (N, 1, 1, T) bool, True where a key may be attended to (not PAD)."""
    return tf.not_equal(ids, 0)[:, None, None, :]


def causal_mask(length):
    """(1, 1, T, T) bool, True on and below the diagonal: position t sees positions <= t."""
    return tf.linalg.band_part(tf.ones((length, length), tf.bool), -1, 0)[None, None]


def scaled_dot_product_attention(q, k, v, mask=None, dropout=None, training=False,
                                 scale=True):
    """softmax(Q K^T / sqrt(d_k)) V, with masked keys excluded. See 3.2.1.

    q: (N, h, T_q, d_k), k: (N, h, T_k, d_k), v: (N, h, T_k, d_v),
    mask: bool broadcastable to (N, h, T_q, T_k), True = attend.
    Returns (output (N, h, T_q, d_v), weights (N, h, T_q, T_k) float32).
    The logits and softmax are float32 whatever the compute dtype.
    """
    scores = _cast(tf.matmul(q, k, transpose_b=True), tf.float32)
    if scale:
        scores = scores / math.sqrt(float(q.shape[-1]))
    if mask is not None:
        scores = tf.where(mask, scores, MASK_VALUE)
    weights = tf.nn.softmax(scores, axis=-1)
    dropped = dropout(weights, training=training) if dropout is not None else weights
    return tf.matmul(_cast(dropped, v.dtype), v), weights


@keras.saving.register_keras_serializable(package="transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, ...).

    See 3.2.2. Separate W^Q, W^K, W^V (d_model x d_model, split into h heads of d_k) and
    the output projection W^O; like the paper (and tensor2tensor) no biases. The 2019
    Kyubyong code has no W^O: it concatenates the heads and adds the residual directly.

    call(query (N, T_q, d_model), memory (N, T_k, d_model), mask) -> (N, T_q, d_model),
    plus the attention weights (N, h, T_q, T_k) when ``return_attention``.
    For incremental decoding, ``cache`` holds precomputed keys/values, see :meth:`step`.
    """

    def __init__(self, d_model: int, num_heads: int, dropout_rate: float = 0.0,
                 scale: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.dropout_rate = d_model, num_heads, dropout_rate
        self.d_k = d_model // num_heads
        self.scale = scale
        self.dropout = Dropout(dropout_rate) if dropout_rate > 0 else None

    def build(self, query_shape=None, memory_shape=None):
        init = keras.initializers.GlorotUniform()
        shape = (self.d_model, self.d_model)
        self.w_q = self.add_weight(name="w_q", shape=shape, initializer=init)
        self.w_k = self.add_weight(name="w_k", shape=shape, initializer=init)
        self.w_v = self.add_weight(name="w_v", shape=shape, initializer=init)
        self.w_o = self.add_weight(name="w_o", shape=shape, initializer=init)

    def _project(self, x, w):
        """(N, T, d_model) @ W -> heads (N, h, T, d_k)."""
        y = dense(x, _cast(w.value, self.compute_dtype))
        n, t = tf.shape(y)[0], tf.shape(y)[1]
        return tf.transpose(tf.reshape(y, (n, t, self.num_heads, self.d_k)), (0, 2, 1, 3))

    def _merge(self, heads):
        """(N, h, T, d_k) -> Concat(heads) W^O (N, T, d_model)."""
        n, t = tf.shape(heads)[0], tf.shape(heads)[2]
        concat = tf.reshape(tf.transpose(heads, (0, 2, 1, 3)), (n, t, self.d_model))
        return dense(concat, _cast(self.w_o.value, self.compute_dtype))

    def keys_values(self, memory):
        """Projected keys and values of memory: two (N, h, T_k, d_k) tensors."""
        return self._project(memory, self.w_k), self._project(memory, self.w_v)

    def call(self, query, memory, mask=None, training=False, return_attention=False):
        q = self._project(query, self.w_q)
        k, v = self.keys_values(memory)
        heads, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout, training,
                                                      self.scale)
        out = self._merge(heads)
        return (out, weights) if return_attention else out

    def attend(self, query, k, v, mask=None):
        """Attention of query (N, T_q, d_model) over precomputed heads k, v (inference)."""
        q = self._project(query, self.w_q)
        heads, weights = scaled_dot_product_attention(q, k, v, mask, scale=self.scale)
        return self._merge(heads), weights

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "dropout_rate": self.dropout_rate, "scale": self.scale}


# ---------------------------------------------------------------------------------------
# Weighted Transformer: branched attention (Ahmed et al. 2017, arXiv 1711.02132, sec. 3)
# ---------------------------------------------------------------------------------------
def project_to_simplex(v):
    """Euclidean projection of a vector (M,) onto {w : w_i >= 0, sum_i w_i = 1}.

    The sort-based algorithm of Duchi et al. (2008): with u sorted in decreasing order,
    rho = max{j : u_j - (sum_{i<=j} u_i - 1) / j > 0}, theta = (sum_{i<=rho} u_i - 1) / rho,
    and w = max(v - theta, 0). A vector already on the simplex is returned unchanged.
    """
    v = tf.convert_to_tensor(v)
    u = tf.sort(v, direction="DESCENDING")
    css = tf.cumsum(u)
    j = tf.range(1, tf.shape(v)[0] + 1, dtype=v.dtype)
    rho = tf.reduce_sum(tf.cast(u - (css - 1.0) / j > 0, tf.int32))
    theta = (css[rho - 1] - 1.0) / tf.cast(rho, v.dtype)
    return tf.maximum(v - theta, 0.0)


@keras.saving.register_keras_serializable(package="transformer")
class SimplexProjection(keras.constraints.Constraint):
    """Keeps a weight vector on the probability simplex: non-negative, summing to 1.

    Keras optimizers apply a variable's constraint right after each update, so this is
    projected gradient descent, exactly the constrained problem of the paper.
    """

    def __call__(self, w):
        return project_to_simplex(w)


def random_simplex(shape, dtype=None):
    """Random positive values normalized to sum 1 (the reference initialization)."""
    w = keras.random.uniform(shape, minval=0.1, maxval=1.0, dtype=dtype or "float32")
    return w / keras.ops.sum(w)


@keras.saving.register_keras_serializable(package="transformer")
class BranchedAttention(MultiHeadAttention):
    """Weighted multi-branch attention with the feed-forward folded in (Weighted
    Transformer, Ahmed et al. 2017, eq. 3-5), for M = num_heads branches::

        head_i    = Attention(Q W_i^Q, K W_i^K, V W_i^V)              (N, T_q, d_k)
        headbar_i = head_i W^{O_i} * kappa_i                           (N, T_q, d_model)
        Branched  = sum_i alpha_i FFN_i(headbar_i)                     (N, T_q, d_model)

    W^{O_i} (d_k x d_model) are the rows of the usual W^O that belong to head i, so
    W^Q, W^K, W^V and W^O are those of :class:`MultiHeadAttention`. FFN_i is a ReLU
    network of inner size d_ff / M; the M branches together hold the d_model x d_ff and
    d_ff x d_model matrices of the standard layer's FFN. The output bias b_2 is shared:
    sum_i alpha_i b_2 = b_2 because the alphas sum to 1, so one bias is the same function
    with the same parameter count as the standard FFN. kappa and alpha (M,) are
    initialized random positive summing to 1 and kept on the probability simplex by
    :class:`SimplexProjection` after every update.

    The branches run as batched matmuls over a leading branch axis, not a loop of M
    layers. The caller wraps this in Residual: LayerNorm(x + Dropout(Branched)).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout_rate: float = 0.0,
                 scale: bool = True, **kwargs):
        super().__init__(d_model, num_heads, dropout_rate, scale, **kwargs)
        if d_ff % num_heads:
            raise ValueError(f"d_ff ({d_ff}) must be divisible by the number of branches "
                             f"({num_heads})")
        self.d_ff = d_ff
        self.d_branch = d_ff // num_heads

    def build(self, query_shape=None, memory_shape=None):
        super().build(query_shape, memory_shape)
        m, d, f = self.num_heads, self.d_model, self.d_branch
        init = keras.initializers.GlorotUniform()
        self.ffn_w1 = self.add_weight(name="ffn_w1", shape=(m, d, f), initializer=init)
        self.ffn_b1 = self.add_weight(name="ffn_b1", shape=(m, f), initializer="zeros")
        self.ffn_w2 = self.add_weight(name="ffn_w2", shape=(m, f, d), initializer=init)
        self.ffn_b2 = self.add_weight(name="ffn_b2", shape=(d,), initializer="zeros")
        self.kappa = self.add_weight(name="kappa", shape=(m,), initializer=random_simplex,
                                     constraint=SimplexProjection(), dtype="float32")
        self.alpha = self.add_weight(name="alpha", shape=(m,), initializer=random_simplex,
                                     constraint=SimplexProjection(), dtype="float32")

    def _merge(self, heads):
        """heads (N, M, T, d_k) -> sum_i alpha_i FFN_i(kappa_i head_i W^{O_i}) (N, T, d)."""
        dt = self.compute_dtype
        m, d, f = self.num_heads, self.d_model, self.d_branch
        n, t = tf.shape(heads)[0], tf.shape(heads)[2]
        # branch-major rows (M, N*T, d_k); kappa scales head_i before the projection
        x = tf.reshape(tf.transpose(heads, (1, 0, 2, 3)), (m, n * t, self.d_k))
        x = x * _cast(self.kappa.value, dt)[:, None, None]
        w_o = tf.reshape(_cast(self.w_o.value, dt), (m, self.d_k, d))
        headbar = tf.matmul(x, w_o)                                          # (M, NT, d)
        hidden = tf.nn.relu(tf.matmul(headbar, _cast(self.ffn_w1.value, dt))
                            + _cast(self.ffn_b1.value, dt)[:, None, :])      # (M, NT, f)
        hidden = hidden * _cast(self.alpha.value, dt)[:, None, None]
        # sum over branches and inner units in one matmul: (NT, M*f) @ (M*f, d)
        hidden = tf.reshape(tf.transpose(hidden, (1, 0, 2)), (n * t, m * f))
        out = tf.matmul(hidden, tf.reshape(_cast(self.ffn_w2.value, dt), (m * f, d)))
        return tf.reshape(out + _cast(self.ffn_b2.value, dt), (n, t, d))

    def get_config(self):
        return {**super().get_config(), "d_ff": self.d_ff}


# ---------------------------------------------------------------------------------------
# Feed-forward (3.3) and residual + normalization (5.4)
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class FeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, inner size d_ff. See 3.3.

    (N, T, d_model) -> (N, T, d_model).
    """

    def __init__(self, d_model: int, d_ff: int, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.d_ff = d_model, d_ff
        self.inner = keras.layers.Dense(d_ff, activation="relu", name="inner")
        self.outer = keras.layers.Dense(d_model, name="outer")

    def build(self, input_shape):
        self.inner.build(input_shape)
        self.outer.build(tuple(input_shape[:-1]) + (self.d_ff,))

    def call(self, x):
        return self.outer(self.inner(x))

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "d_ff": self.d_ff}


def layer_norm(name: str):
    """LayerNormalization computed in float32 (its dtype policy) for mixed precision."""
    return keras.layers.LayerNormalization(epsilon=1e-6, dtype="float32", name=name)


@keras.saving.register_keras_serializable(package="transformer")
class Residual(keras.layers.Layer):
    """Wraps a sublayer with dropout, the residual connection and layer normalization.

    norm='post' (paper, 5.4): LayerNorm(x + Dropout(Sublayer(x))).
    norm='pre': x + Dropout(Sublayer(LayerNorm(x))); the stack then ends with a LayerNorm.
    The sublayer itself is applied by the caller through ``fn``.
    """

    def __init__(self, dropout_rate: float, norm: str = "post", **kwargs):
        super().__init__(**kwargs)
        self.dropout_rate, self.norm = dropout_rate, norm
        self.dropout = Dropout(dropout_rate)
        self.ln = layer_norm("layer_norm")

    def build(self, input_shape):
        self.ln.build(input_shape)

    def call(self, x, fn, training=False):
        if self.norm == "pre":
            y = fn(_cast(self.ln(x), x.dtype))
            return x + self.dropout(y, training=training)
        y = fn(x)
        return _cast(self.ln(x + self.dropout(y, training=training)), x.dtype)

    def get_config(self):
        return {**super().get_config(), "dropout_rate": self.dropout_rate, "norm": self.norm}


# ---------------------------------------------------------------------------------------
# Loss (label smoothing, 5.4) and learning-rate schedule (5.3)
# ---------------------------------------------------------------------------------------
def smooth_labels(onehot, epsilon: float = 0.1):
    """Kyubyong's label_smoothing: (1 - epsilon) * onehot + epsilon / V.

    With 3 classes and epsilon 0.1, [0, 0, 1] becomes [0.0333, 0.0333, 0.9333].
    """
    v = tf.cast(tf.shape(onehot)[-1], onehot.dtype)
    return (1.0 - epsilon) * onehot + epsilon / v


def smoothed_cross_entropy(logits, labels, epsilon: float = 0.1, with_nll: bool = False):
    """Cross-entropy against smooth_labels(one_hot(labels)), without building the one-hot.

    logits: (M, V) float32, labels: (M,) int -> (M,) losses [, (M,) plain cross-entropy].
    With q = smoothed target, -sum_v q_v log p_v = (1 - eps) * (lse - z_y)
    + eps * (lse - mean_v z_v), where lse = logsumexp(z). Memory is O(M V) for the
    logits only.
    """
    loss, nll, _ = cross_entropy_terms(logits, labels, epsilon)
    return (loss, nll) if with_nll else loss


def cross_entropy_terms(logits, labels, epsilon: float = 0.1):
    """(label-smoothed loss, plain cross-entropy, correct), each (M,) float32, from one
    pass over logits (M, V): correct is 1.0 where the label's logit is the largest (ties
    count as correct), 0.0 elsewhere; it has no gradient."""
    return _smoothed_xent(_cast(logits, tf.float32), labels, float(epsilon))


def _smoothed_xent(logits, labels, epsilon: float):
    """(loss, nll, correct), all (M,), with a hand-written gradient.

    d loss / d z = p - (1 - eps) onehot(y) - eps / V and d nll / d z = p - onehot(y),
    with p = softmax(z). The forward pass keeps p (one fused softmax kernel) and reads
    logsumexp off it: lse = max(z) - log(max(p)), exact because the largest logit has
    the largest probability, which is at least 1/V and so never underflows. The gradient
    is then a scale of p and a scatter of M values, instead of the gather, logsumexp and
    mean gradients that autodiff would chain (the gather's alone densifies an (M, V)
    tensor through UnsortedSegmentSum) or a second exp pass.
    """
    labels = tf.cast(labels, tf.int32)

    @tf.custom_gradient
    def fn(z):
        p = tf.nn.softmax(z, axis=-1)                                  # (M, V)
        z_max = tf.reduce_max(z, axis=-1)
        lse = z_max - tf.math.log(tf.reduce_max(p, axis=-1))
        z_y = tf.gather(z, labels, axis=-1, batch_dims=1)
        nll = lse - z_y
        loss = (1.0 - epsilon) * nll + epsilon * (lse - tf.reduce_mean(z, axis=-1)) \
            if epsilon else nll
        correct = tf.cast(z_y >= z_max, tf.float32)

        def grad(d_loss, d_nll, d_correct=None):
            g = d_loss + d_nll                                         # (M,)
            q = p * g[:, None]
            if epsilon:
                q = q - (epsilon / tf.cast(tf.shape(z)[-1], z.dtype)) * d_loss[:, None]
            rows = tf.range(tf.shape(z)[0])
            at = tf.stack([rows, labels], axis=1)
            return tf.tensor_scatter_nd_sub(q, at, (1.0 - epsilon) * d_loss + d_nll)

        return (loss, nll, correct), grad

    return fn(logits)


@keras.saving.register_keras_serializable(package="transformer")
class FusedAdam(keras.optimizers.Adam):
    """keras.optimizers.Adam (5.3) whose dense update is TensorFlow's fused
    ResourceApplyAdam kernel: one pass over (variable, m, v, gradient) instead of the ten
    elementwise ops and three assignments of Keras' generic update, the same arithmetic
    (m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
    w -= lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)), the same slot
    variables and checkpoints. Sparse gradients and amsgrad take Keras' path."""

    def __init__(self, *args, name: str = "adam", **kwargs):
        super().__init__(*args, name=name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        var = variable.value if isinstance(variable, keras.Variable) else variable
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices) \
                or not hasattr(var, "handle"):
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index].value, self._velocities[index].value
        dtype = var.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=var.handle, m=m.handle, v=v.handle, beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step), lr=tf.cast(learning_rate, dtype),
            beta1=beta_1, beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype), use_locking=False)


@keras.saving.register_keras_serializable(package="transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Learning rate per step (step counted from 1).

    kind='noam' (5.3): d_model^-0.5 * min(step^-0.5, step * warmup^-1.5); peaks at warmup.
    kind='kyubyong' (updated Kyubyong code): lr * warmup^0.5 * min(step * warmup^-1.5,
    step^-0.5); the same shape, peaking at ``lr``.
    kind='constant' (the TF1 legacy code): lr.
    """

    def __init__(self, kind: str = "noam", d_model: int = 512, warmup_steps: int = 4000,
                 lr: float = 1e-3):
        self.kind, self.d_model, self.warmup_steps, self.lr = kind, d_model, warmup_steps, lr

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0  # optimizer iterations count from 0
        warm = tf.minimum(tf.math.rsqrt(step), step * float(self.warmup_steps) ** -1.5)
        if self.kind == "noam":
            return float(self.d_model) ** -0.5 * warm
        if self.kind == "kyubyong":
            return self.lr * float(self.warmup_steps) ** 0.5 * warm
        return tf.constant(self.lr, tf.float32) + 0.0 * step

    def get_config(self):
        return {"kind": self.kind, "d_model": self.d_model, "warmup_steps": self.warmup_steps,
                "lr": self.lr}


# ---------------------------------------------------------------------------------------
# Encoder and decoder layers (3.1)
# ---------------------------------------------------------------------------------------
class _Block(keras.layers.Layer):
    """What encoder and decoder layers share: their arguments, the self-attention and
    the feed-forward sublayer.

    weighted=True makes the Weighted Transformer's layer (Ahmed et al. 2017): the last
    attention sublayer is a :class:`BranchedAttention` whose branch FFNs replace the
    separate feed-forward sublayer (``self.ffn`` is then None).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout_rate: float,
                 norm: str = "post", attention_dropout: float = 0.0, weighted: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        self.args = dict(d_model=d_model, num_heads=num_heads, d_ff=d_ff,
                         dropout_rate=dropout_rate, norm=norm,
                         attention_dropout=attention_dropout, weighted=weighted)
        self.weighted = weighted
        self.ffn = None if weighted else FeedForward(d_model, d_ff, name="ffn")

    def attention(self, name: str, branched: bool):
        a = self.args
        if branched:
            return BranchedAttention(a["d_model"], a["num_heads"], a["d_ff"],
                                     a["attention_dropout"], name=name)
        return MultiHeadAttention(a["d_model"], a["num_heads"], a["attention_dropout"],
                                  name=name)

    def branched(self) -> list:
        """The layer's BranchedAttention sublayers (holding kappa and alpha)."""
        return [x for x in (getattr(self, "self_attn", None), getattr(self, "cross_attn", None))
                if isinstance(x, BranchedAttention)]

    def feed_forward(self, x, residual, training=False):
        """The FFN sublayer, absent in a weighted layer (its branches hold the FFN)."""
        return x if self.ffn is None else residual(x, fn=self.ffn, training=training)

    def get_config(self):
        return {**super().get_config(), **self.args}


@keras.saving.register_keras_serializable(package="transformer")
class EncoderLayer(_Block):
    """Self-attention, then the feed-forward network, each wrapped by :class:`Residual`.

    call: x (N, T1, d_model), mask (N, 1, 1, T1) -> (N, T1, d_model) [, weights]. See 3.1.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn = self.attention("self_attn", branched=self.weighted)
        self.res1 = Residual(self.args["dropout_rate"], self.args["norm"], name="res_attn")
        self.res2 = None if self.weighted else Residual(
            self.args["dropout_rate"], self.args["norm"], name="res_ffn")

    def build(self, input_shape):
        for layer in (self.res1, self.res2, self.ffn):
            if layer is not None:
                layer.build(input_shape)
        self.self_attn.build(input_shape, input_shape)

    def call(self, x, mask, training=False, return_attention=False):
        found = {}

        def attend(h):
            out, found["w"] = self.self_attn(h, h, mask, training=training,
                                             return_attention=True)
            return out

        x = self.res1(x, fn=attend, training=training)
        x = self.feed_forward(x, self.res2, training)
        return (x, found["w"]) if return_attention else x


@keras.saving.register_keras_serializable(package="transformer")
class DecoderLayer(_Block):
    """Masked self-attention, encoder-decoder attention, feed-forward; each with Residual.

    call: x (N, T2, d_model), memory (N, T1, d_model), self_mask (1, 1, T2, T2),
    memory_mask (N, 1, 1, T1) -> (N, T2, d_model) [, (self weights, cross weights)].
    :meth:`step` runs one position with a key/value cache for incremental decoding.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        a = self.args
        # the masked self-attention stays standard; in a weighted layer the
        # encoder-decoder attention is branched and holds the FFN
        self.self_attn = self.attention("self_attn", branched=False)
        self.cross_attn = self.attention("cross_attn", branched=self.weighted)
        self.res1 = Residual(a["dropout_rate"], a["norm"], name="res_self")
        self.res2 = Residual(a["dropout_rate"], a["norm"], name="res_cross")
        self.res3 = None if self.weighted else Residual(a["dropout_rate"], a["norm"],
                                                        name="res_ffn")

    def build(self, input_shape, memory_shape=None):
        for layer in (self.res1, self.res2, self.res3, self.ffn):
            if layer is not None:
                layer.build(input_shape)
        self.self_attn.build(input_shape, input_shape)
        self.cross_attn.build(input_shape, memory_shape or input_shape)

    def call(self, x, memory, self_mask, memory_mask, training=False, return_attention=False):
        found = {}

        def self_attend(h):
            out, found["self"] = self.self_attn(h, h, self_mask, training=training,
                                                return_attention=True)
            return out

        def cross_attend(h):
            out, found["cross"] = self.cross_attn(h, memory, memory_mask, training=training,
                                                  return_attention=True)
            return out

        x = self.res1(x, fn=self_attend, training=training)
        x = self.res2(x, fn=cross_attend, training=training)
        x = self.feed_forward(x, self.res3, training)
        return (x, (found["self"], found["cross"])) if return_attention else x

    def init_cache(self, memory, max_len: int):
        """Cache for :meth:`step`: self-attention keys/values for max_len positions
        (N, h, max_len, d_k), zero-filled, and the cross-attention keys/values of the
        memory (N, h, T1, d_k), computed once per source."""
        cross_k, cross_v = self.cross_attn.keys_values(_cast(memory, self.compute_dtype))
        n, a = tf.shape(memory)[0], self.self_attn
        empty = tf.zeros((n, a.num_heads, max_len, a.d_k), self.compute_dtype)
        return {"k": empty, "v": empty, "cross_k": cross_k, "cross_v": cross_v}

    def step(self, x, cache, step, memory_mask):
        """One decoding position. x: (N, 1, d_model) at position ``step`` (scalar int);
        returns (N, 1, d_model) and the updated cache (self keys/values written at step)."""
        x = _cast(x, self.compute_dtype)
        new = dict(cache)
        visible = (tf.range(tf.shape(cache["k"])[2]) <= step)[None, None, None, :]

        def self_attend(h):
            k, v = self.self_attn.keys_values(h)
            new["k"] = keras.ops.slice_update(cache["k"], [0, 0, step, 0], k)
            new["v"] = keras.ops.slice_update(cache["v"], [0, 0, step, 0], v)
            return self.self_attn.attend(h, new["k"], new["v"], visible)[0]

        def cross_attend(h):
            return self.cross_attn.attend(h, cache["cross_k"], cache["cross_v"],
                                          memory_mask)[0]

        x = self.res1(x, fn=self_attend)
        x = self.res2(x, fn=cross_attend)
        x = self.feed_forward(x, self.res3)
        return x, new
