"""An exponential moving average (EMA) of the model's trainable weights (``--ema_decay``),
as OpenNMT-tf's ``moving_average_decay``, Marian's ``--exponential-smoothing`` and
fairseq's ``--ema-decay`` keep it.

After every applied update (a skipped one leaves it alone), each shadow weight s of a
weight w moves to

    s <- s - (1 - d_t) (s - w),    d_t = min(ema_decay, (1 + t) / (10 + t))

where t is the optimizer's step after the update: the warm-up of d_t is the one of
``tf.train.ExponentialMovingAverage(num_updates=t)`` that OpenNMT-tf uses, so that the
first updates, made from random weights, are soon forgotten. The shadows start as the
weights themselves and are kept in the run's checkpoint (item ``ema``); a resumed run
continues them exactly. With several replicas the weights are the same on each (mirrored),
and the shadows are one copy of them, updated from the first replica's values.

The dev evaluation of an EMA run scores the shadows (:meth:`MovingAverage.applied` puts
them in the model for its duration), and the run's end chooses its default model by dev
BLEU among the EMA weights, the best checkpoint's own weights and the average of the last
checkpoints (checkpoints.choose_default).
"""

from __future__ import annotations

import contextlib

import tensorflow as tf


class MovingAverage:
    """Shadow copies of ``variables`` (the model's trainable weights, each (shape of w)
    float32) and their update after each step ``iterations`` (the optimizer's counter)."""

    def __init__(self, variables, decay: float, iterations):
        if not 0 < decay < 1:
            raise ValueError(f"ema decay must be in (0, 1); got {decay}")
        self.variables, self.decay, self.iterations = list(variables), decay, iterations
        # plain variables outside any strategy scope: one copy, whatever the replicas
        self.shadows = [
            tf.Variable(tf.convert_to_tensor(v), trainable=False, name="ema")
            for v in self.variables
        ]
        self._update = tf.function(self._update_graph, autograph=False)
        self._swap = tf.function(self._swap_graph, autograph=False)

    def decay_at(self, step):
        """d_t of the module docstring for step t (a float32 scalar)."""
        t = tf.cast(step, tf.float32)
        return tf.minimum(tf.constant(self.decay, tf.float32), (1.0 + t) / (10.0 + t))

    def update(self) -> None:
        """Move every shadow towards its weight (after an applied update)."""
        self._update()

    def _update_graph(self):
        rate = 1.0 - self.decay_at(self.iterations)
        for shadow, weight in zip(self.shadows, self.variables):
            shadow.assign_sub(rate * (shadow - tf.cast(weight, shadow.dtype)))

    def _swap_graph(self):
        for shadow, weight in zip(self.shadows, self.variables):
            own = tf.identity(tf.convert_to_tensor(weight))  # read before either is written
            weight.assign(tf.cast(shadow.read_value(), weight.dtype))
            shadow.assign(tf.cast(own, shadow.dtype))

    @contextlib.contextmanager
    def applied(self):
        """The shadows in the model, its own weights back after (even on an exception):
        what the dev evaluation of an EMA run scores and what an EMA model file holds."""
        self._swap()
        try:
            yield
        finally:
            self._swap()

    def reset(self) -> None:
        """Shadows equal to the weights (a run resumed from a checkpoint without them)."""
        for shadow, weight in zip(self.shadows, self.variables):
            shadow.assign(tf.cast(tf.convert_to_tensor(weight), shadow.dtype))
