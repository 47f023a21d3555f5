"""What bounds a training run (``num_epochs``, ``max_steps``, ``max_minutes``) and the
fraction of it used, which the wsd and linear schedules read (optimization.TransformerSchedule;
docs/training.md)."""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

from transformer_tf2.config import hparams
from transformer_tf2.layers import optimization


class RunClock(NamedTuple):
    """What a :class:`Budget` reads and writes of a run (train.run_clock builds it from
    the run's Trainer)."""

    step: Callable[[], int]  # the updates so far
    spent: Callable[[], float]  # the run's wall seconds over all resumes, by the chief's clock
    budget_used: Any  # tf.Variable: the fraction used (checkpointed; the schedules read it)
    eval_seconds: Any  # tf.Variable: the run's seconds of dev evaluation (checkpointed)
    chief_value: Callable[[float], float]  # the chief's figure, on every worker


class Budget:
    """What bounds a run, and the fraction of it used (docs/training.md).

    The run ends at whichever comes first: ``num_epochs`` of ``updates_per_epoch``
    updates, ``max_steps``, or ``max_minutes`` of wall time summed over its resumes,
    dev evaluation included (:attr:`RunClock.spent`). The fraction used is the larger of
    steps / planned steps and seconds / (budget - reserve), where ``reserve`` is the
    time the run's final evaluation will take (twice that with ``average``): before
    the first dev evaluation with BLEU, :meth:`estimate`; after it, that evaluation's
    duration. The wsd and linear schedules read the fraction from
    ``clock.budget_used``, which only ever grows, so the lr never rises on a resume.
    """

    def __init__(self, hp: hparams.Hparams, clock: RunClock, updates_per_epoch: int):
        self.hp, self.clock = hp, clock
        steps = hp.num_epochs * updates_per_epoch
        self.steps = min(steps, hp.max_steps) if hp.max_steps else steps
        self.seconds = 60.0 * hp.max_minutes
        self.reserve = 0.0
        self.follow = hp.lr_schedule in optimization.BUDGET_SCHEDULES
        # wsd with --average N: N - 1 checkpoints inside the cooldown, at the fractions
        # 1 - cooldown * k / N (k = N - 1, ..., 1), and the run's end saves the last one
        n = hp.average if hp.lr_schedule == "wsd" else 0
        self.points = [1.0 - hp.cooldown * k / n for k in range(n - 1, 0, -1)]
        self.checked = float(clock.budget_used)  # the fraction at the last check

    def estimate(self, dev, translator, dev_loss) -> float:
        """The seconds a dev evaluation with BLEU takes, before any has run (a run under
        ``max_minutes`` must keep them back from its first step, or a short run ends its
        budget before an evaluation that takes as long again). Timed here: the dev loss
        (all of dev), then one batch of the dev BLEU subset decoded twice (the first call
        traces the decoder, which this process then keeps), the second call's time
        scaled to the subset's batches. An untrained model's outputs run to the subset's
        length limit, so early in a run this is about the most the evaluation takes.
        ``dev``: the run's evaluation.dev.Dev, ``translator`` its Translator,
        ``dev_loss(corpus, batch_size)``: the run's (Trainer.dev_loss). The chief's figure,
        on every worker; the time counts as dev evaluation."""
        clock, hp = self.clock, self.hp
        t0 = time.time()
        dev_loss(dev.corpus, max(1, hp.tokens_per_batch // 64))
        seconds = time.time() - t0
        n = min(len(dev.src), hp.eval_batch_size)
        if n:
            translator.translate(dev.src[:n], dev.docs[:n])
            t1 = time.time()
            translator.translate(dev.src[:n], dev.docs[:n])
            seconds += (time.time() - t1) * -(-len(dev.src) // n)
        clock.eval_seconds.assign_add(time.time() - t0)
        return clock.chief_value(seconds)

    def fraction(self, step: int) -> float:
        """The fraction of the budget used after ``step`` updates (by the chief's clock
        in a multi-worker run: the workers' lr must agree)."""
        used = step / max(self.steps, 1)
        if self.seconds:
            used = max(used, self.clock.spent() / max(self.seconds - self.reserve, 1.0))
        return min(used, 1.0)

    def checkpoint_due(self, step: int) -> bool:
        """Whether the update that made ``step`` passed one of :attr:`points`: the run's
        last ``average`` checkpoints then lie evenly in the cooldown, whatever the number
        of epochs (a time-bounded run of a few long epochs would otherwise average
        checkpoints from before the decay)."""
        if not self.points:
            return False
        before, self.checked = self.checked, self.fraction(step)
        return any(before < p <= self.checked for p in self.points)

    def before_update(self) -> None:
        """Set ``budget_used`` for the next update, which the schedule reads."""
        if self.follow:
            used = max(float(self.clock.budget_used), self.fraction(self.clock.step()))
            self.clock.budget_used.assign(used)

    def out_of_time(self) -> bool:
        """The time left is what the final evaluation needs (by the chief's clock)."""
        if not self.seconds:
            return False
        return self.clock.spent() + self.reserve >= self.seconds

    def bleu_due(self, last_seconds: float) -> bool:
        """Under max_minutes, an epoch's dev BLEU runs only while evaluation, this one
        included (it takes about ``last_seconds``), stays within ``eval_share`` of the
        time used; the run's final evaluation always runs."""
        if not self.seconds:
            return True
        spent, evals = self.clock.spent(), float(self.clock.eval_seconds)
        return evals + last_seconds <= self.hp.eval_share * (spent + last_seconds)
