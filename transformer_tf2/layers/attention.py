"""Multi-head attention (Vaswani et al. 2017, 3.2): the masks, scaled dot-product
attention (3.2.1) and the multi-head layer (3.2.2) with its decoding step over a
key/value cache. Shapes: N (batch), T1/T2 (source/target length), h (num_heads), d_k =
d_model / h.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers import positions

MASK_VALUE = positions.MASK_VALUE  # masked attention logits get this value (positions.py)
cast = fast_ops.cast


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
    differs, behind switches: ``qkv_activation='relu'`` and ``qkv_bias`` give its
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
        qkv_activation, qkv_bias: the TF1 code's ReLU(x W + b) projections ("relu", True).
        output_projection: W^O (3.2.2); False concatenates the heads, as the TF1 code.
        position: the stack's relative position scheme (self-attention), or None.

    Example:

    >>> import tensorflow as tf
    >>> from transformer_tf2.layers.attention import MultiHeadAttention, padding_mask
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
        qkv_activation: str = "none",
        qkv_bias: bool = False,
        output_projection: bool = True,
        position: positions.StackPosition | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.dropout_rate = d_model, num_heads, dropout_rate
        self.d_k = d_model // num_heads
        self.scale = scale
        self.qkv_activation, self.qkv_bias = qkv_activation, qkv_bias
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
        if self.qkv_bias:
            bias = dict(shape=(self.d_model,), initializer="zeros")
            self.b_q = self.add_weight(name="b_q", **bias)
            self.b_k = self.add_weight(name="b_k", **bias)
            self.b_v = self.add_weight(name="b_v", **bias)
        if self.relative is not None:
            self.relative.build()

    def _project(self, x, w, b=None):
        """(N, T, d_model) @ W [+ b, ReLU] -> heads (N, h, T, d_k). In a decoder
        (fast_ops.Kernels' ``decoding``) with the dense2d switch, the product runs on the
        rows of x (N * T, d_model) and its result reshapes straight to the heads
        (fast_ops.unflatten): the same values as by way of (N, T, d_model), with half the
        shape ops; one position (a decoding step) needs none."""
        w, chosen = cast(w.value, self.compute_dtype), fast_ops.kernels()
        if chosen.dense2d and (chosen.decoding or x.shape[1] == 1):
            y = tf.matmul(tf.reshape(x, (-1, self.d_model)), w)
        else:  # (a train step's graph; the switch off: the standard 3-D product)
            y = fast_ops.dense(x, w)
        if b is not None:
            y = y + cast(b.value, self.compute_dtype)
        if self.qkv_activation == "relu":
            y = tf.nn.relu(y)
        if x.shape[1] == 1:  # one position: its rows are its heads, the same memory
            return tf.reshape(y, (-1, self.num_heads, 1, self.d_k))
        if y.shape.rank == 2:
            heads = fast_ops.unflatten(y, x, (self.num_heads, self.d_k))  # (N, T, h, d_k)
        else:
            heads = tf.reshape(y, tf.concat([tf.shape(y)[:2], [self.num_heads, self.d_k]], 0))
        return tf.transpose(heads, (0, 2, 1, 3))

    def _merge(self, heads):
        """(N, h, T, d_k) -> Concat(heads) W^O (N, T, d_model); Concat(heads) without W^O.
        In a decoder with the dense2d switch, W^O multiplies the rows (N * T, d_model) of
        the concatenated heads, as in :meth:`_project`."""
        chosen = fast_ops.kernels()
        dense2d = chosen.dense2d
        w_o = cast(self.w_o.value, self.compute_dtype) if self.output_projection else None
        if heads.shape[2] == 1:  # one position: the same memory, no copy
            if w_o is None:
                return tf.reshape(heads, (-1, 1, self.d_model))
            rows = tf.reshape(heads, (-1, self.d_model) if dense2d else (-1, 1, self.d_model))
            return tf.reshape(fast_ops.dense(rows, w_o), (-1, 1, self.d_model))
        positions = tf.transpose(heads, (0, 2, 1, 3))  # (N, T, h, d_k)
        if w_o is None or not (dense2d and chosen.decoding):
            concat = tf.reshape(positions, tf.concat([tf.shape(positions)[:2], [self.d_model]], 0))
            return concat if w_o is None else fast_ops.dense(concat, w_o)
        out = tf.matmul(tf.reshape(positions, (-1, self.d_model)), w_o)
        return fast_ops.unflatten(out, positions, lead=2)

    def _rotate(self, heads, offset):
        """Heads (N, h, T, d_k) at positions offset, ...: rotated with rotary positions."""
        return heads if self.relative is None else self.relative.rotate(heads, offset)

    def keys_values(self, memory, offset=0):
        """Projected keys and values of memory at positions offset, ...: two
        (N, h, T_k, d_k) tensors (the keys rotated with rotary positions)."""
        k = self._rotate(self._project(memory, self.w_k, self.b_k), offset)
        return k, self._project(memory, self.w_v, self.b_v)

    def _query(self, query, k, bias, offset, k_offset):
        """The queries of query (N, T_q, d_model) at positions offset, ... over T_k keys at
        positions k_offset, ...: (heads (N, h, T_q, d_k), the logits bias or None, the
        value term or None), the relative scheme's terms added to ``bias``."""
        q = self._rotate(self._project(query, self.w_q, self.b_q), offset)
        value_term = None
        if self.relative is not None:
            t_k = tf.shape(k)[2]  # read only here: no shape ops in a plain decoding step
            q, extra, value_term = self.relative.terms(q, t_k, offset, k_offset, self.scale)
            bias = extra if bias is None else (bias if extra is None else bias + extra)
        return q, bias, value_term

    def _heads(self, query, k, v, mask, training, bias, query_mask, offset, k_offset):
        """Attention of query (N, T_q, d_model) at positions offset, ... over heads k, v at
        positions k_offset, ...: (heads (N, h, T_q, d_k), weights (N, h, T_q, T_k))."""
        q, bias, value_term = self._query(query, k, bias, offset, k_offset)
        return scaled_dot_product_attention(
            q, k, v, mask, self.dropout, training, self.scale, bias, query_mask, value_term
        )

    def attend_step(self, query, k, v, mask=None, query_mask=None, offset=0, k_offset=0, rows=None):
        """``attend(...)[0]`` of one query position, query (N, 1, d_model) -> (N, 1,
        d_model) (a decoding step). Where the decoder's kernels hold the C++ library
        and only the content logits enter (no relative bias or value term, no query mask,
        float32), the scaled dot products, the mask, the softmax and the weighted sum of
        every head are one kernel. k, v: (N, h, T_k, d_k); mask (N or 1, 1, 1, T_k) bool
        or None. ``rows`` (N,) int32: query row r reads key and mask row rows[r] of k, v
        (M, h, T_k, d_k) and mask (M or 1, 1, 1, T_k): a search's hypotheses over one copy
        of their sentence's encoder keys/values (where
        :meth:`model.Transformer.reads_memory_rows`; the kernel reads them in place, the
        other path gathers them). See 3.2.1, 3.2.2."""
        lib = fast_ops.kernels().decode_lib
        q, bias, value_term = self._query(query, k, None, offset, k_offset)
        plain = bias is None and value_term is None and query_mask is None
        if lib is None or not plain or q.dtype != tf.float32:
            if rows is not None:
                k, v = tf.gather(k, rows), tf.gather(v, rows)
                if mask is not None and mask.shape[0] != 1:
                    mask = tf.gather(mask, rows)
            heads, _ = scaled_dot_product_attention(
                q, k, v, mask, None, False, self.scale, bias, query_mask, value_term
            )
        else:
            flat = tf.zeros((0,), tf.bool)  # (M or 1, T_k) where there is a mask
            if mask is not None:
                flat = tf.squeeze(mask, axis=(1, 2))
            div = math.sqrt(float(self.d_k)) if self.scale else 1.0
            index = tf.zeros((0,), tf.int32) if rows is None else rows
            heads = lib.native_step_attention(
                q, k, v, flat, index, div=div, masked_value=MASK_VALUE
            )
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
            "qkv_activation": self.qkv_activation,
            "qkv_bias": self.qkv_bias,
            "output_projection": self.output_projection,
        }
