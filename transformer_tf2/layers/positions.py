"""Position encodings: every ``position`` family is one class here, in one registry.

The model, attention, decoding and the Universal Transformer ask a family (an
:class:`Encoding`, found by its hparam value with :func:`get`) what it needs:
* what it adds to the embeddings (:attr:`Encoding.embedding`: sinusoid (3.5) or a
  learned table, added at the bottom of each stack by :class:`embeddings.PositionalEncoding`,
  or by each Universal Transformer step), or nothing for a relative family unless
  ``position_add_absolute`` (then the sinusoid);
* in self-attention (relative families): weights shared by a stack's layers
  (:meth:`Encoding.build_stack`) and per layer (:meth:`Encoding.build_layer`), a transform
  of queries and keys at their positions (:meth:`Encoding.rotate`), and the terms the
  attention adds (:meth:`Encoding.terms`: the content query, a logits bias, a value term).
  Queries and keys get position vectors of their own, so keys may start before the
  queries' segment (a cache, or a memory of earlier segments);
* the longest length it allows (:meth:`Encoding.max_length`: a learned table's rows), which
  bounds decoding.

A new family is one subclass with :func:`register` and its row in config's table
(``families.POSITIONS``: its name, which becomes a valid ``--position``, whether it is
relative, and its check of the settings, which hparams.apply runs before TensorFlow loads);
``tests/test_positions.py`` adds one inside the test file and trains a step with it.
Cross-attention stays plain content attention in every family.

The families:
* sinusoid (Vaswani et al. 2017, 3.5): PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
  PE(pos, 2i+1) = cos(same), added to the embeddings;
* learned: a (max_position, d_model) table added to the embeddings (the TF1 code's
  ``sinusoid=False``); positions past the table reuse its last row;
* shaw (Shaw et al. 2018, arXiv 1803.02155, sec. 3): e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_k)
  and z_i = sum_j alpha_ij (v_j + a^V_ij), with a_ij = w_clip(j - i, k) learned, per layer,
  shared across heads: 2k + 1 rows of d_k (k = ``max_relative_position``);
* t5 (Raffel et al. 2020, sec. 2.1): a learned scalar per head and distance bucket added to
  the logits; log-spaced buckets, both directions in the encoder, the past alone in the
  decoder; one table per stack, shared across its layers;
* xl (Dai et al. 2019, arXiv 1901.02860, sec. 3.3): e_ij = (q_i + u) k_j^T +
  (q_i + v) (R_{i-j} W_R)^T, all over sqrt(d_k); R is the sinusoid of the distance i - j,
  W_R is per layer, u and v (per head) are shared across the layers of a stack, as in the
  paper's equation (one u, v for all layers). The second term is computed once per
  distance and moved into place with the relative shift, exact in both directions;
* alibi (Press et al. 2022, arXiv 2108.12409, sec. 3): -m_h |i - j| added to the logits,
  one fixed slope m_h per head (a geometric sequence); in the encoder this symmetric form
  cannot tell left from right;
* alibi_dir: ALiBi that can, in the encoder: the head split by direction that the ALiBi
  authors proposed for bidirectional attention (the ALiBi repository's issue 5, "Modifying
  ALiBi for Encoder-Attention"): the first ceil(h / 2) heads see only keys j <= i, the
  others only j >= i, each half with ALiBi's slopes for its own number of heads, and
  -m_h |i - j| on what it sees. The decoder's causal self-attention is plain alibi;
* rotary (Su et al. 2021, arXiv 2104.09864, sec. 3.4): queries and keys rotated by their
  absolute position, pairs (2i, 2i+1) of each head by the angle pos * 10000^(-2i/d_k), so
  q_i k_j^T depends on j - i alone.

Shapes: N batch, h heads, T_q / T_k query / key positions, d_k = d_model / h.
:class:`StackPosition` (one per stack, built by the model) holds a relative family and the
weights shared by a stack's layers; :class:`LayerPosition` (inside each self-attention
sublayer) holds the per-layer weights; both hand the work to their family.
"""

from __future__ import annotations

import difflib
import math

import keras
import numpy as np
import tensorflow as tf

from transformer_tf2.config import families
from transformer_tf2.kernels import fast_ops
from transformer_tf2.utils.errors import UserError

cast = fast_ops.cast
# Masked attention logits get this value (modules.py masks with it; alibi_dir's bias blocks
# a head's other side with it): exp() of it is 0 in float32, and it stays finite in float16
# (max 65504) and bfloat16, unlike -1e9 or -inf.
MASK_VALUE = -3.0e4


# ---------------------------------------------------------------------------------------
# Position arithmetic of the families (no weights)
# ---------------------------------------------------------------------------------------
def sinusoid_encoding(positions, d_model: int, dtype=tf.float32):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same). See 3.5.

    positions: (T,) int -> (T, d_model). Works for any position, not a fixed table; the
    original TF1 code precomputed maxlen rows and failed on longer test sentences.
    """
    pos = tf.cast(positions, tf.float32)[:, None]  # (T, 1)
    i = tf.range(d_model) // 2  # 0 0 1 1 2 2 ...
    angle_rates = tf.pow(10000.0, -tf.cast(2 * i, tf.float32) / d_model)
    angles = pos * angle_rates[None, :]  # (T, d_model)
    even = tf.equal(tf.range(d_model) % 2, 0)
    return tf.cast(tf.where(even[None, :], tf.sin(angles), tf.cos(angles)), dtype)


def distances(q_pos, k_pos):
    """j - i for query positions (T_q,) and key positions (T_k,): (T_q, T_k) int32."""
    return k_pos[None, :] - q_pos[:, None]


def shaw_index(q_pos, k_pos, k: int):
    """Row of a^K / a^V for each pair: clip(j - i, -k, k) + k, (T_q, T_k) in [0, 2k]."""
    return tf.clip_by_value(distances(q_pos, k_pos), -k, k) + k


def t5_bucket(distance, num_buckets: int, max_distance: int, bidirectional: bool):
    """T5's bucket of each distance j - i (int tensor): half of the buckets are exact
    distances 0, 1, ...; the rest are log-spaced up to ``max_distance``, past which all
    share the last. Bidirectional: the buckets are split between j < i and j > i; causal
    (decoder): only j <= i counts, j > i falls in bucket 0 (and is masked)."""
    if bidirectional:
        num_buckets //= 2
        offset = tf.where(distance > 0, num_buckets, 0)
        n = tf.abs(distance)
    else:
        offset = tf.zeros_like(distance)
        n = tf.maximum(-distance, 0)
    exact = num_buckets // 2
    ratio = tf.math.log(tf.maximum(tf.cast(n, tf.float32), 1.0) / exact)
    scaled = ratio / math.log(max_distance / exact) * (num_buckets - exact)
    far = tf.minimum(exact + tf.cast(scaled, n.dtype), num_buckets - 1)
    return offset + tf.where(n < exact, n, far)


def alibi_slopes(num_heads: int) -> list[float]:
    """ALiBi's head slopes: for h a power of 2, 2^(-8/h), 2^(-16/h), ..., 2^(-8); else those
    of the largest power of 2 below h, then every other slope of twice that power."""
    n = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    extra = [2.0 ** (-8.0 * (i + 1) / (2 * n)) for i in range(0, 2 * n, 2)]
    return slopes + extra[: num_heads - n]


def directional_alibi(distance, num_heads: int):
    """alibi_dir's encoder logits bias for distances j - i (T_q, T_k) int: (h, T_q, T_k)
    float32. Heads 0 .. ceil(h / 2) - 1 look left (j <= i), the rest right (j >= i); each
    half has :func:`alibi_slopes` of its own size; a head's other side gets MASK_VALUE
    (every query still sees itself, at distance 0, in every head)."""
    left = (num_heads + 1) // 2
    right = num_heads - left
    slopes = alibi_slopes(left) + (alibi_slopes(right) if right else [])
    slopes = tf.constant(slopes, tf.float32)[:, None, None]
    looks_left = tf.range(num_heads)[:, None, None] < left
    hidden = tf.where(looks_left, distance[None] > 0, distance[None] < 0)  # (h, T_q, T_k)
    bias = -slopes * tf.cast(tf.abs(distance), tf.float32)[None]
    return tf.where(hidden, MASK_VALUE, bias)


def rotate(x, positions):
    """RoPE: x (N, h, T, d_k) at positions (T,) -> the same shape, each pair (a, b) =
    (x_2i, x_2i+1) rotated by the angle t = positions * 10000^(-2i / d_k):
    (a cos t - b sin t, b cos t + a sin t) = x cos t + (x P) sin t, where the fixed
    (d_k, d_k) matrix P maps each pair (a, b) to (-b, a) (one small matmul is faster on
    a CPU than splitting and interleaving the pairs)."""
    d = x.shape[-1]
    freq = tf.pow(10000.0, -tf.range(0, d, 2, dtype=tf.float32) / d)  # (d_k / 2,)
    angle = tf.cast(positions, tf.float32)[:, None] * tf.repeat(freq, 2)[None, :]  # (T, d_k)
    swap = np.kron(np.eye(d // 2), [[0.0, 1.0], [-1.0, 0.0]])  # (a, b) @ [[0, 1], [-1, 0]]
    turned = tf.matmul(x, tf.constant(swap, x.dtype))
    return x * cast(tf.cos(angle), x.dtype) + turned * cast(tf.sin(angle), x.dtype)


def xl_sinusoid(dist, d_model: int):
    """Transformer-XL's relative encoding R of distances (L,): [sin(d f), cos(d f)] with
    f = 10000^(-2i / d_model), i < d_model / 2: (L, d_model) float32."""
    freq = tf.pow(10000.0, -tf.range(0, d_model, 2, dtype=tf.float32) / d_model)
    angle = tf.cast(dist, tf.float32)[:, None] * freq[None, :]
    return tf.concat([tf.sin(angle), tf.cos(angle)], axis=-1)


def relative_shift(x, t_k):
    """The relative shift: x (N, h, T_q, L), whose column c holds the distance D - c (D =
    the largest), -> (N, h, T_q, t_k) with out[i, j] = x[i, j + T_q - 1 - i], i.e. the
    distance (D - T_q + 1) + i - j. Each row, read flat, starts L - 1 entries after the
    previous row's start: the flat run from T_q - 1, cut into T_q rows of L - 1 and the
    first t_k columns of each kept, is the shifted matrix. Two contiguous slices (no
    strided ones, no pad: their gradients are plain pads). Needs L >= t_k + 1; exact
    wherever j + T_q - 1 - i < L, which holds for every pair when L >= T_q + t_k - 1, and
    for j <= i (what a causal mask keeps) when L = t_k + 1 = T_q + 1."""
    s = tf.shape(x)
    t_q, width = s[2], s[3]
    flat = tf.reshape(x, (s[0], s[1], t_q * width))
    rows = tf.slice(flat, [0, 0, t_q - 1], [-1, -1, t_q * (width - 1)])
    rows = tf.reshape(rows, (s[0], s[1], t_q, width - 1))
    return tf.slice(rows, [0, 0, 0, 0], [-1, -1, -1, t_k])


# ---------------------------------------------------------------------------------------
# The interface and the registry
# ---------------------------------------------------------------------------------------
class Encoding:
    """A position family; this base is the interface, and a family with no position terms.

    Class attributes: ``name`` (the ``--position`` value), ``embedding`` ("sinusoid" or
    "learned": added to the embeddings; None: nothing, unless ``position_add_absolute``)
    and ``relative`` (True: the family works in self-attention, through a StackPosition
    per stack and a LayerPosition per self-attention sublayer). A family keeps no state:
    its weights live on the layer it is given, so checkpoint paths name the layers
    (``self_attn/relative/a_k``).
    """

    name = ""
    embedding: str | None = None
    relative = False

    @classmethod
    def max_length(cls, config) -> int | None:
        """The longest sequence it can place (None: any), for a model config."""
        return None

    @classmethod
    def embedding_of(cls, config) -> str | None:
        """What the model adds to the embeddings: "sinusoid", "learned" or None."""
        if cls.relative:
            return "sinusoid" if config.position_add_absolute else None
        return cls.embedding

    # -- the embedding (absolute families), for a embeddings.PositionalEncoding layer ------
    def build_table(self, layer) -> None:
        """Create the layer's weights (a learned table)."""

    def encode(self, layer, positions, dtype):
        """The (T, d_model) encoding of positions (T,) int, in ``dtype``."""
        raise NotImplementedError(f"position={self.name} adds nothing to the embeddings")

    # -- self-attention (relative families) -------------------------------------------
    def build_stack(self, stack: StackPosition) -> None:
        """Create the weights a stack's layers share (on ``stack``)."""

    def build_layer(self, layer: LayerPosition) -> None:
        """Create one self-attention sublayer's weights (on ``layer``)."""

    def rotate(self, layer: LayerPosition, x, positions):
        """Projected queries or keys x (N, h, T, d_k) at positions (T,) int, transformed
        before the dot product (rotary); the identity otherwise."""
        return x

    def terms(self, layer: LayerPosition, q, q_pos, k_pos, div):
        """What attention adds for queries q (N, h, T_q, d_k) at positions q_pos (T_q,)
        over keys at positions k_pos (T_k,): (the query the content logits use, a logits
        bias broadcastable to (N, h, T_q, T_k) float32 or None, a value term - a function
        of the attention weights (N, h, T_q, T_k) giving (N, h, T_q, d_k) - or None).
        ``div`` is sqrt(d_k) where a bias multiplies q (1 without the scale)."""
        return q, None, None


REGISTRY: dict[str, type[Encoding]] = {}


def register(family: type[Encoding]) -> type[Encoding]:
    """Add a family under its ``name`` (a class decorator). Config's table of families
    (``families.POSITIONS``, the ``--position`` values and their checks) must have its row,
    saying as the class does whether it is relative: else a ValueError."""
    row = families.POSITIONS.get(family.name)
    if row is None or row.relative != family.relative:
        raise ValueError(
            f"position family {family.name!r} (relative={family.relative}) needs its row in "
            f"transformer_tf2/config/families.py POSITIONS, with relative={family.relative}"
        )
    REGISTRY[family.name] = family
    return family


def get(name: str) -> Encoding:
    """The family of ``position`` = name (a fresh instance: families keep no state)."""
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, REGISTRY, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise UserError(f"unknown position '{name}'{hint} (known: {', '.join(REGISTRY)})")
    return REGISTRY[name]()


# ---------------------------------------------------------------------------------------
# The families
# ---------------------------------------------------------------------------------------
@register
class Sinusoid(Encoding):
    """The paper's fixed encoding (3.5), added to the embeddings; no weights."""

    name, embedding = "sinusoid", "sinusoid"

    def encode(self, layer, positions, dtype):
        return sinusoid_encoding(positions, layer.d_model, dtype)


@register
class Learned(Encoding):
    """A learned (max_position, d_model) table added to the embeddings; positions past the
    table reuse its last row, and decoding stops at its length."""

    name, embedding = "learned", "learned"

    @classmethod
    def max_length(cls, config) -> int:
        return config.max_position

    def build_table(self, layer) -> None:
        layer.table = layer.add_weight(
            name="table",
            shape=(layer.max_position, layer.d_model),
            initializer=layer.table_initializer(),
        )

    def encode(self, layer, positions, dtype):
        table = cast(layer.table.value, dtype)
        return tf.gather(table, tf.minimum(positions, layer.max_position - 1))


@register
class Shaw(Encoding):
    """Shaw et al.'s a^K and a^V per layer, clipped at max_relative_position."""

    name, relative = "shaw", True

    def build_layer(self, layer) -> None:
        shape = (2 * layer.stack.max_relative_position + 1, layer.d_k)
        # an initializer each (a shared one would start a^K = a^V: it fixes its seed)
        layer.a_k = layer.add_weight(name="a_k", shape=shape, initializer="glorot_uniform")
        layer.a_v = layer.add_weight(name="a_v", shape=shape, initializer="glorot_uniform")

    def terms(self, layer, q, q_pos, k_pos, div):
        """Shaw's terms by the paper's reshaping (sec. 3.3): queries against the 2k + 1
        embeddings a^K (N, h, T_q, 2k + 1), gathered per pair; the weights summed into
        the 2k + 1 buckets (N, h, T_q, 2k + 1), then one matmul with a^V."""
        dt, r = q.dtype, 2 * layer.stack.max_relative_position + 1
        index = shaw_index(q_pos, k_pos, layer.stack.max_relative_position)  # (T_q, T_k)
        # (N, h, T_q, R) float32
        scores = fast_ops.logits_product(q, cast(layer.a_k.value, dt), transpose_b=True)
        n, h, t_q = tf.shape(q)[0], tf.shape(q)[1], tf.shape(q)[2]
        flat = tf.reshape(scores, (n, h, t_q * r))
        rows = tf.range(t_q)[:, None] * r + index  # (T_q, T_k) into the flat rows
        bias = tf.reshape(tf.gather(flat, tf.reshape(rows, [-1]), axis=2), (n, h, t_q, -1))
        one_hot = tf.one_hot(index, r, dtype=dt)  # (T_q, T_k, R)

        def value_term(weights):
            buckets = tf.einsum("nhqk,qkr->nhqr", cast(weights, dt), one_hot)
            return tf.matmul(buckets, cast(layer.a_v.value, dt))

        return q, bias / div, value_term


@register
class T5(Encoding):
    """T5's learned bias per head and distance bucket, one table per stack."""

    name, relative = "t5", True

    def build_stack(self, stack) -> None:
        shape = (stack.t5_buckets, stack.num_heads)
        stack.table = stack.add_weight(
            name="bias", shape=shape, initializer="zeros", dtype="float32"
        )

    def terms(self, layer, q, q_pos, k_pos, div):
        s = layer.stack
        bucket = t5_bucket(distances(q_pos, k_pos), s.t5_buckets, s.t5_max_distance, not s.causal)
        return q, tf.transpose(tf.gather(s.table.value, bucket), (2, 0, 1)), None


@register
class XL(Encoding):
    """Transformer-XL's u, v per stack and W_R per layer over the sinusoid of distances."""

    name, relative = "xl", True

    def build_stack(self, stack) -> None:
        shape = (stack.num_heads, stack.d_model // stack.num_heads)
        stack.u = stack.add_weight(name="u", shape=shape, initializer="zeros")
        stack.v = stack.add_weight(name="v", shape=shape, initializer="zeros")

    def build_layer(self, layer) -> None:
        shape = (layer.stack.d_model, layer.stack.d_model)
        layer.w_r = layer.add_weight(name="w_r", shape=shape, initializer="glorot_uniform")

    def terms(self, layer, q, q_pos, k_pos, div):
        """(q + v) against R_d W_R for every distance d from the largest i - j down (both
        directions, or i >= j when causal), shifted into place by :func:`relative_shift`;
        the content query is q + u (sec. 3.3)."""
        s, dt = layer.stack, q.dtype
        t_q, t_k = tf.shape(q)[2], tf.shape(k_pos)[0]
        # relative_shift's widths: one distance more than the pairs need (-1 when causal)
        width = t_k + 1 if s.causal else t_q + t_k
        dist = (q_pos[-1] - k_pos[0]) - tf.range(width)  # (L,), largest first
        r = fast_ops.dense(cast(xl_sinusoid(dist, s.d_model), dt), cast(layer.w_r.value, dt))
        r = tf.transpose(tf.reshape(r, (width, s.num_heads, layer.d_k)), (1, 2, 0))  # (h, d_k, L)
        # (N, h, T_q, L) float32
        by_distance = fast_ops.logits_product(q + cast(s.v.value, dt)[:, None], r)
        bias = relative_shift(by_distance, t_k)
        return q + cast(s.u.value, dt)[:, None], bias / div, None


@register
class Alibi(Encoding):
    """ALiBi's fixed -m_h |i - j| per head; symmetric in the encoder."""

    name, relative = "alibi", True

    def terms(self, layer, q, q_pos, k_pos, div):
        slopes = tf.constant(alibi_slopes(layer.stack.num_heads), tf.float32)[:, None, None]
        dist = tf.cast(tf.abs(distances(q_pos, k_pos)), tf.float32)
        return q, -slopes * dist[None], None


@register
class AlibiDir(Alibi):
    """ALiBi with the encoder's heads split into left- and right-looking halves."""

    name = "alibi_dir"

    def terms(self, layer, q, q_pos, k_pos, div):
        if layer.stack.causal:
            return super().terms(layer, q, q_pos, k_pos, div)
        return q, directional_alibi(distances(q_pos, k_pos), layer.stack.num_heads), None


@register
class Rotary(Encoding):
    """RoPE: queries and keys rotated at their positions; no weights, no terms."""

    name, relative = "rotary", True

    def rotate(self, layer, x, positions):
        return rotate(x, positions)


# ---------------------------------------------------------------------------------------
# The layers that hold a relative family's weights
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class StackPosition(keras.layers.Layer):
    """One stack's relative position family (``kind``), its settings and the weights its
    layers share (t5: the bias table (num_buckets, h); xl: u and v (h, d_k)).
    ``causal``: the decoder's masked self-attention (queries see the past alone)."""

    def __init__(
        self,
        kind: str,
        d_model: int,
        num_heads: int,
        causal: bool = False,
        max_relative_position: int = 16,
        t5_buckets: int = 32,
        t5_max_distance: int = 128,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.family = get(kind)
        if not self.family.relative:
            raise ValueError(f"position={kind} is not a relative family")
        self.kind, self.d_model, self.num_heads, self.causal = kind, d_model, num_heads, causal
        self.max_relative_position = max_relative_position
        self.t5_buckets, self.t5_max_distance = t5_buckets, t5_max_distance

    def build(self, input_shape=None):
        self.family.build_stack(self)

    def get_config(self):
        return {
            **super().get_config(),
            "kind": self.kind,
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "causal": self.causal,
            "max_relative_position": self.max_relative_position,
            "t5_buckets": self.t5_buckets,
            "t5_max_distance": self.t5_max_distance,
        }


@keras.saving.register_keras_serializable(package="transformer")
class LayerPosition(keras.layers.Layer):
    """The relative terms of one self-attention sublayer, for its stack's family
    ``stack`` (:class:`StackPosition`); per layer: shaw's a^K, a^V (2k + 1, d_k), xl's
    W_R (d_model, d_model).

    :meth:`rotate` turns projected queries or keys at their positions (rotary; the
    identity otherwise); :meth:`terms` gives what scaled_dot_product_attention adds."""

    def __init__(self, stack: StackPosition, **kwargs):
        super().__init__(**kwargs)
        self.stack, self.family = stack, stack.family
        self.d_k = stack.d_model // stack.num_heads

    def build(self, input_shape=None):
        self.family.build_layer(self)

    def rotate(self, x, offset=0):
        """x (N, h, T, d_k) at positions offset, offset + 1, ..."""
        return self.family.rotate(self, x, offset + tf.range(tf.shape(x)[2]))

    def terms(self, q, t_k, q_offset=0, k_offset=0, scale=True):
        """The family's terms (:meth:`Encoding.terms`) of queries q (N, h, T_q, d_k) at
        positions q_offset + i over t_k keys at positions k_offset + j. Biases that
        multiply q are divided by sqrt(d_k) with ``scale``."""
        q_pos = q_offset + tf.range(tf.shape(q)[2])
        k_pos = k_offset + tf.range(t_k)
        div = math.sqrt(self.d_k) if scale else 1.0
        return self.family.terms(self, q, q_pos, k_pos, div)
