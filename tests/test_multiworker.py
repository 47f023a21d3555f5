"""Two train.py processes under MultiWorkerMirroredStrategy (TF_CONFIG) on 127.0.0.1, and
devices.py's one line for the loss of a worker."""

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from eval import evaluate
from helpers import ROOT
from transformer_tf2.config import cli, hparams
from transformer_tf2.data import data_load
from transformer_tf2.utils import devices


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start_workers(hp, workers=None, logs=None):
    """Two train.py processes of one MultiWorkerMirroredStrategy cluster on 127.0.0.1, at
    the addresses ``workers`` (default: two free ports). Their stdout and stderr are pipes,
    or with ``logs`` (a folder) the files worker-<index>.out and .err in it."""
    argv = [x for key, value in dataclasses.asdict(hp).items() for x in (f"--{key}", str(value))]
    workers = workers or [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    for index in range(2):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            ),
            CUDA_VISIBLE_DEVICES="",
        )
        out, err = subprocess.PIPE, subprocess.PIPE
        if logs is not None:
            out = open(os.path.join(logs, f"worker-{index}.out"), "w")
            err = open(os.path.join(logs, f"worker-{index}.err"), "w")
        procs.append(
            subprocess.Popen(
                [sys.executable, "train.py", *argv],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=err,
                text=True,
            )
        )
        if logs is not None:  # the child holds its own copies
            out.close()
            err.close()
    return procs


def one_epoch(demo_prepro, tmp_path, ckpt_every_steps: int) -> hparams.Hparams:
    """The demo run of the multi-worker tests: one epoch without dropout in tmp_path."""
    values = dict(logdir=str(tmp_path / "log"), evaldir=str(tmp_path / "eval"), num_epochs=1)
    return hparams.apply(
        demo_prepro, dict(values, ckpt_every_steps=ckpt_every_steps, dropout_rate=0.0)
    )


def finish(procs):
    """[(exit status, stdout, stderr)] of each worker."""
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, out, err))
    return outs


@pytest.mark.slow
def test_two_workers_stop_together_resume_and_only_the_chief_checkpoints(demo_prepro, tmp_path):
    """SIGTERM to the non-chief worker alone, during training: both workers agree on the
    stop (in the step's all-reduce, or after a dev evaluation), stop after the same step
    with status 143, and the chief writes the checkpoint of that step. Started again,
    both resume and end the epoch (its end: a dev evaluation on each, an agreement on
    not stopping, a collective save) at the same step; only the chief checkpoints."""
    hp = one_epoch(demo_prepro, tmp_path, ckpt_every_steps=0)
    n = len(data_load.TrainData(hp, replicas=2).batches(0))  # one update per global batch
    procs = start_workers(hp)
    for line in procs[1].stdout:  # the worker has started its epochs
        if "batches per epoch" in line:
            break
    time.sleep(0.5)
    procs[1].send_signal(signal.SIGTERM)
    outs = finish(procs)
    assert [status for status, _, _ in outs] == [143, 143], outs[0][2][-3000:]
    steps = [re.search(r"resume; step (\d+); checkpoint", out) for _, out, _ in outs]
    assert steps[0] and steps[1] and steps[0].group(1) == steps[1].group(1), outs
    assert "stopped by a signal to another worker" in outs[0][1]
    assert "stopped by SIGTERM" in outs[1][1]
    step = int(steps[0].group(1))
    assert 0 < step < n  # before the end of the run
    assert tf.train.latest_checkpoint(hp.logdir) == os.path.join(hp.logdir, f"ckpt-{step}")
    # the same command again: both resume and end the epoch
    outs = finish(start_workers(hp))
    assert [status for status, _, _ in outs] == [0, 0], outs[0][2][-3000:]
    outs = [(out, err) for _, out, err in outs]
    for out, err in outs:
        assert "train: TensorFlow sees" in err
        assert "MultiWorkerMirroredStrategy with 2 replica(s)" in err
        assert f"resumed from {hp.logdir}/ckpt-{step} at step {step}" in out
        assert "epoch 1: dev loss" in out and f"done; step {n}" in out
    # every worker names the chief's checkpoint; only the chief wrote one
    assert outs[0][0].strip().endswith(f"checkpoint {hp.logdir}/ckpt-{n}")
    assert outs[1][0].strip().endswith(f"checkpoint {hp.logdir}/ckpt-{n}")
    names = sorted(os.listdir(hp.logdir))
    assert [f for f in names if f.startswith("ckpt-")] == sorted(
        f"ckpt-{k}.{ext}" for k in (step, n) for ext in ("data-00000-of-00001", "index")
    )
    assert not [f for f in names if f.startswith(".worker")]  # the temp folder is gone
    assert {"hparams.json", "specs", "train", "checkpoint", "best"} <= set(names)
    # the checkpoint holds trained weights at step n that eval can load
    reader = tf.train.load_checkpoint(os.path.join(hp.logdir, f"ckpt-{n}"))
    step = [k for k in reader.get_variable_to_shape_map() if "iter" in k.lower()]
    assert step and int(reader.get_tensor(step[0])) == n
    result = evaluate(hp.logdir, {"results_dir": str(tmp_path / "results")})
    assert np.isfinite(result["sacrebleu"])


# ---------------------------------------------------------------------------------------
# The loss of a worker

CLUSTER = {"worker": ["127.0.0.1:2001", "127.0.0.1:2002"]}
# what TensorFlow 2.21 raised in the survivor of a SIGKILL (abridged)
NON_CHIEF_LOST = (
    "Collective ops is aborted by: Error reported from /job:worker/task:1: The following "
    "tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1\nThe "
    "tasks have crashed. [[{{node CollectiveReduceV2}}]]"
)
CHIEF_LOST = (
    "Collective ops is aborted by: recvmsg:Connection reset by peer\nAdditional GRPC error "
    "information from remote target /job:worker/replica:0/task:0 while calling "
    "/tensorflow.WorkerService/CompleteInstance: [[{{node CollectiveReduceV2_1}}]]"
)


def tf_config(index):
    return json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": index}})


def test_peer_lost_line_names_the_lost_worker_and_the_checkpoint(tmp_path):
    """The task named in the error (not this process's own) and its TF_CONFIG address;
    the newest checkpoint of logdir, or logdir where this worker sees none."""
    logdir = str(tmp_path)
    error = tf.errors.UnavailableError(None, None, NON_CHIEF_LOST)
    line = devices.peer_lost_line(error, logdir, 7, tf_config(0))
    assert line == (
        "worker 1 (127.0.0.1:2002) of the multi-worker run was lost after step 7; "
        f"restart all workers with the same command to resume from the newest checkpoint in "
        f"{logdir}, if the chief wrote one"
    )
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(os.path.join(logdir, "ckpt-6"))
    with open(os.path.join(logdir, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-6"\n')
    error = tf.errors.UnavailableError(None, None, CHIEF_LOST)
    line = devices.peer_lost_line(error, logdir, tf_config=tf_config(1))
    assert line == (
        "worker 0 (127.0.0.1:2001) of the multi-worker run was lost; restart all "
        f"workers with the same command to resume from the last checkpoint, {logdir}/ckpt-6"
    )
    # a chief job: /job:chief/replica:0/task:0 is the first address of "chief"
    cluster = {"chief": ["10.0.0.1:5000"], "worker": ["10.0.0.2:5000"]}
    message = "Socket closed from remote target /job:chief/replica:0/task:0"
    config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    error = tf.errors.AbortedError(None, None, message)
    assert devices.peer_lost_line(error, logdir, tf_config=config).startswith(
        "chief 0 (10.0.0.1:5000) of the multi-worker run was lost;"
    )


def test_peer_lost_line_leaves_other_errors_alone(tmp_path):
    """Another error type, an error naming only this worker, or a task outside the
    cluster is not a lost worker: None (the traceback stays)."""
    logdir = str(tmp_path)
    plain = ValueError(NON_CHIEF_LOST)
    assert devices.peer_lost_line(plain, logdir, tf_config=tf_config(0)) is None
    oom = tf.errors.ResourceExhaustedError(None, None, NON_CHIEF_LOST)
    assert devices.peer_lost_line(oom, logdir, tf_config=tf_config(0)) is None
    own = tf.errors.UnavailableError(None, None, "failed at /job:worker/replica:0/task:1")
    assert devices.peer_lost_line(own, logdir, tf_config=tf_config(1)) is None
    outside = tf.errors.UnavailableError(None, None, "from /job:worker/replica:0/task:5")
    assert devices.peer_lost_line(outside, logdir, tf_config=tf_config(0)) is None


def test_peer_lost_is_one_line_with_its_own_exit_status(monkeypatch, capsys):
    """train.py raises the lost worker's line as a UserError with PEER_LOST_STATUS; the
    scripts' runner prints it as one line and exits with that status. Without TF_CONFIG
    (not a multi-worker run) the error is not a lost worker."""
    error = tf.errors.UnavailableError(None, None, NON_CHIEF_LOST)
    assert devices.peer_lost_line(error, "") is None  # no TF_CONFIG here
    monkeypatch.setenv("TF_CONFIG", tf_config(0))
    line = devices.peer_lost_line(error, "")

    def main():
        raise hparams.UserError(line, status=devices.PEER_LOST_STATUS)

    with pytest.raises(SystemExit) as stopped:
        cli.run_main(main)
    assert stopped.value.code == devices.PEER_LOST_STATUS == 75
    err = capsys.readouterr().err
    assert err.startswith("error: worker 1 (127.0.0.1:2002) of the multi-worker run was lost;")
    assert err.count("\n") == 1


def wait_for_checkpoint(logdir, after, procs, deadline):
    """The step of logdir's newest checkpoint, once it is past ``after``; fails if a worker
    ends first or at ``deadline`` (time.time())."""
    while time.time() < deadline:
        path = tf.train.latest_checkpoint(logdir)
        if path and int(path.rsplit("-", 1)[1]) > after:
            return int(path.rsplit("-", 1)[1])
        ended = [p.returncode for p in procs if p.poll() is not None]
        assert not ended, f"a worker ended (status {ended}) before a checkpoint past {after}"
        time.sleep(0.02)
    pytest.fail(f"no checkpoint past step {after} in {logdir} in time")


def kill_and_watch(procs, victim, logs, workers):
    """SIGKILL worker ``victim``; the other must end within 60 s with PEER_LOST_STATUS and
    one line naming the lost worker and no traceback. Returns that line."""
    procs[victim].kill()
    killed = time.time()
    survivor = procs[1 - victim]
    try:
        survivor.wait(timeout=60)
    except subprocess.TimeoutExpired:
        survivor.kill()
        pytest.fail(f"worker {1 - victim} still ran 60 s after worker {victim} was killed")
    took = time.time() - killed
    procs[victim].wait()
    with open(os.path.join(logs, f"worker-{1 - victim}.err")) as f:
        err = f.read()
    assert survivor.returncode == devices.PEER_LOST_STATUS, err[-3000:]
    assert took < 60 and "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(
        f"error: worker {victim} ({workers[victim]}) of the multi-worker run was lost after step "
    )
    return lines[0]


def resumed_at(logs, step, logdir, indices=(0, 1)):
    """The logs of the workers ``indices`` say they resumed from ckpt-<step> (a killed
    worker's stdout loses what it had not flushed)."""
    for index in indices:
        with open(os.path.join(logs, f"worker-{index}.out")) as f:
            out = f.read()
        assert f"resumed from {logdir}/ckpt-{step} at step {step}," in out, out


@pytest.mark.slow
def test_a_killed_worker_stops_the_other_with_one_line_and_the_run_resumes(demo_prepro, tmp_path):
    """SIGKILL the non-chief worker just after a checkpoint: the chief ends within 60 s
    with the one line that names it. The same command (same addresses) resumes both at
    the newest checkpoint; SIGKILL the chief there: the other worker ends the same way.
    Started again, both resume at the chief's newest checkpoint and finish the run."""
    hp = one_epoch(demo_prepro, tmp_path, ckpt_every_steps=2)
    n = len(data_load.TrainData(hp, replicas=2).batches(0))  # one update per global batch
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    logs, deadline, step, started = str(tmp_path), time.time() + 300, 0, []
    try:
        for victim in (1, 0):
            procs = start_workers(hp, workers, logs)
            started += procs
            saved = wait_for_checkpoint(hp.logdir, step, procs, deadline)
            line = kill_and_watch(procs, victim, logs, workers)
            if step:
                resumed_at(logs, step, hp.logdir, [1 - victim])
            step = int(tf.train.latest_checkpoint(hp.logdir).rsplit("-", 1)[1])
            assert saved <= step < n  # mid-epoch; no checkpoint after the kill
            assert line.endswith(
                "restart all workers with the same command to resume from the last "
                f"checkpoint, {hp.logdir}/ckpt-{step}"
            )
        procs = start_workers(hp, workers, logs)
        started += procs
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.time()))
    finally:  # a failed check leaves no worker running
        for p in started:
            if p.poll() is None:
                p.kill()
    with open(os.path.join(logs, "worker-0.err")) as f:
        assert [p.returncode for p in procs] == [0, 0], f.read()[-3000:]
    resumed_at(logs, step, hp.logdir)
    with open(os.path.join(logs, "worker-0.out")) as f:
        assert f.read().strip().endswith(f"train: done; step {n}; checkpoint {hp.logdir}/ckpt-{n}")
    assert tf.train.latest_checkpoint(hp.logdir) == f"{hp.logdir}/ckpt-{n}"
