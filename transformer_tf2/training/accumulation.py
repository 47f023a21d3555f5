"""Gradient accumulation (``--accum_steps N``): N batches make one update, as one batch of
N times the tokens would (section 5.1's 25,000-token batches on a smaller device).

Each batch adds its gradients of the summed label-smoothed loss (5.4) to accumulators, and
the N-th batch applies their sum divided by all N batches' target tokens
(Trainer.apply_gradients: the finiteness check, clipping, Adam 5.3). Updates happen only on
batch boundaries, so a checkpoint never holds a partial sum: an epoch's last partial
accumulation is applied at its end (:meth:`Accumulation.flush`), and a run stopped by a
signal forgets its partial one (:meth:`Accumulation.drop_partial`) and trains those
batches again on resume. With several replicas each keeps its own sums (ON_READ variables:
a replica reads and adds to its copy) and the update sums them across the replicas, as
for one batch.
"""

from __future__ import annotations

import tensorflow as tf

from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers.optimization import NO_UPDATE, StepStats
from transformer_tf2.utils.devices import deal_rows


class Accumulation:
    """The accumulators of a Trainer (trainer.py) and its compiled accumulation steps:
    ``trainer`` gives the model, the loss (``loss_sums``), the update (``apply_gradients``)
    and the run's state (the data position and the dropout random state)."""

    def __init__(self, trainer):
        self.trainer, hp, strategy = trainer, trainer.hp, trainer.strategy
        self.steps, self.tokens_per_batch = hp.accum_steps, float(hp.tokens_per_batch)
        self.pending = 0  # batches accumulated since the last update
        self.rng_at_update = []  # the dropout random state at the last update
        local = tf.VariableSynchronization.ON_READ
        if trainer.replicas == 1:
            local = tf.VariableSynchronization.AUTO  # a plain variable

        def local_sum(shape, dtype=tf.float32):
            return tf.Variable(tf.zeros(shape, dtype), trainable=False, synchronization=local)

        with strategy.scope():
            self.sums = [local_sum(v.shape, v.dtype) for v in trainer.model.trainable_variables]
            self.tokens, self.loss = local_sum([]), local_sum([])
        accumulate = self._accumulate
        if hp.jit_compile:
            accumulate = fast_ops.function(self._accumulate, trainer.kernels.for_xla())
        self._accumulate_fn = trainer.distributed(lambda *b: trainer.summed(accumulate, b))
        self._apply_fn = tf.function(lambda: trainer.summed(self._apply, ()), autograph=False)
        self._clear_fn = tf.function(lambda: strategy.run(self._clear), autograph=False)

    def batch(self, *batch, stop: bool = False) -> tuple[StepStats, bool]:
        """Accumulate one batch (Trainer.batch_spec), and update after every ``steps``
        batches (:meth:`flush`). Returns (its stats, with the update's; whether the
        weights were updated)."""
        if self.pending == 0:  # where drop_partial() returns to
            self.rng_at_update = [v.numpy() for v in self.trainer.state.rng_states]
        batch = deal_rows(self.trainer.strategy, *batch)
        sums = self._accumulate_fn(*batch, tf.constant(float(stop)))
        stats = StepStats(*(float(x) for x in sums))
        self.pending += 1
        if self.pending < self.steps:
            return stats, False
        update = self.flush()
        stats = stats._replace(
            grad_norm=update.grad_norm, skipped=update.skipped, scale_skip=update.scale_skip
        )
        return stats, not (update.skipped or update.scale_skip)  # flush() moved the EMA

    def _accumulate(self, *batch_and_stop) -> StepStats:
        """Add this replica's rows' gradients of the summed loss to its accumulators;
        their StepStats, with ``stop`` as in Trainer._replica_step."""
        *batch, stop = batch_and_stop
        trainer = self.trainer
        model = trainer.model
        with tf.GradientTape() as tape:
            extras = {}
            sums = trainer.loss_sums(batch, training=True, extras=extras)
            # divided by the token budget so that float16 gradients keep the magnitude
            # of a per-token mean (the update divides by the real token count)
            per_budget = sums.loss_sum / self.tokens_per_batch
            # the variant's term, weighted by the batch's tokens: once per update in all
            extra = trainer.hooks.extra_loss(model, extras) * sums.tokens
            per_budget += extra / self.tokens_per_batch
            scaled = trainer.loss_scale.scale(per_budget)
        grads = tape.gradient(scaled, model.trainable_variables)
        for acc, grad in zip(self.sums, grads):
            acc.assign_add(tf.convert_to_tensor(grad))
        self.tokens.assign_add(sums.tokens)
        self.loss.assign_add(per_budget)
        return sums._replace(stop=stop)

    def _apply(self):
        """One update with the accumulated gradients (summed over the replicas in
        apply_gradients) over all their target tokens: (grad norm, skipped, scale_skip)
        divided by the replicas, for the sum over them that follows."""
        trainer = self.trainer
        tokens = trainer.sum_replicas(self.tokens.read_value())
        tokens = tf.maximum(tokens, 1.0) / self.tokens_per_batch
        grads = [acc.read_value() / tokens for acc in self.sums]
        result = trainer.apply_gradients(grads, self.loss.read_value())
        with tf.control_dependencies(result):
            self._clear()
        return tuple(x / float(trainer.replicas) for x in result)

    def _clear(self) -> None:
        for acc in self.sums:
            acc.assign(tf.zeros_like(acc))
        self.tokens.assign(0.0)
        self.loss.assign(0.0)

    def flush(self) -> StepStats:
        """Apply a partial accumulation (at the end of an epoch); its update's StepStats
        (grad_norm, skipped, scale_skip; all 0 when nothing was pending). An applied update
        moves the moving average (Trainer.updated)."""
        if not self.pending:
            return NO_UPDATE
        self.pending = 0
        norm, skipped, scale_skip = (float(x) for x in self._apply_fn())
        stats = StepStats(0.0, 0.0, 0.0, 0.0, norm, skipped, scale_skip)
        self.trainer.updated(stats)
        return stats

    def drop_partial(self) -> int:
        """Forget a partial accumulation (before an interrupted run's checkpoint): the
        data position and the dropout random state go back to the last update, so that
        a resumed run trains those batches again as the uninterrupted run would have.
        Returns the number of batches dropped."""
        dropped, self.pending = self.pending, 0
        if dropped:
            self._clear_fn()
            state = self.trainer.state
            state.batch_in_epoch.assign_add(-dropped)
            for v, value in zip(state.rng_states, self.rng_at_update):
                v.assign(value)
        return dropped
