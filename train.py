"""Train the Transformer: Adam + a learning-rate schedule + label smoothing (section 5).

    python train.py                          # the demo preset
    python train.py --preset multi30k --max_minutes 30
    tensorboard --logdir log/

Checkpoints (tf.train.CheckpointManager) go to ``logdir``; a run resumes automatically from
the latest one (or from ``--ckpt PATH``) with the same step, optimizer state, lr schedule,
data position, dropout random state and wall time. After each epoch the dev set is scored
(loss, greedy BLEU on a fixed subset; under ``max_minutes`` BLEU within ``eval_share`` of
the time), its translations are written to ``<logdir>/eval`` (or ``--evaldir``), and
the best checkpoint by dev BLEU is kept in ``logdir/best``; ``logdir/best.json`` names
the default model (the best checkpoint, or the average of the last ``average``
checkpoints where it wins on dev).

The wsd and linear schedules end at the budget: ``num_epochs``, ``max_steps`` or
``max_minutes`` (over all resumes), whichever binds (:class:`Budget`).

SIGINT or SIGTERM: the step ends, a checkpoint is written, the exit status is 130 or 143
(:class:`Interrupt`). One training per logdir (:class:`LogdirLock`). Updates with a NaN
or Inf are skipped, and ``max_bad_steps`` of them in a row stop the run (:class:`Health`).

A batch goes: TrainData.dataset -> Trainer.train_batch -> Trainer.train_step (compiled:
forward, label-smoothed loss, gradients, clipping, Adam) -> StepStats -> Window -> logs.
"""

# ruff: noqa: E402  (the script answers --help before TensorFlow is imported: cli.start)
from __future__ import annotations

from transformer_tf2.config import cli, hparams

SCRIPT = cli.Script(
    "train",
    __doc__,
    fields=("data", "vocabulary", "batching", "model", "training", "decoding"),
    options={
        "ckpt": (
            "",
            "resume from this checkpoint, not the latest in logdir (after a damaged one); with "
            "--init_from, the parent's checkpoint to start from (a path, best or last)",
        ),
    },
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

from transformer_tf2.config import parents
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.evaluation.dev import Dev
from transformer_tf2.evaluation.dev_evaluation import (  # noqa: F401 (train.dev_bleu, ...)
    Run,
    Stop,
    dev_bleu,
    end_evaluations,
    end_of_epoch,
    finish_run,
    summary,
)
from transformer_tf2.layers.optimization import StepStats
from transformer_tf2.models import checkpoints
from transformer_tf2.training import finetune, summaries
from transformer_tf2.training.budget import Budget, RunClock
from transformer_tf2.training.interrupts import DevAbandoned, Interrupt
from transformer_tf2.training.run_state import RunState
from transformer_tf2.training.trainer import Trainer
from transformer_tf2.utils import devices, files

LOG_EVERY = 50  # steps between TensorBoard scalar summaries


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


# ---------------------------------------------------------------------------------------
# The run: epochs of batches, logs, dev evaluation, checkpoints
# ---------------------------------------------------------------------------------------
def train(hp: hparams.Hparams, ckpt: str = "") -> dict:
    """Run (or resume, from ``ckpt`` or the newest checkpoint) training; returns a summary
    dict (steps, last dev BLEU, ...; ``signal``: the signal that stopped it, or None).

    The chief holds ``<logdir>/train.lock`` for the whole run (:class:`LogdirLock`), and
    SIGINT/SIGTERM stop the run at a checkpoint (:class:`Interrupt`)."""
    checkpoints.check_logdir(hp)
    if hp.init_from:
        finetune.check_vocabulary(hp)
        hparams.check_same(
            parents.read_parent(hp.init_from, "init_from"),
            hp,
            hparams.MODEL_KEYS,
            f"the model of {hp.init_from}",
            "fine-tune with the parent's model settings (finetune.parent_settings)",
        )
    tok = data_load.load_tokenizer(hp)
    strategy, precision = devices.setup_devices(hp)
    with checkpoints.LogdirLock(hp.logdir, devices.is_chief(strategy)):
        keras.utils.set_random_seed(hp.seed)
        # tokens_per_batch is per replica: a global batch holds replicas x that budget and
        # its rows are dealt out to the replicas
        data = data_load.TrainData(hp, replicas=strategy.num_replicas_in_sync)
        dev = Dev(hp, tok)
        trainer = Trainer(hp, tok, strategy, precision)
        if hp.init_from:  # --ckpt names the parent's checkpoint; the run resumes its own
            saved = trainer.state.position if trainer.state.restore() else None
            if saved is None:
                print(finetune.start_from_parent(trainer, hp, ckpt))
        else:  # a checkpoint given by --ckpt is not logdir's newest: write one before stopping
            saved = trainer.state.position if trainer.state.restore(ckpt) and not ckpt else None
        translator = dev.translator(trainer.model, tok, hp)
        # per epoch: the same every epoch (with bpe_dropout, epoch 1's: the others differ a little)
        budget = Budget(
            hp,
            run_clock(trainer.state, trainer.workers),
            -(-len(data.batches(0)) // hp.accum_steps),
        )
        why = nothing_left(hp, trainer, budget, dev, translator)
        if why:
            print(f"train: {hp.logdir} {why}; nothing was trained or written")
            return summary(trainer, trainer.state.latest_checkpoint, Stop("finished", why))
        os.makedirs(hp.logdir, exist_ok=True)
        if trainer.state.chief:  # in a multi-worker run only the chief writes into logdir
            checkpoints.remove_partial_checkpoints(hp.logdir)  # of a run killed while saving
            # the precision the run trains in (auto resolved); decoding uses float32
            resolved = hparams.apply(hp, {"precision": precision})
            hparams.save(resolved, os.path.join(hp.logdir, "hparams.json"))
            data_load.write_vocab_fingerprint(hp)
            files.atomic_write(
                os.path.join(hp.logdir, "specs"), "\n".join(trainer.model.specs_lines()) + "\n"
            )
            events = os.path.join(hp.logdir, "train")
            with files.reporting(events, "nothing is lost"):  # no step trained yet
                writer = tf.summary.create_file_writer(events)
        else:
            writer = tf.summary.create_noop_writer()
        print(
            f"train: {trainer.model.count_params():,} parameters; {len(data.keep):,} training "
            f"pairs; logdir {hp.logdir}"
        )
        with Interrupt() as interrupt:
            run = Run(
                hp=hp,
                trainer=trainer,
                data=data,
                dev=dev,
                translator=translator,
                writer=writer,
                interrupt=interrupt,
                budget=budget,
                saved=saved,
            )
            try:
                return train_loop(run)
            except devices.PEER_ERRORS as e:  # another worker of a multi-worker run is lost
                line = devices.peer_lost_line(e, hp.logdir, finished_step(trainer))
                if line is None:
                    raise
                raise UserError(line, status=devices.PEER_LOST_STATUS) from None


def run_clock(state: RunState, workers: devices.Workers) -> RunClock:
    """What the run's Budget reads and writes of its state: the step, the budget's
    variables and the chief's clock."""
    return RunClock(
        step=lambda: state.step,
        spent=lambda: workers.chief_value(state.seconds_used()),
        budget_used=state.budget_used,
        eval_seconds=state.eval_seconds,
        chief_value=workers.chief_value,
    )


def nothing_left(hp, trainer: Trainer, budget: Budget, dev: Dev, translator) -> str | None:
    """Why a restored run has nothing left to train under these settings (its epochs,
    max_steps, early stopping or max_minutes spent), or None. Under max_minutes a run is
    spent once what is left is less than its final dev evaluation (estimated here, and
    kept in ``budget.reserve``), as :meth:`Budget.out_of_time` decides during the run."""
    state, step = trainer.state, trainer.step
    if not step:
        return None
    if int(state.epoch) >= hp.num_epochs:
        return f"has finished its {hp.num_epochs} epochs (step {step}); raise --num_epochs"
    if hp.max_steps and step >= hp.max_steps:
        return f"has reached max_steps={hp.max_steps} (step {step}); raise --max_steps"
    if hp.early_stopping and int(state.bad_epochs) >= hp.early_stopping:
        return (
            f"stopped early after {hp.early_stopping} epochs without a better dev BLEU (step "
            f"{step}); raise --early_stopping, or 0 to turn it off"
        )
    if budget.seconds:
        budget.reserve = budget.estimate(dev, translator, trainer.dev_loss) * end_evaluations(hp)
        if budget.out_of_time():
            return (
                f"has spent max_minutes={hp.max_minutes:g} ({state.seconds_used() / 60:.1f} "
                f"min used, and its final dev evaluation needs about {budget.reserve:.0f} s; "
                f"step {step}); raise --max_minutes"
            )
    return None


def finished_step(trainer) -> int | None:
    """The trainer's step, or None where it cannot be read (after a failed collective)."""
    try:
        return trainer.step
    except tf.errors.OpError:
        return None


def train_loop(run: Run) -> dict:
    """The epochs of :func:`train`'s ``run``, from the restored position (``run.saved``:
    that of logdir's newest checkpoint, if any) to the end: each epoch's batches
    (:func:`train_epoch`), its partial accumulation, its dev evaluation and checkpoint
    (dev_evaluation.end_of_epoch), then the end of the run (dev_evaluation.finish_run)."""
    hp, trainer, budget, interrupt = run.hp, run.trainer, run.budget, run.interrupt
    state = trainer.state
    if budget.seconds and not budget.reserve:  # else estimated by nothing_left
        budget.reserve = budget.estimate(
            run.dev, run.translator, trainer.dev_loss
        ) * end_evaluations(hp)
        print(
            f"train: {budget.reserve:.1f} s of max_minutes kept back for the final dev "
            f"evaluation{' and the choice of the default model' if end_evaluations(hp) > 1 else ''}"
            f" (estimated)"
        )
    stop = None
    while int(state.epoch) < hp.num_epochs and stop is None:
        epoch = int(state.epoch)
        stop = train_epoch(run, epoch)
        if stop:
            break
        update = trainer.flush()  # the epoch's last, partial accumulation
        run.health.after(update, not (update.skipped or update.scale_skip))
        stop = run.signal_stop()
        if stop:
            break
        bleu = budget.bleu_due(run.bleu_seconds) or epoch + 1 == hp.num_epochs
        try:
            result = end_of_epoch(run, bleu)
        except DevAbandoned:
            why = f"stopped by {interrupt.name}; the dev evaluation of epoch {epoch + 1} was"
            stop = Stop("signal", why + " abandoned (it runs again on resume)")
            break
        run.history.append(result)
        if bleu:
            run.bleu_seconds = result["seconds"]
            budget.reserve = run.bleu_seconds * end_evaluations(hp)
        run.saved = state.position
        stop = run.signal_stop()
        if stop is None and hp.early_stopping and int(state.bad_epochs) >= hp.early_stopping:
            stop = Stop("early", f"no better dev BLEU for {hp.early_stopping} epochs")
        stop = stop or run.budget_stop()
    return finish_run(run, stop)


def train_epoch(run: Run, epoch: int) -> Stop | None:
    """The batches of ``epoch`` from where the run stands in it, each one update (or one
    accumulation); a Stop when the budget runs out or a signal comes, else None."""
    hp, trainer, state, data = run.hp, run.trainer, run.trainer.state, run.data
    skip = int(state.batch_in_epoch)
    plan = data.batches(epoch)
    if epoch == 0 and skip == 0:
        pad_s, pad_t = data_load.padding_fraction(plan, data.epoch_corpus(0)[0], hp.pad_multiple)
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
    window, stop = Window(), None
    for batch in bar:
        run.budget.before_update()
        with devices.out_of_memory(hp, "a training batch", batch[0].shape, batch[1].shape):
            stats, updated = trainer.train_batch(*batch, stop=run.interrupt.signum is not None)
        window.add(stats)
        state.batch_in_epoch.assign_add(1)
        run.health.after(stats, updated)
        if updated:
            step = trainer.step
            if step % 10 == 0 or step == 1:
                window = log_progress(run, bar, window, stats, step)
            every = hp.ckpt_every_steps and step % hp.ckpt_every_steps == 0
            if run.budget.checkpoint_due(step) or every:
                state.save()
                run.saved = state.position
            stop = run.budget_stop()
        stop = stop or run.signal_stop(stats)
        if stop:
            break
    bar.close()
    return stop


def log_progress(run: Run, bar, window: Window, stats: StepStats, step: int) -> Window:
    """The progress bar's loss, learning rate and tokens/s (every 10 updates), and every
    LOG_EVERY updates the TensorBoard scalars; returns the window to fill next."""
    trainer, state = run.trainer, run.trainer.state
    means, lr = window.means(), float(trainer.schedule(step - 1))
    run.last_loss = means["loss"]
    if run.first_loss != run.first_loss:  # NaN: the first log of this run
        run.first_loss = run.last_loss
    bar.set_postfix(
        loss=f"{run.last_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{means['tokens_per_sec']:,.0f}"
    )
    if step % LOG_EVERY and step != 1:
        return window
    with summaries.summaries_at(run.writer, step, run.hp, state.unsaved()):
        summaries.train_scalars(means, stats.grad_norm, lr)
        summaries.budget(run.budget.fraction(step), state.seconds_used())
        summaries.skipped_updates(int(state.skipped_steps), trainer.loss_scale.value())
        trainer.hooks.summaries(trainer.model, step, trainer.schedules)
    return Window()


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    summary = train(finetune.parent_settings(hp, opts["_set"]), opts["ckpt"])
    if summary["signal"]:  # 130 for SIGINT, 143 for SIGTERM, as a shell reports them
        sys.exit(128 + summary["signal"])


if __name__ == "__main__":
    cli.run_main(main)
