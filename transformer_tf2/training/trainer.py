"""The Trainer of a run: the model, its optimizers, and the compiled train step (forward,
label-smoothed loss 5.4, gradients, the replicas' sum, clipping, Adam 5.3); the dev set it
is scored on (:class:`Dev`) and the watch on skipped updates (:class:`Health`). Its parts
live with their own jobs: the checkpointed state of the run (run_state.RunState:
``trainer.state``), gradient accumulation (accumulation.Accumulation) and what the workers
of a multi-worker run agree on (devices.Workers: ``trainer.workers``). train.py runs the
loop around it.

A batch goes: TrainData.dataset -> Trainer.train_batch -> Trainer.train_step -> StepStats.
"""

from __future__ import annotations

import contextlib
import sys

import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

from transformer_tf2.config import hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers import optimization
from transformer_tf2.layers.optimization import NO_UPDATE, StepStats
from transformer_tf2.models.model import Transformer
from transformer_tf2.training import ema, summaries
from transformer_tf2.training.accumulation import Accumulation
from transformer_tf2.training.run_state import RunState
from transformer_tf2.utils import devices
from transformer_tf2.utils.devices import LossScale, deal_rows


class Trainer:
    """Model, optimizers and the compiled train step of one run; ``state`` holds what its
    checkpoints save (RunState), ``workers`` what its workers agree on (devices.Workers)."""

    def __init__(self, hp: hparams.Hparams, tok, strategy, precision: str, kernels=None):
        self.hp, self.tok, self.strategy = hp, tok, strategy
        # the kernels its functions trace (fast_ops.Kernels: a benchmark turns some off);
        # with XLA the model is only called inside XLA functions: no C++ LayerNorm to load
        off = ("native_ln",) if hp.jit_compile else ()
        self.kernels = kernels or fast_ops.Kernels.resolve(off)
        self.replicas = strategy.num_replicas_in_sync
        with strategy.scope():
            self.model = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
            # what the model variant changes in training (variants.Training)
            self.hooks = self.model.variant.training
            self._build_optimizers(loss_scaling=precision == "mixed_float16")
        self.ema = None  # the weights' moving average (ema.py), with --ema_decay
        if hp.ema_decay > 0:
            self.ema = ema.MovingAverage(
                self.model.trainable_variables, hp.ema_decay, self.optimizer.iterations
            )
        optimizers = [self.adam, *self.group_optimizers.values()]
        finite = self.model.weights + [v for o in optimizers for v in o.variables]
        self.state = RunState(
            hp, strategy, self.model, self.optimizer, self.group_optimizers, self.ema, finite
        )
        for schedule in [self.schedule, *self.schedules.values()]:
            schedule.progress = self.state.budget_used  # the fraction of the budget used
        self.workers = devices.Workers(strategy, self.state.chief)
        self.multi_worker = self.workers.multi_worker
        self._build_steps()

    def _build_optimizers(self, loss_scaling: bool) -> None:
        """Adam with the run's schedule (5.3) for the model's variables, and one more Adam
        per optimizer group of the model variant (the Weighted Transformer's kappa and
        alpha) with that group's schedule."""
        hp, model = self.hp, self.model
        adam = dict(beta_1=hp.adam_beta1, beta_2=hp.adam_beta2, epsilon=hp.adam_epsilon)
        self.schedule = optimization.TransformerSchedule(
            hp.lr_schedule, hp.d_model, hp.warmup_steps, hp.lr, hp.cooldown
        )
        self.optimizer = self.adam = optimization.Adam(self.schedule, **adam)
        if loss_scaling:
            self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
        self.loss_scale = LossScale(self.optimizer, loss_scaling)
        groups = self.hooks.optimizer_groups(model, hp)
        self.schedules = {name: schedule for name, (_, schedule) in groups.items()}
        self.group_of = {id(v): name for name, (vs, _) in groups.items() for v in vs}
        self.group_optimizers = {}
        for name, (variables, schedule) in groups.items():
            self.group_optimizers[name] = optimization.Adam(schedule, **adam)
            self.group_optimizers[name].build(variables)
        main = [v for v in model.trainable_variables if id(v) not in self.group_of]
        self.optimizer.build(main)
        for optimizer in [self.adam, *self.group_optimizers.values()]:
            optimizer.summed = True  # apply_gradients sums the replicas' gradients

    def _build_steps(self) -> None:
        """Compile the train step (and the accumulation steps when accum_steps > 1)."""
        hp = self.hp
        # one trace for every batch shape (several replicas get per-replica values instead);
        # no autograph: the step has no Python control flow on tensors, and converting its
        # code took half the time of tracing it
        self._step = self.distributed(self._distributed_step)
        # XLA: the whole step on one replica; on several, the gradients alone (gradients())
        self._compiled, self._gradients = self._replica_step, self.gradients
        if hp.jit_compile and self.replicas == 1:
            self._compiled = fast_ops.function(self._replica_step, self.kernels.for_xla())
        elif hp.jit_compile:
            self._gradients = fast_ops.function(self.gradients, self.kernels.for_xla())
        self.accumulation = Accumulation(self) if hp.accum_steps > 1 else None

    def distributed(self, fn):
        """tf.function of ``fn(*batch, stop)``: one trace for every batch shape on one
        replica; on several, per-replica values (deal_rows) retraced as little as may be."""
        if self.replicas > 1:
            return fast_ops.function(fn, self.kernels, reduce_retracing=True)
        spec = self.batch_spec() + [tf.TensorSpec([], tf.float32)]
        return fast_ops.function(fn, self.kernels, input_signature=spec)

    def summed(self, fn, args):
        """``fn(*args)`` on every replica (traced under the run's kernels on the replica's
        own thread), its tuple of scalars summed over the replicas."""
        replica = fast_ops.under(self.kernels, lambda *a: tf.stack(fn(*a)))
        stacked = self.strategy.run(replica, args)
        return self.strategy.reduce("SUM", stacked, axis=None)

    def batch_spec(self) -> list:
        """The tensors of a batch: data_load.batch_spec."""
        return data_load.batch_spec(self.hp)

    @property
    def step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    # -- the update: batch -> loss -> gradients -> Adam -------------------------------------
    def train_step(self, *batch, stop: bool = False) -> StepStats:
        """One update on one batch (:meth:`batch_spec`); its StepStats as numbers.
        ``stop``: this worker was asked to stop; the all-reduced StepStats.stop tells
        every worker."""
        batch = deal_rows(self.strategy, *batch)
        return StepStats(*(float(x) for x in self._step(*batch, tf.constant(float(stop)))))

    def _distributed_step(self, *batch_and_stop) -> StepStats:
        """The replicas' StepStats summed in one all-reduce of a stacked vector."""
        total = StepStats(*tf.unstack(self.summed(self._compiled, batch_and_stop)))
        n = float(self.replicas)  # the mean of what every replica reports alike
        mean = dict(grad_norm=total.grad_norm, skipped=total.skipped, scale_skip=total.scale_skip)
        return total._replace(**{k: v / n for k, v in mean.items()})

    def _replica_step(self, *batch_and_stop) -> StepStats:
        """One update from this replica's rows, the path of every training batch:

        1. the label-smoothed loss (5.4) per target token of the whole batch (every
           replica's tokens, so that the replicas' summed gradients are the one-device
           gradient), plus the variant's extra term, once in all;
        2. its gradients (of the scaled loss under mixed_float16: :class:`LossScale`);
        3. :meth:`apply_gradients`: skipped if not finite, else clipped and applied.
        Returns the batch's StepStats, with the update's and ``stop`` (this worker was
        asked to stop)."""
        *batch, stop = batch_and_stop
        real = tf.cast(tf.not_equal(batch[2], data_load.PAD_ID), tf.float32)
        tokens = self.sum_replicas(tf.reduce_sum(real))  # the whole batch's target tokens
        sums, loss, grads = self._gradients(tokens, *batch)
        norm, skipped, scale_skip = self.apply_gradients(grads, loss)
        return sums._replace(grad_norm=norm, skipped=skipped, scale_skip=scale_skip, stop=stop)

    def gradients(self, tokens, *batch):
        """(StepStats of this replica's rows, their share of the loss per target token of
        the batch (``tokens`` in all), its gradients): steps 1 and 2 of :meth:`_replica_step`,
        which XLA compiles alone with several replicas (the all-reduces and the update may
        not be inside a function that strategy.run calls)."""
        with tf.GradientTape() as tape:
            extras = {}  # what the layers report for this pass (the ponder cost)
            sums = self.loss_sums(batch, training=True, extras=extras)
            loss = sums.loss_sum / tf.maximum(tokens, 1.0)
            loss += self.hooks.extra_loss(self.model, extras) / self.replicas
            scaled = self.loss_scale.scale(loss)
        return sums, loss, tape.gradient(scaled, self.model.trainable_variables)

    def sum_replicas(self, x):
        """x summed over the replicas (x itself on one device)."""
        return tf.distribute.get_replica_context().all_reduce("sum", x) if self.replicas > 1 else x

    def loss_sums(self, batch, training, extras=None) -> StepStats:
        """Label-smoothed loss (5.4), cross-entropy and correct tokens summed over the
        non-PAD targets of ``batch`` (:meth:`batch_spec`), and their count; ``extras``
        receives what the layers report. With a context, the encoder reads the sources in
        it, and the decoder the targets (Transformer.forward)."""
        src, dec_in, labels, *context = batch
        hidden = self.model.forward(src, dec_in, *context, training=training, extras=extras)
        real = tf.not_equal(labels, data_load.PAD_ID)
        if self.hp.jit_compile:  # XLA needs static shapes: every position, PAD weighted 0
            hidden = tf.reshape(hidden, (-1, self.model.d_model))
            labels, weight = tf.reshape(labels, (-1,)), tf.cast(tf.reshape(real, (-1,)), tf.float32)
        else:  # logits only for the real target positions
            hidden, labels = tf.boolean_mask(hidden, real), tf.boolean_mask(labels, real)
            weight = tf.ones_like(labels, tf.float32)
        eps = self.hp.label_smoothing
        losses, nll, correct = optimization.cross_entropy_terms(
            self.model.logits(hidden), labels, eps
        )
        return StepStats(*[tf.reduce_sum(x * weight) for x in (losses, nll, weight, correct)])

    def apply_gradients(self, grads, loss):
        """The gradients' global norm; if it or the loss is a NaN or an Inf on any
        replica, no update anywhere (no weight, optimizer slot or step count changes, and
        the loss scale halves); else clipped to ``clip_norm`` (if set) and applied by Adam
        and the variant's optimizer groups. Returns (the global norm of the gradient
        summed over the replicas, skipped, scale_skip) as float32 scalars: scale_skip
        marks a skip that was the loss scale's normal overflow (not counted as a bad
        step)."""
        scale = self.loss_scale.factor()
        grads = self.sum_gradients(grads)
        norm = tf.linalg.global_norm(grads) / scale
        loss = tf.cast(loss, tf.float32)
        # all-reduced, so every replica skips the same updates
        bad = tf.cast(tf.logical_not(tf.math.is_finite(tf.stack([norm, loss]))), tf.float32)
        bad = self.sum_replicas(bad)
        finite = tf.equal(bad[0] + bad[1], 0.0)
        if self.hp.clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, self.hp.clip_norm * scale, norm * scale)
        self._update_or_skip(finite, list(grads), scale)
        skipped = 1.0 - tf.cast(finite, tf.float32)
        overflow = self.loss_scale.overflow(skipped, bad, scale)
        return norm, skipped - overflow, overflow

    def sum_gradients(self, grads) -> list:
        """The step's gradient: the sum of the replicas' gradients (None where a variable
        has none), on every replica; the gradients themselves on one device.

        It is the one all-reduce of the gradients in the step: the optimizers are told
        (``summed``) not to sum them again, so the global norm that the clip and the logs
        read costs no communication of its own. Clipping that sum by min(1, c / |g|) is
        the same as scaling every replica's share by that factor before the sum."""
        grads = list(grads)
        if self.replicas == 1:
            return grads
        present = [i for i, g in enumerate(grads) if g is not None]
        summed = self.sum_replicas([grads[i] for i in present])
        for i, g in zip(present, summed):
            grads[i] = g
        return grads

    def _update_or_skip(self, finite, grads, scale) -> None:
        """The update of every optimizer if ``finite`` (the same on every replica), else
        the loss scale's halving. With several replicas the condition is evaluated in
        cross-replica context, where the strategy updates variables through merge_call
        (a branch may not hold a merge_call in replica context)."""
        variables = self.model.trainable_variables

        def update(grads):
            pairs = list(zip(grads, variables))
            self.optimizer.apply_gradients([(g, v) for g, v in pairs if id(v) not in self.group_of])
            for name, optimizer in self.group_optimizers.items():
                group = [(g, v) for g, v in pairs if self.group_of.get(id(v)) == name]
                optimizer.apply_gradients([(g / scale, v) for g, v in group])  # unscaled here

        if tf.__internal__.distribute.strategy_supports_no_merge_call():
            tf.cond(finite, lambda: update(grads), self.loss_scale.halve)
            return

        def cross_replica(strategy, finite, grads):
            finite = strategy.experimental_local_results(finite)[0]  # equal on every replica
            tf.cond(
                finite,
                lambda: strategy.extended.call_for_each_replica(update, (grads,)),
                self.loss_scale.halve,
            )

        tf.distribute.get_replica_context().merge_call(cross_replica, args=(finite, grads))

    # -- a batch: one update, or one accumulation (accumulation.py) ----------------------
    def train_batch(self, *batch, stop: bool = False) -> tuple[StepStats, bool]:
        """Train on one batch (:meth:`batch_spec`): an update, or with accum_steps > 1 one
        accumulation that updates every accum_steps batches; each update moves the moving
        average (:meth:`updated`). Returns (stats, whether the weights were updated: not for
        an accumulation, nor for a skipped update)."""
        if self.accumulation:
            return self.accumulation.batch(*batch, stop=stop)
        stats = self.train_step(*batch, stop=stop)
        return stats, self.updated(stats)

    def updated(self, stats: StepStats) -> bool:
        """Whether the update of ``stats`` was applied; if so, the moving average (ema.py)
        follows it."""
        applied = not (stats.skipped or stats.scale_skip)
        if applied and self.ema:
            self.ema.update()
        return applied

    def flush(self) -> StepStats:
        """Apply a partial accumulation (at the end of an epoch): Accumulation.flush."""
        return self.accumulation.flush() if self.accumulation else NO_UPDATE

    def drop_partial(self) -> int:
        """Forget a partial accumulation (before a signal's checkpoint): the number of
        batches dropped (Accumulation.drop_partial)."""
        return self.accumulation.drop_partial() if self.accumulation else 0

    # -- what the dev evaluation scores ---------------------------------------------------
    def scored_weights(self):
        """The weights a dev evaluation scores, in the model for a ``with`` block: the
        moving average's with --ema_decay (ema.MovingAverage.applied), else the model's."""
        return self.ema.applied() if self.ema else contextlib.nullcontext()

    def dev_loss(self, corpus, batch_size: int) -> tuple[float, float]:
        """Per-token (label-smoothed loss, cross-entropy) on a dev corpus, no dropout."""
        fn = getattr(self, "_dev_fn", None)
        if fn is None:
            fn = self._dev_fn = fast_ops.function(
                lambda *batch: tf.stack(self.loss_sums(batch, False)[:4]),
                self.kernels,
                input_signature=self.batch_spec(),
            )
        order = np.argsort(corpus.src_lens, kind="stable")
        total = np.zeros(4)
        (depth, target_depth), hp = data_load.context_depths(self.hp), self.hp
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = data_load.build_batch(
                corpus, idx, 1, 0, depth, hp.maxlen1, target_depth, hp.maxlen2
            )
            with devices.out_of_memory(self.hp, "a dev batch", batch[0].shape, batch[1].shape):
                total += fn(*batch).numpy()
        return total[0] / max(total[2], 1), total[1] / max(total[2], 1)


class Health:
    """Skipped updates of a run: each NaN/Inf skip is counted (train/skipped_steps, also
    in the checkpoint) and reported; ``max_bad_steps`` of them in a row stop the run with
    a UserError naming the likely causes, without a new checkpoint (the last one holds the
    last good weights). Loss-scale overflow skips (mixed_float16) are normal: not counted."""

    def __init__(self, hp: hparams.Hparams, trainer: Trainer, writer):
        self.hp, self.trainer, self.writer, self.in_a_row = hp, trainer, writer, 0

    def after(self, stats: StepStats, updated: bool) -> None:
        trainer, state, hp = self.trainer, self.trainer.state, self.hp
        if updated:
            self.in_a_row = 0
        if not stats.skipped:
            return
        state.skipped_steps.assign_add(1)
        self.in_a_row += 1
        step, batch = trainer.step, int(state.batch_in_epoch)
        tqdm.write(
            f"train: a NaN or Inf loss or gradient after step {step} (epoch "
            f"{int(state.epoch) + 1}, batch {batch}): update skipped "
            f"({self.in_a_row} in a row)",
            file=sys.stderr,
        )
        with summaries.summaries_at(self.writer, step, hp, state.unsaved()):
            summaries.skipped_updates(int(state.skipped_steps), trainer.loss_scale.value())
        if hp.max_bad_steps and self.in_a_row >= hp.max_bad_steps:
            raise UserError(
                f"{self.in_a_row} updates in a row after step {step} had a NaN or Inf loss or "
                f"gradient and were skipped (max_bad_steps={hp.max_bad_steps}); likely causes: "
                f"a learning rate too high (--lr, --warmup_steps), float16 overflow (--precision "
                f"float32 or mixed_bfloat16), or bad data (epoch {int(state.epoch) + 1}, "
                f"batches {batch - self.in_a_row + 1}-{batch}); the last good checkpoint "
                f"{state.latest_checkpoint} is kept"
            )
