"""The layers of the Transformer (Vaswani et al. 2017, "Attention Is All You Need"),
section 3: the encoder and decoder layers (3.1), their residual connections and
normalization, and the position-wise feed-forward network (3.3). Attention (3.2) is
attention.py's, the embeddings and positional encoding (3.4, 3.5) embeddings.py's, the
schedule and loss of section 5 optimization.py's.

Keras 3 layers with build()/get_config(), usable under mixed precision: matmuls run in
the layer's compute dtype, while softmax, LayerNorm and the loss run in float32. Shapes in
the docstrings use N (batch), T1 (source length), T2 (target length), h (num_heads),
d_k = d_model / h, V (vocabulary size). Where Kyubyong's TF1 code differs from the paper,
the docstring says so. A few ops go through fast_ops.py, whose rewrites compute the same
thing faster.

A model variant (``model_type``) changes the layers at one hook, variants.Variant.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from transformer_tf2.config import hparams
from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers import attention, positions

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
    ``output_projection`` go to the attention sublayers (:class:`attention.MultiHeadAttention`),
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
        """The keyword arguments of :class:`attention.MultiHeadAttention` that the layer passes on;
        the self-attention sublayer (``name`` self_attn) gets the relative positions."""
        a = self.args
        return dict(
            dropout_rate=a["attention_dropout"],
            qkv_activation=a["qkv_activation"],
            qkv_bias=a["qkv_bias"],
            output_projection=a["output_projection"],
            position=self.relative if name == "self_attn" else None,
        )

    def make_attention(self, name: str, last: bool) -> keras.layers.Layer:
        """An attention sublayer; ``last`` marks the layer's last attention sublayer."""
        a = self.args
        return attention.MultiHeadAttention(
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
        layer_norm_epsilon, relative_position: see :class:`attention.MultiHeadAttention`.

    Example:

    >>> import tensorflow as tf
    >>> from transformer_tf2.layers.modules import EncoderLayer
    >>> from transformer_tf2.layers.attention import padding_mask
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
    >>> from transformer_tf2.layers.modules import DecoderLayer
    >>> from transformer_tf2.layers.attention import causal_mask, padding_mask
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
        positions -T_e ..) are also computed once per sentence, like the cross-attention's.
        Every entry has the batch on axis 0 (a search picks rows of each:
        Transformer.select_rows)."""
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

    def step(self, x, cache, step, memory_mask, query_mask=None, order=None, memory_rows=None):
        """One decoding position. x: (N, 1, d_model) at position ``step`` (scalar int);
        returns (N, 1, d_model) and the updated cache (this position's self keys/values
        appended). ``query_mask`` (N, 1, 1, 1), if given, zeroes the attention weights of
        PAD queries. ``order`` (N,) int32, if given: the rows of the cached self
        keys/values (M, h, T, d_k) that x's rows continue, gathered as the new position
        is appended (fast_ops.gather_append; Transformer.select_rows). ``memory_rows``
        (N,) int32, if given: the row of the cross-attention keys/values (M, h, T1, d_k)
        and of ``memory_mask`` (M, 1, 1, T1) that each of x's rows reads
        (Transformer.reads_memory_rows)."""
        x = cast(x, self.compute_dtype)
        new = dict(cache)

        def append(cached, fresh):
            if order is None:
                return tf.concat([cached, fresh], axis=2)
            return fast_ops.gather_append(cached, order, fresh)

        def self_attend(h):
            k, v = self.self_attn.keys_values(h, offset=step)
            new["k"], new["v"] = append(cache["k"], k), append(cache["v"], v)
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
            return self.cross_attn.attend_step(
                h, k, v, memory_mask, query_mask=query_mask, rows=memory_rows
            )

        x = self.res1(x, fn=self_attend)
        x = self.res2(x, fn=cross_attend)
        x = self.feed_forward(x, self.res3)
        return x, new


# ---------------------------------------------------------------------------------------
# 3.2 Attention
# ---------------------------------------------------------------------------------------


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
        """keras.layers.Dense's arithmetic in each layer, bit for bit, with fewer ops to
        trace: the 2-D MatMuls of x's rows that Dense's tensordot runs, and its BiasAdd,
        between one reshape in and one out, instead of tensordot's shape bookkeeping."""
        rows = tf.reshape(x, (-1, self.inner.kernel.shape[0]))
        h = tf.nn.relu(tf.nn.bias_add(tf.matmul(rows, self.inner.kernel), self.inner.bias))
        y = tf.nn.bias_add(tf.matmul(h, self.outer.kernel), self.outer.bias)
        return fast_ops.unflatten(y, x)

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "d_ff": self.d_ff}


# ---------------------------------------------------------------------------------------
# 3.4 Embeddings and softmax
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# 3.5 Positional encoding
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# 5.3 Optimizer: the learning-rate schedule
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# 5.4 Regularization: label smoothing (residual dropout is in Residual)
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# The model-variant hook
# ---------------------------------------------------------------------------------------
