"""The dev evaluation of a training run and its end, both given the :class:`Run`: the dev
loss and dev BLEU after each epoch (:func:`evaluate`, :func:`end_of_epoch`), the best
checkpoint and early stopping's count (:func:`keep_best`); at the end (:func:`finish_run`,
a sequence of named steps that fill in an :class:`Ending`) the final weights' dev BLEU,
the last checkpoint, the average of the last ones and the run's default model among its
candidates (:func:`default_candidates`; checkpoints.record_default writes the choice),
and the summary that train.train returns. With --ema_decay every dev figure is the moving
average's (Trainer.scored_weights). Why a run stops is a :class:`Stop`. Used by train.py,
which builds the Run and runs the epochs."""

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
    another worker: the same command resumes) or "early" (early stopping); "finished"
    for a restored run with nothing left to train (train.nothing_left); ``why``: the
    line train.py prints, which later steps of the run may extend."""

    kind: str
    why: str

    def extended(self, more: str) -> "Stop":
        return self._replace(why=self.why + more)


@dataclasses.dataclass
class Ending:
    """How a run ends, as the steps of :func:`finish_run` learn it: why (``stop``: None
    for a run that trained all its epochs; a step may extend or replace it), the average
    of its last checkpoints (checkpoints.average_last's dict, where one was made) and its
    default model ({path, dev_bleu, what}, where one was recorded)."""

    stop: Stop | None
    averaged: dict | None = None
    default: dict | None = None

    @property
    def kind(self) -> str | None:
        """The stop's kind ("budget", "signal", "early"), None for a run that trained all
        its epochs."""
        return self.stop.kind if self.stop else None

    @property
    def resumes(self) -> bool:
        """Whether a signal (here or in another worker) ends the run: the same command
        resumes it, so its last checkpoints are not averaged and no candidate for the
        default model is scored here."""
        return self.kind == "signal"


@dataclasses.dataclass
class Run:
    """What train.py's loop, the dev evaluation and the run's end share: the run's parts
    (train.train builds them), its skipped-update count (``health``, made here) and its
    progress."""

    hp: hparams.Hparams
    trainer: Trainer
    data: Any  # data_load.TrainData: the epochs' batches
    dev: Dev
    translator: Translator
    writer: Any  # the run's tf.summary writer (a no-op one on a non-chief worker)
    interrupt: Interrupt
    budget: Budget
    health: Health = dataclasses.field(init=False)  # of hp, trainer and writer
    saved: tuple | None = None  # the position of logdir's newest checkpoint, if any
    history: list = dataclasses.field(default_factory=list)  # evaluate()'s results
    bleu_seconds: float = 0.0  # the last dev evaluation with BLEU
    first_loss: float = float("nan")  # the running loss at this run's first log
    last_loss: float = float("nan")  # and at its last

    def __post_init__(self):
        self.health = Health(self.hp, self.trainer, self.writer)

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
        files.atomic_write(os.path.join(hparams.eval_folder(hp), name), text, state.unsaved())
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
    """The end of a run that ``stop`` ended (None: it trained all its epochs), step by
    step: a dropped partial accumulation is said; a run ended by its budget gets a dev
    BLEU of its final weights; the last position is saved; the last checkpoints are
    averaged (``--average``) and the default model recorded; then the summary lines and
    the dict that train.train returns."""
    end = Ending(drop_partial_accumulation(run, stop))
    if needs_final_dev_bleu(run, end):
        end.stop = final_dev_bleu(run, end.stop)
    save_last_position(run)
    end.averaged = average_last_checkpoints(run, end)
    end.default = choose_default_model(run, end)
    return closing_summary(run, end)


def drop_partial_accumulation(run: Run, stop: Stop | None) -> Stop | None:
    """Drops the trainer's partial gradient accumulation, if any (only a signal stops a
    run between updates; its batches are trained again on resume): ``stop`` with its
    line extended to say so, else ``stop`` as it is."""
    dropped = run.trainer.drop_partial()
    if not dropped:
        return stop
    return stop.extended(
        f"; a partial gradient accumulation of {dropped} batch(es) was dropped (they are "
        f"trained again on resume)"
    )


def needs_final_dev_bleu(run: Run, end: Ending) -> bool:
    """Whether the run's final weights still need a dev BLEU: its budget ended it (so
    they may be the best) and its last dev evaluation did not score them (it was at an
    earlier step, or without BLEU)."""
    last = run.history[-1] if run.history else {}
    scored = last.get("step") == run.trainer.step and last.get("dev_bleu") is not None
    return end.kind == "budget" and not scored


def final_dev_bleu(run: Run, stop: Stop) -> Stop:
    """The final weights' dev evaluation (:func:`evaluate`), added to the history and
    saved as a checkpoint (into logdir/best too if it is the best so far): ``stop`` as
    it is, or, where a signal abandons the evaluation, a Stop of that signal."""
    state = run.trainer.state
    try:
        run.history.append(evaluate(run))
        state.save(best=keep_best(state, run.history[-1]["dev_bleu"]))
        run.saved = state.position
    except DevAbandoned:
        return Stop("signal", f"stopped by {run.interrupt.name} during the final dev evaluation")
    return stop


def save_last_position(run: Run) -> None:
    """A checkpoint of where the run stands, unless logdir's newest one holds it."""
    state = run.trainer.state
    if state.position != run.saved:
        state.save()
        run.saved = state.position


def average_last_checkpoints(run: Run, end: Ending) -> dict | None:
    """With ``--average N``, the average of the run's last N checkpoints, scored on dev
    and written where it beats the best checkpoint (checkpoints.average_last; its time
    counts as dev evaluation); None where there is none: a run without a dev evaluation,
    one a signal ended (it resumes), too few checkpoints, or a multi-worker run (which
    says to use average_checkpoints.py)."""
    hp, trainer = run.hp, run.trainer
    if not run.history or end.resumes or hp.average <= 1:
        return None
    if trainer.multi_worker:
        print("train: --average is skipped in a multi-worker run: use average_checkpoints.py")
        return None
    state = trainer.state
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
    return averaged


def choose_default_model(run: Run, end: Ending) -> dict | None:
    """The chief's choice of the run's default model among :func:`default_candidates`
    (with ``end.averaged``; a run a signal ended scores no more of them), recorded in
    <logdir>/best.json (checkpoints.record_default) and returned; None on another worker,
    before the run's first dev evaluation, or without a best checkpoint."""
    if not (run.trainer.state.chief and run.history):
        return None
    candidates = default_candidates(run, end.averaged, scored=not end.resumes)
    return checkpoints.record_default(run.hp.logdir, candidates)


def closing_summary(run: Run, end: Ending) -> dict:
    """The run's last two lines (its time, the share of it on dev evaluation and the last
    lr; why it stopped, its step and checkpoint: a run a signal ended says the same
    command resumes it) and train.train's :func:`summary` of it. ``signal``: the one
    that stopped this process, else SIGTERM where a signal to another worker did."""
    trainer, state = run.trainer, run.trainer.state
    share = float(state.eval_seconds) / max(state.seconds_used(), 1e-9)
    last_lr = float(trainer.schedule(max(trainer.step - 1, 0)))  # of the last update
    # the path this run saved (a non-chief worker may look before the chief's
    # `checkpoint` file names it), else the one it resumed from
    path = state.last_saved or state.latest_checkpoint
    stop = end.stop.extended("; run the same command again to resume") if end.resumes else end.stop
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
        signal=run.interrupt.signum or (signal.SIGTERM if end.resumes else None),
        eval_share=share,
        averaged=end.averaged,
        default=end.default,
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
