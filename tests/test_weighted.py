"""The Weighted Transformer (model_type=weighted; Ahmed et al. 2017, arXiv 1711.02132)."""
import os

import numpy as np
import pytest
import tensorflow as tf

import hparams as H
import model as MD
import modules as M
from conftest import tiny
from prepro import BOS_ID, EOS_ID, PAD_ID
from test_modules import analytic_count, check_cached_equals_full


def weighted(V, d=32, d_ff=64, n=2, h=4, **kw):
    import keras
    keras.utils.set_random_seed(kw.pop("seed", 1))
    m = MD.Transformer(V, V, d_model=d, d_ff=d_ff, num_blocks=n, num_heads=h,
                       dropout_rate=0.0, model_type="weighted", **kw)
    m.build_all()
    return m


def rand_ids(rng, shape, V):
    return rng.integers(4, V, size=shape).astype(np.int32)


def on_simplex(w, atol=1e-6):
    return np.all(w >= 0) and abs(float(np.sum(w)) - 1.0) < atol


# ---------------------------------------------------------------------------------------
# the simplex projection
# ---------------------------------------------------------------------------------------
def brute_force_projection(v):
    """argmin ||w - v|| over the simplex by the KKT form w = max(v - theta, 0), with
    theta found by bisection (independent of the sort-based algorithm)."""
    lo, hi = np.min(v) - 1.0, np.max(v)
    for _ in range(200):
        theta = (lo + hi) / 2
        if np.maximum(v - theta, 0).sum() > 1:
            lo = theta
        else:
            hi = theta
    return np.maximum(v - (lo + hi) / 2, 0)


def test_project_to_simplex_examples():
    # already on the simplex: unchanged
    v = np.array([0.2, 0.3, 0.5], np.float32)
    np.testing.assert_allclose(M.project_to_simplex(v).numpy(), v, atol=1e-7)
    # a uniform shift is removed: [1, 2, 3] -> [0, 0, 1]; [0.5, 0.5, 0.5] -> 1/3 each
    np.testing.assert_allclose(M.project_to_simplex(np.array([1., 2., 3.], np.float32)),
                               [0, 0, 1], atol=1e-7)
    np.testing.assert_allclose(M.project_to_simplex(np.full(3, 0.5, np.float32)),
                               np.full(3, 1 / 3), atol=1e-7)
    # negative entries are clipped: [0.6, 0.6, -0.2] -> [0.5, 0.5, 0]
    np.testing.assert_allclose(M.project_to_simplex(np.array([.6, .6, -.2], np.float32)),
                               [0.5, 0.5, 0], atol=1e-7)
    rng = np.random.default_rng(0)
    for _ in range(20):
        v = rng.normal(size=8).astype(np.float64) * 2
        w = M.project_to_simplex(v).numpy()
        assert on_simplex(w, 1e-9)
        np.testing.assert_allclose(w, brute_force_projection(v), atol=1e-9)


# ---------------------------------------------------------------------------------------
# shapes, parameter count, specs
# ---------------------------------------------------------------------------------------
def test_shapes_and_initial_branch_weights():
    V = 23
    m = weighted(V)
    rng = np.random.default_rng(1)
    src, tgt = rand_ids(rng, (3, 7), V), rand_ids(rng, (3, 5), V)
    logits = m((src, tgt))
    assert logits.shape == (3, 5, V) and logits.dtype == tf.float32
    memory, mask = m.encode(src)
    assert memory.shape == (3, 7, 32)
    names = sorted(m.branched_layers())
    assert names == ["decoder_0", "decoder_1", "encoder_0", "encoder_1"]
    weights = m.branch_weights()
    assert len(weights) == 8 and len(m.branch_variables) == 8
    for name, w in weights.items():
        assert w.shape == (4,)
        assert np.all(w > 0) and on_simplex(w), name   # random positive, sum 1
    # random, not uniform
    assert np.ptp(weights["encoder_0/kappa"]) > 1e-3
    # the weighted layers have no separate feed-forward sublayer
    assert m.encoder_0.ffn is None and m.decoder_0.ffn is None
    # a branched sublayer is the encoder self-attention and the decoder cross-attention
    assert isinstance(m.encoder_0.self_attn, M.BranchedAttention)
    assert isinstance(m.decoder_0.cross_attn, M.BranchedAttention)
    assert not isinstance(m.decoder_0.self_attn, M.BranchedAttention)


def analytic_weighted_count(V, d, d_ff, n, h):
    """Per layer, against the standard Transformer: + 2h (kappa, alpha) and - 2d (the
    LayerNorm of the separate FFN sublayer, which the branches fold in)."""
    return analytic_count(V, V, d, d_ff, n) + n * 2 * (2 * h - 2 * d)


@pytest.mark.parametrize("d,d_ff,n,h", [(32, 64, 2, 4), (48, 96, 3, 8), (512, 2048, 6, 8)])
def test_parameter_count_parity(d, d_ff, n, h):
    V = 1000
    m = MD.Transformer(V, V, d_model=d, d_ff=d_ff, num_blocks=n, num_heads=h,
                       model_type="weighted")
    m.build()
    std = MD.Transformer(V, V, d_model=d, d_ff=d_ff, num_blocks=n, num_heads=h)
    std.build()
    assert std.count_params() == analytic_count(V, V, d, d_ff, n)
    assert m.count_params() == analytic_weighted_count(V, d, d_ff, n, h)
    # within 2M weights and one LayerNorm per layer of the standard model
    assert abs(m.count_params() - std.count_params()) == 2 * n * abs(2 * h - 2 * d)


def test_summary_lines_list_branch_weights():
    m = weighted(17)
    lines = m.summary_lines()
    kappa = [line for line in lines if line.startswith("encoder_0/kappa\t")]
    assert len(kappa) == 1
    values = np.array(kappa[0].split("\t")[1].split(), float)
    np.testing.assert_allclose(values, m.encoder_0.self_attn.kappa.numpy(), atol=1e-4)
    assert lines[-1] == f"total parameters: {m.count_params():,}"


def test_branched_attention_matches_per_branch_loop():
    """The batched matmuls equal the paper's formula evaluated branch by branch."""
    import keras
    keras.utils.set_random_seed(3)
    d, h, d_ff = 16, 4, 32
    layer = M.BranchedAttention(d, h, d_ff)
    layer.build((None, None, d), (None, None, d))
    rng = np.random.default_rng(5)
    for w in (layer.ffn_b1, layer.ffn_b2):  # nonzero biases, so they are checked too
        w.assign(rng.normal(size=w.shape).astype(np.float32))
    x = rng.normal(size=(2, 5, d)).astype(np.float32)
    mem = rng.normal(size=(2, 6, d)).astype(np.float32)
    out = layer(x, mem).numpy()
    dk, f = d // h, d_ff // h
    wq, wk, wv, wo = (w.numpy() for w in (layer.w_q, layer.w_k, layer.w_v, layer.w_o))
    w1, b1, w2, b2 = (w.numpy() for w in (layer.ffn_w1, layer.ffn_b1, layer.ffn_w2,
                                          layer.ffn_b2))
    kappa, alpha = layer.kappa.numpy(), layer.alpha.numpy()
    expected = np.zeros_like(out)
    for i in range(h):
        cols = slice(i * dk, (i + 1) * dk)
        q, k, v = x @ wq[:, cols], mem @ wk[:, cols], mem @ wv[:, cols]
        s = q @ k.transpose(0, 2, 1) / np.sqrt(dk)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        headbar = (p @ v) @ wo[cols, :] * kappa[i]
        ffn = np.maximum(headbar @ w1[i] + b1[i], 0) @ w2[i] + b2
        expected += alpha[i] * ffn
    np.testing.assert_allclose(out, expected, atol=1e-4)
    assert f == 8


# ---------------------------------------------------------------------------------------
# cache, save/load
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_incremental_decoding_matches_full(norm):
    V = 19
    m = weighted(V, norm=norm, seed=5)
    rng = np.random.default_rng(4)
    src = rand_ids(rng, (3, 7), V)
    src[0, 4:] = PAD_ID
    T2 = 6
    tgt = np.concatenate([np.full((3, 1), BOS_ID, np.int32), rand_ids(rng, (3, T2 - 1), V)],
                         axis=1)
    check_cached_equals_full(m, src, tgt)
    fast = MD.greedy_decoder(m)(tf.constant(src), tf.constant(4, tf.int32)).numpy()
    L = src.shape[1] + 4
    limits = (src != PAD_ID).sum(axis=1) + 4
    slow = MD.naive_greedy(m, src, L, limits)
    np.testing.assert_array_equal(fast, slow[:, :fast.shape[1]])
    # beam search runs on the same cache: k = 1 is greedy, k = 3 ranks its hypotheses
    beam, _ = MD.beam_decoder(m, 1)(tf.constant(src), tf.constant(4, tf.int32))
    b = beam.numpy()[:, 0]
    width = max(b.shape[1], fast.shape[1])
    np.testing.assert_array_equal(np.pad(b, ((0, 0), (0, width - b.shape[1]))),
                                  np.pad(fast, ((0, 0), (0, width - fast.shape[1]))))
    beam3, scores = MD.beam_decoder(m, 3)(tf.constant(src), tf.constant(4, tf.int32))
    assert beam3.shape[:2] == (3, 3)
    # best first: finished hypotheses (with </S>) by score, then unfinished ones by score
    ended = (beam3.numpy() == EOS_ID).any(axis=-1)
    for row_ended, row_scores in zip(ended, scores.numpy()):
        assert list(row_ended) == sorted(row_ended, reverse=True)
        for group in (row_scores[row_ended], row_scores[~row_ended]):
            assert np.all(np.diff(group) <= 1e-6)


def test_checkpoint_and_keras_round_trip(tmp_path):
    import keras
    V = 21
    m = weighted(V, seed=2)
    rng = np.random.default_rng(2)
    src, tgt = rand_ids(rng, (2, 6), V), rand_ids(rng, (2, 4), V)
    base = m((src, tgt)).numpy()
    path = tf.train.Checkpoint(model=m).write(str(tmp_path / "ckpt"))
    other = weighted(V, seed=9)
    assert np.max(np.abs(other((src, tgt)).numpy() - base)) > 1e-3
    tf.train.Checkpoint(model=other).read(path).assert_existing_objects_matched()
    np.testing.assert_allclose(other((src, tgt)).numpy(), base, atol=1e-6)
    for k, v in m.branch_weights().items():
        np.testing.assert_array_equal(other.branch_weights()[k], v)
    m.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    assert loaded.model_type == "weighted"
    np.testing.assert_allclose(loaded((src, tgt)).numpy(), base, atol=1e-6)


def test_hparams_weighted_validation():
    hp = H.apply(H.Hparams(), {"model_type": "weighted"})
    assert hp.model_type == "weighted" and hp.branch_warmup_steps == 400
    with pytest.raises(H.UserError, match="d_ff .* must be divisible"):
        H.apply(H.Hparams(), {"model_type": "weighted", "d_ff": 510, "num_heads": 4})
    with pytest.raises(H.UserError, match="did you mean --model_type"):
        H.apply(H.Hparams(), {"model_typ": "weighted"})


# ---------------------------------------------------------------------------------------
# training: the separate schedule, the simplex constraint, TensorBoard
# ---------------------------------------------------------------------------------------
def test_branch_schedule_peaks_at_its_own_warmup(tmp_path):
    import data_load
    import prepro
    import train as T
    hp = tiny(str(tmp_path), model_type="weighted", lr_schedule="noam", warmup_steps=4000,
              branch_warmup_steps=400, num_heads=4)
    prepro.preprocess(hp)
    tok = data_load.load_tokenizer(hp)
    strategy, precision = T.setup_devices(hp)
    trainer = T.Trainer(hp, tok, strategy, precision)
    lr = trainer.branch_schedule
    steps = np.arange(1, 3000)
    values = lr(steps - 1).numpy()          # lr(iterations) is the lr of step iterations+1
    assert steps[np.argmax(values)] == 400
    assert float(lr(399)) == pytest.approx(32 ** -0.5 * 400 ** -0.5, rel=1e-6)
    # the main schedule still warms up for 4000 steps
    assert float(trainer.schedule(399)) < 0.2 * float(lr(399))
    ids = {id(v) for v in trainer.model.branch_variables}
    assert ids and not ids & {id(v) for v in trainer.main_variables}
    assert len(trainer.main_variables) + len(ids) == len(trainer.model.trainable_variables)


def test_training_keeps_the_simplex_and_moves_the_weights(tmp_path):
    import data_load
    import prepro
    import train as T
    hp = tiny(str(tmp_path), model_type="weighted", num_heads=4, num_epochs=2,
              ckpt_every_steps=5)
    prepro.preprocess(hp)
    tok = data_load.load_tokenizer(hp)
    strategy, precision = T.setup_devices(hp)
    trainer = T.Trainer(hp, tok, strategy, precision)
    before = trainer.model.branch_weights()
    data = data_load.TrainData(hp)
    losses = []
    for epoch in range(4):
        for src, dec_in, labels in data.dataset(epoch, 0, data.batches(epoch)):
            stats, _ = trainer.train_batch(src, dec_in, labels)
            losses.append(stats[0] / stats[2])
            for name, w in trainer.model.branch_weights().items():
                assert on_simplex(w, 1e-5), (name, w, trainer.step)
    assert trainer.step >= 40
    assert int(trainer.branch_optimizer.iterations) == trainer.step
    after = trainer.model.branch_weights()
    moved = max(np.max(np.abs(after[k] - before[k])) for k in before)
    assert moved > 1e-3
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5
    # the branch optimizer's state is checkpointed and restored
    path = trainer.manager.save(checkpoint_number=trainer.step)
    again = T.Trainer(hp, tok, strategy, precision)
    assert again.restore()
    for k, v in after.items():
        np.testing.assert_array_equal(again.model.branch_weights()[k], v)
    m1 = [v.numpy() for v in trainer.branch_optimizer.variables]
    m2 = [v.numpy() for v in again.branch_optimizer.variables]
    assert len(m1) == len(m2) > 2
    for a, b in zip(m1, m2):
        np.testing.assert_array_equal(a, b)
    assert os.path.exists(path + ".index")


def test_end_to_end_weighted_run_logs_branch_weights(tmp_path):
    import eval as E
    import prepro
    import train as T
    from tensorboard.backend.event_processing import event_accumulator
    hp = tiny(str(tmp_path), model_type="weighted", num_heads=4, num_epochs=1)
    prepro.preprocess(hp)
    T.LOG_EVERY, old = 10, T.LOG_EVERY
    try:
        summary = T.train(hp)
    finally:
        T.LOG_EVERY = old
    assert summary["epoch"] == 1
    acc = event_accumulator.EventAccumulator(os.path.join(hp.logdir, "train"),
                                             size_guidance={"tensors": 0})
    acc.Reload()
    tags = acc.Tags()["tensors"]
    assert "branch/encoder_0/kappa_0" in tags and "branch/decoder_0/alpha_3" in tags
    assert "branch/encoder_0/kappa" in tags          # the histogram
    assert "train/branch_lr" in tags
    with open(os.path.join(hp.logdir, "specs")) as f:
        specs = f.read()
    assert "encoder_0/kappa\t" in specs and "decoder_0/alpha\t" in specs
    result = E.evaluate(hp.logdir, {"results_dir": hp.results_dir})
    # eval rebuilds the weighted model from the logdir's hparams and writes its results
    assert os.path.exists(result["results"]) and result["results"].endswith("ckpt-20")
    with open(result["results"], encoding="utf-8") as f:
        assert len(f.read().splitlines()) > 500


def test_weighted_mixed_float16_keeps_the_simplex(tmp_path):
    """Under mixed_float16 the kappa/alpha gradients are unscaled by hand (the loss-scale
    optimizer only wraps the main Adam): they still train, stay on the simplex, and the
    loss falls."""
    import data_load
    import prepro
    import train as T
    hp = tiny(str(tmp_path), model_type="weighted", num_heads=4, precision="mixed_float16")
    prepro.preprocess(hp)
    tok = data_load.load_tokenizer(hp)
    strategy, precision = T.setup_devices(hp)
    assert precision == "mixed_float16"
    trainer = T.Trainer(hp, tok, strategy, precision)
    before = trainer.model.branch_weights()
    data = data_load.TrainData(hp)
    losses = []
    for epoch in range(3):
        for batch in data.dataset(epoch, 0, data.batches(epoch)):
            stats, _ = trainer.train_batch(*batch)
            losses.append(stats[0] / stats[2])
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    after = trainer.model.branch_weights()
    for name, w in after.items():
        assert on_simplex(w, 1e-5), name
    moved = max(np.max(np.abs(after[k] - before[k])) for k in before)
    assert moved > 1e-4
