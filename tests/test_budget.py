"""Training on a budget: the wsd and linear schedules, the fraction of the budget used for
each bound, its clock across resumes, dev evaluation within its share, the default model
(best checkpoint or average) and the runaway count of eval.py."""

import json
import os
import shutil
import time
import types

import numpy as np
import pytest
import tensorflow as tf

import train
from eval import evaluate
from helpers import tiny
from test_interrupts import ckpt_tensor
from transformer_tf2.config import hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.decoding import translator
from transformer_tf2.evaluation import dev_evaluation
from transformer_tf2.evaluation.dev import Dev
from transformer_tf2.layers import optimization
from transformer_tf2.models import checkpoints
from transformer_tf2.training import budget as budget_module
from transformer_tf2.training import run_state
from transformer_tf2.training.budget import Budget, RunClock
from transformer_tf2.training.trainer import Trainer
from transformer_tf2.utils import devices


# ---------------------------------------------------------------------------------------
# the schedules
# ---------------------------------------------------------------------------------------
def lr_at(schedule, step: int, used: float) -> float:
    schedule.progress.assign(used)
    return float(schedule(step))


def test_wsd_schedule_warms_up_holds_and_decays_to_zero():
    peak, w = 2e-3, 10
    wsd = optimization.TransformerSchedule("wsd", warmup_steps=w, lr=peak, cooldown=0.25)
    np.testing.assert_allclose(lr_at(wsd, 0, 0.0), peak / w, rtol=1e-6)  # step 1 of 10
    np.testing.assert_allclose(lr_at(wsd, 4, 0.0), peak * 5 / w, rtol=1e-6)
    for used in (0.0, 0.3, 0.75):  # stable until the cooldown starts
        np.testing.assert_allclose(lr_at(wsd, 500, used), peak, rtol=1e-6)
    # in the cooldown: peak * (1 - sqrt((p - 0.75) / 0.25))
    for used in (0.8, 0.9, 0.99):
        want = peak * (1 - np.sqrt((used - 0.75) / 0.25))
        np.testing.assert_allclose(lr_at(wsd, 500, used), want, rtol=1e-5)
    assert lr_at(wsd, 500, 1.0) == 0.0
    assert lr_at(wsd, 500, 1.5) == 0.0  # clipped: never negative
    lrs = [lr_at(wsd, 500, p) for p in np.linspace(0.75, 1.0, 50)]
    assert np.all(np.diff(lrs) < 0)  # falls all through the cooldown


def test_linear_schedule_falls_from_the_peak_to_zero():
    peak = 1e-3
    linear = optimization.TransformerSchedule("linear", warmup_steps=4, lr=peak)
    np.testing.assert_allclose(lr_at(linear, 1, 0.0), peak / 2, rtol=1e-6)
    for used in (0.0, 0.25, 0.5, 0.96):
        np.testing.assert_allclose(lr_at(linear, 100, used), peak * (1 - used), rtol=1e-5)
    assert lr_at(linear, 100, 1.0) == 0.0
    cfg = linear.get_config()
    assert cfg["kind"] == "linear" and cfg["cooldown"] == 0.2
    again = optimization.TransformerSchedule.from_config(cfg)
    np.testing.assert_allclose(lr_at(again, 100, 0.5), peak / 2, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# the fraction of the budget used, for each bound
# ---------------------------------------------------------------------------------------
class FakeTrainer:
    """What train.run_clock reads of a run's state (RunState: the step, the wall time
    and evaluation time of the run, and the budget_used variable) and of its workers
    (devices.Workers.chief_value): one object plays both."""

    def __init__(self, step=0, seconds=0.0, eval_seconds=0.0, used=0.0):
        self.step, self.seconds = step, seconds
        self.budget_used, self.eval_seconds = tf.Variable(used), tf.Variable(eval_seconds)

    def seconds_used(self):
        return self.seconds

    def chief_value(self, value):
        return value


def clock(t: FakeTrainer) -> RunClock:
    return train.run_clock(t, t)  # what the run's Budget sees of a Trainer


def budget(trainer, updates_per_epoch=10, **kw):
    hp = hparams.apply(hparams.Hparams(), {"lr_schedule": "wsd", **kw})
    return Budget(hp, clock(trainer), updates_per_epoch)


def test_budget_fraction_for_each_bound():
    t = FakeTrainer()
    by_epochs = budget(t, num_epochs=3)  # 30 updates
    assert by_epochs.steps == 30 and not by_epochs.out_of_time()
    assert by_epochs.fraction(15) == 0.5 and by_epochs.fraction(30) == 1.0
    by_steps = budget(t, num_epochs=3, max_steps=12)  # max_steps binds first
    assert by_steps.steps == 12 and by_steps.fraction(6) == 0.5
    assert budget(t, num_epochs=1, max_steps=50).steps == 10  # the epochs bind first
    # max_minutes: the larger of the step and time fractions
    t.seconds = 30.0
    by_time = budget(t, num_epochs=100, max_minutes=1)
    assert by_time.fraction(0) == 0.5 and by_time.fraction(800) == 0.8
    # a reserve for the final evaluation: the time fraction reaches 1 when it must start
    by_time.reserve = 10.0
    np.testing.assert_allclose(by_time.fraction(0), 30 / 50)
    t.seconds = 49.0
    assert not by_time.out_of_time()
    t.seconds = 50.0
    assert by_time.out_of_time() and by_time.fraction(0) == 1.0


def test_budget_used_never_falls():
    """A resume with a larger budget does not raise the lr: the fraction holds until the
    new budget's fraction passes it."""
    t = FakeTrainer(step=20, used=0.9)
    b = budget(t, num_epochs=2)  # 20 of 20 updates: 1.0
    b.before_update()
    assert float(t.budget_used) == 1.0
    b = budget(t, num_epochs=4)  # raised: 20 / 40 = 0.5 < 1.0
    b.before_update()
    assert float(t.budget_used) == 1.0
    t.budget_used.assign(0.3)
    b.before_update()
    assert float(t.budget_used) == 0.5
    # a schedule that does not follow the budget leaves it alone
    t.budget_used.assign(0.0)
    hp = hparams.apply(hparams.Hparams(), {"lr_schedule": "kyubyong", "num_epochs": 4})
    Budget(hp, clock(t), 10).before_update()
    assert float(t.budget_used) == 0.0


def test_dev_bleu_runs_within_its_share_of_a_time_budget():
    t = FakeTrainer(seconds=100.0, eval_seconds=5.0)
    b = budget(t, max_minutes=10, eval_share=0.1)
    assert b.bleu_due(4.0)  # 5 + 4 <= 0.1 * 104
    t.eval_seconds.assign(8.0)
    assert not b.bleu_due(4.0)  # 12 > 10.4
    assert b.bleu_due(0.0)  # 8 <= 10
    t.eval_seconds.assign(11.0)
    assert not b.bleu_due(0.0)  # 11 > 10
    assert budget(t, num_epochs=5).bleu_due(100.0)  # no time budget: every epoch


# ---------------------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------------------
# (a wsd run stopped in its cooldown and resumed: test_context's memory run)


class Clock:
    """The training modules' time.time(), made to advance 0.05 s per training batch, 0.1 s
    per dev loss pass and 0.5 s per dev translation: a time budget runs the same on a fast
    or a loaded machine."""

    def __init__(self, monkeypatch):
        self.now = 1000.0
        fake = types.SimpleNamespace(time=lambda: self.now, strftime=time.strftime)
        for module in (train, run_state, budget_module, checkpoints, dev_evaluation):
            monkeypatch.setattr(module, "time", fake)
        for cls, name, seconds in (
            (Trainer, "train_batch", 0.05),
            (Trainer, "dev_loss", 0.1),
            (translator.Translator, "translate", 0.5),
        ):
            monkeypatch.setattr(cls, name, self.taking(getattr(cls, name), seconds))

    def taking(self, method, seconds):
        def timed(*args, **kw):
            self.now += seconds
            return method(*args, **kw)

        return timed


def wsd_run(demo_prepro, tmp_path, **kw) -> hparams.Hparams:
    """Hparams of a wsd run (warmup 5 steps) on the demo's prepro, bounded by ``kw``."""
    base = dict(data_dir=demo_prepro.data_dir, prepro_dir=demo_prepro.prepro_dir)
    return tiny(str(tmp_path), **base, lr_schedule="wsd", warmup_steps=5, **kw)


@pytest.mark.slow
def test_time_budget_is_the_total_over_resumes(demo_prepro, tmp_path, monkeypatch, capsys):
    """max_minutes counts the time of every start: a 6-second wsd budget trained in two
    starts (max_minutes 0.05, then 0.1) ends near 6 s in all, not 3 + 6, with its lr
    under 5% of the peak at the last update; dev BLEU stays within its share of the time,
    and the final weights get a dev evaluation. (20 batches an epoch: 1 s of training,
    then 0.1 s of dev loss and 0.5 s of dev BLEU.)"""
    Clock(monkeypatch)
    hp = wsd_run(demo_prepro, tmp_path, num_epochs=1000, max_minutes=0.05, eval_share=0.3)
    first = train.train(hp)
    assert first["stop_reason"] == "max_minutes=0.05 reached"
    seconds = ckpt_tensor(first["checkpoint"], "seconds")
    assert 3.0 - 0.5 <= seconds <= 3.0 + 0.05  # the final evaluation inside the budget
    assert ckpt_tensor(first["checkpoint"], "budget_used") >= 0.98
    second = train.train(hparams.apply(hp, {"max_minutes": 0.1}))
    assert second["step"] > first["step"]
    total = ckpt_tensor(second["checkpoint"], "seconds")
    assert 6.0 - 0.5 <= total <= 6.0 + 0.05  # the clock went on from the first start
    used = ckpt_tensor(second["checkpoint"], "budget_used")
    assert used >= 0.98  # lr <= 5% of the peak: 1 - sqrt((0.98 - 0.8) / 0.2) = 0.051
    schedule = optimization.TransformerSchedule("wsd", warmup_steps=5, lr=hp.lr)
    assert lr_at(schedule, second["step"] - 1, used) <= 0.052 * hp.lr
    # dev BLEU was skipped where it would have passed 30% of the time; never the last
    history = first["history"] + second["history"]
    assert any(h["dev_bleu"] is None for h in history)
    assert second["history"][-1]["step"] == second["step"]
    assert second["history"][-1]["dev_bleu"] is not None
    evals = ckpt_tensor(second["checkpoint"], "eval_seconds")
    # one evaluation (the final) may pass it; each start also timed the evaluation
    # (Budget.estimate: one dev loss, two translations: 1.1 s)
    assert evals <= 0.3 * total + 0.5 + 2 * 1.1
    assert second["eval_share"] == pytest.approx(evals / total, rel=1e-3)
    assert f"{total / 60:.1f} min, {evals / total:.1%} of them on dev evaluation" in (
        capsys.readouterr().out
    )


@pytest.mark.slow
def test_a_budget_keeps_back_the_final_evaluation_before_the_first(
    demo_prepro, tmp_path, monkeypatch, capsys
):
    """With no dev BLEU before the end (eval_share 1%), a 3-second budget still ends at
    3 s, not at 3 s plus the final evaluation: before its first step the run times the
    dev loss and one batch of the dev BLEU subset (0.1 s and 0.5 s here), keeps that
    back, and the final evaluation takes what was kept back."""
    Clock(monkeypatch)
    hp = wsd_run(demo_prepro, tmp_path, num_epochs=1000, max_minutes=0.05, eval_share=0.01)
    summary = train.train(hp)
    assert "train: 0.6 s of max_minutes kept back for the final dev evaluation (estimated)" in (
        capsys.readouterr().out
    )
    assert [h["dev_bleu"] is None for h in summary["history"][:-1]] == [True] * (
        len(summary["history"]) - 1
    )
    assert summary["history"][-1]["seconds"] == pytest.approx(0.6)
    seconds = ckpt_tensor(summary["checkpoint"], "seconds")
    assert 3.0 - 0.2 <= seconds <= 3.0 + 0.05
    assert ckpt_tensor(summary["checkpoint"], "budget_used") >= 0.98


@pytest.mark.slow
def test_wsd_checkpoints_for_the_average_lie_in_the_cooldown(demo_prepro, tmp_path):
    """wsd with --average 3 over 40 steps (the cooldown: the last 20 %, steps 33-40):
    besides the epochs' checkpoints, one after each update that passes 1 - 0.2 * 2/3 and
    1 - 0.2 / 3 of the budget (steps 35 and 38), so that the three averaged checkpoints
    lie in the cooldown, the last one at the end."""
    hp = wsd_run(demo_prepro, tmp_path, num_epochs=100, max_steps=40, average=3)
    epoch = len(data_load.TrainData(hp).batches(0))
    summary = train.train(hp)
    saved = {
        int(p.rsplit("-", 1)[1])
        for p in tf.train.get_checkpoint_state(hp.logdir).all_model_checkpoint_paths
    }
    assert {35, 38, 40} <= saved
    assert saved - {35, 38, 40} <= {k * epoch for k in range(1, 40 // epoch + 1)}
    averaged = [int(p.rsplit("-", 1)[1]) for p in summary["averaged"]["checkpoints"]]
    assert len(averaged) == 3 and averaged[-1] == 40 and min(averaged) > 0.8 * 40
    # no two closer than half the planned spacing (0.5 * 0.2 * 40 / 3 steps)
    assert min(b - a for a, b in zip(averaged, averaged[1:])) >= 0.5 * 0.2 * 40 / 3


# ---------------------------------------------------------------------------------------
# the default model
# ---------------------------------------------------------------------------------------
def write_checkpoints(logdir):
    """ckpt-1, ckpt-2 in logdir and best/ckpt-1 (of a single variable)."""
    v = tf.Variable(1.0)
    ckpt = tf.train.Checkpoint(v=v)
    last = tf.train.CheckpointManager(ckpt, logdir, 5)
    best = tf.train.CheckpointManager(ckpt, os.path.join(logdir, "best"), 1)
    last.save(1)
    best.save(1)
    last.save(2)
    return ckpt


def test_default_checkpoint_best_json_then_best_then_last(tmp_path):
    logdir = str(tmp_path / "log")
    with pytest.raises(UserError, match="no checkpoint in .*: run train.py first"):
        checkpoints.choose_checkpoint(logdir)
    ckpt = write_checkpoints(logdir)
    best, last = os.path.join(logdir, "best", "ckpt-1"), os.path.join(logdir, "ckpt-2")
    path, why = checkpoints.choose_checkpoint(logdir)
    assert path == best and why.startswith("the best checkpoint by dev BLEU")
    assert checkpoints.choose_checkpoint(logdir, "last") == (last, "the newest checkpoint")
    assert checkpoints.choose_checkpoint(logdir, "best")[0] == best
    assert checkpoints.choose_checkpoint(logdir, "/x/ckpt-7") == ("/x/ckpt-7", "--ckpt")
    # an average recorded by train.py comes first
    avg = os.path.join(logdir, "averaged", "avg-last2-2")
    ckpt.write(avg)
    checkpoints.write_default(logdir, avg, 31.5, "average of ckpt-1, ckpt-2")
    path, why = checkpoints.choose_checkpoint(logdir)
    assert path == avg and "average of ckpt-1, ckpt-2, dev BLEU 31.50" in why
    assert checkpoints.choose_checkpoint(logdir, "last")[0] == last
    assert checkpoints.choose_checkpoint(logdir, "best")[0] == best
    # a record whose checkpoint is gone falls back to the best; an unreadable one is an error
    for name in os.listdir(os.path.dirname(avg)):
        os.remove(os.path.join(os.path.dirname(avg), name))
    assert checkpoints.choose_checkpoint(logdir)[0] == best
    with open(os.path.join(logdir, "best.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(UserError, match="best.json is unreadable .*--ckpt last"):
        checkpoints.choose_checkpoint(logdir)


@pytest.mark.slow
def test_eval_uses_the_default_model_and_ckpt_last(run, capsys, tmp_path):
    """The 3-epoch run: best.json names its best checkpoint; eval.py loads it by default
    and says so, --ckpt last loads the newest."""
    hp, summary, result = run
    with open(os.path.join(hp.logdir, "best.json")) as f:
        record = json.load(f)
    best = tf.train.latest_checkpoint(os.path.join(hp.logdir, "best"))
    assert os.path.join(hp.logdir, record["checkpoint"]) == best
    bleus = [h["dev_bleu"] for h in summary["history"]]
    assert record["dev_bleu"] == pytest.approx(max(bleus), abs=1e-4)
    with open(result["results"] + ".json") as f:
        assert json.load(f)["decoding"]["checkpoint"] == best
    capsys.readouterr()
    last = evaluate(hp.logdir, {"results_dir": str(tmp_path)}, "last")
    with open(last["results"] + ".json") as f:
        assert json.load(f)["decoding"]["checkpoint"] == summary["checkpoint"]
    assert f"eval: model {summary['checkpoint']} (the newest checkpoint)" in capsys.readouterr().err


@pytest.mark.slow
def test_average_becomes_the_default_only_where_it_wins(demo_prepro, tmp_path):
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        lr_schedule="wsd",
        num_epochs=4,
        average=3,
    )
    summary = train.train(hp)
    averaged = summary["averaged"]
    steps = [int(p.rsplit("-", 1)[1]) for p in averaged["checkpoints"]]
    # the last three, in the cooldown (test_wsd_checkpoints_for_the_average_lie_in_the_cooldown)
    assert len(steps) == 3 and steps[-1] == summary["step"] and min(steps) > 0.8 * steps[-1]
    best = max(h["dev_bleu"] for h in summary["history"])
    assert averaged["wins"] == (averaged["dev_bleu"] > best)
    with open(os.path.join(hp.logdir, "best.json")) as f:
        record = json.load(f)
    if averaged["wins"]:
        assert record["checkpoint"].startswith("averaged/avg-last3-")
        assert record["dev_bleu"] == pytest.approx(averaged["dev_bleu"], abs=1e-4)
    else:
        assert record["checkpoint"].startswith("best/ckpt-")
        assert record["dev_bleu"] == pytest.approx(best, abs=1e-4)
    # the default model loads (an average holds the weights alone)
    path = checkpoints.load_run(hp.logdir, {})[3]
    assert path == os.path.join(hp.logdir, record["checkpoint"])
    # an average that wins is written, recorded and loaded; the model gets its weights back
    tok = data_load.load_tokenizer(hp)
    trainer = Trainer(hp, tok, tf.distribute.get_strategy(), "float32")
    trainer.state.restore()
    own = [w.numpy() for w in trainer.model.weights]
    trainer.state.best_bleu.assign(-1.0)
    dev = Dev(hp, tok)
    translator = dev.translator(trainer.model, tok, hp)
    averaged = checkpoints.average_last(
        hp,
        trainer.model,
        trainer.state.manager.checkpoints,
        trainer.step,
        float(trainer.state.best_bleu),
        trainer.state.chief,
        lambda: train.dev_bleu(dev, translator),
    )
    assert averaged["wins"] and averaged["path"].endswith(f"averaged/avg-last3-{trainer.step}")
    for w, value in zip(trainer.model.weights, own):
        np.testing.assert_array_equal(w.numpy(), value)
    assert averaged["seconds"] > 0
    best = dict(
        path=trainer.state.best.directory, dev_bleu=-1.0, what="best checkpoint by dev BLEU"
    )
    chosen = checkpoints.record_default(hp.logdir, [best, dict(averaged, what="average")])
    assert chosen["path"] == averaged["path"]
    saved, _, model, path = checkpoints.load_run(hp.logdir, {})
    assert path == averaged["path"]
    table = next(n for n, _ in tf.train.list_variables(path) if n.startswith("model/tgt_emb"))
    tables = [tf.train.load_checkpoint(p).get_tensor(table) for p in averaged["checkpoints"]]
    got = tf.train.load_checkpoint(path).get_tensor(table)
    np.testing.assert_allclose(got, np.mean(tables, axis=0), rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------
# runaway outputs, the dev length limit, precision
# ---------------------------------------------------------------------------------------
def test_runaways_are_outputs_without_end_of_sentence():
    eos, pad = data_load.EOS_ID, data_load.PAD_ID
    outs = [
        (np.array([[7, 8, eos, pad]]), np.zeros(1)),
        None,  # an empty source
        (np.array([[7, 7, 7, 7]]), np.zeros(1)),  # hit its limit
        (np.array([[9, 9, 9, 9], [5, eos, pad, pad]]), np.zeros(2)),  # the best has none
    ]
    assert translator.runaways(outs) == [2, 3]


@pytest.mark.slow
def test_eval_counts_runaway_outputs(quick_run, tmp_path):
    """A model trained for 3 steps: eval.py's count equals the outputs without </S>,
    counted here from the decoder's ids, in the results file and its JSON."""
    hp, _ = quick_run
    result = evaluate(hp.logdir, {"results_dir": str(tmp_path), "max_len_extra": 3}, "last")
    with open(result["results"] + ".json") as f:
        figures = json.load(f)
    saved, tok, model, _ = checkpoints.load_run(hp.logdir, {"max_len_extra": 3}, "last")
    sources, _ = data_load.read_raw(saved, "test")
    outs = translator.Translator(model, tok, saved).translate_ids(tok.encode_src(sources))
    ends = [o is None or data_load.EOS_ID in o[0][0] for o in outs]
    assert figures["runaways"] == ends.count(False) > 0
    assert figures["runaway_lines"] == [i + 1 for i, e in enumerate(ends) if not e]
    with open(result["results"]) as f:
        text = f.read()
    line = f"runaway outputs (length limit reached without </S>) = {ends.count(False)} of "
    assert line + f"{len(sources)}\n" in text


def test_dev_bleu_subset_has_one_length_limit(demo_prepro):
    tok = data_load.load_tokenizer(demo_prepro)
    dev = Dev(demo_prepro, tok)
    assert len(dev.src) == demo_prepro.dev_bleu_sents == 8
    assert dev.max_len == max(len(ids) for ids in tok.encode_tgt(dev.ref)) + 10
    model = types.SimpleNamespace(
        key_mask_defect=False,
        memory_sentences=0,
        target_memory_sentences=0,
        reads_documents=False,
        compute_dtype="float32",
        pin_output=lambda: None,
    )
    translator = dev.translator(model, tok, demo_prepro)
    assert translator.hp.max_len == dev.max_len


def test_auto_precision_trains_in_bfloat16_where_the_cpu_has_it(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_bf16\n")
    assert devices.cpu_bf16(str(cpuinfo)) == "AVX512-BF16 and AMX-BF16"
    cpuinfo.write_text("flags\t\t: fpu sse avx512f\n")
    assert devices.cpu_bf16(str(cpuinfo)) == ""
    assert devices.cpu_bf16(str(tmp_path / "missing")) == ""
    monkeypatch.setattr(devices, "cpu_bf16", lambda: "AVX512-BF16")
    precision, why = devices.auto_precision([], "train")
    assert (
        precision == "mixed_bfloat16" and why == "auto: no GPU; training on a CPU with AVX512-BF16"
    )
    for who in ("eval", "translate", "export"):
        assert devices.auto_precision([], who) == ("float32", "auto: no GPU")
    monkeypatch.setattr(devices, "cpu_bf16", lambda: "")
    assert devices.auto_precision([], "train") == ("float32", "auto: no GPU")


@pytest.mark.slow
def test_the_run_records_its_precision_and_decoding_uses_float32(
    demo_prepro, tmp_path, monkeypatch
):
    monkeypatch.setattr(devices, "cpu_bf16", lambda: "AVX512-BF16")
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        precision="auto",
        max_steps=2,
    )
    train.train(hp)
    assert hparams.load(os.path.join(hp.logdir, "hparams.json")).precision == "mixed_bfloat16"
    saved, _, model, _ = checkpoints.load_run(hp.logdir, {}, "last")
    assert saved.precision == "float32" and model.compute_dtype == "float32"
    asked, _, model, _ = checkpoints.load_run(hp.logdir, {"precision": "mixed_bfloat16"}, "last")
    assert asked.precision == "mixed_bfloat16" and model.compute_dtype == "bfloat16"


# ---------------------------------------------------------------------------------------
# a run that has nothing left to train
# ---------------------------------------------------------------------------------------
def snapshot(folder) -> dict:
    """Every file under ``folder`` but the lock's note: its bytes and mtime."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if name != "train.lock":
                with open(path, "rb") as f:
                    out[os.path.relpath(path, folder)] = (f.read(), os.stat(path).st_mtime_ns)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra,why",
    [
        ({}, "has reached max_steps=3 (step 3); raise --max_steps"),
        ({"max_steps": 0, "num_epochs": 1, "max_minutes": 0.001}, "has spent max_minutes=0.001"),
    ],
)
def test_a_finished_run_trains_nothing_writes_nothing_and_says_so(
    quick_run, tmp_path, capsys, extra, why
):
    """A rerun of a run at its max_steps (before this, it trained one more step and
    wrote ckpt-4), or past its max_minutes: no step, no file, and the line says why."""
    hp, _ = quick_run
    logdir = str(tmp_path / "log")
    shutil.copytree(hp.logdir, logdir)
    before = snapshot(logdir)
    summary = train.train(hparams.apply(hp, {"logdir": logdir, **extra}))
    assert (summary["step"], summary["stop_kind"], summary["history"]) == (3, "finished", [])
    assert why in summary["stop_reason"]
    assert f"train: {logdir} {why}" in capsys.readouterr().out
    assert snapshot(logdir) == before


@pytest.mark.slow
def test_early_stopping_stops_when_dev_bleu_cannot_improve_and_says_why(
    demo_prepro, tmp_path, capsys
):
    """At a learning rate of 1e-12 the weights cannot move the dev BLEU: epoch 1 sets
    the best, epoch 2 does not beat it, and --early_stopping 1 ends the run there (of
    its 4 epochs) with the reason; the same command again trains nothing."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        lr_schedule="constant",
        lr=1e-12,
        num_epochs=4,
        early_stopping=1,
    )
    summary = train.train(hp)
    bleus = [h["dev_bleu"] for h in summary["history"]]
    assert len(bleus) == 2 and bleus[0] == bleus[1], bleus
    assert (summary["epoch"], summary["stop_kind"]) == (2, "early")
    assert summary["stop_reason"] == "no better dev BLEU for 1 epochs"
    out = capsys.readouterr().out
    assert f"train: no better dev BLEU for 1 epochs; step {summary['step']}" in out
    again = train.train(hp)
    assert (again["step"], again["stop_kind"]) == (summary["step"], "finished")
    assert "stopped early after 1 epochs without a better dev BLEU" in capsys.readouterr().out
