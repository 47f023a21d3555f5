"""A run saved before the code moved into the transformer_tf2 package still loads and
decodes the same: its checkpoint and registered Keras classes depend on no file path.

tests/data/premove is a tiny run (word vocabulary, d_model 16, 2 training steps) that the
flat-module version of this project trained and saved, with what that version decoded
from it (golden.json: greedy and beam-2 token ids, scores and texts, and the scores of
two given translations)::

    python prepro.py --vocab_type word --min_cnt 3 --demo_size 300 --data_dir D/data \\
        --prepro_dir D/prepro
    python train.py --vocab_type word --min_cnt 3 --demo_size 300 --data_dir D/data \\
        --prepro_dir D/prepro --d_model 16 --d_ff 32 --num_blocks 1 --num_heads 2 \\
        --max_steps 2 --logdir D/log --evaldir D/eval --precision float32 --average 1

The folder keeps what loading needs: the run's hparams.json, best.json and default model,
its vocabulary fingerprint, and the vocabularies of its prepro folder.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from helpers import ROOT
from transformer_tf2 import Translator

SAVED = os.path.join(ROOT, "tests", "data", "premove")


@pytest.fixture
def saved_run(tmp_path):
    """The saved run copied to a temp folder, its folders pointed at the copy; and what
    the earlier version decoded from it."""
    shutil.copytree(SAVED, tmp_path / "run")
    log = tmp_path / "run" / "log"
    with open(log / "hparams.json", encoding="utf-8") as f:
        values = json.load(f)
    for key, folder in (("logdir", "log"), ("prepro_dir", "prepro"), ("data_dir", "data")):
        values[key] = str(tmp_path / "run" / folder)
    (log / "hparams.json").write_text(json.dumps(values, indent=2, sort_keys=True) + "\n")
    with open(os.path.join(SAVED, "golden.json"), encoding="utf-8") as f:
        return str(log), json.load(f)


@pytest.mark.slow
def test_a_run_saved_before_the_package_decodes_as_it_did(saved_run):
    logdir, golden = saved_run
    sentences = golden["sentences"]
    for beam in (1, 2):
        engine = Translator.from_run(logdir, beam_size=beam, max_len=12)
        assert engine.checkpoints[0].endswith(golden["checkpoint"])
        outs = engine.decoder.translate_ids(engine.tok.encode_src(sentences))
        want = golden[f"beam{beam}"]
        assert [None if o is None else o[0][0].tolist() for o in outs] == want["ids"]
        got = [None if o is None else float(o[1][0]) for o in outs]
        np.testing.assert_allclose(
            [s for s in got if s is not None],
            [s for s in want["scores"] if s is not None],
            rtol=0,
            atol=1e-6,
        )
        assert engine.translate(sentences) == want["text"]
    scores = Translator.from_run(logdir).score(
        sentences[:2], ["The woman reads a book.", "The dog sleeps."]
    )
    np.testing.assert_allclose(scores, golden["score"], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_translate_py_decodes_the_saved_run(saved_run):
    logdir, golden = saved_run
    proc = subprocess.run(
        [sys.executable, "translate.py", "--logdir", logdir, "--max_len", "12"],
        input="\n".join(golden["sentences"]) + "\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:-1] == golden["beam1"]["text"]
