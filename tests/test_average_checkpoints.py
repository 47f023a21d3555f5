"""average_checkpoints.py: the averaged weights, checked by hand, and eval on them."""

import json

import numpy as np
import pytest
import tensorflow as tf

import average_checkpoints
from eval import evaluate
from transformer_tf2.config import hparams
from transformer_tf2.models import checkpoints

KEY = "model/encoder_0/self_attn/w_q/.ATTRIBUTES/VARIABLE_VALUE"


@pytest.mark.slow
def test_average_of_last_checkpoints(run, tmp_path):
    hp, _, _ = run
    paths = average_checkpoints.run_checkpoints(hp.logdir)
    assert len(paths) == 3
    out = average_checkpoints.average(hp.logdir, 2, str(tmp_path / "avg"))
    # by hand: restore each of the two checkpoints into a fresh model, average in numpy
    _, _, model, _ = checkpoints.load_run(hp.logdir, {})
    w_q = model.encoder_layers[0].self_attn.w_q
    values = []
    for p in paths[-2:]:
        tf.train.Checkpoint(model=model).restore(p).expect_partial()
        values.append(w_q.numpy())
    by_hand = (values[0] + values[1]) / 2
    averaged = tf.train.load_checkpoint(out).get_tensor(KEY)
    np.testing.assert_allclose(averaged, by_hand, rtol=1e-6, atol=1e-7)
    assert not np.allclose(averaged, values[1])
    names = {n for n, _ in tf.train.list_variables(out)}
    assert "model/tgt_embedding/embeddings/.ATTRIBUTES/VARIABLE_VALUE" in names
    assert not any(n.startswith("optimizer/") for n in names)
    result = evaluate(hp.logdir, {"results_dir": str(tmp_path)}, ckpt=out)
    with open(result["results"] + ".json") as f:
        assert json.load(f)["decoding"]["checkpoint"] == out


@pytest.mark.slow
def test_average_needs_enough_checkpoints(quick_run):
    hp, _ = quick_run
    assert len(average_checkpoints.run_checkpoints(hp.logdir)) == 3
    with pytest.raises(hparams.UserError, match="fewer than --last 9"):
        average_checkpoints.average(hp.logdir, 9)
    with pytest.raises(hparams.UserError, match="--last must be at least 1"):
        average_checkpoints.average(hp.logdir, 0)


def test_spread_checkpoints_passes_over_an_epoch_end_next_to_a_planned_one():
    """A 30-minute wsd run's kept checkpoints (5): the epochs' ends 3720, 3968 and 4216,
    the cooldown's planned 3937 and the end 4218. The last three would average 4216 and
    4218, two steps apart; half the planned spacing (0.5 * 0.2 * 4218 / 3 = 140.6 steps)
    picks 3720, 3968 and 4218."""
    paths = [f"log/run/ckpt-{s}" for s in (3720, 3937, 3968, 4216, 4218)]
    gap = 0.5 * 0.2 * 4218 / 3
    assert checkpoints.spread_checkpoints(paths, 3, gap) == [paths[0], paths[2], paths[4]]
    assert checkpoints.spread_checkpoints(paths, 2, gap) == [paths[2], paths[4]]
    # too few so far apart: the last n, as without a cooldown
    assert checkpoints.spread_checkpoints(paths, 3, 400) == paths[-3:]
    assert checkpoints.spread_checkpoints(paths, 3, 0) == paths[-3:]
