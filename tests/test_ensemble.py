"""ensemble.py: several runs decoded as one model. An ensemble of one run, or of a run and
its copy, decodes as the run; two different runs give, at every teacher-forced step, the
mixture of their own distributions; greedy, beam and sampling each run on it; runs of
other vocabularies or with document memory are refused in one line."""

import os
import types

import numpy as np
import pytest
import tensorflow as tf

from helpers import rand_ids, tiny_model
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import ensemble
from transformer_tf2.decoding.ensemble import Ensemble
from transformer_tf2.decoding.translator import Translator
from transformer_tf2.models import checkpoints

V = 23


def settings(**kw):
    values = {"max_len_extra": 6, "decode_streams": 1, "eval_batch_size": 3, **kw}
    return hparams.apply(hparams.Hparams(), values)


def sources(seed=0, lengths=(5, 9, 2, 7, 4)):
    rng = np.random.default_rng(seed)
    return [list(rand_ids(rng, n, V)) for n in lengths]


def copy_of(model, seed):
    other = tiny_model(V, V, seed=seed)
    other.set_weights(model.get_weights())
    return other


def same_outputs(a, b, atol=1e-5):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[0], y[0])
        np.testing.assert_allclose(x[1], y[1], atol=atol)


@pytest.mark.slow
@pytest.mark.parametrize(
    "search", [{}, {"beam_size": 3}, {"sampling_topk": 0, "seed": 4}, {"sampling_topk": 5}]
)
def test_an_ensemble_of_one_run_or_of_a_run_and_its_copy_decodes_as_the_run(search):
    model = tiny_model(V, V, seed=3)
    srcs = sources()
    hp = settings(**search)
    alone = Translator(model, None, hp).translate_ids(srcs, n=2)
    same_outputs(Translator(Ensemble([model]), None, hp).translate_ids(srcs, n=2), alone)
    twins = Ensemble([model, copy_of(model, seed=9)])
    same_outputs(Translator(twins, None, hp).translate_ids(srcs, n=2), alone)


@pytest.mark.slow
def test_two_runs_give_the_mixture_of_their_distributions_at_every_step():
    """Teacher forced through a target, step by step on the ensemble's caches: each step's
    log-probabilities are log(1/2 (p_a + p_b)) of the two models' own full passes."""
    a, b = tiny_model(V, V, seed=1), tiny_model(V, V, seed=2)
    both = Ensemble([a, b])
    rng = np.random.default_rng(5)
    src = np.zeros((3, 8), np.int32)
    for i, n in enumerate((4, 7, 2)):
        src[i, :n] = rand_ids(rng, n, V)
        src[i, n] = data_load.EOS_ID
    tgt = np.c_[np.full((3, 1), data_load.BOS_ID), rand_ids(rng, (3, 5), V)].astype(np.int32)
    want = []
    for m in (a, b):
        want.append(tf.nn.log_softmax(m((tf.constant(src), tf.constant(tgt)))).numpy())
    mixture = np.log((np.exp(want[0].astype(np.float64)) + np.exp(want[1])) / 2)
    memories, masks = both.encode(tf.constant(src))
    cache = both.init_cache(memories, masks)
    for t in range(tgt.shape[1]):
        logp, cache = both.decode_step(tf.constant(tgt[:, t]), cache)
        np.testing.assert_allclose(logp.numpy(), mixture[:, t], atol=2e-5)
        assert not np.allclose(logp.numpy(), want[0][:, t], atol=1e-3)  # not one run's
    full = both((tf.constant(src), tf.constant(tgt))).numpy()
    np.testing.assert_allclose(full, mixture, atol=2e-5)
    # the searches run on it, and scoring scores the mixture
    srcs = sources(1)
    for search in ({}, {"beam_size": 3}, {"sampling_topk": 0}):
        outs = Translator(both, None, settings(**search)).translate_ids(srcs)
        assert all(o is not None and o[0].shape[1] >= 1 for o in outs)
    (logp,) = Translator(both, None, settings()).score_ids([list(src[0, :4])], [list(tgt[0, 1:])])
    np.testing.assert_allclose(logp[:-1], mixture[0, np.arange(5), tgt[0, 1:]], atol=2e-5)


def prepro_folder(root, name, words):
    folder = os.path.join(root, name)
    os.makedirs(folder)
    for lang in ("de", "en"):
        with open(os.path.join(folder, f"vocab.{lang}.tsv"), "w", encoding="utf-8") as f:
            for i, w in enumerate(list(data_load.RESERVED) + words):
                f.write(f"{w}\t{100 - i}\n")
    return folder


def test_runs_of_other_vocabularies_or_with_memory_are_refused(tmp_path, monkeypatch):
    base = hparams.apply(hparams.Hparams(), {"vocab_type": "word"})
    one = prepro_folder(str(tmp_path), "one", ["hund", "katze"])
    same = prepro_folder(str(tmp_path), "same", ["hund", "katze"])
    other = prepro_folder(str(tmp_path), "other", ["hund", "maus"])
    hp = {
        name: hparams.apply(base, {"prepro_dir": d})
        for name, d in (("one", one), ("same", same), ("other", other))
    }
    assert ensemble.vocabulary_difference(hp["one"], hp["same"]) is None
    assert "the vocabularies of" in ensemble.vocabulary_difference(hp["one"], hp["other"])
    bpe = hparams.apply(hp["one"], {"vocab_type": "bpe"})
    assert ensemble.vocabulary_difference(hp["one"], bpe) == "vocab_type word against bpe"
    runs = {}
    for name in ("a", "b", "c", "memory"):
        os.makedirs(tmp_path / name)
        (tmp_path / name / "hparams.json").write_text("{}")
    model = types.SimpleNamespace(reads_documents=False)
    runs = {
        str(tmp_path / "a"): (hp["one"], None, model, "ckpt-1"),
        str(tmp_path / "b"): (hp["same"], None, model, "ckpt-2"),
        str(tmp_path / "c"): (hp["other"], None, model, "ckpt-3"),
        str(tmp_path / "memory"): (
            hp["one"],
            None,
            types.SimpleNamespace(reads_documents=True),
            "x",
        ),
    }
    monkeypatch.setattr(checkpoints, "load_run", lambda logdir, *args: runs[logdir])
    monkeypatch.setattr(ensemble, "Ensemble", lambda models: ("ensemble", models))
    a, b, c, memory = (str(tmp_path / n) for n in ("a", "b", "c", "memory"))
    assert ensemble.load_ensemble([a, b], {})[2:] == (
        ("ensemble", [model, model]),
        ["ckpt-1", "ckpt-2"],
    )
    with pytest.raises(hparams.UserError, match=f"^--ensemble: {a} and {c} have different vocab"):
        ensemble.load_ensemble([a, c], {})
    with pytest.raises(hparams.UserError, match=f"^--ensemble: {memory} reads document context"):
        ensemble.load_ensemble([a, memory], {})
    with pytest.raises(hparams.UserError, match="holds no trained run"):
        ensemble.load_ensemble([a, str(tmp_path / "nothing")], {})
