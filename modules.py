"""The layers of the Transformer (Vaswani et al. 2017, "Attention Is All You Need"),
in the order of the paper's section 3, then the training pieces of section 5.

Keras 3 layers with build()/get_config(), usable under mixed precision: matmuls run in
the layer's compute dtype, while softmax, LayerNorm and the loss run in float32. Shapes in
the docstrings use N (batch), T1 (source length), T2 (target length), h (num_heads),
d_k = d_model / h, V (vocabulary size). Where Kyubyong's TF1 code differs from the paper,
the docstring says so. A few ops go through fast_ops.py, whose rewrites compute the same
thing faster.

A model variant (``model_type``) changes the layers at one hook, :class:`Variant`, at
the end of this file.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

import fast_ops
import hparams
import positions

MASK_VALUE = positions.MASK_VALUE  # masked attention logits get this value (positions.py)
LAYER_NORM_EPSILON = hparams.ModelConfig.layer_norm_epsilon  # the paper's model's

cast = fast_ops.cast


# ---------------------------------------------------------------------------------------
# 3.1 Encoder and decoder stacks: layers of sublayers, each with a residual and LayerNorm
# ---------------------------------------------------------------------------------------
def layer_norm(name: str, epsilon: float = LAYER_NORM_EPSILON):
    """LayerNormalization computed in float32 (its dtype policy) for mixed precision:
    gamma * (x - mean) / sqrt(var + epsilon) + beta over the last axis (TF1: epsilon 1e-8),
    returned in x's dtype (fast_ops.LayerNormalization)."""
    return fast_ops.LayerNormalization(epsilon=epsilon, dtype="float32", name=name)


@keras.saving.register_keras_serializable(package="transformer")
class Residual(keras.layers.Layer):
    """Wraps a sublayer with dropout, the residual connection and layer normalization.

    norm='post' (paper, 3.1 and 5.4): LayerNorm(x + Dropout(Sublayer(x))).
    norm='pre': x + Dropout(Sublayer(LayerNorm(x))); the stack then ends with a LayerNorm.
    The sublayer itself is applied by the caller through ``fn``. x: (N, T, d_model).
    The TF1 code has no dropout here (``residual_dropout`` 0).
    """

    def __init__(
        self,
        dropout_rate: float,
        norm: str = "post",
        epsilon: float = LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.dropout_rate, self.norm, self.epsilon = dropout_rate, norm, epsilon
        self.dropout = keras.layers.Dropout(dropout_rate)
        self.ln = layer_norm("layer_norm", epsilon)

    def build(self, input_shape):
        self.ln.build(input_shape)

    def normalize(self, x):
        """What ``fn`` sees of x: LayerNorm(x) with norm='pre', x itself with 'post' (the
        encoder's memory of earlier sentences goes through the same LayerNorm as x)."""
        return cast(self.ln(x), x.dtype) if self.norm == "pre" else x

    def call(self, x, fn, training=False):
        if self.norm == "pre":
            y = fn(self.normalize(x))
            return x + self.dropout(y, training=training)
        y = fn(x)
        return cast(self.ln(x + self.dropout(y, training=training)), x.dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "dropout_rate": self.dropout_rate,
            "norm": self.norm,
            "epsilon": self.epsilon,
        }


class _Block(keras.layers.Layer):
    """What encoder and decoder layers share: their arguments, the feed-forward sublayer
    and the two factories a model variant overrides, :meth:`make_attention` and
    :meth:`make_feed_forward`. (The construction order fixes each layer's random seeds.)

    ``dropout_rate`` is the residual dropout (5.4); ``qkv_activation``, ``qkv_bias`` and
    ``output_projection`` go to the attention sublayers (:class:`MultiHeadAttention`),
    ``layer_norm_epsilon`` to the LayerNorms.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout_rate: float,
        norm: str = "post",
        attention_dropout: float = 0.0,
        qkv_activation: str = "none",
        qkv_bias: bool = False,
        output_projection: bool = True,
        layer_norm_epsilon: float = LAYER_NORM_EPSILON,
        relative_position: positions.StackPosition | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.relative = relative_position  # the stack's relative positions, or None
        self.args = dict(
            d_model=d_model,
            num_heads=num_heads,
            d_ff=d_ff,
            dropout_rate=dropout_rate,
            norm=norm,
            attention_dropout=attention_dropout,
            qkv_activation=qkv_activation,
            qkv_bias=qkv_bias,
            output_projection=output_projection,
            layer_norm_epsilon=layer_norm_epsilon,
        )
        self.ffn = self.make_feed_forward()

    def attention_options(self, name: str) -> dict:
        """The keyword arguments of :class:`MultiHeadAttention` that the layer passes on;
        the self-attention sublayer (``name`` self_attn) gets the relative positions."""
        a = self.args
        return dict(
            dropout_rate=a["attention_dropout"],
            activation=a["qkv_activation"],
            use_bias=a["qkv_bias"],
            output_projection=a["output_projection"],
            position=self.relative if name == "self_attn" else None,
        )

    def make_attention(self, name: str, last: bool) -> keras.layers.Layer:
        """An attention sublayer; ``last`` marks the layer's last attention sublayer."""
        a = self.args
        return MultiHeadAttention(
            a["d_model"], a["num_heads"], **self.attention_options(name), name=name
        )

    def make_feed_forward(self):
        """The FFN sublayer (3.3), or None for a layer without one."""
        return FeedForward(self.args["d_model"], self.args["d_ff"], name="ffn")

    def residual(self, name: str) -> Residual | None:
        """A Residual wrapper; None for the absent FFN sublayer's (``name`` res_ffn)."""
        if name == "res_ffn" and self.ffn is None:
            return None
        a = self.args
        return Residual(a["dropout_rate"], a["norm"], a["layer_norm_epsilon"], name=name)

    def feed_forward(self, x, residual, training=False):
        """The FFN sublayer (3.3), when the layer has one."""
        return x if self.ffn is None else residual(x, fn=self.ffn, training=training)

    def get_config(self):
        return {**super().get_config(), **self.args}


@keras.saving.register_keras_serializable(package="transformer")
class EncoderLayer(_Block):
    """Self-attention, then the feed-forward network, each wrapped by :class:`Residual`.

    call: x (N, T1, d_model), mask (N, 1, 1, T1) -> (N, T1, d_model) [, weights]. See 3.1.
    ``query_mask`` (N, 1, T1, 1), if given, zeroes the attention weights of PAD queries.
    ``memory`` (N, T_m, d_model) with ``memory_mask`` (N, 1, 1, T_m): this layer's inputs
    for earlier sentences of the document (Transformer-XL's recurrence, Dai et al. 2019,
    3.2), left-aligned so that the last one sits just before the sentence: the keys and
    values come from [memory; x] at positions -T_m .. T1 - 1, the queries from x alone
    (weights (N, h, T1, T_m + T1)); a relative position family places them.

    Args:
        d_model, num_heads, d_ff: the widths (3.1, 3.3; the base model: 512, 8, 2048).
        dropout_rate: the residual dropout on each sublayer's output (5.4).
        norm: "post" (the paper: LayerNorm(x + Sublayer(x))) or "pre".
        attention_dropout, qkv_activation, qkv_bias, output_projection,
        layer_norm_epsilon, relative_position: see :class:`MultiHeadAttention`.

    Example:

    >>> import tensorflow as tf
    >>> from modules import EncoderLayer, padding_mask
    >>> layer = EncoderLayer(d_model=16, num_heads=4, d_ff=32, dropout_rate=0.1)
    >>> src = tf.constant([[5, 6, 7, 0], [8, 9, 0, 0]])  # (N, T1) ids, PAD = 0
    >>> x = tf.random.normal((2, 4, 16))  # the embedded sources
    >>> y, weights = layer(x, padding_mask(src), return_attention=True)
    >>> y.shape, weights.shape
    (TensorShape([2, 4, 16]), TensorShape([2, 4, 4, 4]))

    References:
        Vaswani et al. 2017, "Attention Is All You Need": 3.1 (the encoder), 3.3 (the
        feed-forward network), 5.4 (residual dropout).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn = self.make_attention("self_attn", last=True)
        self.res1 = self.residual("res_attn")
        self.res2 = self.residual("res_ffn")

    def build(self, input_shape):
        for layer in (self.res1, self.res2, self.ffn):
            if layer is not None:
                layer.build(input_shape)
        self.self_attn.build(input_shape, input_shape)

    def call(
        self,
        x,
        mask,
        training=False,
        return_attention=False,
        query_mask=None,
        memory=None,
        memory_mask=None,
    ):
        found = {}

        def attend(h):
            keys, key_mask, k_offset = h, mask, 0
            if memory is not None:
                keys = tf.concat([self.res1.normalize(cast(memory, h.dtype)), h], axis=1)
                key_mask = tf.concat([memory_mask, mask], axis=-1)
                k_offset = -tf.shape(memory)[1]
            out, found["w"] = self.self_attn(
                h,
                keys,
                key_mask,
                training=training,
                return_attention=True,
                query_mask=query_mask,
                k_offset=k_offset,
            )
            return out

        x = self.res1(x, fn=attend, training=training)
        x = self.feed_forward(x, self.res2, training)
        return (x, found["w"]) if return_attention else x


@keras.saving.register_keras_serializable(package="transformer")
class DecoderLayer(_Block):
    """Masked self-attention, encoder-decoder attention, feed-forward; each with Residual.

    call: x (N, T2, d_model), memory (N, T1, d_model), self_mask (1, 1, T2, T2),
    memory_mask (N, 1, 1, T1) -> (N, T2, d_model) [, (self weights, cross weights)]. See 3.1.
    ``query_mask`` (N, 1, T2, 1), if given, zeroes the attention weights of PAD queries.
    ``earlier`` (N, T_e, d_model) with ``earlier_mask`` (N, 1, 1, T_e): this layer's inputs
    for the earlier target sentences of the document (the decoder's memory, as
    Transformer-XL's language model), left-aligned as the encoder's ``memory``: the
    masked self-attention's keys come from [earlier; x] at positions -T_e .. T2 - 1.
    :meth:`step` runs one position with a key/value cache for incremental decoding.

    Args: those of :class:`EncoderLayer`.

    Example:

    >>> import tensorflow as tf
    >>> from modules import DecoderLayer, causal_mask, padding_mask
    >>> layer = DecoderLayer(d_model=16, num_heads=4, d_ff=32, dropout_rate=0.1)
    >>> src = tf.constant([[5, 6, 7, 0]])
    >>> memory = tf.random.normal((1, 4, 16))  # the encoder's output (N, T1, d_model)
    >>> x = tf.random.normal((1, 3, 16))  # the embedded target so far (N, T2, d_model)
    >>> layer.build(x.shape, memory.shape)  # the two input shapes
    >>> y, (self_w, cross_w) = layer(
    ...     x, memory, causal_mask(3), padding_mask(src), return_attention=True
    ... )
    >>> y.shape, self_w.shape, cross_w.shape
    (TensorShape([1, 3, 16]), TensorShape([1, 4, 3, 3]), TensorShape([1, 4, 3, 4]))
    >>> float(tf.reduce_max(self_w[0, :, 0, 1:]))  # position 0 sees no later position
    0.0

    References:
        Vaswani et al. 2017, "Attention Is All You Need": 3.1 (the decoder, its masked
        self-attention), 3.2.3 (encoder-decoder attention).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn = self.make_attention("self_attn", last=False)
        self.cross_attn = self.make_attention("cross_attn", last=True)
        self.res1 = self.residual("res_self")
        self.res2 = self.residual("res_cross")
        self.res3 = self.residual("res_ffn")

    def build(self, input_shape, memory_shape=None):
        for layer in (self.res1, self.res2, self.res3, self.ffn):
            if layer is not None:
                layer.build(input_shape)
        self.self_attn.build(input_shape, input_shape)
        self.cross_attn.build(input_shape, memory_shape or input_shape)

    def call(
        self,
        x,
        memory,
        self_mask,
        memory_mask,
        training=False,
        return_attention=False,
        query_mask=None,
        earlier=None,
        earlier_mask=None,
    ):
        found = {}
        options = dict(training=training, return_attention=True, query_mask=query_mask)

        def self_attend(h):
            keys, mask, k_offset = h, self_mask, 0
            if earlier is not None:
                keys = tf.concat([self.res1.normalize(cast(earlier, h.dtype)), h], axis=1)
                n, t, t_e = tf.shape(h)[0], tf.shape(h)[1], tf.shape(earlier)[1]
                mask = tf.concat(
                    [
                        tf.broadcast_to(earlier_mask, (n, 1, t, t_e)),
                        tf.broadcast_to(self_mask, (n, 1, t, t)),
                    ],
                    axis=-1,
                )
                k_offset = -t_e
            out, found["self"] = self.self_attn(h, keys, mask, k_offset=k_offset, **options)
            return out

        def cross_attend(h):
            out, found["cross"] = self.cross_attn(h, memory, memory_mask, **options)
            return out

        x = self.res1(x, fn=self_attend, training=training)
        x = self.res2(x, fn=cross_attend, training=training)
        x = self.feed_forward(x, self.res3, training)
        return (x, (found["self"], found["cross"])) if return_attention else x

    def init_cache(self, memory, earlier=None) -> dict:
        """Cache for :meth:`step`: the self-attention keys/values of the positions decoded
        so far, (N, h, 0, d_k) at first and one position longer after each step (a step
        copies and attends over the filled part only, not a max-length buffer), and the
        cross-attention keys/values of the memory (N, h, T1, d_k), computed once per
        source. ``earlier``: (states (N, T_e, d_model), mask (N, 1, 1, T_e)) of the
        earlier target sentences (see the class), whose keys/values (N, h, T_e, d_k, at
        positions -T_e ..) are also computed once per sentence, like the cross-attention's,
        and shared by a sentence's beams (never reordered). Every entry has the batch on
        axis 0."""
        cross_k, cross_v = self.cross_attn.keys_values(cast(memory, self.compute_dtype))
        n, a = tf.shape(memory)[0], self.self_attn
        empty = tf.zeros((n, a.num_heads, 0, a.d_k), self.compute_dtype)
        cache = {"k": empty, "v": empty, "cross_k": cross_k, "cross_v": cross_v}
        if earlier is not None:
            states, mask = earlier
            h = self.res1.normalize(cast(states, self.compute_dtype))
            cache["earlier_k"], cache["earlier_v"] = a.keys_values(h, -tf.shape(h)[1])
            cache["earlier_mask"] = mask
        return cache

    def reorder_cache(self, cache: dict, index) -> dict:
        """The cache of the rows ``index`` (N',) after a beam-search step: the
        self-attention keys/values follow their hypotheses (the cross-attention ones and
        the earlier sentences' are the same for every hypothesis of a sentence)."""
        return dict(cache, k=tf.gather(cache["k"], index), v=tf.gather(cache["v"], index))

    def step(self, x, cache, step, memory_mask, query_mask=None):
        """One decoding position. x: (N, 1, d_model) at position ``step`` (scalar int);
        returns (N, 1, d_model) and the updated cache (this position's self keys/values
        appended). ``query_mask`` (N, 1, 1, 1), if given, zeroes the attention weights of
        PAD queries."""
        x = cast(x, self.compute_dtype)
        new = dict(cache)

        def self_attend(h):
            k, v = self.self_attn.keys_values(h, offset=step)
            new["k"] = tf.concat([cache["k"], k], axis=2)
            new["v"] = tf.concat([cache["v"], v], axis=2)
            keys, values, mask, k_offset = new["k"], new["v"], None, 0
            if "earlier_k" in cache:  # the earlier sentences' keys, then this one's
                keys = tf.concat([cache["earlier_k"], keys], axis=2)
                values = tf.concat([cache["earlier_v"], values], axis=2)
                k_offset = -tf.shape(cache["earlier_k"])[2]
                own = tf.ones_like(new["k"][:, :1, None, :, 0], tf.bool)  # (N, 1, 1, step + 1)
                mask = tf.concat([cache["earlier_mask"], own], axis=-1)
            # every key is at or before this position: no causal mask
            return self.self_attn.attend_step(
                h, keys, values, mask, query_mask=query_mask, offset=step, k_offset=k_offset
            )

        def cross_attend(h):
            k, v = cache["cross_k"], cache["cross_v"]
            return self.cross_attn.attend_step(h, k, v, memory_mask, query_mask=query_mask)

        x = self.res1(x, fn=self_attend)
        x = self.res2(x, fn=cross_attend)
        x = self.feed_forward(x, self.res3)
        return x, new


# ---------------------------------------------------------------------------------------
# 3.2 Attention
# ---------------------------------------------------------------------------------------
def padding_mask(ids):
    """(N, T) ids -> (N, 1, 1, T) bool, True where a key may be attended to (not PAD)."""
    return tf.not_equal(ids, 0)[:, None, None, :]


def query_padding_mask(ids):
    """(N, T) ids -> (N, 1, T, 1) bool, True where a query is a real token (not PAD): the
    TF1 code's query masking zeroes the attention weights of the other rows."""
    return tf.not_equal(ids, 0)[:, None, :, None]


def causal_mask(length):
    """(1, 1, T, T) bool, True on and below the diagonal: position t sees positions <= t."""
    return tf.linalg.band_part(tf.ones((length, length), tf.bool), -1, 0)[None, None]


def scaled_dot_product_attention(
    q,
    k,
    v,
    mask=None,
    dropout=None,
    training=False,
    scale=True,
    bias=None,
    query_mask=None,
    value_term=None,
):
    """softmax(Q K^T / sqrt(d_k) + bias) V, with masked keys excluded. See 3.2.1.

    q: (N, h, T_q, d_k), k: (N, h, T_k, d_k), v: (N, h, T_k, d_v),
    mask: bool broadcastable to (N, h, T_q, T_k), True = attend;
    bias: float logits added before the softmax, broadcastable to (N, h, T_q, T_k) (where a
    relative position scheme enters; None in the paper's model);
    query_mask: bool broadcastable to (N, h, T_q, 1), False rows of the weights are zeroed
    after the softmax, before the dropout (the TF1 code's query masking; None in the paper);
    value_term: None, or a function of the (dropped) weights giving (N, h, T_q, d_v), added
    to the output (Shaw et al.'s a^V term, positions.py).
    Returns (output (N, h, T_q, d_v), weights (N, h, T_q, T_k) float32).
    The logits (Q K^T accumulated in float32: fast_ops.logits_product) and the softmax
    are float32 whatever the compute dtype.
    """
    scores = fast_ops.logits_product(q, k, transpose_b=True)
    if scale:
        scores = scores / math.sqrt(float(q.shape[-1]))
    if bias is not None:
        scores = scores + cast(bias, tf.float32)
    if mask is not None:
        scores = tf.where(mask, scores, MASK_VALUE)
    weights = tf.nn.softmax(scores, axis=-1)
    if query_mask is not None:
        weights = weights * tf.cast(query_mask, weights.dtype)
    dropped = dropout(weights, training=training) if dropout is not None else weights
    out = tf.matmul(cast(dropped, v.dtype), v)
    if value_term is not None:
        out = out + value_term(dropped)
    return out, weights


@keras.saving.register_keras_serializable(package="transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, ...).

    See 3.2.2. Separate W^Q, W^K, W^V (d_model x d_model, split into h heads of d_k) and
    the output projection W^O; like the paper (and tensor2tensor) no biases. The TF1 code
    differs, behind switches: ``activation='relu'`` and ``use_bias`` give its
    ReLU(x W + b) projections; ``output_projection=False`` drops W^O (the heads are
    concatenated and go straight to the residual), as in the TF1 and 2019 Kyubyong code.

    call(query (N, T_q, d_model), memory (N, T_k, d_model), mask) -> (N, T_q, d_model),
    plus the attention weights (N, h, T_q, T_k) when ``return_attention``.
    For incremental decoding, :meth:`keys_values` and :meth:`attend` split the two halves.

    ``position`` (self-attention only): the stack's relative position scheme
    (positions.StackPosition); the sublayer then holds a positions.LayerPosition, and
    ``offset`` is the position of the first query (and, in ``call``, of the first key,
    unless ``k_offset`` places the keys: a memory of earlier sentences starts before 0).

    Args:
        d_model: the width of queries, keys, values and output; h heads of d_k = d_model / h.
        num_heads: h (the paper's base model: 8).
        dropout_rate: dropout on the attention weights (not in the paper; 0).
        scale: divide the scores by sqrt(d_k) (3.2.1).
        activation, use_bias: the TF1 code's ReLU(x W + b) projections ("relu", True).
        output_projection: W^O (3.2.2); False concatenates the heads, as the TF1 code.
        position: the stack's relative position scheme (self-attention), or None.

    Example:

    >>> import tensorflow as tf
    >>> from modules import MultiHeadAttention, padding_mask
    >>> attn = MultiHeadAttention(d_model=16, num_heads=4)
    >>> ids = tf.constant([[5, 6, 7, 0]])  # one sentence of 3 tokens and a PAD
    >>> x = tf.random.normal((1, 4, 16))
    >>> out, weights = attn(x, x, padding_mask(ids), return_attention=True)
    >>> out.shape, weights.shape
    (TensorShape([1, 4, 16]), TensorShape([1, 4, 4, 4]))
    >>> float(tf.reduce_max(weights[..., 3]))  # no query attends to the PAD key
    0.0
    >>> round(float(tf.reduce_sum(weights[0, 0, 0])), 5)  # each query's weights sum to 1
    1.0

    References:
        Vaswani et al. 2017, "Attention Is All You Need": 3.2.1 (scaled dot-product
        attention), 3.2.2 (multi-head attention).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout_rate: float = 0.0,
        scale: bool = True,
        activation: str = "none",
        use_bias: bool = False,
        output_projection: bool = True,
        position: positions.StackPosition | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.dropout_rate = d_model, num_heads, dropout_rate
        self.d_k = d_model // num_heads
        self.scale = scale
        self.activation, self.use_bias = activation, use_bias
        self.output_projection = output_projection
        self.dropout = keras.layers.Dropout(dropout_rate) if dropout_rate > 0 else None
        self.relative = None if position is None else positions.LayerPosition(position)

    def build(self, query_shape=None, memory_shape=None):
        shape = (self.d_model, self.d_model)
        # one initializer per matrix: a Keras 3 initializer draws its seed when it is made,
        # so one object shared by the four would start W^Q = W^K = W^V = W^O (3.2.2 has
        # four independent projections)
        self.w_q = self.add_weight(name="w_q", shape=shape, initializer="glorot_uniform")
        self.w_k = self.add_weight(name="w_k", shape=shape, initializer="glorot_uniform")
        self.w_v = self.add_weight(name="w_v", shape=shape, initializer="glorot_uniform")
        if self.output_projection:
            self.w_o = self.add_weight(name="w_o", shape=shape, initializer="glorot_uniform")
        self.b_q = self.b_k = self.b_v = None
        if self.use_bias:
            bias = dict(shape=(self.d_model,), initializer="zeros")
            self.b_q = self.add_weight(name="b_q", **bias)
            self.b_k = self.add_weight(name="b_k", **bias)
            self.b_v = self.add_weight(name="b_v", **bias)
        if self.relative is not None:
            self.relative.build()

    def _project(self, x, w, b=None):
        """(N, T, d_model) @ W [+ b, ReLU] -> heads (N, h, T, d_k)."""
        y = fast_ops.dense(x, cast(w.value, self.compute_dtype))
        if b is not None:
            y = y + cast(b.value, self.compute_dtype)
        if self.activation == "relu":
            y = tf.nn.relu(y)
        n, t = tf.shape(y)[0], tf.shape(y)[1]
        if y.shape[1] == 1:  # one position (a decoding step): the same memory, no copy
            return tf.reshape(y, (n, self.num_heads, 1, self.d_k))
        return tf.transpose(tf.reshape(y, (n, t, self.num_heads, self.d_k)), (0, 2, 1, 3))

    def _merge(self, heads):
        """(N, h, T, d_k) -> Concat(heads) W^O (N, T, d_model); Concat(heads) without W^O."""
        n, t = tf.shape(heads)[0], tf.shape(heads)[2]
        if heads.shape[2] == 1:  # one position: the same memory, no copy
            concat = tf.reshape(heads, (n, 1, self.d_model))
        else:
            concat = tf.reshape(tf.transpose(heads, (0, 2, 1, 3)), (n, t, self.d_model))
        if not self.output_projection:
            return concat
        return fast_ops.dense(concat, cast(self.w_o.value, self.compute_dtype))

    def _rotate(self, heads, offset):
        """Heads (N, h, T, d_k) at positions offset, ...: rotated with rotary positions."""
        return heads if self.relative is None else self.relative.rotate(heads, offset)

    def keys_values(self, memory, offset=0):
        """Projected keys and values of memory at positions offset, ...: two
        (N, h, T_k, d_k) tensors (the keys rotated with rotary positions)."""
        k = self._rotate(self._project(memory, self.w_k, self.b_k), offset)
        return k, self._project(memory, self.w_v, self.b_v)

    def _query(self, query, t_k, bias, offset, k_offset):
        """The queries of query (N, T_q, d_model) at positions offset, ... over T_k keys at
        positions k_offset, ...: (heads (N, h, T_q, d_k), the logits bias or None, the
        value term or None), the relative scheme's terms added to ``bias``."""
        q = self._rotate(self._project(query, self.w_q, self.b_q), offset)
        value_term = None
        if self.relative is not None:
            q, extra, value_term = self.relative.terms(q, t_k, offset, k_offset, self.scale)
            bias = extra if bias is None else (bias if extra is None else bias + extra)
        return q, bias, value_term

    def _heads(self, query, k, v, mask, training, bias, query_mask, offset, k_offset):
        """Attention of query (N, T_q, d_model) at positions offset, ... over heads k, v at
        positions k_offset, ...: (heads (N, h, T_q, d_k), weights (N, h, T_q, T_k))."""
        q, bias, value_term = self._query(query, tf.shape(k)[2], bias, offset, k_offset)
        return scaled_dot_product_attention(
            q, k, v, mask, self.dropout, training, self.scale, bias, query_mask, value_term
        )

    def attend_step(self, query, k, v, mask=None, query_mask=None, offset=0, k_offset=0):
        """``attend(...)[0]`` of one query position, query (N, 1, d_model) -> (N, 1,
        d_model) (a decoding step). Where fast_ops.decode_kernels() gives the C++ kernels
        and only the content logits enter (no relative bias or value term, no query mask,
        float32), the scaled dot products, the mask, the softmax and the weighted sum of
        every head are one kernel. k, v: (N, h, T_k, d_k); mask (N or 1, 1, 1, T_k) bool
        or None. See 3.2.1, 3.2.2."""
        lib = fast_ops.decode_kernels()
        q, bias, value_term = self._query(query, tf.shape(k)[2], None, offset, k_offset)
        plain = bias is None and value_term is None and query_mask is None
        if lib is None or not plain or q.dtype != tf.float32:
            heads, _ = scaled_dot_product_attention(
                q, k, v, mask, None, False, self.scale, bias, query_mask, value_term
            )
        else:
            flat = tf.zeros((0,), tf.bool)  # (N or 1, T_k) where there is a mask
            if mask is not None:
                flat = tf.reshape(mask, (tf.shape(mask)[0], -1))
            div = math.sqrt(float(self.d_k)) if self.scale else 1.0
            heads = lib.native_step_attention(q, k, v, flat, div=div, masked_value=MASK_VALUE)
        return self._merge(heads)

    def call(
        self,
        query,
        memory,
        mask=None,
        training=False,
        return_attention=False,
        bias=None,
        query_mask=None,
        offset=0,
        k_offset=None,
    ):
        k_offset = offset if k_offset is None else k_offset
        k, v = self.keys_values(memory, k_offset)
        heads, weights = self._heads(
            query, k, v, mask, training, bias, query_mask, offset, k_offset
        )
        out = self._merge(heads)
        return (out, weights) if return_attention else out

    def attend(self, query, k, v, mask=None, bias=None, query_mask=None, offset=0, k_offset=0):
        """Attention of query (N, T_q, d_model) at positions offset, ... over precomputed
        heads k, v of positions k_offset, k_offset + 1, ... (inference)."""
        heads, weights = self._heads(query, k, v, mask, False, bias, query_mask, offset, k_offset)
        return self._merge(heads), weights

    def get_config(self):
        return {
            **super().get_config(),
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "dropout_rate": self.dropout_rate,
            "scale": self.scale,
            "activation": self.activation,
            "use_bias": self.use_bias,
            "output_projection": self.output_projection,
        }


# ---------------------------------------------------------------------------------------
# 3.3 Position-wise feed-forward networks
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


# ---------------------------------------------------------------------------------------
# 3.4 Embeddings and softmax
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class TokenEmbedding(keras.layers.Layer):
    """Token embedding scaled by sqrt(d_model); the PAD row (id 0) gives zeros. See 3.4.

    The same matrix is the pre-softmax projection (:meth:`logits`), as in the paper (the
    TF1 code has a projection of its own: :class:`OutputProjection`).
    Kyubyong zeroes the PAD row by concatenating a constant zero row; here the output at
    PAD positions is masked, which has the same effect and keeps one plain matrix.
    ``init``: 'normal' (std d_model^-0.5) or 'xavier' (Glorot uniform
    with the fans of a (V, d_model) table, as both Kyubyong codes).

    The matrix has V8 = V rounded up to a multiple of 8 rows, so that the output
    projection's matmul has a width that suits Tensor Cores (and vector units); the
    extra rows belong to no token, and their logits are cut off after the matmul.

    call: ids (N, T) int -> (N, T, d_model).  logits: (..., d_model) -> (..., V) float32.
    """

    ROW_MULTIPLE = 8

    def __init__(self, vocab_size: int, d_model: int, init: str = "normal", **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.d_model, self.init = vocab_size, d_model, init
        self.rows = -(-vocab_size // self.ROW_MULTIPLE) * self.ROW_MULTIPLE

    def build(self, input_shape=None):
        if self.init == "xavier":
            initializer = xavier_uniform(self.vocab_size, self.d_model)
        else:
            initializer = keras.initializers.RandomNormal(stddev=self.d_model**-0.5)
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.rows, self.d_model), initializer=initializer
        )

    def call(self, ids):
        w = cast(self.embeddings.value, self.compute_dtype)
        x = tf.gather(w, ids) * math.sqrt(self.d_model)
        return x * cast(tf.not_equal(ids, 0)[..., None], x.dtype)

    def logits(self, x, transposed=None):
        """Pre-softmax linear transformation with the shared weights; float32 output
        (accumulated in float32: fast_ops.logits_product). ``transposed``: the matrix
        already transposed to (d_model, V8) (:meth:`transposed`), which a decoding loop
        makes once for all its steps: a product with a transposed operand runs at about
        2/3 of the speed on CPU."""
        w, flip = (self.embeddings.value, True) if transposed is None else (transposed, False)
        z = fast_ops.logits_product(
            cast(x, self.compute_dtype), w, transpose_b=flip, switch="f32_logits"
        )
        return z if self.rows == self.vocab_size else z[..., : self.vocab_size]

    def transposed(self):
        """The matrix as (d_model, V8), for :meth:`logits`."""
        return tf.transpose(self.embeddings.value)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "init": self.init,
        }


def xavier_uniform(fan_in: int, fan_out: int):
    """Glorot (Xavier) uniform initializer with the given fans: U(-a, a),
    a = sqrt(6 / (fan_in + fan_out)), whatever the shape of the weight it fills."""
    limit = (6.0 / (fan_in + fan_out)) ** 0.5
    return keras.initializers.RandomUniform(-limit, limit)


@keras.saving.register_keras_serializable(package="transformer")
class OutputProjection(keras.layers.Layer):
    """The pre-softmax linear transformation with weights of its own and a bias, as the
    TF1 code's final dense layer (``tie_softmax=false``); the paper (3.4) ties it to the
    target embedding instead (:meth:`TokenEmbedding.logits`).

    logits / call: (..., d_model) -> (..., V) float32.
    """

    def __init__(self, vocab_size: int, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.d_model = vocab_size, d_model

    def build(self, input_shape=None):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.d_model, self.vocab_size),
            initializer=keras.initializers.GlorotUniform(),
        )
        self.bias = self.add_weight(name="bias", shape=(self.vocab_size,), initializer="zeros")

    def logits(self, x):
        z = fast_ops.logits_product(
            cast(x, self.compute_dtype), self.kernel.value, switch="f32_logits"
        )
        return z + cast(self.bias.value, tf.float32)

    def call(self, x):
        return self.logits(x)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model}


# ---------------------------------------------------------------------------------------
# 3.5 Positional encoding
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class PositionalEncoding(keras.layers.Layer):
    """Adds position information to (N, T, d_model) embeddings, starting at ``offset``:
    the encoding of the absolute family ``kind`` (positions.py: 'sinusoid', the fixed
    encoding of 3.5 with no weights, or 'learned', a (max_position, d_model) table).
    ``init`` of a learned table: 'normal' (std 1, the scale of the token embeddings once
    multiplied by sqrt(d_model), so that position and token start equally loud; the paper
    gives no initialisation) or 'xavier' (Glorot uniform, as the TF1 code).
    """

    def __init__(
        self,
        d_model: int,
        kind: str = "sinusoid",
        max_position: int = 1024,
        init: str = "normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model, self.kind, self.max_position = d_model, kind, max_position
        self.init = init
        self.family = positions.get(kind)

    def table_initializer(self):
        if self.init == "xavier":
            return xavier_uniform(self.max_position, self.d_model)
        return keras.initializers.RandomNormal(stddev=1.0)

    def build(self, input_shape=None):
        self.family.build_table(self)

    def call(self, x, offset=0):
        pe = self.family.encode(self, tf.range(tf.shape(x)[1]) + offset, x.dtype)
        return x + pe[None]

    def get_config(self):
        return {
            **super().get_config(),
            "d_model": self.d_model,
            "kind": self.kind,
            "max_position": self.max_position,
            "init": self.init,
        }


# ---------------------------------------------------------------------------------------
# 5.3 Optimizer: the learning-rate schedule
# ---------------------------------------------------------------------------------------
BUDGET_SCHEDULES = ("wsd", "linear")  # schedules that end at the run's budget


@keras.saving.register_keras_serializable(package="transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Learning rate per step (step counted from 1).

    kind='noam' (5.3): d_model^-0.5 * min(step^-0.5, step * warmup^-1.5); peaks at warmup.
    kind='kyubyong' (updated Kyubyong code): lr * warmup^0.5 * min(step * warmup^-1.5,
    step^-0.5); the same shape, peaking at ``lr``.
    kind='constant' (the TF1 legacy code): lr.

    The budget schedules read ``progress``, the fraction p of the run's budget used (a
    scalar variable the training loop sets before each update: steps or epochs done, or
    minutes used, whichever binds; see budget.Budget), and warm up linearly to ``lr``:
    kind='wsd' (warmup-stable-decay; Hagele et al. 2024): lr until p = 1 - cooldown,
    then lr * (1 - sqrt((p - 1 + cooldown) / cooldown)), reaching 0 at the budget;
    kind='linear' (Li et al. 2020): lr * (1 - p).
    """

    def __init__(
        self,
        kind: str = "noam",
        d_model: int = 512,
        warmup_steps: int = 4000,
        lr: float = 1e-3,
        cooldown: float = 0.2,
    ):
        self.kind, self.d_model, self.warmup_steps, self.lr = kind, d_model, warmup_steps, lr
        self.cooldown = cooldown
        self.progress = None
        if kind in BUDGET_SCHEDULES:  # trainer.Trainer shares one variable between schedules
            self.progress = tf.Variable(0.0, trainable=False, name="budget_used")

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0  # optimizer iterations count from 0
        if self.kind in BUDGET_SCHEDULES:
            warm = tf.minimum(1.0, step / float(self.warmup_steps))
            p = tf.clip_by_value(tf.cast(self.progress, tf.float32), 0.0, 1.0)
            if self.kind == "linear":
                return self.lr * warm * (1.0 - p)
            into = tf.maximum(p - (1.0 - self.cooldown), 0.0) / self.cooldown
            return self.lr * warm * (1.0 - tf.sqrt(into))
        warm = tf.minimum(tf.math.rsqrt(step), step * float(self.warmup_steps) ** -1.5)
        if self.kind == "noam":
            return float(self.d_model) ** -0.5 * warm
        if self.kind == "kyubyong":
            return self.lr * float(self.warmup_steps) ** 0.5 * warm
        return tf.constant(self.lr, tf.float32) + 0.0 * step

    def get_config(self):
        return {
            "kind": self.kind,
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "lr": self.lr,
            "cooldown": self.cooldown,
        }


# ---------------------------------------------------------------------------------------
# 5.4 Regularization: label smoothing (residual dropout is in Residual)
# ---------------------------------------------------------------------------------------
def smooth_labels(onehot, epsilon: float = 0.1):
    """Kyubyong's label_smoothing: (1 - epsilon) * onehot + epsilon / V.

    With 3 classes and epsilon 0.1, [0, 0, 1] becomes [0.0333, 0.0333, 0.9333].
    """
    v = tf.cast(tf.shape(onehot)[-1], onehot.dtype)
    return (1.0 - epsilon) * onehot + epsilon / v


def cross_entropy_terms(logits, labels, epsilon: float = 0.1):
    """Cross-entropy against smooth_labels(one_hot(labels)), without building the one-hot.

    logits: (M, V), labels: (M,) int -> (loss, nll, correct), each (M,) float32: the
    label-smoothed loss, the plain cross-entropy, and 1.0 where the label's logit is the
    largest (ties count as correct; no gradient). With q = the smoothed target,
    -sum_v q_v log p_v = (1 - eps) * (lse - z_y) + eps * (lse - mean_v z_v), where
    lse = logsumexp(z). Memory is O(M V) for the logits only.
    """
    return fast_ops.cross_entropy_terms(logits, labels, epsilon)


def smoothed_cross_entropy(logits, labels, epsilon: float = 0.1, with_nll: bool = False):
    """(M,) label-smoothed losses [and (M,) plain cross-entropy]; see cross_entropy_terms."""
    loss, nll, _ = cross_entropy_terms(logits, labels, epsilon)
    return (loss, nll) if with_nll else loss


# ---------------------------------------------------------------------------------------
# The model-variant hook
# ---------------------------------------------------------------------------------------
class Variant:
    """What a ``model_type`` changes, at one hook; this base is the paper's Transformer.

    A variant module (weighted.py, ...) subclasses it, is listed in model.VARIANTS and
    in hparams.CHOICES["model_type"], and overrides what it needs:
    * layer construction: :meth:`encoder_layer`, :meth:`decoder_layer` (a layer class
      also owns its decoding cache: ``init_cache``, ``step``, ``reorder_cache``), how
      many (:meth:`num_layers`), their extra arguments (:meth:`layer_args`) and whether
      they add the positions themselves (``positions_in_layers``), and whether they
      attend to earlier sentences (``document_memory``);
    * :meth:`extra_loss`: terms added to the training loss;
    * :meth:`optimizer_groups`: variables trained by an optimizer of their own;
    * :meth:`summaries`: TensorBoard summaries written with the training scalars;
    * :meth:`specs_lines`: lines added to the run's ``specs`` file;
    * :meth:`per_token`: a value per token that the attention figures draw as bars.
    """

    name = "transformer"
    # True: the layers add the position embedding themselves (they get the model's
    # PositionalEncoding as ``position``) and the model's embedding adds none
    positions_in_layers = False
    # True: each encoder layer takes ``memory`` / ``memory_mask``, the states of earlier
    # sentences (document context, recurrence.encode_in_context)
    document_memory = True

    def num_layers(self, num_blocks: int) -> int:
        """How many encoder (and decoder) layers the model builds."""
        return num_blocks

    def layer_args(self, config) -> dict:
        """Arguments of the variant's layers taken from the model's ``config``
        (hparams.ModelConfig)."""
        return {}

    def encoder_layer(self, **args) -> keras.layers.Layer:
        return EncoderLayer(**args)

    def decoder_layer(self, **args) -> keras.layers.Layer:
        return DecoderLayer(**args)

    def extra_loss(self, model, extras: dict):
        """A scalar float32 added once to the mean training loss of each update (with
        several replicas or accumulated batches, the trainer splits it among them).
        ``extras``: what the model's layers reported in this forward pass, {layer name:
        {name: tensor}} (Transformer.encode / decode), so that each replica's loss reads
        its own pass."""
        return tf.constant(0.0, tf.float32)

    def optimizer_groups(self, model, hp) -> dict:
        """{group name: (variables, TransformerSchedule)}; the main optimizer trains the
        rest. A group's optimizer is checkpointed as ``<name>_optimizer``."""
        return {}

    def summaries(self, model, step: int, schedules: dict) -> None:
        """Write TensorBoard summaries (inside the caller's writer context)."""

    def specs_lines(self, model) -> list[str]:
        return []

    def per_token(self, model, stack: str, extras: dict):
        """A value per token of ``stack`` ("encoder" | "decoder") in the forward pass
        whose layer reports are ``extras`` (as in :meth:`extra_loss`), (N, T), that the
        attention figures draw as bars (the Universal Transformer's ACT steps), or None."""
        return None
