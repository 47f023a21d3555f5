"""Two train.py processes under MultiWorkerMirroredStrategy (TF_CONFIG) on 127.0.0.1."""

import dataclasses
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

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


@pytest.mark.slow
def test_two_worker_run_trains_and_only_the_chief_checkpoints(run, tmp_path):
    hp, _, _ = run
    hp = hparams.apply(
        hp,
        dict(
            logdir=str(tmp_path / "log"),
            evaldir=str(tmp_path / "eval"),
            max_steps=4,
            ckpt_every_steps=0,
            dropout_rate=0.0,
        ),
    )
    argv = []
    for key, value in dataclasses.asdict(hp).items():
        argv += [f"--{key}", str(value)]
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
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, err[-3000:]
        outs.append((out, err))
    for out, err in outs:
        assert "train: TensorFlow sees" in err
        assert "MultiWorkerMirroredStrategy with 2 replica(s)" in err
        assert "max_steps=4 reached; step 4" in out
    # every worker names the chief's checkpoint; only the chief wrote one
    assert outs[0][0].strip().endswith(f"checkpoint {hp.logdir}/ckpt-4")
    assert outs[1][0].strip().endswith(f"checkpoint {hp.logdir}/ckpt-4")
    names = sorted(os.listdir(hp.logdir))
    assert [f for f in names if f.startswith("ckpt-")] == [
        "ckpt-4.data-00000-of-00001",
        "ckpt-4.index",
    ]
    assert not [f for f in names if f.startswith(".worker")]  # the temp folder is gone
    assert {"hparams.json", "specs", "train", "checkpoint"} <= set(names)
    # the checkpoint holds trained weights at step 4 that eval can load
    reader = tf.train.load_checkpoint(os.path.join(hp.logdir, "ckpt-4"))
    step = [k for k in reader.get_variable_to_shape_map() if "iter" in k.lower()]
    assert step and int(reader.get_tensor(step[0])) == 4
    result = evaluate(hp.logdir, {"results_dir": str(tmp_path / "results")})
    assert np.isfinite(result["sacrebleu"])
