"""The Weighted Transformer (Ahmed et al. 2017, arXiv 1711.02132), ``model_type=weighted``.

In every encoder layer, and in the encoder-decoder attention of every decoder layer, the
heads become M = num_heads branches whose feed-forward networks replace the layer's
separate FFN sublayer (:class:`BranchedAttention`). The branch weights kappa and alpha are
kept on the probability simplex by projected gradient descent and trained by an Adam of
their own with a short warmup. Everything plugs into modules.py and the trainer through
:class:`Variant`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers import attention, embeddings, modules, optimization
from transformer_tf2.models import variants

cast = fast_ops.cast


# ---------------------------------------------------------------------------------------
# Branch weights on the simplex (sec. 3)
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
class BranchedAttention(attention.MultiHeadAttention):
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
    :class:`SimplexProjection` after every update. Each branch's FFN kernels start as the
    branch's own dense layers would (Glorot uniform with fans d_model and d_ff / M), not
    with the fans Keras gives a 3-D (M, d, d_ff / M) kernel (M d and d_ff), which would
    start them sqrt(M) too small.

    The branches run as batched matmuls over a leading branch axis, not a loop of M
    layers. The caller wraps this in Residual: LayerNorm(x + Dropout(Branched)).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout_rate: float = 0.0,
        scale: bool = True,
        **kwargs,
    ):
        super().__init__(d_model, num_heads, dropout_rate, scale, **kwargs)
        if not self.output_projection:
            raise ValueError("the Weighted Transformer's branches need W^O (output_projection)")
        if d_ff % num_heads:
            raise ValueError(
                f"d_ff ({d_ff}) must be divisible by the number of branches ({num_heads})"
            )
        self.d_ff = d_ff
        self.d_branch = d_ff // num_heads

    def build(self, query_shape=None, memory_shape=None):
        super().build(query_shape, memory_shape)
        m, d, f = self.num_heads, self.d_model, self.d_branch
        # one initializer each: a seeded initializer repeats its values on every call
        w1_init, w2_init = embeddings.xavier_uniform(d, f), embeddings.xavier_uniform(f, d)
        self.ffn_w1 = self.add_weight(name="ffn_w1", shape=(m, d, f), initializer=w1_init)
        self.ffn_b1 = self.add_weight(name="ffn_b1", shape=(m, f), initializer="zeros")
        self.ffn_w2 = self.add_weight(name="ffn_w2", shape=(m, f, d), initializer=w2_init)
        self.ffn_b2 = self.add_weight(name="ffn_b2", shape=(d,), initializer="zeros")
        self.kappa = self.add_weight(
            name="kappa",
            shape=(m,),
            initializer=random_simplex,
            constraint=SimplexProjection(),
            dtype="float32",
        )
        self.alpha = self.add_weight(
            name="alpha",
            shape=(m,),
            initializer=random_simplex,
            constraint=SimplexProjection(),
            dtype="float32",
        )

    def _merge(self, heads):
        """heads (N, M, T, d_k) -> sum_i alpha_i FFN_i(kappa_i head_i W^{O_i}) (N, T, d)."""
        dt = self.compute_dtype
        m, d, f = self.num_heads, self.d_model, self.d_branch
        n, t = tf.shape(heads)[0], tf.shape(heads)[2]
        # branch-major rows (M, N*T, d_k); kappa scales head_i before the projection
        x = tf.reshape(tf.transpose(heads, (1, 0, 2, 3)), (m, n * t, self.d_k))
        x = x * cast(self.kappa.value, dt)[:, None, None]
        w_o = tf.reshape(cast(self.w_o.value, dt), (m, self.d_k, d))
        headbar = tf.matmul(x, w_o)  # (M, NT, d)
        hidden = tf.nn.relu(
            tf.matmul(headbar, cast(self.ffn_w1.value, dt))
            + cast(self.ffn_b1.value, dt)[:, None, :]
        )  # (M, NT, f)
        hidden = hidden * cast(self.alpha.value, dt)[:, None, None]
        # sum over branches and inner units in one matmul: (NT, M*f) @ (M*f, d)
        hidden = tf.reshape(tf.transpose(hidden, (1, 0, 2)), (n * t, m * f))
        out = tf.matmul(hidden, tf.reshape(cast(self.ffn_w2.value, dt), (m * f, d)))
        return tf.reshape(out + cast(self.ffn_b2.value, dt), (n, t, d))

    def get_config(self):
        return {**super().get_config(), "d_ff": self.d_ff}


# ---------------------------------------------------------------------------------------
# Weighted layers: the last attention sublayer is branched and holds the FFN
# ---------------------------------------------------------------------------------------
class _WeightedBlock:
    """Mixin over modules' layers: the layer's last attention sublayer becomes a
    :class:`BranchedAttention` whose branch FFNs replace the FFN sublayer; in a decoder
    layer the masked self-attention stays standard."""

    def make_attention(self, name: str, last: bool):
        if not last:
            return super().make_attention(name, last)
        a = self.args
        return BranchedAttention(
            a["d_model"], a["num_heads"], a["d_ff"], **self.attention_options(name), name=name
        )

    def make_feed_forward(self):
        return None

    def branched(self) -> BranchedAttention:
        return self.self_attn if isinstance(self, modules.EncoderLayer) else self.cross_attn


@keras.saving.register_keras_serializable(package="transformer")
class WeightedEncoderLayer(_WeightedBlock, modules.EncoderLayer):
    """Encoder layer of the Weighted Transformer: one branched self-attention sublayer,
    LayerNorm(x + Dropout(sum_i alpha_i FFN_i(kappa_i head_i W^{O_i}))).
    (N, T1, d_model) -> (N, T1, d_model), as modules.EncoderLayer."""


@keras.saving.register_keras_serializable(package="transformer")
class WeightedDecoderLayer(_WeightedBlock, modules.DecoderLayer):
    """Decoder layer of the Weighted Transformer: standard masked self-attention, then a
    branched encoder-decoder sublayer holding the FFN. Shapes as modules.DecoderLayer."""


# ---------------------------------------------------------------------------------------
# The hook: layers, kappa/alpha optimizer, summaries, specs
# ---------------------------------------------------------------------------------------
class Training(variants.Training):
    """``model_type=weighted`` in training: kappa and alpha trained by their own Adam
    (:meth:`optimizer_groups`), and their values in TensorBoard."""

    def optimizer_groups(self, model, hp) -> dict:
        variables = [
            w for sub in Variant.branched_layers(model).values() for w in (sub.kappa, sub.alpha)
        ]
        lr = hp.lr
        if hp.lr_schedule == "kyubyong":  # lr warmup^0.5 step^-0.5 past the warmup
            lr *= (hp.warmup_steps / hp.branch_warmup_steps) ** 0.5
        schedule = optimization.TransformerSchedule(
            hp.lr_schedule, hp.d_model, hp.branch_warmup_steps, lr, hp.cooldown
        )
        return {Variant.GROUP: (variables, schedule)}

    def summaries(self, model, step: int, schedules: dict) -> None:
        """kappa and alpha of every layer: one scalar per branch (branch/<layer>/kappa_<i>)
        and a histogram per layer, plus their lr (train/branch_lr)."""
        tf.summary.scalar(f"train/{Variant.GROUP}_lr", float(schedules[Variant.GROUP](step - 1)))
        for name, value in model.variant.branch_weights(model).items():
            tf.summary.histogram(f"branch/{name}", value)
            for i, x in enumerate(value):
                tf.summary.scalar(f"branch/{name}_{i}", float(x))


class Variant(variants.Variant):
    """``model_type=weighted``: weighted layers; kappa and alpha trained by their own Adam
    with the main schedule's kind but ``branch_warmup_steps`` (sec. 4: 400 steps), and a
    rate equal to the main one once both warmups are over (as the paper's Noam form
    gives: d_model^-0.5 step^-0.5 whatever the warmup)."""

    name = "weighted"
    training = Training()
    GROUP = "branch"  # its optimizer is checkpointed as branch_optimizer

    def encoder_layer(self, **args):
        return WeightedEncoderLayer(**args)

    def decoder_layer(self, **args):
        return WeightedDecoderLayer(**args)

    @staticmethod
    def branched_layers(model) -> dict:
        """{'encoder_0': BranchedAttention, ...} of every layer of the model."""
        return {
            layer.name: layer.branched() for layer in model.encoder_layers + model.decoder_layers
        }

    def branch_weights(self, model) -> dict:
        """{'encoder_0/kappa': (M,) numpy, 'encoder_0/alpha': ..., ...}."""
        out = {}
        for name, sub in self.branched_layers(model).items():
            out[f"{name}/kappa"] = sub.kappa.numpy()
            out[f"{name}/alpha"] = sub.alpha.numpy()
        return out

    def specs_lines(self, model) -> list[str]:
        """Each layer's kappa and alpha values."""
        return [
            f"{name}\t" + " ".join(f"{x:.4f}" for x in value)
            for name, value in self.branch_weights(model).items()
        ]
