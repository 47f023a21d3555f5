"""The moving average of the weights (``--ema_decay``, ema.py): its update after each
applied step, its place in the checkpoint across a resume, the dev evaluation that scores
it, and the default model chosen among it, the best checkpoint's own weights and the
average. On 2 replicas it is compared with one device's in tests/mirrored_cases.py."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import train
from helpers import tiny
from test_trainer import trainer_for, values
from transformer_tf2.config.hparams import UserError
from transformer_tf2.evaluation.dev import Dev
from transformer_tf2.models import checkpoints, variants


def test_shadows_follow_the_recurrence_after_each_applied_step(demo_prepro, tmp_path):
    """s <- s - (1 - d_t)(s - w), d_t = min(decay, (1 + t) / (10 + t)) at step t, from
    s = w at the start; a skipped update (a NaN loss) leaves the shadows alone."""
    decay = 0.95
    trainer, batches = trainer_for(demo_prepro, tmp_path, ema_decay=decay)
    poison = tf.Variable(0.0)

    class Poisoned(variants.Training):  # once poison is set, a NaN loss: the update is skipped
        def extra_loss(self, model, extras):
            return tf.where(poison > 0, np.nan, 0.0)

    trainer.hooks = Poisoned()
    weights = trainer.model.trainable_variables
    expected = values(weights)
    np.testing.assert_array_equal(values(trainer.ema.shadows)[0], expected[0])
    for batch in batches[:3]:
        _, updated = trainer.train_batch(*batch)
        assert updated
        d = min(decay, (1 + trainer.step) / (10 + trainer.step))
        expected = [s - (1 - d) * (s - w) for s, w in zip(expected, values(weights))]
        for got, want in zip(values(trainer.ema.shadows), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert trainer.step == 3
    # the shadows lag the weights: they are not a copy
    gap = max(float(np.abs(s - w).max()) for s, w in zip(expected, values(weights)))
    assert gap > 1e-4
    before = values(trainer.ema.shadows)
    poison.assign(1.0)
    stats, updated = trainer.train_batch(*batches[3])
    assert stats.skipped == 1.0 and not updated and trainer.step == 3
    for got, want in zip(values(trainer.ema.shadows), before):
        np.testing.assert_array_equal(got, want)


def test_applied_puts_the_shadows_in_the_model_and_takes_them_out(demo_prepro, tmp_path):
    trainer, batches = trainer_for(demo_prepro, tmp_path, ema_decay=0.9)
    for batch in batches[:2]:
        trainer.train_batch(*batch)
    own, shadows = values(trainer.model.trainable_variables), values(trainer.ema.shadows)
    with trainer.scored_weights():
        for got, want in zip(values(trainer.model.trainable_variables), shadows):
            np.testing.assert_array_equal(got, want)
    for got, want in zip(values(trainer.model.trainable_variables), own):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(values(trainer.ema.shadows), shadows):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(KeyError), trainer.scored_weights():  # put back on an error too
        raise KeyError("abandoned")
    for got, want in zip(values(trainer.model.trainable_variables), own):
        np.testing.assert_array_equal(got, want)


def test_shadows_resume_exactly_from_the_checkpoint(demo_prepro, tmp_path):
    """4 steps in one go, and 2 + a checkpoint + a new Trainer restoring it + 2: the same
    shadows, bit for bit (dropout's random state is in the checkpoint too)."""
    straight, batches = trainer_for(demo_prepro, tmp_path / "a", ema_decay=0.9, dropout_rate=0.1)
    for batch in batches[:4]:
        straight.train_batch(*batch)
    first, _ = trainer_for(demo_prepro, tmp_path / "b", ema_decay=0.9, dropout_rate=0.1)
    for batch in batches[:2]:
        first.train_batch(*batch)
    path = first.state.save()
    resumed, _ = trainer_for(demo_prepro, tmp_path / "b", ema_decay=0.9, dropout_rate=0.1)
    assert resumed.state.restore(path) and resumed.step == 2
    for batch in batches[2:4]:
        resumed.train_batch(*batch)
    for got, want in zip(values(resumed.ema.shadows), values(straight.ema.shadows)):
        np.testing.assert_array_equal(got, want)
    assert "ema" in checkpoints.checkpoint_items(path)


def test_a_checkpoint_without_shadows_starts_them_from_its_weights(demo_prepro, tmp_path, capsys):
    plain, batches = trainer_for(demo_prepro, tmp_path, dropout_rate=0.0)
    for batch in batches[:2]:
        plain.train_batch(*batch)
    path = plain.state.save()
    assert "ema" not in checkpoints.checkpoint_items(path)
    turned_on, _ = trainer_for(demo_prepro, tmp_path, ema_decay=0.9, dropout_rate=0.0)
    assert turned_on.state.restore(path)
    assert "holds no moving average of the weights: it starts from them" in capsys.readouterr().out
    for got, want in zip(values(turned_on.ema.shadows), values(plain.model.trainable_variables)):
        np.testing.assert_array_equal(got, want)


def test_nonfinite_shadows_are_never_saved(demo_prepro, tmp_path):
    trainer, batches = trainer_for(demo_prepro, tmp_path, ema_decay=0.9)
    trainer.train_batch(*batches[0])
    trainer.ema.shadows[0].assign(tf.fill(trainer.ema.shadows[0].shape, np.nan))
    with pytest.raises(UserError, match=r"after step 1, ema\S* .*holds a NaN or an Inf"):
        trainer.state.save()
    assert not tf.train.latest_checkpoint(trainer.hp.logdir)


@pytest.mark.slow
def test_an_ema_run_scores_the_shadows_and_records_its_default_model(demo_prepro, tmp_path, capsys):
    """2 epochs with an EMA and --average 2: each dev evaluation scores the EMA weights
    (ema/ema-<step>, decoded alone, gives the best epoch's dev BLEU), and best.json names
    the best of the three candidates, which eval.py loads."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        num_epochs=2,
        ema_decay=0.9,
        average=2,
        dev_bleu_sents=16,
    )
    summary = train.train(hp)
    out = capsys.readouterr().out
    history = summary["history"]
    best_epoch = max(history, key=lambda r: r["dev_bleu"])
    ema_path = os.path.join(hp.logdir, "ema", f"ema-{best_epoch['step']}")
    assert sorted(os.listdir(os.path.dirname(ema_path))) == [
        f"ema-{best_epoch['step']}.data-00000-of-00001",
        f"ema-{best_epoch['step']}.index",
    ]
    hp_run, tok, model, _ = checkpoints.load_run(hp.logdir, {}, ckpt=ema_path)
    dev = Dev(hp_run, tok)
    ema_bleu = train.dev_bleu(dev, dev.translator(model, tok, hp_run))
    assert ema_bleu == pytest.approx(best_epoch["dev_bleu"], abs=1e-9)
    # and its dev loss (continuous, where the tiny run's BLEU is near 0) that epoch's
    judge, _ = trainer_for(demo_prepro, tmp_path / "judge")
    checkpoints.restore_checkpoint(tf.train.Checkpoint(model=judge.model), ema_path, "")
    loss = judge.dev_loss(dev.corpus, max(1, hp.tokens_per_batch // 64))[0]
    assert loss == pytest.approx(best_epoch["dev_loss"], rel=1e-5)
    checkpoints.restore_checkpoint(
        tf.train.Checkpoint(model=judge.model), summary["checkpoint"], ""
    )
    raw_loss = judge.dev_loss(dev.corpus, max(1, hp.tokens_per_batch // 64))[0]
    assert abs(raw_loss - history[-1]["dev_loss"]) > 1e-3  # the raw weights score otherwise
    # the raw weights of the same checkpoint differ, and score what the line says
    raw_path = tf.train.latest_checkpoint(os.path.join(hp.logdir, "best"))
    assert raw_path.endswith(f"ckpt-{best_epoch['step']}")
    _, _, raw, _ = checkpoints.load_run(hp.logdir, {}, ckpt=raw_path)
    gap = max(
        float(np.abs(a - b).max()) for a, b in zip(values(raw.weights), values(model.weights))
    )
    assert gap > 1e-4
    raw_bleu = train.dev_bleu(dev, dev.translator(raw, tok, hp_run))
    assert f"best checkpoint's own weights {raw_bleu:.2f}" in out or (
        f"the default model is the best checkpoint's own weights ({raw_path}, dev BLEU "
        f"{raw_bleu:.2f})" in out
    )
    with open(os.path.join(hp.logdir, "best.json"), encoding="utf-8") as f:
        record = json.load(f)
    default = summary["default"]
    assert os.path.join(hp.logdir, record["checkpoint"]) == default["path"]
    candidates = [ema_bleu, raw_bleu] + (
        [summary["averaged"]["dev_bleu"]] if summary["averaged"]["wins"] else []
    )
    assert default["dev_bleu"] == pytest.approx(max(candidates), abs=1e-9)
    assert f"train: the default model is the {default['what']} ({default['path']}" in out
    _, _, _, loaded = checkpoints.load_run(hp.logdir, {})
    assert loaded == default["path"]
