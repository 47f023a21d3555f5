"""The steps of a run's end (dev_evaluation.finish_run), each alone on a real Run of the
tiny demo model: the dropped partial accumulation, whether a budget-ended run still needs
a final dev BLEU and that evaluation, the last checkpoint, the average of the last
checkpoints, the default model among its candidates, and the closing lines and summary.
Whole runs through all of them: test_train_eval.py, test_budget.py, test_interrupts.py,
test_ema.py and others."""

import json
import os
import signal

import pytest
import tensorflow as tf

import train
from test_trainer import trainer_for
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.evaluation.dev import Dev
from transformer_tf2.evaluation.dev_evaluation import (
    Ending,
    Run,
    Stop,
    average_last_checkpoints,
    choose_default_model,
    closing_summary,
    drop_partial_accumulation,
    final_dev_bleu,
    needs_final_dev_bleu,
    save_last_position,
)
from transformer_tf2.training.budget import Budget
from transformer_tf2.training.interrupts import DevAbandoned, Interrupt

SIGNALLED = Stop("signal", "stopped by SIGINT")
BUDGET = Stop("budget", "max_steps=3 reached")


def run_for(demo_prepro, tmp_path, **kw) -> tuple[Run, list]:
    """A Run of the tiny demo run with ``kw`` as train.train builds it (untrained, nothing
    saved, no signal), and its first epoch's batches."""
    trainer, batches = trainer_for(demo_prepro, tmp_path, **kw)
    hp, tok = trainer.hp, trainer.tok
    dev = Dev(hp, tok)
    run = Run(
        hp=hp,
        trainer=trainer,
        data=data_load.TrainData(hp),
        dev=dev,
        translator=dev.translator(trainer.model, tok, hp),
        writer=tf.summary.create_noop_writer(),
        interrupt=Interrupt(),
        budget=Budget(hp, train.run_clock(trainer.state, trainer.workers), len(batches)),
    )
    assert run.health.trainer is trainer and run.saved is None and run.history == []
    return run, batches


def at_step(run: Run, step: int) -> None:
    """Move the run's step counter (the optimizer's iterations) to ``step``."""
    run.trainer.optimizer.iterations.assign(step)


def test_a_dropped_partial_accumulation_extends_the_stops_line(demo_prepro, tmp_path):
    """accum_steps=3 and two batches in: the step drops them (the data position goes back)
    and the stop's line says so; with nothing pending the stop is left as it is."""
    run, batches = run_for(demo_prepro, tmp_path, accum_steps=3)
    assert drop_partial_accumulation(run, None) is None  # nothing pending
    assert drop_partial_accumulation(run, SIGNALLED) is SIGNALLED
    state = run.trainer.state
    for batch in batches[:2]:
        run.trainer.train_batch(*batch)
        state.batch_in_epoch.assign_add(1)  # as train.py's loop does
    stop = drop_partial_accumulation(run, SIGNALLED)
    assert stop == Stop(
        "signal",
        "stopped by SIGINT; a partial gradient accumulation of 2 batch(es) was dropped (they "
        "are trained again on resume)",
    )
    assert int(state.batch_in_epoch) == 0 and run.trainer.step == 0
    assert drop_partial_accumulation(run, stop) is stop  # dropped once


def test_a_budget_end_needs_a_final_dev_bleu_unless_its_last_step_was_scored(demo_prepro, tmp_path):
    """Only a run its budget ended evaluates its final weights, and only where its last
    dev evaluation was at an earlier step or computed no BLEU (eval_share)."""
    run, _ = run_for(demo_prepro, tmp_path)
    at_step(run, 7)
    for stop in (None, SIGNALLED, Stop("early", "no better dev BLEU for 1 epochs")):
        assert not needs_final_dev_bleu(run, Ending(stop))
    budget = Ending(BUDGET)
    assert needs_final_dev_bleu(run, budget)  # no dev evaluation yet
    run.history.append(dict(step=5, dev_bleu=3.0))
    assert needs_final_dev_bleu(run, budget)  # an earlier step's
    run.history.append(dict(step=7, dev_bleu=None))
    assert needs_final_dev_bleu(run, budget)  # this step's, without BLEU
    run.history.append(dict(step=7, dev_bleu=0.0))
    assert not needs_final_dev_bleu(run, budget)  # this step's BLEU, even a zero one
    assert not needs_final_dev_bleu(run, Ending(SIGNALLED))


def test_the_final_dev_bleu_is_saved_as_the_best_or_given_up_for_a_signal(
    demo_prepro, tmp_path, monkeypatch
):
    """The final weights' evaluation joins the history and is saved, into best/ as the
    first dev BLEU; a signal during it abandons it and the run ends as that signal's."""
    run, _ = run_for(demo_prepro, tmp_path)
    state, logdir = run.trainer.state, run.hp.logdir
    assert final_dev_bleu(run, BUDGET) is BUDGET
    assert [h["step"] for h in run.history] == [0] and run.history[0]["dev_bleu"] >= 0
    assert run.saved == state.position == (0, 0, 0)
    assert tf.train.latest_checkpoint(logdir) == os.path.join(logdir, "ckpt-0")
    assert tf.train.latest_checkpoint(os.path.join(logdir, "best")).endswith("ckpt-0")
    assert float(state.best_bleu) == pytest.approx(run.history[0]["dev_bleu"])
    assert not needs_final_dev_bleu(run, Ending(BUDGET))

    def abandoned(*args, **kw):
        raise DevAbandoned

    at_step(run, 1)
    run.interrupt.signum = signal.SIGTERM
    monkeypatch.setattr(run.translator, "translate", abandoned)
    stop = final_dev_bleu(run, BUDGET)
    assert stop == Stop("signal", "stopped by SIGTERM during the final dev evaluation")
    assert len(run.history) == 1 and run.saved == (0, 0, 0)
    assert tf.train.latest_checkpoint(logdir).endswith("ckpt-0")  # nothing more saved


def test_the_last_position_is_saved_unless_the_newest_checkpoint_holds_it(
    demo_prepro, tmp_path, monkeypatch
):
    run, _ = run_for(demo_prepro, tmp_path)
    state, saves = run.trainer.state, []
    original = state.save
    monkeypatch.setattr(state, "save", lambda **kw: saves.append(kw) or original(**kw))
    save_last_position(run)
    assert saves == [{}] and run.saved == (0, 0, 0)
    save_last_position(run)  # the newest checkpoint holds it
    assert saves == [{}]
    state.batch_in_epoch.assign(4)
    save_last_position(run)
    assert saves == [{}, {}] and run.saved == (0, 0, 4)
    assert tf.train.latest_checkpoint(run.hp.logdir).endswith("ckpt-0")


def test_the_last_checkpoints_are_averaged_only_for_a_run_that_ends_with_them(
    demo_prepro, tmp_path, monkeypatch, capsys
):
    """--average 2: no average before the first dev evaluation, after a signal, without
    --average, in a multi-worker run (which says so) or with too few checkpoints; else
    the average of the last two, scored, its time counted as dev evaluation."""
    run, _ = run_for(demo_prepro, tmp_path, average=2)
    state = run.trainer.state
    state.save()
    assert average_last_checkpoints(run, Ending(None)) is None  # no dev evaluation
    run.history.append(dict(step=0, dev_bleu=1.0))
    assert average_last_checkpoints(run, Ending(SIGNALLED)) is None
    run.hp = hparams.apply(run.hp, {"average": 0})
    assert average_last_checkpoints(run, Ending(None)) is None
    run.hp = hparams.apply(run.hp, {"average": 2})
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(run.trainer, "multi_worker", True)
    assert average_last_checkpoints(run, Ending(BUDGET)) is None
    skipped = "train: --average is skipped in a multi-worker run: use average_checkpoints.py"
    assert capsys.readouterr().out == skipped + "\n"
    monkeypatch.undo()
    assert average_last_checkpoints(run, Ending(None)) is None
    assert "1 checkpoint(s), fewer than --average 2: no average" in capsys.readouterr().out
    at_step(run, 1)
    state.save()
    before = float(state.eval_seconds)
    averaged = average_last_checkpoints(run, Ending(BUDGET))
    names = [os.path.basename(p) for p in averaged["checkpoints"]]
    assert names == ["ckpt-0", "ckpt-1"] and averaged["dev_bleu"] >= 0
    assert float(state.eval_seconds) == pytest.approx(before + averaged["seconds"])


def test_the_default_model_is_the_best_candidate_of_the_chief(demo_prepro, tmp_path):
    """The best checkpoint, or an average that won on dev, recorded in best.json; none
    before a dev evaluation or on another worker than the chief."""
    run, _ = run_for(demo_prepro, tmp_path)
    state, logdir = run.trainer.state, run.hp.logdir
    state.best_bleu.assign(5.0)
    state.save(best=True)
    assert choose_default_model(run, Ending(None)) is None  # no dev evaluation
    run.history.append(dict(step=0, dev_bleu=5.0))
    best = os.path.join(logdir, "best", "ckpt-0")
    chosen = choose_default_model(run, Ending(None))
    assert chosen == dict(path=best, dev_bleu=5.0, what="best checkpoint by dev BLEU")
    path = os.path.join(logdir, "averaged", "avg-last2-0")
    average = dict(checkpoints=[best, best], dev_bleu=6.0, wins=True, path=path, seconds=1.0)
    chosen = choose_default_model(run, Ending(None, averaged=average))
    assert chosen["path"] == path and chosen["what"] == "average of ckpt-0, ckpt-0"
    with open(os.path.join(logdir, "best.json")) as f:
        assert json.load(f)["checkpoint"] == os.path.join("averaged", "avg-last2-0")
    lost = dict(average, dev_bleu=4.0, wins=False)
    assert choose_default_model(run, Ending(None, averaged=lost))["path"] == best
    state.chief = False
    assert choose_default_model(run, Ending(None, averaged=average)) is None


def test_a_signalled_ema_run_scores_no_more_candidates(demo_prepro, tmp_path, capsys):
    """With --ema_decay the best checkpoint's EMA weights are a candidate, and its own
    weights are scored here too, except in a run a signal ended."""
    run, _ = run_for(demo_prepro, tmp_path, ema_decay=0.9)
    state = run.trainer.state
    state.best_bleu.assign(50.0)
    state.save(best=True)
    run.history.append(dict(step=0, dev_bleu=50.0))
    chosen = choose_default_model(run, Ending(SIGNALLED))
    ema = "EMA weights (decay 0.9) of the best checkpoint"
    assert chosen == dict(path=state.ema_model_path(0), dev_bleu=50.0, what=ema)
    assert "against" not in capsys.readouterr().out  # the only candidate
    assert choose_default_model(run, Ending(BUDGET))["what"] == ema  # 50 is out of reach
    assert "against: best checkpoint's own weights" in capsys.readouterr().out


def test_the_closing_lines_say_why_the_run_ended_and_how_to_resume(demo_prepro, tmp_path, capsys):
    """A run a signal to another worker ended says the same command resumes it, and
    reports SIGTERM; one that trained its epochs is done; the summary takes the Ending's
    average and default model."""
    run, _ = run_for(demo_prepro, tmp_path)
    average, default = dict(dev_bleu=2.0), dict(path="p", dev_bleu=2.0, what="w")
    elsewhere = Stop("signal", "stopped by a signal to another worker")
    got = closing_summary(run, Ending(elsewhere, averaged=average, default=default))
    why = "stopped by a signal to another worker; run the same command again to resume"
    assert (got["stop_reason"], got["stop_kind"], got["signal"]) == (why, "signal", signal.SIGTERM)
    assert (got["averaged"], got["default"], got["checkpoint"]) == (average, default, None)
    assert f"train: {why}; step 0; checkpoint None\n" in capsys.readouterr().out
    run.interrupt.signum = signal.SIGINT
    assert closing_summary(run, Ending(SIGNALLED))["signal"] == signal.SIGINT
    capsys.readouterr()
    run.interrupt.signum = None
    got = closing_summary(run, Ending(BUDGET))
    assert (got["stop_reason"], got["stop_kind"], got["signal"]) == (BUDGET.why, "budget", None)
    save_last_position(run)
    got = closing_summary(run, Ending(None))
    assert (got["stop_reason"], got["stop_kind"], got["signal"]) == (None, None, None)
    out = capsys.readouterr().out
    assert f"train: done; step 0; checkpoint {os.path.join(run.hp.logdir, 'ckpt-0')}\n" in out
    assert out.startswith("train: ") and "of them on dev evaluation; last lr" in out
