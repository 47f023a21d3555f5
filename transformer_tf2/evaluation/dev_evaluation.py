"""The dev evaluation of a training run and its end, both given the :class:`Run`: the dev
loss and dev BLEU after each epoch (:func:`evaluate`, :func:`end_of_epoch`), the best
checkpoint and early stopping's count (:func:`keep_best`); at the end (:func:`finish_run`)
the final weights' dev BLEU, the last checkpoint, the average of the last ones and the
run's default model among its candidates (:func:`default_candidates`;
checkpoints.record_default writes the choice), and the summary that train.train returns.
With --ema_decay every dev figure is the moving average's (Trainer.scored_weights). Why a
run stops is a :class:`Stop`. Used by train.py, which runs the epochs.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from typing import Any, NamedTuple

import tensorflow as tf

from transformer_tf2.config import hparams
from transformer_tf2.decoding.translator import Translator
from transformer_tf2.evaluation import metrics
from transformer_tf2.evaluation.dev import Dev
from transformer_tf2.layers.optimization import StepStats
from transformer_tf2.models import checkpoints
from transformer_tf2.training import summaries
from transformer_tf2.training.budget import Budget
from transformer_tf2.training.interrupts import DevAbandoned, Interrupt
from transformer_tf2.training.run_state import RunState
from transformer_tf2.training.trainer import Health, Trainer
from transformer_tf2.utils import files


class Stop(NamedTuple):
    """Why a run ends before its last epoch. ``kind``: "budget" (max_steps or
    max_minutes: the final weights get a dev BLEU), "signal" (SIGINT/SIGTERM here or in
    another worker: the same command resumes) or "early" (early stopping); ``why``: the
    line train.py prints, which later steps of the run may extend."""

    kind: str
    why: str

    def extended(self, more: str) -> "Stop":
        return self._replace(why=self.why + more)


@dataclasses.dataclass
class Run:
    """What train.py's loop, the dev evaluation and the run's end share: the run's parts
    and its progress."""

    hp: hparams.Hparams
    trainer: Trainer
    dev: Dev
    translator: Translator
    writer: Any
    interrupt: Interrupt
    budget: Budget
    health: Health
    saved: tuple | None  # the position of logdir's newest checkpoint, if any
    history: list = dataclasses.field(default_factory=list)  # evaluate()'s results
    bleu_seconds: float = 0.0  # the last dev evaluation with BLEU
    first_loss: float = float("nan")  # the running loss at this run's first log
    last_loss: float = float("nan")  # and at its last

    def budget_stop(self) -> Stop | None:
        hp = self.hp
        if hp.max_steps and self.trainer.step >= hp.max_steps:
            return Stop("budget", f"max_steps={hp.max_steps} reached")
        if self.budget.out_of_time():
            return Stop("budget", f"max_minutes={hp.max_minutes:g} reached")
        return None

    def signal_stop(self, stats: StepStats | None = None) -> Stop | None:
        """A signal agreed by all workers (in the step's all-reduce, or in one of its
        own), else this process's."""
        if stats is not None and self.trainer.multi_worker:
            asked = stats.stop > 0
        else:
            asked = self.trainer.workers.agree(self.interrupt.signum is not None)
        name = self.interrupt.name or "a signal to another worker"
        return Stop("signal", f"stopped by {name}") if asked else None


def end_evaluations(hp) -> int:
    """Dev BLEU evaluations at a run's end: its final weights', the average's (--average)
    and the best checkpoint's own weights' (--ema_decay): what max_minutes keeps back."""
    return 1 + (hp.average > 1) + (hp.ema_decay > 0)


def default_candidates(run: Run, averaged: dict | None, scored: bool = True) -> list[dict]:
    """The run's candidates for its default model ({path, dev_bleu, what}), in the order
    that breaks a tie: the best checkpoint by dev BLEU or, with --ema_decay, its EMA
    weights (which the dev evaluations scored) and then its own weights (scored here, once,
    where ``scored`` and one process holds the run); the average where it beat the best
    (checkpoints.average_last)."""
    hp, trainer, dev, translator = run.hp, run.trainer, run.dev, run.translator
    state = trainer.state
    best = tf.train.latest_checkpoint(state.best.directory)
    if not best:
        return []
    candidates = [
        dict(path=best, dev_bleu=float(state.best_bleu), what="best checkpoint by dev BLEU")
    ]
    ema_path = state.ema_model_path(int(best.rsplit("-", 1)[1]))
    if trainer.ema and tf.io.gfile.exists(ema_path + ".index"):
        what = f"EMA weights (decay {hp.ema_decay:g}) of the best checkpoint"
        candidates[0].update(path=ema_path, what=what)
        if scored and not trainer.multi_worker:
            t0 = time.time()
            bleu = checkpoints.scored(trainer.model, best, lambda: dev_bleu(dev, translator))
            state.eval_seconds.assign_add(time.time() - t0)
            candidates.append(dict(path=best, dev_bleu=bleu, what="best checkpoint's own weights"))
    if averaged and averaged["wins"]:
        names = ", ".join(os.path.basename(p) for p in averaged["checkpoints"])
        candidates.append(dict(averaged, what=f"average of {names}"))
    return candidates


def evaluate(run: Run, bleu: bool = True) -> dict:
    """Dev loss (all of dev) and, with ``bleu``, dev BLEU of the dev subset: summaries,
    translations to evaldir; the time is added to ``trainer.state.eval_seconds``. A signal
    abandons it (:class:`DevAbandoned`; in one process only: other workers would wait for
    this one). Returns {epoch, step, dev_loss, dev_bleu (None without BLEU), seconds}."""
    hp, trainer, dev, translator = run.hp, run.trainer, run.dev, run.translator
    state = trainer.state
    epoch, step, t0 = int(state.epoch) + 1, trainer.step, time.time()
    with run.interrupt.abandonable_region(not trainer.multi_worker), trainer.scored_weights():
        dev_loss, dev_nll = trainer.dev_loss(dev.corpus, max(1, hp.tokens_per_batch // 64))
        hyps = translator.translate(dev.src, dev.docs) if bleu else []
        scores = metrics.scores(hyps, dev.ref) if bleu else None
    seconds = time.time() - t0
    state.eval_seconds.assign_add(seconds)
    if bleu and state.chief:
        name = f"E{epoch:02d}S{step}L{dev_loss:.2f}"
        text = "\n".join(hyps) + f"\nBLEU = {scores['sacrebleu']:.2f}\n"
        files.atomic_write(os.path.join(hp.evaldir, name), text, state.unsaved())
    with summaries.summaries_at(run.writer, step, hp, state.unsaved()):
        summaries.dev_figures(dev_loss, dev_nll, scores)
        if bleu:
            summaries.sample_translations(dev.src, dev.ref, hyps)
        if bleu and dev.src and hp.attention_layers != "none":
            greedy = translator.decode if translator.k == 1 else None
            with trainer.scored_weights():
                summaries.attention(
                    translator.model,  # the weights the translation above decoded
                    trainer.tok,
                    dev.src[0],
                    hp.max_len_extra,
                    hp.attention_layers,
                    greedy,
                )
    return {
        "epoch": epoch,
        "step": step,
        "dev_loss": dev_loss,
        "dev_bleu": scores["sacrebleu"] if bleu else None,
        "example": f"{dev.src[0]!r} -> {hyps[0]!r}; " if hyps else "",
        "seconds": seconds,
    }


def end_of_epoch(run: Run, bleu: bool = True) -> dict:
    """:func:`evaluate`, then the epoch counter moves on and a checkpoint is written
    (into logdir/best too if the dev BLEU is the best so far). The counter moves just
    before the checkpoint: a run stopped during the evaluation resumes at the end of the
    epoch and evaluates it."""
    result, state = evaluate(run, bleu), run.trainer.state
    state.epoch.assign_add(1)
    state.batch_in_epoch.assign(0)
    improved = keep_best(state, result["dev_bleu"])
    # the counters are updated first, so that a resumed run knows the true best so far
    path = state.save(best=improved)
    bleu_text = "not computed (eval_share)" if not bleu else f"{result['dev_bleu']:.2f}"
    print(
        f"epoch {result['epoch']}: dev loss {result['dev_loss']:.3f}, dev BLEU {bleu_text}"
        f"{' (best)' if improved else ''}; e.g. {result['example']}{path}"
    )
    return result


def keep_best(state: RunState, bleu: float | None) -> bool:
    """Whether ``bleu`` beats the run's best dev BLEU (then it becomes the best); a
    figure that does not counts one more epoch for early stopping."""
    if bleu is None:
        return False
    if bleu > float(state.best_bleu):
        state.best_bleu.assign(bleu)
        state.bad_epochs.assign(0)
        return True
    state.bad_epochs.assign_add(1)
    return False


def dev_bleu(dev: Dev, translator) -> float:
    """The dev BLEU of the model's weights as they are, on the dev subset."""
    return metrics.scores(translator.translate(dev.src, dev.docs), dev.ref)["sacrebleu"]


def finish_run(run: Run, stop: Stop | None) -> dict:
    """The end of a run: a dropped partial accumulation is said; a run ended by its
    budget gets a dev BLEU of its final weights; the last position is saved; the last
    checkpoints are averaged (``--average``) and the default model recorded; then the
    summary line and dict of train.train."""
    hp, trainer, interrupt = run.hp, run.trainer, run.interrupt
    state = trainer.state
    dropped = trainer.drop_partial()  # only a signal stops the run between updates
    if dropped:
        stop = stop.extended(
            f"; a partial gradient accumulation of {dropped} batch(es) was dropped (they are "
            f"trained again on resume)"
        )
    last = run.history[-1] if run.history else {}
    scored = last.get("step") == trainer.step and last.get("dev_bleu") is not None
    if stop and stop.kind == "budget" and not scored:  # the final weights may be the best
        try:
            run.history.append(evaluate(run))
            state.save(best=keep_best(state, run.history[-1]["dev_bleu"]))
            run.saved = state.position
        except DevAbandoned:
            stop = Stop("signal", f"stopped by {interrupt.name} during the final dev evaluation")
    if state.position != run.saved:
        state.save()
    signalled = stop is not None and stop.kind == "signal"  # here or in another worker
    averaged = default = None
    if run.history and not signalled and hp.average > 1 and trainer.multi_worker:
        print("train: --average is skipped in a multi-worker run: use average_checkpoints.py")
    elif run.history and not signalled and hp.average > 1:
        averaged = checkpoints.average_last(
            hp,
            trainer.model,
            state.manager.checkpoints,
            trainer.step,
            float(state.best_bleu),
            state.chief,
            lambda: dev_bleu(run.dev, run.translator),
        )
        if averaged:
            state.eval_seconds.assign_add(averaged["seconds"])
    if state.chief and run.history:
        candidates = default_candidates(run, averaged, scored=not signalled)
        default = checkpoints.record_default(hp.logdir, candidates)
    share = float(state.eval_seconds) / max(state.seconds_used(), 1e-9)
    last_lr = float(trainer.schedule(max(trainer.step - 1, 0)))  # of the last update
    # the path this run saved (a non-chief worker may look before the chief's
    # `checkpoint` file names it), else the one it resumed from
    path = state.last_saved or state.latest_checkpoint
    if signalled:
        stop = stop.extended("; run the same command again to resume")
    print(
        f"train: {state.seconds_used() / 60:.1f} min, {share:.1%} of them on dev "
        f"evaluation; last lr {last_lr:.3g}"
    )
    print(f"train: {stop.why if stop else 'done'}; step {trainer.step}; checkpoint {path}")
    return summary(
        trainer,
        path,
        stop,
        history=run.history,
        train_loss=run.last_loss,
        first_loss=run.first_loss,
        signal=interrupt.signum or (signal.SIGTERM if signalled else None),
        eval_share=share,
        averaged=averaged,
        default=default,
    )


def summary(trainer: Trainer, checkpoint: str | None, stop: Stop | None, **fields) -> dict:
    """train.train's summary dict: the trainer's position, the checkpoint, why the run
    stopped, and ``fields`` over the values of a run that trained nothing."""
    return {
        "step": trainer.step,
        "epoch": int(trainer.state.epoch),
        "history": [],
        "checkpoint": checkpoint,
        "stop_reason": stop.why if stop else None,
        "stop_kind": stop.kind if stop else None,
        "train_loss": float("nan"),
        "first_loss": float("nan"),
        "signal": None,
        "eval_share": 0.0,
        "last_lr": float(trainer.schedule(max(trainer.step - 1, 0))),  # of the last update
        "averaged": None,
        "default": None,  # the default model chosen: {path, dev_bleu, what}
        **fields,
    }
