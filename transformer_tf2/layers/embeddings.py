"""Embeddings and softmax (Vaswani et al. 2017, 3.4) and the positional encoding (3.5):
the token embedding (its transpose the tied pre-softmax layer), an output layer of its
own, the sinusoid or learned position table. Shapes: N (batch), T (length), V
(vocabulary size).
"""

from __future__ import annotations

import math
import threading

import keras
import tensorflow as tf

from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers import positions

cast = fast_ops.cast


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
        reads once for all its steps: a product with a transposed operand runs at about
        2/3 of the speed on CPU."""
        w, flip = (self.embeddings.value, True) if transposed is None else (transposed, False)
        z = fast_ops.logits_product(
            cast(x, self.compute_dtype), w, transpose_b=flip, switch="f32_logits"
        )
        return z if self.rows == self.vocab_size else z[..., : self.vocab_size]

    def transposed(self):
        """The matrix as (d_model, V8), for :meth:`logits`: in a decoder
        (fast_ops.Kernels' ``decoding``) the copy :meth:`pin_transposed` made, where it made
        one, else transposed now."""
        pinned = self.__dict__.get("_pinned")
        if pinned is not None and fast_ops.kernels().decoding:
            return pinned.matrix.read_value()
        return tf.transpose(self.embeddings.value)

    def pin_transposed(self) -> None:
        """Keeps the matrix transposed (d_model, V8) in a variable of its own, made or
        refreshed from the embeddings now, which the decoders traced from then on read in
        place of a transpose at each call: the (V8, d_model) matrix is the largest a
        decoder reads, and its transpose (2 x 8 MB of memory traffic on the ``multi30k``
        preset) cost about as much as a sentence's decoding at batch 1. The decoders then
        decode the weights of the last pin: call it again after the weights change
        (decoding.translator.Translator does, when it is made and, for a model in
        training, before each decoding: evaluation.dev.DevTranslator). The variable is
        the layer's alone, outside its weights, checkpoints and SavedModels."""
        with _PIN_LOCK, tf.init_scope():  # eagerly, whatever traces or scopes are open
            value = tf.transpose(self.embeddings.value)
            pinned = self.__dict__.get("_pinned")
            if pinned is None:
                matrix = tf.Variable(value, trainable=False, name="transposed_output")
                # a plain object: Keras and tf.train.Checkpoint track no variable inside
                object.__setattr__(self, "_pinned", _Pinned(matrix))
            else:
                pinned.matrix.assign(value)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "init": self.init,
        }


_PIN_LOCK = threading.Lock()  # one variable per layer, however many threads pin at once


class _Pinned:
    """The holder of :meth:`TokenEmbedding.pin_transposed`'s variable, an object that no
    tracking looks into."""

    __slots__ = ("matrix",)

    def __init__(self, matrix):
        self.matrix = matrix


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
