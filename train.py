"""Train the Transformer: Adam + the Noam schedule + label smoothing (paper section 5).

    python train.py                          # the demo preset
    python train.py --preset multi30k --max_minutes 30
    tensorboard --logdir log/

Checkpoints (tf.train.CheckpointManager) go to ``logdir``; a run resumes automatically from
the latest one with the same step, optimizer state, lr schedule and data position. After
each epoch the dev set is scored (loss, greedy BLEU), its translations are written to
``evaldir``, and the best checkpoint by dev BLEU is kept in ``logdir/best``.

A batch goes: TrainData.dataset -> Trainer.train_batch -> Trainer.train_step (compiled:
forward, label-smoothed loss, gradients, clipping, Adam) -> StepStats -> Window -> logs.
"""

from __future__ import annotations

import cli
import hparams

SCRIPT = cli.Script(
    "train",
    __doc__,
    fields=("data", "vocabulary", "batching", "model", "training", "decoding"),
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import os
import shutil
import sys
import time
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

import data_load
import decoding
import devices
import files
import modules
import summaries
from hparams import UserError
from model import Transformer

LOG_EVERY = 50  # steps between TensorBoard scalar summaries


class StepStats(NamedTuple):
    """What one batch reports, summed over its target tokens (and over the replicas)."""

    loss_sum: float  # label-smoothed cross-entropy
    nll_sum: float  # plain cross-entropy
    tokens: float  # non-PAD target tokens
    correct: float  # tokens whose label has the largest logit
    grad_norm: float = 0.0  # global gradient norm of the update (0 without an update)


class Window:
    """Sums of the StepStats since the last log, and the time they took."""

    def __init__(self):
        self.sums, self.start = np.zeros(4), time.time()

    def add(self, stats: StepStats) -> None:
        self.sums += stats[:4]

    def means(self) -> dict:
        loss, nll, tokens, correct = self.sums
        n = max(tokens, 1.0)
        return {
            "loss": loss / n,
            "nll": nll / n,
            "accuracy": correct / n,
            "tokens_per_sec": tokens / max(time.time() - self.start, 1e-9),
        }


def deal_rows(strategy, *batch):
    """With several replicas, the rows of each (N, T) tensor dealt out among them (row i
    to replica i mod replicas) as per-replica values; else the batch unchanged."""
    n = strategy.num_replicas_in_sync
    if n == 1:
        return batch
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: tuple(x[ctx.replica_id_in_sync_group :: n] for x in batch)
    )


def apply_where(condition, optimizer, grads_and_vars) -> None:
    """``optimizer.apply_gradients(grads_and_vars)`` where the scalar bool ``condition``
    holds; otherwise nothing moves (variables, slots, step counter). Called in a replica
    context; with several replicas the condition is taken in the cross-replica context,
    as Keras' LossScaleOptimizer does, because the update itself calls merge_call."""
    grads, variables = [g for g, _ in grads_and_vars], [v for _, v in grads_and_vars]

    def update(grads, variables):
        optimizer.apply_gradients(zip(grads, variables))

    if tf.__internal__.distribute.strategy_supports_no_merge_call():
        tf.cond(condition, lambda: update(grads, variables), lambda: None)
        return

    def cross_replica(strategy, condition, grads, variables):
        def apply():
            strategy.extended.call_for_each_replica(update, args=(grads, variables))

        tf.cond(strategy.experimental_local_results(condition)[0], apply, lambda: None)

    tf.distribute.get_replica_context().merge_call(
        cross_replica, args=(condition, grads, variables)
    )


def check_logdir(hp: hparams.Hparams) -> None:
    """A logdir holding a run with another model shape, another batch plan or another
    vocabulary cannot be resumed."""
    path = os.path.join(hp.logdir, "hparams.json")
    if os.path.exists(path):
        hparams.check_same(
            hparams.load(path),
            hp,
            hparams.MODEL_KEYS + hparams.RESUME_KEYS,
            f"the checkpoint in {hp.logdir}",
            "pass a new --logdir, or the same settings to resume it",
        )
    data_load.check_vocab_fingerprint(hp)


class Trainer:
    """Model, optimizers, checkpoints and the compiled train step of one run."""

    def __init__(self, hp: hparams.Hparams, tok, strategy, precision: str):
        self.hp, self.tok, self.strategy = hp, tok, strategy
        self.loss_scaling = precision == "mixed_float16"
        self.replicas = strategy.num_replicas_in_sync
        with strategy.scope():
            self.model = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
            self._build_optimizers()
        self._build_checkpoints()
        self._build_steps()

    def _build_optimizers(self) -> None:
        """Adam with the run's schedule (5.3) for the model's variables, and one more Adam
        per optimizer group of the model variant (the Weighted Transformer's kappa and
        alpha) with that group's schedule."""
        hp, model = self.hp, self.model
        adam = dict(beta_1=hp.adam_beta1, beta_2=hp.adam_beta2, epsilon=hp.adam_epsilon)
        self.schedule = modules.TransformerSchedule(
            hp.lr_schedule, hp.d_model, hp.warmup_steps, hp.lr
        )
        self.optimizer = keras.optimizers.Adam(self.schedule, **adam)
        if self.loss_scaling:
            self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
        groups = model.variant.optimizer_groups(model, hp)
        self.schedules = {name: schedule for name, (_, schedule) in groups.items()}
        self.group_of = {id(v): name for name, (vs, _) in groups.items() for v in vs}
        self.group_optimizers = {}
        for name, (variables, schedule) in groups.items():
            self.group_optimizers[name] = keras.optimizers.Adam(schedule, **adam)
            self.group_optimizers[name].build(variables)
        main = [v for v in model.trainable_variables if id(v) not in self.group_of]
        self.optimizer.build(main)

    def _build_checkpoints(self) -> None:
        """The checkpoint holds the model, the optimizers and the position in the data.
        Multi-worker: every worker takes part in a save (the variables may need a
        collective read), but only the chief writes into logdir; the others write to a
        private temporary folder that is deleted right after (see save())."""
        hp = self.hp
        # host-side counters, outside the strategy scope: every worker keeps the same ones
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.batch_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch_in_epoch")
        self.best_bleu = tf.Variable(-1.0, dtype=tf.float32, trainable=False)
        self.bad_epochs = tf.Variable(0, dtype=tf.int64, trainable=False)
        groups = {f"{name}_optimizer": opt for name, opt in self.group_optimizers.items()}
        self.ckpt = tf.train.Checkpoint(
            model=self.model,
            optimizer=self.optimizer,
            epoch=self.epoch,
            batch_in_epoch=self.batch_in_epoch,
            best_bleu=self.best_bleu,
            bad_epochs=self.bad_epochs,
            **groups,
        )
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
        spec = [tf.TensorSpec([None, None], tf.int32)] * 3
        # one trace for every batch shape (several replicas get per-replica values instead)
        if self.replicas == 1:
            self._step = tf.function(self._distributed_step, input_signature=spec)
        else:
            self._step = tf.function(self._distributed_step, reduce_retracing=True)
        self._compiled = (
            tf.function(self._replica_step, jit_compile=True)
            if hp.jit_compile
            else self._replica_step
        )
        # gradient accumulation (single replica): accum_steps batches make one update;
        # updates happen only on batch boundaries so checkpoints never hold a partial sum
        self.pending = 0
        if hp.accum_steps > 1:
            if self.replicas > 1:
                raise UserError(
                    "accum_steps > 1 works on one device only for now; "
                    "raise tokens_per_batch instead"
                )
            self.accum = [
                tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False)
                for v in self.model.trainable_variables
            ]
            self.accum_tokens = tf.Variable(0.0, trainable=False)
            self._accumulate_fn = tf.function(
                self._accumulate, input_signature=spec, jit_compile=hp.jit_compile
            )
            self._apply_fn = tf.function(self._apply_accumulated)

    @property
    def step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    # -- the update: batch -> loss -> gradients -> Adam -------------------------------------
    def train_step(self, src, dec_in, labels) -> StepStats:
        """One update on one batch (N, T) x 3; its StepStats as numbers."""
        batch = deal_rows(self.strategy, src, dec_in, labels)
        return StepStats(*(float(x) for x in self._step(*batch)))

    def _distributed_step(self, src, dec_in, labels) -> StepStats:
        """The replicas' StepStats summed in one all-reduce of a stacked vector."""
        stacked = self.strategy.run(lambda *b: tf.stack(self._compiled(*b)), (src, dec_in, labels))
        total = StepStats(*tf.unstack(self.strategy.reduce("SUM", stacked, axis=None)))
        return total._replace(grad_norm=total.grad_norm / self.replicas)  # their mean

    def _replica_step(self, src, dec_in, labels) -> StepStats:
        """One replica's share: its loss over the global number of target tokens, so that
        the replicas' summed gradients are the single-device gradient."""
        ctx = tf.distribute.get_replica_context()
        with tf.GradientTape() as tape:
            sums = self.loss_sums(src, dec_in, labels, training=True)
            global_tokens = ctx.all_reduce("sum", sums.tokens) if ctx else sums.tokens
            loss = sums.loss_sum / tf.maximum(global_tokens, 1.0)
            loss += self.model.variant.extra_loss(self.model) / self.replicas  # once in all
            scaled = self.optimizer.scale_loss(loss) if self.loss_scaling else loss
        grads = tape.gradient(scaled, self.model.trainable_variables)
        return sums._replace(grad_norm=self.apply_gradients(grads))

    def loss_sums(self, src, dec_in, labels, training) -> StepStats:
        """Label-smoothed loss (5.4), cross-entropy and correct tokens summed over the
        non-PAD targets, and their count."""
        memory, mask = self.model.encode(src, training=training)
        hidden = self.model.decode(dec_in, memory, mask, training=training)  # (N, T2, d)
        real = tf.not_equal(labels, data_load.PAD_ID)
        if self.hp.jit_compile:  # XLA needs static shapes: every position, PAD weighted 0
            hidden = tf.reshape(hidden, (-1, self.model.d_model))
            labels, weight = tf.reshape(labels, (-1,)), tf.cast(tf.reshape(real, (-1,)), tf.float32)
        else:  # logits only for the real target positions
            hidden, labels = tf.boolean_mask(hidden, real), tf.boolean_mask(labels, real)
            weight = tf.ones_like(labels, tf.float32)
        eps = self.hp.label_smoothing
        losses, nll, correct = modules.cross_entropy_terms(self.model.logits(hidden), labels, eps)
        return StepStats(*[tf.reduce_sum(x * weight) for x in (losses, nll, weight, correct)])

    def apply_gradients(self, grads):
        """Clip (optional) and apply the gradients (loss-scaled under mixed_float16; the
        optimizer unscales them); returns their global norm (this replica's share).

        Under mixed_float16 the loss-scale optimizer skips an update whose gradients are
        not finite; the optimizer groups of the variant (the Weighted Transformer's kappa
        and alpha) then skip it too: no variable, slot or step counter of theirs moves."""
        scale = tf.cast(self.optimizer.scale_loss(1.0), tf.float32) if self.loss_scaling else 1.0
        norm = tf.linalg.global_norm(grads) / scale
        if self.hp.clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, self.hp.clip_norm * scale, norm * scale)
        pairs = list(zip(grads, self.model.trainable_variables))
        steps_before = tf.identity(self.optimizer.iterations) if self.loss_scaling else None
        self.optimizer.apply_gradients([(g, v) for g, v in pairs if id(v) not in self.group_of])
        for name, optimizer in self.group_optimizers.items():
            group = [(g, v) for g, v in pairs if self.group_of.get(id(v)) == name]
            if not self.loss_scaling:
                optimizer.apply_gradients(group)
                continue
            group = [(g / scale, v) for g, v in group]  # unscaled here, by hand
            applied = self.optimizer.iterations > steps_before  # False: a skipped step
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g, _ in group])
            apply_where(tf.logical_and(applied, finite), optimizer, group)
        return norm

    # -- gradient accumulation ------------------------------------------------------------
    def train_batch(self, src, dec_in, labels) -> tuple[StepStats, bool]:
        """Train on one batch: an update, or with accum_steps > 1 one accumulation that
        updates every accum_steps batches. Returns (stats, whether an update was made)."""
        if self.hp.accum_steps <= 1:
            return self.train_step(src, dec_in, labels), True
        stats = StepStats(*(float(x) for x in self._accumulate_fn(src, dec_in, labels)))
        self.pending += 1
        if self.pending < self.hp.accum_steps:
            return stats, False
        return stats._replace(grad_norm=self.flush()), True

    def _accumulate(self, src, dec_in, labels) -> StepStats:
        """Add this batch's gradients of the summed loss to the accumulators."""
        with tf.GradientTape() as tape:
            sums = self.loss_sums(src, dec_in, labels, training=True)
            # divided by the token budget so that float16 gradients keep the magnitude
            # of a per-token mean (the update divides by the real token count)
            per_budget = sums.loss_sum / float(self.hp.tokens_per_batch)
            # the variant's term, weighted by the batch's tokens: once per update in all
            extra = self.model.variant.extra_loss(self.model) * sums.tokens
            per_budget += extra / float(self.hp.tokens_per_batch)
            scaled = self.optimizer.scale_loss(per_budget) if self.loss_scaling else per_budget
        grads = tape.gradient(scaled, self.model.trainable_variables)
        for acc, grad in zip(self.accum, grads):
            acc.assign_add(tf.convert_to_tensor(grad))
        self.accum_tokens.assign_add(sums.tokens)
        return sums

    def _apply_accumulated(self):
        """One update with the accumulated gradients over all their target tokens."""
        tokens = tf.maximum(self.accum_tokens, 1.0) / float(self.hp.tokens_per_batch)
        norm = self.apply_gradients([acc / tokens for acc in self.accum])
        for acc in self.accum:
            acc.assign(tf.zeros_like(acc))
        self.accum_tokens.assign(0.0)
        return norm

    def flush(self) -> float:
        """Apply a partial accumulation (at the end of an epoch); returns the grad norm."""
        if not self.pending:
            return 0.0
        self.pending = 0
        return float(self._apply_fn())

    # -- checkpoints and the dev loss -----------------------------------------------------
    def save(self, best: bool = False) -> str:
        """Checkpoint at the current step (into logdir/best too when ``best``); returns the
        chief's path. Non-chief workers save to their temporary folder and delete it."""
        path = self.manager.save(checkpoint_number=self.step)
        if best:
            self.best.save(checkpoint_number=self.step)
        if not self.chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
            path = os.path.join(self.hp.logdir, os.path.basename(path))
        self.last_saved = path
        return path

    @property
    def latest_checkpoint(self):
        """The newest checkpoint in logdir (the chief's, for every worker)."""
        return tf.train.latest_checkpoint(self.hp.logdir)

    def restore(self) -> bool:
        path = self.latest_checkpoint
        if not path:
            return False
        try:
            self.ckpt.restore(path).assert_existing_objects_matched()
        except (ValueError, AssertionError, IndexError, tf.errors.OpError) as e:
            raise UserError(
                f"cannot restore {path} ({str(e).splitlines()[0][:160]}); the checkpoint is "
                f"damaged or was written with another --precision: resume with the same "
                f"settings or use a new --logdir"
            ) from None
        print(
            f"train: resumed from {path} at step {self.step}, epoch {int(self.epoch) + 1}, "
            f"batch {int(self.batch_in_epoch)}"
        )
        return True

    def dev_loss(self, corpus, batch_size: int) -> tuple[float, float]:
        """Per-token (label-smoothed loss, cross-entropy) on a dev corpus, no dropout."""
        fn = getattr(self, "_dev_fn", None)
        if fn is None:
            spec = tf.TensorSpec([None, None], tf.int32)
            fn = self._dev_fn = tf.function(
                lambda s, d, lab: tf.stack(self.loss_sums(s, d, lab, False)[:4]),
                input_signature=[spec] * 3,
            )
        order = np.argsort(corpus.src_lens, kind="stable")
        total = np.zeros(4)
        for start in range(0, len(order), batch_size):
            total += fn(*data_load.build_batch(corpus, order[start : start + batch_size])).numpy()
        return total[0] / max(total[2], 1), total[1] / max(total[2], 1)


# ---------------------------------------------------------------------------------------
# The run: epochs of batches, logs, dev evaluation, checkpoints
# ---------------------------------------------------------------------------------------
class Dev:
    """The dev set of a run: the encoded corpus (dev loss) and the raw sentences decoded
    for dev BLEU (the first ``dev_bleu_sents``)."""

    def __init__(self, hp: hparams.Hparams):
        self.corpus = data_load.load_corpus(hp, "dev")
        src, ref = data_load.read_raw(hp, "dev")
        n = len(src) if hp.dev_bleu_sents <= 0 else min(hp.dev_bleu_sents, len(src))
        self.src, self.ref = src[:n], ref[:n]


def train(hp: hparams.Hparams) -> dict:
    """Run (or resume) training; returns a summary dict (steps, last dev BLEU, ...)."""
    check_logdir(hp)
    tok = data_load.load_tokenizer(hp)
    strategy, precision = devices.setup_devices(hp)
    keras.utils.set_random_seed(hp.seed)
    # tokens_per_batch is per replica: a global batch holds replicas x that budget and
    # its rows are dealt out to the replicas
    data = data_load.TrainData(hp, replicas=strategy.num_replicas_in_sync)
    dev = Dev(hp)
    trainer = Trainer(hp, tok, strategy, precision)
    trainer.restore()
    os.makedirs(hp.logdir, exist_ok=True)
    if trainer.chief:  # in a multi-worker run only the chief writes into logdir
        hparams.save(hp, os.path.join(hp.logdir, "hparams.json"))
        data_load.write_vocab_fingerprint(hp)
        files.atomic_write(
            os.path.join(hp.logdir, "specs"), "\n".join(trainer.model.specs_lines()) + "\n"
        )
        writer = tf.summary.create_file_writer(os.path.join(hp.logdir, "train"))
    else:
        writer = tf.summary.create_noop_writer()
    print(
        f"train: {trainer.model.count_params():,} parameters; {len(data.keep):,} training "
        f"pairs; logdir {hp.logdir}"
    )
    translator = decoding.Translator(trainer.model, tok, hp)
    try:
        return train_loop(hp, trainer, data, dev, translator, writer)
    except KeyboardInterrupt:  # keep what was trained since the last checkpoint
        if trainer.pending == 0:
            path = trainer.save()
            print(f"train: interrupted; saved {path}", file=sys.stderr)
        raise


def train_loop(hp, trainer: Trainer, data, dev: Dev, translator, writer) -> dict:
    """The epochs of :func:`train`, from the restored position to the end."""
    t_start, stop_reason, history = time.time(), None, []
    first_loss = last_loss = float("nan")  # running loss at this run's first and last log
    saved_step = trainer.step if trainer.latest_checkpoint else -1
    if int(trainer.epoch) >= hp.num_epochs:
        print(
            f"train: {hp.logdir} has already finished {hp.num_epochs} epochs; raise "
            f"--num_epochs to train on"
        )
    while int(trainer.epoch) < hp.num_epochs and stop_reason is None:
        epoch, skip = int(trainer.epoch), int(trainer.batch_in_epoch)
        plan = data.batches(epoch)
        if epoch == 0 and skip == 0:
            pad_s, pad_t = data_load.padding_fraction(plan, data.corpus, hp.pad_multiple)
            print(
                f"train: {len(plan):,} batches per epoch; padding {pad_s:.1%} of source "
                f"and {pad_t:.1%} of target positions"
            )
        bar = tqdm(
            data.dataset(epoch, skip, plan),
            total=len(plan),
            initial=skip,
            desc=f"epoch {epoch + 1}/{hp.num_epochs}",
            unit="batch",
            dynamic_ncols=True,
        )
        window = Window()
        for src, dec_in, labels in bar:
            stats, updated = trainer.train_batch(src, dec_in, labels)
            window.add(stats)
            trainer.batch_in_epoch.assign_add(1)
            if not updated:
                continue
            step = trainer.step
            if step % 10 == 0 or step == 1:
                means, lr = window.means(), float(trainer.schedule(step - 1))
                last_loss = means["loss"]
                first_loss = first_loss if first_loss == first_loss else last_loss
                bar.set_postfix(
                    loss=f"{last_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{means['tokens_per_sec']:,.0f}"
                )
                if step % LOG_EVERY == 0 or step == 1:
                    with writer.as_default(step=step):
                        summaries.train_scalars(means, stats.grad_norm, lr)
                        trainer.model.variant.summaries(trainer.model, step, trainer.schedules)
                    window = Window()
            if hp.ckpt_every_steps and step % hp.ckpt_every_steps == 0:
                trainer.save()
                saved_step = step
            if hp.max_steps and step >= hp.max_steps:
                stop_reason = f"max_steps={hp.max_steps} reached"
            elif hp.max_minutes and time.time() - t_start >= 60 * hp.max_minutes:
                stop_reason = f"max_minutes={hp.max_minutes:g} reached"
            if stop_reason:
                break
        bar.close()
        if stop_reason:
            break
        trainer.flush()  # the epoch's last, partial accumulation
        trainer.epoch.assign_add(1)
        trainer.batch_in_epoch.assign(0)
        history.append(end_of_epoch(hp, trainer, dev, translator, writer))
        saved_step = trainer.step
        if hp.early_stopping and int(trainer.bad_epochs) >= hp.early_stopping:
            stop_reason = f"no better dev BLEU for {hp.early_stopping} epochs"
        elif hp.max_steps and trainer.step >= hp.max_steps:
            stop_reason = f"max_steps={hp.max_steps} reached"
    if saved_step != trainer.step:
        trainer.save()
    # the path this run saved (a non-chief worker may look before the chief's
    # `checkpoint` file names it), else the one it resumed from
    path = trainer.last_saved or trainer.latest_checkpoint
    writer.flush()
    print(f"train: {stop_reason or 'done'}; step {trainer.step}; checkpoint {path}")
    return {
        "step": trainer.step,
        "epoch": int(trainer.epoch),
        "history": history,
        "checkpoint": path,
        "stop_reason": stop_reason,
        "train_loss": last_loss,
        "first_loss": first_loss,
    }


def end_of_epoch(hp, trainer: Trainer, dev: Dev, translator, writer) -> dict:
    """Dev loss, dev BLEU, translations to evaldir, summaries, best checkpoint."""
    epoch, step, tok = int(trainer.epoch), trainer.step, trainer.tok
    dev_loss, dev_nll = trainer.dev_loss(dev.corpus, max(1, hp.tokens_per_batch // 64))
    hyps = translator.translate(dev.src)
    scores = decoding.scores(hyps, dev.ref)
    bleu = scores["sacrebleu"]
    if trainer.chief:
        name = f"E{epoch:02d}L{dev_loss:.2f}"
        files.atomic_write(
            os.path.join(hp.evaldir, name), "\n".join(hyps) + f"\nBLEU = {bleu:.2f}\n"
        )
    with writer.as_default(step=step):
        summaries.dev_figures(dev_loss, dev_nll, scores)
        summaries.sample_translations(dev.src, dev.ref, hyps)
        if dev.src and hp.attention_layers != "none":
            greedy = translator.decode if translator.k == 1 else None
            summaries.attention(
                trainer.model, tok, dev.src[0], hp.max_len_extra, hp.attention_layers, greedy
            )
    writer.flush()
    improved = bleu > float(trainer.best_bleu)
    if improved:
        trainer.best_bleu.assign(bleu)
        trainer.bad_epochs.assign(0)
    else:
        trainer.bad_epochs.assign_add(1)
    # the counters are updated first, so that a resumed run knows the true best so far
    path = trainer.save(best=improved)
    example = f"{dev.src[0]!r} -> {hyps[0]!r}; " if dev.src else ""
    print(
        f"epoch {epoch}: dev loss {dev_loss:.3f}, dev BLEU {bleu:.2f}"
        f"{' (best)' if improved else ''}; e.g. {example}{path}"
    )
    return {"epoch": epoch, "step": step, "dev_loss": dev_loss, "dev_bleu": bleu}


def main() -> None:
    hp, _ = cli.parse_args(script=SCRIPT)
    train(hp)


if __name__ == "__main__":
    hparams.run_main(main)
