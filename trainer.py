"""The Trainer of a run: the model, its optimizers and checkpoint, and the compiled train
step (forward, label-smoothed loss 5.4, gradients, the replicas' sum, clipping, Adam 5.3);
the dev set it is scored on (:class:`Dev`) and the watch on skipped updates
(:class:`Health`). train.py runs the loop around it.

A batch goes: TrainData.dataset -> Trainer.train_batch -> Trainer.train_step -> StepStats.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

import checkpoints
import data_load
import devices
import ema
import fast_ops
import files
import hparams
import optimization
import summaries
from devices import LossScale
from hparams import UserError
from model import Transformer
from translator import Translator


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


def deal_rows(strategy, *batch):
    """With several replicas, the rows of each (N, T) tensor dealt out among them (row i
    to replica i mod replicas) as per-replica values; else the batch unchanged."""
    n = strategy.num_replicas_in_sync
    if n == 1:
        return batch
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: tuple(x[ctx.replica_id_in_sync_group :: n] for x in batch)
    )


class Trainer:
    """Model, optimizers, checkpoints and the compiled train step of one run."""

    def __init__(self, hp: hparams.Hparams, tok, strategy, precision: str):
        self.hp, self.tok, self.strategy = hp, tok, strategy
        self.replicas = strategy.num_replicas_in_sync
        self.multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        with strategy.scope():
            self.model = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
            self._build_optimizers(loss_scaling=precision == "mixed_float16")
        self.ema = None  # the weights' moving average (ema.py), with --ema_decay
        if hp.ema_decay > 0:
            self.ema = ema.MovingAverage(
                self.model.trainable_variables, hp.ema_decay, self.optimizer.iterations
            )
        self._build_checkpoints()
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
        groups = model.variant.optimizer_groups(model, hp)
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

    # items a checkpoint written before they existed lacks (restored when present)
    OPTIONAL_ITEMS = (
        "dropout_rng",
        "skipped_steps",
        "budget_used",
        "seconds",
        "eval_seconds",
        "ema",
    )

    def _build_checkpoints(self) -> None:
        """The checkpoint holds the model, the optimizers, the position in the data and
        the dropout layers' random state (so that a resumed run draws the masks the
        uninterrupted run would have drawn). Multi-worker: every worker takes part in a
        save (the variables may need a collective read), but only the chief writes into
        logdir; the others write to a private temporary folder that is deleted right
        after (see save())."""
        hp = self.hp
        # host-side counters, outside the strategy scope: every worker keeps the same ones
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.batch_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch_in_epoch")
        self.best_bleu = tf.Variable(-1.0, dtype=tf.float32, trainable=False)
        self.bad_epochs = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
        # the budget: the fraction used (read by the wsd/linear schedules, never falls), the
        # run's wall time and the part of it spent on dev evaluation, over all resumes
        self.budget_used = tf.Variable(0.0, trainable=False, name="budget_used")
        for schedule in [self.schedule, *self.schedules.values()]:
            schedule.progress = self.budget_used
        self.seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self.eval_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self.clock = time.time()  # when this process's share of ``seconds`` began
        # each keras Dropout layer's SeedGenerator state (2,) int64, in construction order
        self.rng_states = [v for v in self.model.variables if v.name == "seed_generator_state"]
        groups = {f"{name}_optimizer": opt for name, opt in self.group_optimizers.items()}
        self.items = dict(
            model=self.model,
            optimizer=self.optimizer,
            epoch=self.epoch,
            batch_in_epoch=self.batch_in_epoch,
            best_bleu=self.best_bleu,
            bad_epochs=self.bad_epochs,
            skipped_steps=self.skipped_steps,
            budget_used=self.budget_used,
            seconds=self.seconds,
            eval_seconds=self.eval_seconds,
            dropout_rng=[v.value for v in self.rng_states],
            **groups,
        )
        if self.ema:
            self.items["ema"] = self.ema.shadows
        self.ckpt = tf.train.Checkpoint(**self.items)
        self.chief = devices.is_chief(self.strategy)
        self.last_saved = None  # the chief's path of this run's newest checkpoint
        target = hp.logdir
        if not self.chief:
            target = os.path.join(
                hp.logdir, f".worker-{self.strategy.cluster_resolver.task_id}-tmp"
            )
        self.manager = tf.train.CheckpointManager(self.ckpt, target, hp.keep_ckpts)
        self.best = tf.train.CheckpointManager(self.ckpt, os.path.join(target, "best"), 1)

    def _build_steps(self) -> None:
        """Compile the train step (and the accumulation steps when accum_steps > 1)."""
        hp = self.hp
        # one trace for every batch shape (several replicas get per-replica values instead);
        # no autograph: the step has no Python control flow on tensors, and converting its
        # code took half the time of tracing it
        self._step = self._distributed(self._distributed_step)
        # XLA: the whole step on one replica; on several, the gradients alone (gradients())
        self._compiled, self._gradients = self._replica_step, self.gradients
        if hp.jit_compile and self.replicas == 1:
            self._compiled = fast_ops.xla_function(self._replica_step)
        elif hp.jit_compile:
            self._gradients = fast_ops.xla_function(self.gradients)
        # gradient accumulation: accum_steps batches make one update; updates happen only
        # on batch boundaries so checkpoints never hold a partial sum. With several
        # replicas each keeps its own sums (ON_READ variables: a replica reads and adds to
        # its copy) and the update sums them across the replicas, as for one batch
        self.pending = 0
        if hp.accum_steps > 1:
            local = tf.VariableSynchronization.ON_READ
            if self.replicas == 1:
                local = tf.VariableSynchronization.AUTO  # a plain variable

            def local_sum(shape, dtype=tf.float32):
                return tf.Variable(tf.zeros(shape, dtype), trainable=False, synchronization=local)

            with self.strategy.scope():
                self.accum = [local_sum(v.shape, v.dtype) for v in self.model.trainable_variables]
                self.accum_tokens, self.accum_loss = local_sum([]), local_sum([])
            accumulate = self._accumulate
            if hp.jit_compile:
                accumulate = fast_ops.xla_function(self._accumulate)
            self._accumulate_fn = self._distributed(lambda *b: self._summed(accumulate, b))
            self._apply_fn = tf.function(
                lambda: self._summed(self._apply_accumulated, ()), autograph=False
            )
            self._clear_fn = tf.function(
                lambda: self.strategy.run(self._clear_accumulators), autograph=False
            )

    def _distributed(self, fn):
        """tf.function of ``fn(*batch, stop)``: one trace for every batch shape on one
        replica; on several, per-replica values (deal_rows) retraced as little as may be."""
        if self.replicas > 1:
            return tf.function(fn, reduce_retracing=True, autograph=False)
        spec = self.batch_spec() + [tf.TensorSpec([], tf.float32)]
        return tf.function(fn, input_signature=spec, autograph=False)

    def _summed(self, fn, args):
        """``fn(*args)`` on every replica, its tuple of scalars summed over the replicas."""
        stacked = self.strategy.run(lambda *a: tf.stack(fn(*a)), args)
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
        total = StepStats(*tf.unstack(self._summed(self._compiled, batch_and_stop)))
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
        tokens = self._sum_replicas(tf.reduce_sum(real))  # the whole batch's target tokens
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
            loss += self.model.variant.extra_loss(self.model, extras) / self.replicas
            scaled = self.loss_scale.scale(loss)
        return sums, loss, tape.gradient(scaled, self.model.trainable_variables)

    def _sum_replicas(self, x):
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
        bad = self._sum_replicas(bad)
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
        summed = self._sum_replicas([grads[i] for i in present])
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

    # -- gradient accumulation ------------------------------------------------------------
    def train_batch(self, *batch, stop: bool = False) -> tuple[StepStats, bool]:
        """Train on one batch (:meth:`batch_spec`): an update, or with accum_steps > 1 one
        accumulation that updates every accum_steps batches; each update moves the moving
        average (:meth:`updated`). Returns (stats, whether the weights were updated: not for
        an accumulation, nor for a skipped update)."""
        if self.hp.accum_steps <= 1:
            stats = self.train_step(*batch, stop=stop)
            return stats, self.updated(stats)
        if self.pending == 0:  # where drop_partial() returns to
            self.rng_at_update = [v.numpy() for v in self.rng_states]
        batch = deal_rows(self.strategy, *batch)
        stats = StepStats(
            *(float(x) for x in self._accumulate_fn(*batch, tf.constant(float(stop))))
        )
        self.pending += 1
        if self.pending < self.hp.accum_steps:
            return stats, False
        update = self.flush()
        stats = stats._replace(
            grad_norm=update.grad_norm, skipped=update.skipped, scale_skip=update.scale_skip
        )
        return stats, not (update.skipped or update.scale_skip)  # flush() moved the EMA

    def updated(self, stats: StepStats) -> bool:
        """Whether the update of ``stats`` was applied; if so, the moving average (ema.py)
        follows it."""
        applied = not (stats.skipped or stats.scale_skip)
        if applied and self.ema:
            self.ema.update()
        return applied

    def _accumulate(self, *batch_and_stop) -> StepStats:
        """Add this replica's rows' gradients of the summed loss to its accumulators;
        their StepStats, with ``stop`` as in :meth:`_replica_step`."""
        *batch, stop = batch_and_stop
        with tf.GradientTape() as tape:
            extras = {}
            sums = self.loss_sums(batch, training=True, extras=extras)
            # divided by the token budget so that float16 gradients keep the magnitude
            # of a per-token mean (the update divides by the real token count)
            per_budget = sums.loss_sum / float(self.hp.tokens_per_batch)
            # the variant's term, weighted by the batch's tokens: once per update in all
            extra = self.model.variant.extra_loss(self.model, extras) * sums.tokens
            per_budget += extra / float(self.hp.tokens_per_batch)
            scaled = self.loss_scale.scale(per_budget)
        grads = tape.gradient(scaled, self.model.trainable_variables)
        for acc, grad in zip(self.accum, grads):
            acc.assign_add(tf.convert_to_tensor(grad))
        self.accum_tokens.assign_add(sums.tokens)
        self.accum_loss.assign_add(per_budget)
        return sums._replace(stop=stop)

    def _apply_accumulated(self):
        """One update with the accumulated gradients (summed over the replicas in
        apply_gradients) over all their target tokens: (grad norm, skipped, scale_skip)
        divided by the replicas, for the sum over them that follows."""
        tokens = self._sum_replicas(self.accum_tokens.read_value())
        tokens = tf.maximum(tokens, 1.0) / float(self.hp.tokens_per_batch)
        grads = [acc.read_value() / tokens for acc in self.accum]
        result = self.apply_gradients(grads, self.accum_loss.read_value())
        with tf.control_dependencies(result):
            self._clear_accumulators()
        return tuple(x / float(self.replicas) for x in result)

    def _clear_accumulators(self) -> None:
        for acc in self.accum:
            acc.assign(tf.zeros_like(acc))
        self.accum_tokens.assign(0.0)
        self.accum_loss.assign(0.0)

    def flush(self) -> StepStats:
        """Apply a partial accumulation (at the end of an epoch); its update's StepStats
        (grad_norm, skipped, scale_skip; all 0 when nothing was pending)."""
        if not self.pending:
            return StepStats(0.0, 0.0, 0.0, 0.0)
        self.pending = 0
        norm, skipped, scale_skip = (float(x) for x in self._apply_fn())
        stats = StepStats(0.0, 0.0, 0.0, 0.0, norm, skipped, scale_skip)
        self.updated(stats)
        return stats

    def drop_partial(self) -> int:
        """Forget a partial accumulation (before an interrupted run's checkpoint): the
        data position and the dropout random state go back to the last update, so that
        a resumed run trains those batches again as the uninterrupted run would have.
        Returns the number of batches dropped."""
        dropped, self.pending = self.pending, 0
        if dropped:
            self._clear_fn()
            self.batch_in_epoch.assign_add(-dropped)
            for v, value in zip(self.rng_states, self.rng_at_update):
                v.assign(value)
        return dropped

    # -- checkpoints and the dev loss -----------------------------------------------------
    @property
    def position(self) -> tuple[int, int, int]:
        """(step, epoch, batch in epoch): what a checkpoint saved now would resume at."""
        return self.step, int(self.epoch), int(self.batch_in_epoch)

    def save(self, best: bool = False) -> str:
        """Checkpoint at the current step (into logdir/best too when ``best``, first, so
        that a run stopped between the two resumes from a checkpoint that agrees with
        best/); returns the chief's path. Non-chief workers save to their temporary
        folder and delete it. A full disk is one UserError line naming the checkpoint and
        the steps lost (:meth:`unsaved`); the previous checkpoints stay intact."""
        self.seconds.assign(self.seconds_used())
        self.clock = time.time()
        lost = self.unsaved()
        optimizers = [self.adam, *self.group_optimizers.values()]
        state = self.model.weights + [v for o in optimizers for v in o.variables]
        checkpoints.refuse_nonfinite(
            state + (self.ema.shadows if self.ema else []), self.step, lost
        )
        managers = ([self.best] if best else []) + [self.manager]
        try:
            for manager in managers:
                target = os.path.join(manager.directory, f"ckpt-{self.step}")
                with files.reporting(target, lost):
                    path = manager.save(checkpoint_number=self.step)
        except UserError:
            checkpoints.remove_partial_checkpoints(self.manager.directory)
            raise
        if not self.chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
            path = os.path.join(self.hp.logdir, os.path.basename(path))
        elif best and self.ema:  # the best EMA weights, as a model a decoder loads
            with self.ema.applied():
                checkpoints.write_model(self.model, self.ema_model_path(), lost)
        self.last_saved = path
        return path

    def unsaved(self) -> str:
        """What a run that stops now loses: the steps since logdir's newest checkpoint,
        from which the same command resumes (said in a failed write's line)."""
        last = self.latest_checkpoint
        saved = int(last.rsplit("-", 1)[1]) if last else 0  # <logdir>/ckpt-<step>
        n = self.step - saved
        if n <= 0:
            if last:
                return f"nothing trained is lost: checkpoint {last} (step {saved}) is intact"
            return "nothing is lost (no step was trained yet)"
        steps, are = f"the {n} step{'s' * (n > 1)}", "are" if n > 1 else "is"
        if not last:
            return f"{steps} trained so far {are} lost (no checkpoint yet)"
        return (
            f"{steps} since checkpoint {last} (step {saved}) {are} lost (a rerun resumes from it)"
        )

    def ema_model_path(self, step: int | None = None) -> str:
        """<logdir>/ema/ema-<step>: the EMA weights of the best checkpoint (step: now's)."""
        return os.path.join(self.hp.logdir, "ema", f"ema-{self.step if step is None else step}")

    def scored_weights(self):
        """The weights a dev evaluation scores, in the model for a ``with`` block: the
        moving average's with --ema_decay (ema.MovingAverage.applied), else the model's."""
        return self.ema.applied() if self.ema else contextlib.nullcontext()

    def seconds_used(self) -> float:
        """Wall time of the run so far, over all its resumes (checkpointed)."""
        return float(self.seconds) + time.time() - self.clock

    @property
    def latest_checkpoint(self):
        """The newest checkpoint in logdir (the chief's, for every worker)."""
        return tf.train.latest_checkpoint(self.hp.logdir)

    def restore(self, ckpt: str = "") -> bool:
        """Restore ``ckpt``, or else the newest checkpoint in logdir (if any). A damaged
        checkpoint is one UserError line naming the file and the previous checkpoint."""
        path = ckpt or self.latest_checkpoint
        if not path:
            return False
        present = checkpoints.checkpoint_items(path)
        optional = self.OPTIONAL_ITEMS
        items = {k: v for k, v in self.items.items() if k in present or k not in optional}
        checkpoints.restore_checkpoint(
            tf.train.Checkpoint(**items),
            path,
            "was it written with another --precision? resume with the same settings or use a "
            "new --logdir",
            partial=False,
        )
        self.clock = time.time()
        print(
            f"train: resumed from {path} at step {self.step}, epoch {int(self.epoch) + 1}, "
            f"batch {int(self.batch_in_epoch)}"
        )
        if self.ema and "ema" not in present:
            self.ema.reset()
            print(f"train: {path} holds no moving average of the weights: it starts from them")
        if "dropout_rng" not in present and self.rng_states:
            print(f"train: {path} holds no dropout random state (an older checkpoint): fresh masks")
        return True

    def agree(self, flag: bool) -> bool:
        """``flag`` of any worker (one small all-reduce in a multi-worker run)."""
        return self._sum(float(flag)) > 0

    def chief_value(self, value: float) -> float:
        """The chief's ``value``, on every worker (one small all-reduce in a multi-worker
        run; the value itself elsewhere): e.g. its clock, which the lr follows."""
        return self._sum(value if self.chief else 0.0)

    def _sum(self, value: float) -> float:
        if not self.multi_worker:
            return value
        fn = getattr(self, "_sum_fn", None)
        if fn is None:
            strategy = self.strategy
            fn = self._sum_fn = tf.function(
                lambda x: strategy.reduce("SUM", strategy.run(tf.identity, (x,)), axis=None),
                autograph=False,
            )
        return float(fn(tf.constant(value)))

    def dev_loss(self, corpus, batch_size: int) -> tuple[float, float]:
        """Per-token (label-smoothed loss, cross-entropy) on a dev corpus, no dropout."""
        fn = getattr(self, "_dev_fn", None)
        if fn is None:
            fn = self._dev_fn = tf.function(
                lambda *batch: tf.stack(self.loss_sums(batch, False)[:4]),
                input_signature=self.batch_spec(),
                autograph=False,
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


class Dev:
    """The dev set of a run: the encoded corpus (dev loss, all of it) and the raw
    sentences decoded for dev BLEU (a fixed subset: the first ``dev_bleu_sents``).

    ``max_len``: one length limit for the whole subset, its longest reference (in target
    tokens) + 10, so that an untrained model's runaway outputs stop there rather than at
    each source's length + max_len_extra."""

    def __init__(self, hp: hparams.Hparams, tok=None):
        self.corpus = data_load.load_corpus(hp, "dev")
        src, ref = data_load.read_raw(hp, "dev")
        n = len(src) if hp.dev_bleu_sents <= 0 else min(hp.dev_bleu_sents, len(src))
        self.src, self.ref = src[:n], ref[:n]
        self.docs = self.corpus.docs[:n]  # a memory model reads them in document order
        self.max_len = 0
        if tok is not None and self.ref:
            self.max_len = max(len(ids) for ids in tok.encode_tgt(self.ref)) + 10

    def translator(self, model, tok, hp: hparams.Hparams) -> Translator:
        """The run's decoding settings under the subset's length limit."""
        limit = min(hp.max_len, self.max_len) if hp.max_len else self.max_len
        return Translator(model, tok, hparams.apply(hp, {"max_len": limit}))


class Health:
    """Skipped updates of a run: each NaN/Inf skip is counted (train/skipped_steps, also
    in the checkpoint) and reported; ``max_bad_steps`` of them in a row stop the run with
    a UserError naming the likely causes, without a new checkpoint (the last one holds the
    last good weights). Loss-scale overflow skips (mixed_float16) are normal: not counted."""

    def __init__(self, hp: hparams.Hparams, trainer: Trainer, writer):
        self.hp, self.trainer, self.writer, self.in_a_row = hp, trainer, writer, 0

    def after(self, stats: StepStats, updated: bool) -> None:
        trainer, hp = self.trainer, self.hp
        if updated:
            self.in_a_row = 0
        if not stats.skipped:
            return
        trainer.skipped_steps.assign_add(1)
        self.in_a_row += 1
        step, batch = trainer.step, int(trainer.batch_in_epoch)
        tqdm.write(
            f"train: a NaN or Inf loss or gradient after step {step} (epoch "
            f"{int(trainer.epoch) + 1}, batch {batch}): update skipped "
            f"({self.in_a_row} in a row)",
            file=sys.stderr,
        )
        with summaries.summaries_at(self.writer, step, hp, trainer.unsaved()):
            summaries.skipped_updates(int(trainer.skipped_steps), trainer.loss_scale.value())
        if hp.max_bad_steps and self.in_a_row >= hp.max_bad_steps:
            raise UserError(
                f"{self.in_a_row} updates in a row after step {step} had a NaN or Inf loss or "
                f"gradient and were skipped (max_bad_steps={hp.max_bad_steps}); likely causes: "
                f"a learning rate too high (--lr, --warmup_steps), float16 overflow (--precision "
                f"float32 or mixed_bfloat16), or bad data (epoch {int(trainer.epoch) + 1}, "
                f"batches {batch - self.in_a_row + 1}-{batch}); the last good checkpoint "
                f"{trainer.latest_checkpoint} is kept"
            )
