"""What training optimizes and how (Vaswani et al. 2017, section 5): the learning-rate
schedule (5.3, and the other schedules the presets use), the label-smoothed
cross-entropy (5.4), Adam (5.3) and the sums of them that a batch reports (StepStats).
Used by trainer.py and accumulation.py.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf
from keras import ops

from transformer_tf2.kernels import fast_ops

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
# Adam that takes gradients already summed over the replicas
# ---------------------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="transformer")
class Adam(keras.optimizers.Adam):
    """keras.optimizers.Adam (5.3) that can skip Keras' sum of the replicas' gradients:
    where ``summed`` is set (trainer.Trainer, which all-reduces the gradients once and
    clips their sum), the gradients it gets are summed already. The same update, slot
    variables and checkpoints as Keras' Adam."""

    def __init__(self, *args, name: str = "adam", **kwargs):
        super().__init__(*args, name=name, **kwargs)
        # True where the caller passes gradients already summed over the replicas
        # (trainer.Trainer, which clips the sum): Keras' own all-reduce is then skipped
        self.summed = False
        self._scalars = None  # dtype -> the step's scalars, while an update is traced

    def _all_reduce_sum_gradients(self, grads_and_vars):
        """Keras' sum of the replicas' gradients, skipped when they are summed already."""
        if self.summed:
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        """Keras' update of every variable, with the step's scalars (the learning rate,
        the bias corrections' alpha) computed once per dtype and shared by the variables,
        where Keras computes them again for each: the same arithmetic, fewer ops to trace."""
        self._scalars = {}
        try:
            super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            self._scalars = None

    def update_step(self, gradient, variable, learning_rate):
        """keras.optimizers.Adam.update_step's arithmetic, in its order (5.3)."""
        scalars = self._scalars
        if self.amsgrad or scalars is None:
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        if dtype not in scalars:
            lr = ops.cast(learning_rate, dtype)
            local_step = ops.cast(self.iterations + 1, dtype)
            beta_1_power = ops.power(ops.cast(self.beta_1, dtype), local_step)
            beta_2_power = ops.power(ops.cast(self.beta_2, dtype), local_step)
            alpha = lr * ops.sqrt(1 - beta_2_power) / (1 - beta_1_power)
            one = (ops.cast(1 - beta, dtype) for beta in (self.beta_1, self.beta_2))
            scalars[dtype] = (alpha, *one, ops.cast(self.epsilon, dtype))
        alpha, one_minus_beta_1, one_minus_beta_2, epsilon = scalars[dtype]
        gradient = ops.cast(gradient, dtype)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), one_minus_beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), one_minus_beta_2))
        self.assign_sub(variable, ops.divide(ops.multiply(m, alpha), ops.add(ops.sqrt(v), epsilon)))


class StepStats(NamedTuple):
    """What one batch reports, summed over its target tokens (and over the replicas)."""

    loss_sum: float  # label-smoothed cross-entropy
    nll_sum: float  # plain cross-entropy
    tokens: float  # non-PAD target tokens
    correct: float  # tokens whose label has the largest logit
    grad_norm: float = 0.0  # global gradient norm of the update (0 without an update)
    skipped: float = 0.0  # 1: a NaN or Inf made every replica skip the update (counted)
    scale_skip: float = 0.0  # 1: skipped for a float16 loss-scale overflow (normal, not counted)
    stop: float = 0.0  # > 0: a worker was asked to stop (SIGINT/SIGTERM); all workers see it


# what a batch boundary without an update reports (nothing accumulated to apply)
NO_UPDATE = StepStats(0.0, 0.0, 0.0, 0.0)
