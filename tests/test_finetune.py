"""Fine-tuning (finetune.py): ``prepro.py --vocab_from`` encodes a new corpus with a
trained run's vocabulary, and ``train.py --init_from`` starts a new run from its weights,
with its model settings, refusing in one line what would not fit."""

import filecmp
import os

import numpy as np
import pytest

import prepro
import train
from helpers import tiny
from transformer_tf2.config import cli, hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.models import checkpoints
from transformer_tf2.training import finetune
from transformer_tf2.training.trainer import Trainer
from transformer_tf2.utils import devices


def slice_corpus(parent: hparams.Hparams, folder, n: int) -> tuple[str, str]:
    """The first ``n`` training pairs of the parent's demo corpus and all of its dev and
    test pairs, as plain parallel text in ``folder``: (data_dir, prepro_dir)."""
    data = folder / "data"
    data.mkdir(parents=True)
    plain = prepro.corpus_files(tiny(str(folder), corpus="parallel", data_dir=str(data)))
    for split, paths in prepro.corpus_files(parent).items():
        reader = prepro.read_iwslt_train if split == "train" else prepro.read_iwslt_xml
        for path, out in zip(paths, plain[split]):
            lines = reader(path)[0][: n if split == "train" else None]
            with open(out, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    return str(data), str(folder / "prepro")


def child(parent: hparams.Hparams, folder, **kw) -> hparams.Hparams:
    data_dir, prepro_dir = slice_corpus(parent, folder, 60)
    hp = tiny(str(folder), corpus="parallel", data_dir=data_dir, prepro_dir=prepro_dir, **kw)
    return prepro.preprocess(hp, vocab_from=parent.logdir)


@pytest.mark.slow
def test_a_fine_tuned_run_starts_at_its_parents_dev_loss(run, tmp_path, capsys):
    """The 3-epoch demo run, fine-tuned on a slice of its corpus encoded with its
    vocabulary: after one step at a negligible lr, the dev loss is the parent's (the same
    dev pairs, the same ids), far below a fresh model's on the same data."""
    parent, summary, _ = run
    hp = child(parent, tmp_path, lr=1e-9, max_steps=1, dropout_rate=0.0)
    assert filecmp.cmp(
        os.path.join(parent.prepro_dir, "bpe.model"), os.path.join(hp.prepro_dir, "bpe.model")
    )
    assert "the vocabulary of" in capsys.readouterr().out
    tuned_hp = finetune.parent_settings(
        hparams.apply(hp, {"init_from": parent.logdir, "logdir": str(tmp_path / "tuned")}), set()
    )
    tuned = train.train(tuned_hp, ckpt="last")
    out = capsys.readouterr().out
    last = summary["checkpoint"]
    assert f"train: fine-tuning from {last} (the newest checkpoint) of {parent.logdir}" in out
    assert "with a fresh optimizer and the schedule from step 0" in out
    assert tuned["step"] == 1
    fresh = train.train(hparams.apply(hp, {"logdir": str(tmp_path / "fresh")}))
    parent_loss = summary["history"][-1]["dev_loss"]
    tuned_loss, fresh_loss = tuned["history"][-1]["dev_loss"], fresh["history"][-1]["dev_loss"]
    assert tuned_loss == pytest.approx(parent_loss, abs=2e-3)
    assert fresh_loss > parent_loss + 0.3, (fresh_loss, parent_loss)
    # a rerun resumes the fine-tuned run itself, not the parent again
    again = train.train(hparams.apply(tuned_hp, {"max_steps": 2}), ckpt="last")
    out = capsys.readouterr().out
    assert f"resumed from {tuned['checkpoint']} at step 1" in out and "fine-tuning" not in out
    assert again["step"] == 2


def test_the_parents_model_settings_are_taken_and_a_different_one_refused(demo_prepro, tmp_path):
    parent = tiny(str(tmp_path / "parent"), d_model=48, position="t5")
    os.makedirs(parent.logdir)
    hparams.save(parent, os.path.join(parent.logdir, "hparams.json"))
    args = ["--init_from", parent.logdir, "--logdir", str(tmp_path / "child")]
    hp, opts = cli.parse_args(args + ["--lr", "0.0005", "--dropout_rate", "0.3"])
    taken = finetune.parent_settings(hp, opts["_set"])
    assert (taken.d_model, taken.position) == (48, "t5")  # the parent's model
    assert (taken.lr, taken.dropout_rate) == (0.0005, 0.3)  # the run's own training
    hp, opts = cli.parse_args(args + ["--d_model", "64"])
    with pytest.raises(UserError) as e:
        finetune.parent_settings(hp, opts["_set"])
    assert str(e.value) == (
        f"--d_model 64 would change the model of {parent.logdir}, which has d_model=48; "
        f"drop --d_model"
    )
    hp, opts = cli.parse_args(["--init_from", parent.logdir, "--logdir", parent.logdir])
    with pytest.raises(UserError, match="is the run's own --logdir: a fine-tuned run needs"):
        finetune.parent_settings(hp, opts["_set"])
    hp, opts = cli.parse_args(["--init_from", str(tmp_path / "none")])
    with pytest.raises(UserError, match=r"--init_from \S+none: no \S+hparams.json; name the"):
        finetune.parent_settings(hp, opts["_set"])


def test_data_encoded_with_another_vocabulary_is_refused(quick_run, demo_prepro, tmp_path):
    parent, _ = quick_run
    own = tiny(str(tmp_path), demo_size=200, vocab_size=150)  # its own corpus and vocabulary
    prepro.preprocess(own)
    hp = hparams.apply(own, {"init_from": parent.logdir})
    with pytest.raises(UserError) as e:
        finetune.check_vocabulary(hp)
    assert str(e.value) == (
        f"the data in {own.prepro_dir} is encoded with another vocabulary than "
        f"{parent.logdir}'s; encode it with the parent's: python prepro.py --vocab_from "
        f"{parent.logdir} --data_dir {own.data_dir} --prepro_dir {own.prepro_dir}"
    )
    finetune.check_vocabulary(hparams.apply(demo_prepro, {"init_from": parent.logdir}))


def test_vocab_from_takes_the_vocabulary_and_refuses_what_would_change_it(
    quick_run, tmp_path, capsys
):
    parent, _ = quick_run
    hp = child(parent, tmp_path / "a")
    assert data_load.vocab_fingerprint(hp) == data_load.vocab_fingerprint(parent)
    assert (hp.vocab_size, hp.vocab_type) == (parent.vocab_size, parent.vocab_type)
    assert "the vocabulary of" in capsys.readouterr().out
    # the parent's prepro_dir holds the same vocabulary: up to date
    prepro.preprocess(hp, vocab_from=parent.prepro_dir)
    assert f"prepro: {hp.prepro_dir} is up to date" in capsys.readouterr().out
    with pytest.raises(UserError) as e:
        prepro.parent_vocabulary(
            hparams.apply(hp, {"vocab_size": 300}), parent.logdir, {"vocab_size"}
        )
    assert str(e.value) == (
        f"--vocab_size 300 would change the vocabulary of {parent.logdir}, which has "
        f"vocab_size={parent.vocab_size}; drop --vocab_size"
    )
    with pytest.raises(UserError, match="is where that vocabulary lives; pass another"):
        prepro.parent_vocabulary(
            hparams.apply(hp, {"prepro_dir": parent.prepro_dir}), parent.logdir
        )


def test_init_optimizer_takes_the_moments_and_restarts_the_step(quick_run, tmp_path):
    parent, summary = quick_run
    hp = hparams.apply(
        parent, {"init_from": parent.logdir, "logdir": str(tmp_path / "child"), "ema_decay": 0.9}
    )
    strategy, precision = devices.setup_devices(hp)
    tok = data_load.load_tokenizer(hp)

    def started(**kw) -> Trainer:
        trainer = Trainer(hparams.apply(hp, kw), tok, strategy, precision)
        finetune.start_from_parent(trainer, trainer.hp)
        return trainer

    moments = started(init_optimizer=True)
    assert moments.step == 0
    resumed = Trainer(hparams.apply(hp, {"logdir": parent.logdir}), tok, strategy, precision)
    assert resumed.state.restore(summary["checkpoint"]) and resumed.step == 3
    pairs = [
        (a.numpy(), b.numpy())
        for a, b in zip(moments.adam.variables, resumed.adam.variables)
        if a is not moments.adam.iterations
    ]
    assert len(pairs) > 2 and all(np.abs(b).sum() > 0 for _, b in pairs)
    for a, b in pairs:  # the parent's Adam moments
        np.testing.assert_array_equal(a, b)
    fresh = started()
    assert fresh.step == 0
    assert all(float(np.abs(v.numpy()).sum()) == 0 for v in fresh.adam.variables)
    for trainer in (moments, fresh):  # the parent's weights, and the EMA starts from them
        for w, p, s in zip(
            trainer.model.trainable_variables,
            resumed.model.trainable_variables,
            trainer.ema.shadows,
        ):
            np.testing.assert_array_equal(w.numpy(), p.numpy())
            np.testing.assert_array_equal(w.numpy(), s.numpy())
    weights_only = str(tmp_path / "weights" / "model-3")
    checkpoints.write_model(fresh.model, weights_only, "nothing")
    trainer = Trainer(hparams.apply(hp, {"init_optimizer": True}), tok, strategy, precision)
    with pytest.raises(UserError, match=r"holds the weights alone, no optimizer; pass --ckpt"):
        finetune.start_from_parent(trainer, trainer.hp, weights_only)
