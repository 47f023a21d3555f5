"""average_checkpoints.py: the averaged weights, checked by hand, and eval on them."""
import json

import numpy as np
import pytest

import hparams as H

KEY = "model/encoder_0/self_attn/w_q/.ATTRIBUTES/VARIABLE_VALUE"


def test_average_of_last_checkpoints(run, tmp_path):
    import tensorflow as tf
    import average_checkpoints as A
    import eval as E
    hp, _, _ = run
    paths = A.checkpoints(hp.logdir)
    assert len(paths) == 3
    out = A.average(hp.logdir, 2, str(tmp_path / "avg"))
    # by hand: restore each of the two checkpoints into a fresh model, average in numpy
    _, _, model, _ = E.load_run(hp.logdir, {})
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
    result = E.evaluate(hp.logdir, {"results_dir": str(tmp_path)}, ckpt=out)
    assert json.load(open(result["results"] + ".json"))["decoding"]["checkpoint"] == out


def test_average_needs_enough_checkpoints(run):
    import average_checkpoints as A
    hp, _, _ = run
    with pytest.raises(H.UserError, match="fewer than --last 9"):
        A.average(hp.logdir, 9)
