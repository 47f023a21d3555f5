"""Interrupted runs: SIGINT/SIGTERM stop at a checkpoint, one training per logdir, exact
resume, and the SIGKILL fault-injection loop."""

import dataclasses
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import train
from helpers import ROOT, tiny
from transformer_tf2.config import cli, hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import translator
from transformer_tf2.models import checkpoints
from transformer_tf2.training.trainer import Trainer


def ckpt_tensor(path, key):
    return tf.train.load_checkpoint(path).get_tensor(f"{key}/.ATTRIBUTES/VARIABLE_VALUE")


def rng_counters(path):
    """The second element of each dropout layer's SeedGenerator state in a checkpoint:
    how many training calls the layer has drawn masks for."""
    names = [n for n, _ in tf.train.list_variables(path) if n.startswith("dropout_rng/")]
    return sorted({int(tf.train.load_checkpoint(path).get_tensor(n)[1]) for n in names})


def signal_after(monkeypatch, batch, *signums):
    """Make Trainer.train_batch send ``signums`` to this process right after its
    ``batch``-th call (the handlers run before that call returns)."""
    original, calls = Trainer.train_batch, []

    def patched(self, *args, **kw):
        result = original(self, *args, **kw)
        calls.append(batch)
        if len(calls) == batch:
            for signum in signums:
                os.kill(os.getpid(), signum)
        return result

    monkeypatch.setattr(Trainer, "train_batch", patched)


def argv(hp):
    return [x for k, v in dataclasses.asdict(hp).items() for x in (f"--{k}", str(v))]


@pytest.mark.slow
def test_sigterm_finishes_the_step_checkpoints_and_exits_143(
    demo_prepro, tmp_path, monkeypatch, capfd
):
    """train.py given SIGTERM during step 4: the step ends, ckpt-4 is written at batch 4,
    one clear line says so and the exit status is 143; the handlers are put back."""
    hp = tiny(str(tmp_path), data_dir=demo_prepro.data_dir, prepro_dir=demo_prepro.prepro_dir)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signal_after(monkeypatch, 4, signal.SIGTERM)
    monkeypatch.setattr(sys, "argv", ["train.py", *argv(hp)])
    with pytest.raises(SystemExit) as stop:
        cli.run_main(train.main)
    assert stop.value.code == 143
    out = capfd.readouterr()
    path = os.path.join(hp.logdir, "ckpt-4")
    stopped = "train: stopped by SIGTERM; run the same command again to resume; step 4"
    assert f"{stopped}; checkpoint {path}" in out.out
    assert "SIGTERM: finishing the step and writing a checkpoint" in out.err
    assert tf.train.latest_checkpoint(hp.logdir) == path
    assert ckpt_tensor(path, "batch_in_epoch") == 4 and ckpt_tensor(path, "epoch") == 0
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


@pytest.mark.slow
def test_sigint_drops_a_partial_accumulation(demo_prepro, tmp_path, monkeypatch):
    """accum_steps=3, SIGINT after batch 5: the update of batches 1-3 is kept; batches 4-5
    are dropped, so the checkpoint's data position and dropout random state are those of
    batch 3, where a resumed run goes on as the uninterrupted one would."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        accum_steps=3,
    )
    signal_after(monkeypatch, 5, signal.SIGINT)
    summary = train.train(hp)
    assert summary["signal"] == signal.SIGINT and summary["step"] == 1
    assert "partial gradient accumulation of 2 batch(es) was dropped" in summary["stop_reason"]
    path = summary["checkpoint"]
    assert path == os.path.join(hp.logdir, "ckpt-1")
    assert ckpt_tensor(path, "batch_in_epoch") == 3
    assert rng_counters(path) == [3]  # every dropout layer drew masks for 3 batches, not 5


@pytest.mark.slow
def test_signal_during_dev_evaluation_abandons_it(demo_prepro, tmp_path, monkeypatch):
    """A signal while the dev set is decoded abandons that evaluation; the checkpoint
    holds the end of epoch 1, so the resumed run evaluates epoch 1 and trains no step."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        num_epochs=1,
    )
    original = translator.Translator.translate

    def translate(self, sentences, docs=None):  # the dev evaluation decodes here
        os.kill(os.getpid(), signal.SIGTERM)
        return original(self, sentences, docs)

    monkeypatch.setattr(translator.Translator, "translate", translate)
    summary = train.train(hp)
    assert summary["signal"] == signal.SIGTERM and summary["history"] == []
    assert "the dev evaluation of epoch 1 was abandoned" in summary["stop_reason"]
    steps = summary["step"]
    path = summary["checkpoint"]
    assert ckpt_tensor(path, "epoch") == 0 and ckpt_tensor(path, "batch_in_epoch") == steps
    monkeypatch.undo()
    resumed = train.train(hp)
    assert resumed["step"] == steps and resumed["epoch"] == 1 and resumed["signal"] is None
    assert [h["epoch"] for h in resumed["history"]] == [1]


@pytest.mark.slow
def test_second_signal_exits_at_once(demo_prepro, tmp_path, monkeypatch):
    """Two SIGTERMs during step 3: the second exits at once with status 143, writing
    nothing; the run is loadable at ckpt-2 (written before)."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        ckpt_every_steps=2,
    )
    exits = []

    def exit_now(status):  # os._exit, which would end pytest too
        exits.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(os, "_exit", exit_now)
    signal_after(monkeypatch, 3, signal.SIGTERM, signal.SIGTERM)
    with pytest.raises(SystemExit):
        train.train(hp)
    assert exits == [143]
    assert tf.train.latest_checkpoint(hp.logdir) == os.path.join(hp.logdir, "ckpt-2")
    _, _, _, path = checkpoints.load_run(hp.logdir, {})
    assert path.endswith("ckpt-2")


def test_one_training_per_logdir(quick_run):
    """While a process holds the logdir's lock, train() stops at once, naming it; a
    non-chief worker takes no lock; the lock goes with its holder."""
    hp, _ = quick_run
    with checkpoints.LogdirLock(hp.logdir):
        with open(os.path.join(hp.logdir, "train.lock")) as f:
            assert f.read().startswith(f"pid {os.getpid()} on ")
        with pytest.raises(
            hparams.UserError,
            match=re.escape(f"{hp.logdir} is in use by another training run (pid {os.getpid()} on ")
            + r".*started .*\); wait for it to end or stop it, or pass another --logdir",
        ):
            train.train(hp)
        with checkpoints.LogdirLock(hp.logdir, active=False):  # a non-chief worker
            pass
    with checkpoints.LogdirLock(hp.logdir):  # released
        pass


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_same_weights(demo_prepro, tmp_path, capsys):
    """With dropout and BPE-dropout, a run stopped at step 12 and resumed to step 26
    (across the end of epoch 1 and its dev evaluation, into epoch 2's own segmentation)
    ends with the weights and Adam slots of an uninterrupted run. Resumed without the
    dropout random state (a checkpoint of an older version), it does not: the masks of
    the first steps are drawn again."""
    base = dict(
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        dropout_rate=0.3,
        bpe_dropout=0.1,
    )
    straight = train.train(tiny(str(tmp_path / "straight"), max_steps=26, **base))
    hp = tiny(str(tmp_path / "resumed"), max_steps=12, **base)
    assert train.train(hp)["step"] == 12
    old = hparams.apply(hp, {"logdir": str(tmp_path / "old")})
    shutil.copytree(hp.logdir, old.logdir)  # the same 12 steps, for the resume below
    resumed = train.train(hparams.apply(hp, {"max_steps": 26}))
    assert resumed["step"] == straight["step"] == 26 and resumed["epoch"] == 1
    a, b = (tf.train.load_checkpoint(s["checkpoint"]) for s in (straight, resumed))
    names = [n for n in a.get_variable_to_shape_map() if n.startswith(("model/", "optimizer/"))]
    assert len(names) == 94  # 31 weights, 62 Adam slots, the step count
    for name in names:
        np.testing.assert_allclose(a.get_tensor(name), b.get_tensor(name), atol=1e-6, err_msg=name)
    assert rng_counters(straight["checkpoint"]) == rng_counters(resumed["checkpoint"]) == [26]
    # the same resume from a checkpoint without the dropout state
    strategy = tf.distribute.get_strategy()
    trainer = Trainer(old, data_load.load_tokenizer(old), strategy, "float32")
    trainer.state.restore()
    items = {k: v for k, v in trainer.state.items.items() if k != "dropout_rng"}
    # ckpt-12 again, as an older version wrote it
    tf.train.CheckpointManager(tf.train.Checkpoint(**items), old.logdir, 3).save(12)
    capsys.readouterr()
    again = train.train(hparams.apply(old, {"max_steps": 26}))
    assert "holds no dropout random state (an older checkpoint)" in capsys.readouterr().out
    c = tf.train.load_checkpoint(again["checkpoint"])
    differ = [n for n in names if not np.allclose(a.get_tensor(n), c.get_tensor(n), atol=1e-6)]
    assert len(differ) > len(names) // 2


# One process imports the project once and forks a training process per life: each life
# is a new process running train.py's main (argv, handlers, exit status), without the
# seconds of importing TensorFlow again. Commands and answers are JSON lines.
FORKER = r"""
import json, os, sys
import train
from transformer_tf2.config import cli, hparams
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        for fd, path in ((1, job["out"]), (2, job["err"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.stdout.reconfigure(line_buffering=True)  # as on a terminal: lines survive a kill
        sys.argv = ["train.py", *job["argv"]]
        status = 0
        try:
            cli.run_main(train.main)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class Lives:
    """The training processes of one run, started one after another by the forker."""

    def __init__(self, hp, folder):
        self.hp, self.folder, self.count = hp, folder, 0
        with open(os.path.join(folder, "forker.err"), "w") as err:
            self.forker = subprocess.Popen(
                [sys.executable, "-c", FORKER],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    def start(self):
        self.count += 1
        self.out, self.err = (os.path.join(self.folder, f"life{self.count}.{x}") for x in "oe")
        job = {"out": self.out, "err": self.err, "argv": argv(self.hp)}
        self.forker.stdin.write(json.dumps(job) + "\n")
        self.forker.stdin.flush()
        self.pid, self.started = json.loads(self.forker.stdout.readline())["pid"], time.time()

    def alive(self):
        try:
            os.kill(self.pid, 0)
            return True
        except ProcessLookupError:  # ended and reaped by the forker
            return False

    def wait(self):
        """The exit status (-9 for SIGKILL), stdout and stderr of the current life."""
        status = json.loads(self.forker.stdout.readline())["status"]
        with open(self.out, encoding="utf-8") as o, open(self.err, encoding="utf-8") as e:
            return status, o.read(), e.read()

    def close(self):
        self.forker.stdin.close()
        self.forker.wait(timeout=60)


def latest_step(logdir):
    """The step of the newest checkpoint that logdir's `checkpoint` file names (0: none)."""
    try:
        with open(os.path.join(logdir, "checkpoint"), encoding="utf-8") as f:
            first = f.readline()
    except FileNotFoundError:
        return 0
    match = re.search(r'ckpt-(\d+)"', first)
    return int(match.group(1)) if match else 0


def wait_for(condition, lives, timeout=120.0, poll=0.01):
    end = time.time() + timeout
    while time.time() < end and lives.alive() and not condition():
        time.sleep(poll)


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_no_checkpoint(demo_prepro, tmp_path):
    """6 SIGKILLs of a training process at seeded random moments, two of each kind
    (during start-up and restore, while a checkpoint is written, a few steps in, which
    includes dev evaluations), then a SIGTERM and a SIGINT:
    every restart resumes from the newest checkpoint its predecessor completed, no
    checkpointed step is lost, and the run ends at its planned step. (A second signal is
    tested in process: two signals sent at once are delivered as one.)"""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        tokens_per_batch=300,
        ckpt_every_steps=1,
        keep_ckpts=3,
        num_epochs=50,
        max_steps=200,  # > 6 lives x at most 8 steps each
        dev_bleu_sents=2,
    )
    rng, lives = random.Random(17), Lives(hp, str(tmp_path))
    kills = resumes = fresh = early = lost = mid_save = idle = 0
    expected = None  # the step the next life must resume from (None: no checkpoint yet)

    def check_resume(out):
        """The life resumed from the newest complete checkpoint, if any; a life killed
        before it restored (and printed) anything counts as killed early."""
        nonlocal resumes, fresh, early, lost
        match = re.search(r"train: resumed from (\S+) at step (\d+),", out)
        if match is None and "train:" not in out:
            early += 1
            return
        if expected is None:  # nothing to resume from
            assert match is None, out
            fresh += 1
            return
        assert match, out[-2000:]
        assert match.group(1) == os.path.join(hp.logdir, f"ckpt-{expected}")
        resumes += 1
        lost += expected - int(match.group(2))

    kinds = ["start-up", "checkpoint write", "steps"] * 2
    rng.shuffle(kinds)
    try:
        for kind in kinds:
            lives.start()
            before = latest_step(hp.logdir)
            if kind == "start-up":  # any moment of the start-up
                delay = rng.uniform(0.0, 2.0)
                wait_for(lambda: time.time() - lives.started > delay, lives)
            elif kind == "checkpoint write":  # while TensorFlow writes ckpt-N_temp
                steps = rng.randint(1, 4)
                wait_for(lambda: latest_step(hp.logdir) >= before + steps, lives)
                wait_for(lambda: glob.glob(os.path.join(hp.logdir, "ckpt-*_temp")), lives, 5, 0)
            else:  # a few steps in, then up to a step or two more
                steps = rng.randint(1, 6)
                wait_for(lambda: latest_step(hp.logdir) >= before + steps, lives)
                time.sleep(rng.uniform(0.0, 0.15))
            assert lives.alive(), "the run ended before it could be killed"
            os.kill(lives.pid, signal.SIGKILL)
            status, out, err = lives.wait()
            assert status == -signal.SIGKILL
            kills += 1
            check_resume(out)
            mid_save += bool(glob.glob(os.path.join(hp.logdir, "ckpt-*_temp")))
            step = latest_step(hp.logdir)
            idle += step == before  # killed before its first checkpoint (start-up, tracing)
            expected = step or None
            if step:
                assert os.path.exists(os.path.join(hp.logdir, f"ckpt-{step}.index"))
        # SIGTERM: the step ends, a checkpoint is written, exit 143 within 10 s; while
        # it runs, a second training in the same logdir is refused, naming it
        lives.start()
        before = latest_step(hp.logdir)
        wait_for(lambda: latest_step(hp.logdir) >= before + 2, lives)
        with pytest.raises(
            hparams.UserError, match=f"in use by another training run \\(pid {lives.pid} "
        ):
            train.train(hp)
        sent = time.time()
        os.kill(lives.pid, signal.SIGTERM)
        status, out, err = lives.wait()
        assert status == 143 and time.time() - sent < 10, err[-2000:]
        check_resume(out)
        step = int(
            re.search(
                r"stopped by SIGTERM; run the same command again to resume; step (\d+)", out
            ).group(1)
        )
        assert latest_step(hp.logdir) == step
        expected = step
        # SIGINT (Ctrl-C): the same, with status 130
        lives.start()
        before = latest_step(hp.logdir)
        wait_for(lambda: latest_step(hp.logdir) >= before + 2, lives)
        os.kill(lives.pid, signal.SIGINT)
        status, out, err = lives.wait()
        assert status == 130 and "stopped by SIGINT" in out, err[-2000:]
        check_resume(out)
        expected = latest_step(hp.logdir)
        # the last life runs to the end, a few steps past the newest checkpoint (max_steps
        # is a budget: a resumed run may change it)
        end = latest_step(hp.logdir) + 4
        lives.hp = hparams.apply(hp, {"max_steps": end})
        lives.start()
        status, out, err = lives.wait()
        assert status == 0, err[-3000:]
        check_resume(out)
    finally:
        if lives.alive():
            os.kill(lives.pid, signal.SIGKILL)
        lives.close()
    assert f"max_steps={end} reached; step {end};" in out
    assert latest_step(hp.logdir) == end
    assert checkpoints.load_run(hp.logdir, {}, "last")[3].endswith(f"ckpt-{end}")
    assert resumes + fresh + early == lives.count and fresh <= 2 and lost == 0
    print(
        f"\nkill loop: {kills} SIGKILLs ({early} before the restore, {idle} before a first "
        f"new checkpoint, {mid_save} leaving a partial checkpoint), {resumes} resumes, "
        f"{lost} checkpointed steps lost, {lives.count} processes"
    )
