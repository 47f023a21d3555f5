"""Two train.py processes under MultiWorkerMirroredStrategy (TF_CONFIG) on 127.0.0.1."""

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

import data_load
import hparams
from eval import evaluate
from helpers import ROOT


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start_workers(hp):
    """Two train.py processes of one MultiWorkerMirroredStrategy cluster on 127.0.0.1."""
    argv = [x for key, value in dataclasses.asdict(hp).items() for x in (f"--{key}", str(value))]
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    for index in range(2):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            ),
            CUDA_VISIBLE_DEVICES="",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "train.py", *argv],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


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
    hp = hparams.apply(
        demo_prepro,
        dict(
            logdir=str(tmp_path / "log"),
            evaldir=str(tmp_path / "eval"),
            num_epochs=1,
            ckpt_every_steps=0,
            dropout_rate=0.0,
        ),
    )
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
