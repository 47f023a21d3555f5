"""The dev evaluation of a training run and the choice of its default model: the dev
loss and dev BLEU after each epoch (:func:`evaluate`, :func:`end_of_epoch`), the best
checkpoint and early stopping's count (:func:`keep_best`), and the candidates for the
run's default model at its end (:func:`default_candidates`; checkpoints.record_default
writes the choice). With --ema_decay every figure here is the moving average's
(Trainer.scored_weights). Used by train.py.
"""

from __future__ import annotations

import os
import time

import tensorflow as tf

import checkpoints
import files
import metrics
import summaries
from interrupts import Interrupt
from trainer import Dev, Trainer


def end_evaluations(hp) -> int:
    """Dev BLEU evaluations at a run's end: its final weights', the average's (--average)
    and the best checkpoint's own weights' (--ema_decay): what max_minutes keeps back."""
    return 1 + (hp.average > 1) + (hp.ema_decay > 0)


def default_candidates(
    hp, trainer: Trainer, dev: Dev, translator, averaged: dict | None, scored: bool = True
) -> list[dict]:
    """The run's candidates for its default model ({path, dev_bleu, what}), in the order
    that breaks a tie: the best checkpoint by dev BLEU or, with --ema_decay, its EMA
    weights (which the dev evaluations scored) and then its own weights (scored here, once,
    where ``scored`` and one process holds the run); the average where it beat the best
    (checkpoints.average_last)."""
    best = tf.train.latest_checkpoint(trainer.state.best.directory)
    if not best:
        return []
    candidates = [
        dict(path=best, dev_bleu=float(trainer.state.best_bleu), what="best checkpoint by dev BLEU")
    ]
    ema_path = trainer.state.ema_model_path(int(best.rsplit("-", 1)[1]))
    if trainer.ema and tf.io.gfile.exists(ema_path + ".index"):
        what = f"EMA weights (decay {hp.ema_decay:g}) of the best checkpoint"
        candidates[0].update(path=ema_path, what=what)
        if scored and not trainer.multi_worker:
            t0 = time.time()
            bleu = checkpoints.scored(trainer.model, best, lambda: dev_bleu(dev, translator))
            trainer.state.eval_seconds.assign_add(time.time() - t0)
            candidates.append(dict(path=best, dev_bleu=bleu, what="best checkpoint's own weights"))
    if averaged and averaged["wins"]:
        names = ", ".join(os.path.basename(p) for p in averaged["checkpoints"])
        candidates.append(dict(averaged, what=f"average of {names}"))
    return candidates


def evaluate(
    hp, trainer: Trainer, dev: Dev, translator, writer, interrupt=None, bleu: bool = True
) -> dict:
    """Dev loss (all of dev) and, with ``bleu``, dev BLEU of the dev subset: summaries,
    translations to evaldir; the time is added to ``trainer.state.eval_seconds``. A signal
    abandons it (:class:`DevAbandoned`; in one process only: other workers would wait for
    this one). Returns {epoch, step, dev_loss, dev_bleu (None without BLEU), seconds}."""
    epoch, step, t0 = int(trainer.state.epoch) + 1, trainer.step, time.time()
    interrupt = interrupt or Interrupt()
    with interrupt.abandonable_region(not trainer.multi_worker), trainer.scored_weights():
        dev_loss, dev_nll = trainer.dev_loss(dev.corpus, max(1, hp.tokens_per_batch // 64))
        hyps = translator.translate(dev.src, dev.docs) if bleu else []
        scores = metrics.scores(hyps, dev.ref) if bleu else None
    seconds = time.time() - t0
    trainer.state.eval_seconds.assign_add(seconds)
    if bleu and trainer.state.chief:
        name = f"E{epoch:02d}S{step}L{dev_loss:.2f}"
        text = "\n".join(hyps) + f"\nBLEU = {scores['sacrebleu']:.2f}\n"
        files.atomic_write(os.path.join(hp.evaldir, name), text, trainer.state.unsaved())
    with summaries.summaries_at(writer, step, hp, trainer.state.unsaved()):
        summaries.dev_figures(dev_loss, dev_nll, scores)
        if bleu:
            summaries.sample_translations(dev.src, dev.ref, hyps)
        if bleu and dev.src and hp.attention_layers != "none":
            greedy = translator.decode if translator.k == 1 else None
            with trainer.scored_weights():
                summaries.attention(
                    trainer.model,
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


def end_of_epoch(
    hp,
    trainer: Trainer,
    dev: Dev,
    translator,
    writer,
    interrupt: Interrupt | None = None,
    bleu: bool = True,
) -> dict:
    """:func:`evaluate`, then the epoch counter moves on and a checkpoint is written
    (into logdir/best too if the dev BLEU is the best so far). The counter moves just
    before the checkpoint: a run stopped during the evaluation resumes at the end of the
    epoch and evaluates it."""
    result = evaluate(hp, trainer, dev, translator, writer, interrupt, bleu)
    trainer.state.epoch.assign_add(1)
    trainer.state.batch_in_epoch.assign(0)
    improved = keep_best(trainer, result["dev_bleu"])
    # the counters are updated first, so that a resumed run knows the true best so far
    path = trainer.state.save(best=improved)
    bleu_text = "not computed (eval_share)" if not bleu else f"{result['dev_bleu']:.2f}"
    print(
        f"epoch {result['epoch']}: dev loss {result['dev_loss']:.3f}, dev BLEU {bleu_text}"
        f"{' (best)' if improved else ''}; e.g. {result['example']}{path}"
    )
    return result


def keep_best(trainer: Trainer, bleu: float | None) -> bool:
    """Whether ``bleu`` beats the run's best dev BLEU (then it becomes the best); a
    figure that does not counts one more epoch for early stopping."""
    if bleu is None:
        return False
    if bleu > float(trainer.state.best_bleu):
        trainer.state.best_bleu.assign(bleu)
        trainer.state.bad_epochs.assign(0)
        return True
    trainer.state.bad_epochs.assign_add(1)
    return False


def dev_bleu(dev: Dev, translator) -> float:
    """The dev BLEU of the model's weights as they are, on the dev subset."""
    return metrics.scores(translator.translate(dev.src, dev.docs), dev.ref)["sacrebleu"]
