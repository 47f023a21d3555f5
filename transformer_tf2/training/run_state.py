"""The state of a training run that its checkpoints hold, and their writing and reading.

Besides the model, its optimizers and the weights' moving average (built by the Trainer),
a checkpoint holds the run's host-side counters: the position in the data (epoch, batch in
the epoch), the dev record that the best checkpoint and early stopping follow (best dev
BLEU, epochs without a better one), the skipped updates, the budget's clock (the fraction
used, which the wsd and linear schedules read; the run's wall time and its share spent on
dev evaluation, over all resumes) and each dropout layer's random state, so that a resumed
run draws the masks that the uninterrupted run would have drawn.

:class:`RunState` keeps them and the two checkpoint managers, ``<logdir>`` (the last
``keep_ckpts``) and ``<logdir>/best`` (the best by dev BLEU). Multi-worker: every worker
takes part in a save (the variables may need a collective read), but only the chief writes
into logdir; the others write to a private temporary folder that is deleted right after.
"""

from __future__ import annotations

import os
import shutil
import time

import tensorflow as tf

from transformer_tf2.config import hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.models import checkpoints
from transformer_tf2.utils import devices, files


class RunState:
    """The checkpointed state of a run (module docstring).

    ``model``, ``optimizer`` (the one whose ``iterations`` count the steps) and
    ``group_optimizers`` ({name: optimizer} of the model variant's groups) are saved with
    the counters; ``ema`` (ema.MovingAverage or None) too, and its weights at each best
    checkpoint as a model of their own. ``must_be_finite``: the variables a save checks
    first (checkpoints.refuse_nonfinite)."""

    # items a checkpoint written before they existed lacks (restored when present)
    OPTIONAL_ITEMS = (
        "dropout_rng",
        "skipped_steps",
        "budget_used",
        "seconds",
        "eval_seconds",
        "ema",
    )

    def __init__(
        self, hp: hparams.Hparams, strategy, model, optimizer, group_optimizers, ema, must_be_finite
    ):
        self.hp, self.model, self.ema = hp, model, ema
        self.iterations, self.must_be_finite = optimizer.iterations, list(must_be_finite)
        # host-side counters, outside the strategy scope: every worker keeps the same ones
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.batch_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch_in_epoch")
        self.best_bleu = tf.Variable(-1.0, dtype=tf.float32, trainable=False)
        self.bad_epochs = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.budget_used = tf.Variable(0.0, trainable=False, name="budget_used")
        self.seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self.eval_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self.clock = time.time()  # when this process's share of ``seconds`` began
        # each keras Dropout layer's SeedGenerator state (2,) int64, in construction order
        self.rng_states = [v for v in model.variables if v.name == "seed_generator_state"]
        groups = {f"{name}_optimizer": opt for name, opt in group_optimizers.items()}
        counters = ("epoch", "batch_in_epoch", "best_bleu", "bad_epochs", "skipped_steps")
        clock = ("budget_used", "seconds", "eval_seconds")
        self.items = dict(
            model=model,
            optimizer=optimizer,
            **{name: getattr(self, name) for name in counters + clock},
            dropout_rng=[v.value for v in self.rng_states],
            **groups,
        )
        if ema:
            self.items["ema"] = ema.shadows
        self.ckpt = tf.train.Checkpoint(**self.items)
        self.chief = devices.is_chief(strategy)
        self.last_saved = None  # the chief's path of this run's newest checkpoint
        target = hp.logdir
        if not self.chief:
            target = os.path.join(hp.logdir, f".worker-{strategy.cluster_resolver.task_id}-tmp")
        self.manager = tf.train.CheckpointManager(self.ckpt, target, hp.keep_ckpts)
        self.best = tf.train.CheckpointManager(self.ckpt, os.path.join(target, "best"), 1)

    @property
    def step(self) -> int:
        return int(self.iterations.numpy())

    @property
    def position(self) -> tuple[int, int, int]:
        """(step, epoch, batch in epoch): what a checkpoint saved now would resume at."""
        return self.step, int(self.epoch), int(self.batch_in_epoch)

    def save(self, best: bool = False) -> str:
        """Checkpoint at the current step (into logdir/best too when ``best``, first, so
        that a run stopped between the two resumes from a checkpoint that agrees with
        best/); returns the chief's path. Non-chief workers save to their temporary
        folder and delete it. A full disk is one UserError line naming the checkpoint and
        the steps lost (:meth:`unsaved`); the previous checkpoints stay intact. A NaN or
        an Inf in ``must_be_finite`` writes nothing (checkpoints.refuse_nonfinite)."""
        self.seconds.assign(self.seconds_used())
        self.clock = time.time()
        lost, step = self.unsaved(), self.step
        shadows = self.ema.shadows if self.ema else []
        checkpoints.refuse_nonfinite(self.must_be_finite + shadows, step, lost)
        managers = ([self.best] if best else []) + [self.manager]
        try:
            for manager in managers:
                target = os.path.join(manager.directory, f"ckpt-{step}")
                with files.reporting(target, lost):
                    path = manager.save(checkpoint_number=step)
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
