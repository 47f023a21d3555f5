"""The Weighted Transformer (model_type=weighted; Ahmed et al. 2017, arXiv 1711.02132)."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

import prepro
import train
from eval import evaluate
from helpers import (
    analytic_count,
    check_cached_equals_full,
    rand_ids,
    tiny,
)
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.data.data_load import BOS_ID, EOS_ID, PAD_ID
from transformer_tf2.decoding import beam_search, greedy_search
from transformer_tf2.layers import optimization
from transformer_tf2.models import weighted
from transformer_tf2.models.model import Transformer
from transformer_tf2.training.trainer import Trainer
from transformer_tf2.utils import devices


def weighted_model(V, d=32, d_ff=64, n=2, h=4, **kw):
    keras.utils.set_random_seed(kw.pop("seed", 1))
    m = Transformer(
        V,
        V,
        d_model=d,
        d_ff=d_ff,
        num_blocks=n,
        num_heads=h,
        dropout_rate=0.0,
        model_type="weighted",
        **kw,
    )
    m.build_all()
    return m


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
    np.testing.assert_allclose(weighted.project_to_simplex(v).numpy(), v, atol=1e-7)
    # a uniform shift is removed: [1, 2, 3] -> [0, 0, 1]; [0.5, 0.5, 0.5] -> 1/3 each
    np.testing.assert_allclose(
        weighted.project_to_simplex(np.array([1.0, 2.0, 3.0], np.float32)), [0, 0, 1], atol=1e-7
    )
    np.testing.assert_allclose(
        weighted.project_to_simplex(np.full(3, 0.5, np.float32)), np.full(3, 1 / 3), atol=1e-7
    )
    # negative entries are clipped: [0.6, 0.6, -0.2] -> [0.5, 0.5, 0]
    np.testing.assert_allclose(
        weighted.project_to_simplex(np.array([0.6, 0.6, -0.2], np.float32)),
        [0.5, 0.5, 0],
        atol=1e-7,
    )
    rng = np.random.default_rng(0)
    for _ in range(20):
        v = rng.normal(size=8).astype(np.float64) * 2
        w = weighted.project_to_simplex(v).numpy()
        assert on_simplex(w, 1e-9)
        np.testing.assert_allclose(w, brute_force_projection(v), atol=1e-9)


# ---------------------------------------------------------------------------------------
# shapes, parameter count, specs
# ---------------------------------------------------------------------------------------
def test_shapes_and_initial_branch_weights():
    V = 23
    m = weighted_model(V)
    rng = np.random.default_rng(1)
    src, tgt = rand_ids(rng, (3, 7), V), rand_ids(rng, (3, 5), V)
    logits = m((src, tgt))
    assert logits.shape == (3, 5, V) and logits.dtype == tf.float32
    memory, mask = m.encode(src)
    assert memory.shape == (3, 7, 32)
    assert isinstance(m.variant, weighted.Variant)
    names = sorted(m.variant.branched_layers(m))
    assert names == ["decoder_0", "decoder_1", "encoder_0", "encoder_1"]
    weights = m.variant.branch_weights(m)
    assert len(weights) == 8
    for name, w in weights.items():
        assert w.shape == (4,)
        assert np.all(w > 0) and on_simplex(w), name  # random positive, sum 1
    # random, not uniform
    assert np.ptp(weights["encoder_0/kappa"]) > 1e-3
    # the weighted layers have no separate feed-forward sublayer
    assert m.encoder_0.ffn is None and m.decoder_0.ffn is None
    # a branched sublayer is the encoder self-attention and the decoder cross-attention
    assert isinstance(m.encoder_0.self_attn, weighted.BranchedAttention)
    assert isinstance(m.decoder_0.cross_attn, weighted.BranchedAttention)
    assert not isinstance(m.decoder_0.self_attn, weighted.BranchedAttention)


def analytic_weighted_count(V, d, d_ff, n, h):
    """Per layer, against the standard Transformer: + 2h (kappa, alpha) and - 2d (the
    LayerNorm of the separate FFN sublayer, which the branches fold in)."""
    return analytic_count(V, V, d, d_ff, n) + n * 2 * (2 * h - 2 * d)


@pytest.mark.slow
@pytest.mark.parametrize("d,d_ff,n,h", [(32, 64, 2, 4), (48, 96, 3, 8), (512, 2048, 6, 8)])
def test_parameter_count_parity(d, d_ff, n, h):
    V = 1000
    sizes = dict(d_model=d, d_ff=d_ff, num_blocks=n, num_heads=h, position="sinusoid")
    m = Transformer(V, V, **sizes, model_type="weighted")
    m.build()
    std = Transformer(V, V, **sizes)
    std.build()
    assert std.count_params() == analytic_count(V, V, d, d_ff, n)
    assert m.count_params() == analytic_weighted_count(V, d, d_ff, n, h)
    # within 2M weights and one LayerNorm per layer of the standard model
    assert abs(m.count_params() - std.count_params()) == 2 * n * abs(2 * h - 2 * d)


def test_specs_lines_list_branch_weights():
    m = weighted_model(17)
    lines = m.specs_lines()
    kappa = [line for line in lines if line.startswith("encoder_0/kappa\t")]
    assert len(kappa) == 1
    values = np.array(kappa[0].split("\t")[1].split(), float)
    np.testing.assert_allclose(values, m.encoder_0.self_attn.kappa.numpy(), atol=1e-4)
    assert lines[-1] == f"total parameters: {m.count_params():,}"


def test_branched_attention_matches_per_branch_loop():
    """The batched matmuls equal the paper's formula evaluated branch by branch."""
    keras.utils.set_random_seed(3)
    d, h, d_ff = 16, 4, 32
    layer = weighted.BranchedAttention(d, h, d_ff)
    layer.build((None, None, d), (None, None, d))
    rng = np.random.default_rng(5)
    for w in (layer.ffn_b1, layer.ffn_b2):  # nonzero biases, so they are checked too
        w.assign(rng.normal(size=w.shape).astype(np.float32))
    x = rng.normal(size=(2, 5, d)).astype(np.float32)
    mem = rng.normal(size=(2, 6, d)).astype(np.float32)
    out = layer(x, mem).numpy()
    dk, f = d // h, d_ff // h
    wq, wk, wv, wo = (w.numpy() for w in (layer.w_q, layer.w_k, layer.w_v, layer.w_o))
    w1, b1, w2, b2 = (w.numpy() for w in (layer.ffn_w1, layer.ffn_b1, layer.ffn_w2, layer.ffn_b2))
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
@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_incremental_decoding_matches_full(norm):
    V = 19
    m = weighted_model(V, norm=norm, seed=5)
    rng = np.random.default_rng(4)
    src = rand_ids(rng, (3, 7), V)
    src[0, 4:] = PAD_ID
    T2 = 6
    tgt = np.concatenate([np.full((3, 1), BOS_ID, np.int32), rand_ids(rng, (3, T2 - 1), V)], axis=1)
    check_cached_equals_full(m, src, tgt)
    fast = greedy_search.greedy_decoder(m)(tf.constant(src), tf.constant(4, tf.int32)).numpy()
    L = src.shape[1] + 4
    limits = (src != PAD_ID).sum(axis=1) + 4
    slow = greedy_search.naive_greedy(m, src, L, limits)
    np.testing.assert_array_equal(fast, slow[:, : fast.shape[1]])
    # beam search runs on the same cache: k = 1 is greedy, k = 3 ranks its hypotheses
    beam, _ = beam_search.beam_decoder(m, 1)(tf.constant(src), tf.constant(4, tf.int32))
    b = beam.numpy()[:, 0]
    width = max(b.shape[1], fast.shape[1])
    np.testing.assert_array_equal(
        np.pad(b, ((0, 0), (0, width - b.shape[1]))),
        np.pad(fast, ((0, 0), (0, width - fast.shape[1]))),
    )
    beam3, scores = beam_search.beam_decoder(m, 3, n_best=3)(
        tf.constant(src), tf.constant(4, tf.int32)
    )
    assert beam3.shape[:2] == (3, 3)
    # best first: finished hypotheses (with </S>) by score, then unfinished ones by score
    ended = (beam3.numpy() == EOS_ID).any(axis=-1)
    for row_ended, row_scores in zip(ended, scores.numpy()):
        assert list(row_ended) == sorted(row_ended, reverse=True)
        for group in (row_scores[row_ended], row_scores[~row_ended]):
            assert np.all(np.diff(group) <= 1e-6)


@pytest.mark.slow
def test_checkpoint_and_keras_round_trip(tmp_path):
    V = 21
    m = weighted_model(V, seed=2)
    rng = np.random.default_rng(2)
    src, tgt = rand_ids(rng, (2, 6), V), rand_ids(rng, (2, 4), V)
    base = m((src, tgt)).numpy()
    path = tf.train.Checkpoint(model=m).write(str(tmp_path / "ckpt"))
    other = weighted_model(V, seed=9)
    assert np.max(np.abs(other((src, tgt)).numpy() - base)) > 1e-3
    tf.train.Checkpoint(model=other).read(path).assert_existing_objects_matched()
    np.testing.assert_allclose(other((src, tgt)).numpy(), base, atol=1e-6)
    for k, v in m.variant.branch_weights(m).items():
        np.testing.assert_array_equal(other.variant.branch_weights(other)[k], v)
    m.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    assert loaded.model_type == "weighted"
    np.testing.assert_allclose(loaded((src, tgt)).numpy(), base, atol=1e-6)


def test_hparams_weighted_validation():
    hp = hparams.apply(hparams.Hparams(), {"model_type": "weighted"})
    assert hp.model_type == "weighted" and hp.branch_warmup_steps == 400
    with pytest.raises(hparams.UserError, match="d_ff .* must be divisible"):
        hparams.apply(hparams.Hparams(), {"model_type": "weighted", "d_ff": 510, "num_heads": 4})
    with pytest.raises(hparams.UserError, match="did you mean --model_type"):
        hparams.apply(hparams.Hparams(), {"model_typ": "weighted"})
    with pytest.raises(hparams.UserError, match="needs output_projection=true"):
        hparams.apply(hparams.Hparams(), {"model_type": "weighted", "output_projection": False})
    with pytest.raises(ValueError, match="need W\\^O"):
        weighted.BranchedAttention(8, 2, 16, output_projection=False)


# ---------------------------------------------------------------------------------------
# the variant hook: the kappa/alpha optimizer group
# ---------------------------------------------------------------------------------------
def test_optimizer_groups_hold_every_kappa_and_alpha():
    """weighted.Training().optimizer_groups: one group, 'branch', with the kappa and alpha
    of every layer and a schedule of the run's kind with branch_warmup_steps."""
    m = weighted_model(17, n=2)
    hp = hparams.apply(
        hparams.Hparams(),
        {
            "model_type": "weighted",
            "d_model": 32,
            "num_heads": 4,
            "lr_schedule": "kyubyong",
            "lr": 7e-4,
            "warmup_steps": 4000,
            "branch_warmup_steps": 300,
        },
    )
    groups = weighted.Training().optimizer_groups(m, hp)
    assert list(groups) == ["branch"]
    variables, schedule = groups["branch"]
    expected = [
        w
        for layer in m.encoder_layers + m.decoder_layers
        for w in (layer.branched().kappa, layer.branched().alpha)
    ]
    assert len(variables) == 8
    assert [id(v) for v in variables] == [id(v) for v in expected]
    assert {v.path.rsplit("/", 1)[-1] for v in variables} == {"kappa", "alpha"}
    assert isinstance(schedule, optimization.TransformerSchedule)
    assert schedule.get_config() == {
        "kind": "kyubyong",
        "d_model": 32,
        "warmup_steps": 300,
        "lr": pytest.approx(7e-4 * (4000 / 300) ** 0.5),  # see the test below
        "cooldown": 0.2,
    }


@pytest.mark.parametrize("kind", ["kyubyong", "noam", "constant"])
def test_branch_rate_equals_the_main_rate_past_both_warmups(kind):
    """As with the paper's Noam form (d_model^-0.5 step^-0.5 past the warmup, whatever
    the warmup), kappa and alpha learn at the main rate once both warmups are over; under
    kyubyong they used to run at sqrt(400 / 4000) = 0.32 of it."""
    m = weighted_model(17, n=1)
    values = dict(lr_schedule=kind, lr=3e-4, warmup_steps=4000, branch_warmup_steps=400)
    hp = hparams.apply(hparams.Hparams(), dict(values, model_type="weighted", d_model=32))
    _, branch = weighted.Training().optimizer_groups(m, hp)["branch"]
    main = optimization.TransformerSchedule(kind, 32, 4000, 3e-4)
    for step in (4000, 10000, 50000):  # schedules take the optimizer's iterations (step - 1)
        assert float(branch(step - 1)) == pytest.approx(float(main(step - 1)), rel=1e-6)
    if kind != "constant":  # and the branch warmup is the shorter one
        assert float(branch(399)) > 3 * float(main(399))
        assert float(branch(399)) == pytest.approx(float(branch(399 - 1)) * 400 / 399, rel=1e-5)


def test_branch_ffn_kernels_start_with_a_per_branch_glorot_std():
    """Each branch's FFN kernels (d_model -> d_ff / M -> d_model) have the std of a Glorot
    uniform dense layer of that branch, sqrt(2 / (d_model + d_ff / M)): 0.0722 for the
    multi30k sizes (d_model 256, d_ff 1024, M 8), not the 0.0255 of Keras' fans for a
    3-D kernel; and the two kernels are drawn apart."""
    keras.utils.set_random_seed(4)
    d, d_ff, m = 256, 1024, 8
    layer = weighted.BranchedAttention(d, m, d_ff)
    layer.build((None, None, d), (None, None, d))
    expected = (2 / (d + d_ff // m)) ** 0.5
    assert expected == pytest.approx(0.0722, abs=1e-4)
    w1, w2 = layer.ffn_w1.numpy(), layer.ffn_w2.numpy()
    assert w1.shape == (m, d, d_ff // m) and w2.shape == (m, d_ff // m, d)
    for i in range(m):
        for w in (w1[i], w2[i]):
            assert np.std(w) == pytest.approx(expected, rel=0.03), i
            assert abs(np.mean(w)) < 0.01 and np.abs(w).max() <= 3**0.5 * expected
    assert abs(np.corrcoef(w1.ravel(), w2.ravel())[0, 1]) < 0.02


@pytest.mark.slow
def test_overflow_step_leaves_kappa_alpha_and_their_adam_untouched(tmp_path):
    """Under mixed_float16 a step whose gradients overflow (an inf) is skipped by the
    loss-scale optimizer; the kappa/alpha optimizer skips it too: kappa, alpha, its Adam
    slots and its step counter stay as they were. A finite step moves all four."""
    hp = tiny(str(tmp_path), model_type="weighted", num_heads=4, precision="mixed_float16")
    trainer, _, _, precision = weighted_trainer(hp)
    assert precision == "mixed_float16"
    data = data_load.TrainData(hp)
    trainer.train_batch(*data_load.build_batch(data.corpus, data.batches(0)[0]))
    model, branch = trainer.model, trainer.group_optimizers["branch"]
    variables = model.trainable_variables
    apply = tf.function(lambda grads: trainer.apply_gradients(grads, tf.constant(1.0)))

    def state():
        return {
            "weights": {k: v.copy() for k, v in model.variant.branch_weights(model).items()},
            "slots": [v.numpy().copy() for v in branch.variables if "iteration" not in v.path],
            "iterations": int(branch.iterations.numpy()),
            "main_step": trainer.step,
            "scale": float(trainer.optimizer.dynamic_scale.numpy()),
        }

    def gradients(bad: bool):
        grads = [tf.fill(v.shape, 1e-3 * state0["scale"]) for v in variables]
        if bad:  # one main weight overflows, kappa and alpha get ordinary gradients
            grads[0] = tf.tensor_scatter_nd_update(grads[0], [[0, 0]], [float("inf")])
        return grads

    state0 = state()
    assert state0["iterations"] == state0["main_step"] == 1
    assert max(np.abs(s).max() for s in state0["slots"]) > 0  # the first step filled them
    apply(gradients(bad=True))
    after = state()
    assert after["main_step"] == state0["main_step"]  # the main update was skipped
    assert after["scale"] == state0["scale"] / 2  # and the loss scale halved
    assert after["iterations"] == state0["iterations"]
    for k, v in state0["weights"].items():
        np.testing.assert_array_equal(after["weights"][k], v, err_msg=k)
    for a, b in zip(after["slots"], state0["slots"]):
        np.testing.assert_array_equal(a, b)
    apply(gradients(bad=False))  # a finite step moves them all
    moved = state()
    assert moved["main_step"] == moved["iterations"] == 2
    assert max(np.abs(moved["weights"][k] - v).max() for k, v in state0["weights"].items()) > 0
    assert all(np.abs(a - b).max() > 0 for a, b in zip(moved["slots"], state0["slots"]))


def test_variant_summaries_write_every_branch_weight(tmp_path):
    """The hook's TensorBoard summaries: one scalar per branch weight, a histogram per
    layer and weight kind, and the branch optimizer's lr."""
    m = weighted_model(17, n=1)
    schedule = optimization.TransformerSchedule("noam", 32, 400)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default(step=5):
        m.variant.training.summaries(m, 5, {"branch": schedule})
    writer.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    for layer in ("encoder_0", "decoder_0"):
        for kind in ("kappa", "alpha"):
            assert f"branch/{layer}/{kind}" in tags  # the histogram
            values = [
                float(tf.make_ndarray(acc.Tensors(f"branch/{layer}/{kind}_{i}")[0].tensor_proto))
                for i in range(4)
            ]
            np.testing.assert_allclose(
                values, m.variant.branch_weights(m)[f"{layer}/{kind}"], rtol=1e-6
            )
    lr = float(tf.make_ndarray(acc.Tensors("train/branch_lr")[0].tensor_proto))
    assert lr == pytest.approx(float(schedule(4)), rel=1e-6)


# ---------------------------------------------------------------------------------------
# training: the separate schedule, the simplex constraint, TensorBoard
# ---------------------------------------------------------------------------------------
def weighted_trainer(hp):
    """The Trainer of hp (preprocessed first) on this machine's devices."""
    prepro.preprocess(hp)
    tok = data_load.load_tokenizer(hp)
    strategy, precision = devices.setup_devices(hp)
    return Trainer(hp, tok, strategy, precision), tok, strategy, precision


def test_branch_schedule_peaks_at_its_own_warmup(tmp_path):
    hp = tiny(
        str(tmp_path),
        model_type="weighted",
        lr_schedule="noam",
        warmup_steps=4000,
        branch_warmup_steps=400,
        num_heads=4,
    )
    trainer, _, _, _ = weighted_trainer(hp)
    lr = trainer.schedules["branch"]
    steps = np.arange(1, 3000)
    values = lr(steps - 1).numpy()  # lr(iterations) is the lr of step iterations+1
    assert steps[np.argmax(values)] == 400
    assert float(lr(399)) == pytest.approx(32**-0.5 * 400**-0.5, rel=1e-6)
    # the main schedule still warms up for 4000 steps
    assert float(trainer.schedule(399)) < 0.2 * float(lr(399))
    # kappa and alpha are trained by the branch optimizer only, everything else by the main
    model = trainer.model
    ids = {
        id(v)
        for sub in model.variant.branched_layers(model).values()
        for v in (sub.kappa, sub.alpha)
    }
    assert ids and {i for i, g in trainer.group_of.items() if g == "branch"} == ids
    main = [v for v in model.trainable_variables if id(v) not in ids]
    assert len(main) + len(ids) == len(model.trainable_variables)
    assert len(trainer.optimizer._momentums) == len(main)
    assert len(trainer.group_optimizers["branch"]._momentums) == len(ids)
    assert all(trainer.optimizer._get_variable_index(v) >= 0 for v in main)


@pytest.mark.slow
def test_training_keeps_the_simplex_and_moves_the_weights(tmp_path):
    # warmups of 20 steps both: past them kappa and alpha learn at the main rate, 0.003
    hp = tiny(
        str(tmp_path),
        model_type="weighted",
        num_heads=4,
        num_epochs=2,
        ckpt_every_steps=5,
        branch_warmup_steps=20,
    )
    trainer, tok, strategy, precision = weighted_trainer(hp)
    model = trainer.model
    before = model.variant.branch_weights(model)
    data = data_load.TrainData(hp)
    losses = []
    for epoch in range(4):
        for src, dec_in, labels in data.dataset(epoch, 0, data.batches(epoch)):
            stats, _ = trainer.train_batch(src, dec_in, labels)
            losses.append(stats.loss_sum / stats.tokens)
            for name, w in model.variant.branch_weights(model).items():
                assert on_simplex(w, 1e-5), (name, w, trainer.step)
    assert trainer.step >= 40
    assert int(trainer.group_optimizers["branch"].iterations) == trainer.step
    after = model.variant.branch_weights(model)
    moved = max(np.max(np.abs(after[k] - before[k])) for k in before)
    assert moved > 1e-3
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5
    # the branch optimizer's state is checkpointed and restored
    path = trainer.state.manager.save(checkpoint_number=trainer.step)
    again = Trainer(hp, tok, strategy, precision)
    assert again.state.restore()
    for k, v in after.items():
        np.testing.assert_array_equal(again.model.variant.branch_weights(again.model)[k], v)
    m1 = [v.numpy() for v in trainer.group_optimizers["branch"].variables]
    m2 = [v.numpy() for v in again.group_optimizers["branch"].variables]
    assert len(m1) == len(m2) > 2
    for a, b in zip(m1, m2):
        np.testing.assert_array_equal(a, b)
    assert os.path.exists(path + ".index")


@pytest.mark.slow
def test_end_to_end_weighted_run_logs_branch_weights(tmp_path, monkeypatch):
    hp = tiny(str(tmp_path), model_type="weighted", num_heads=4, num_epochs=1)
    prepro.preprocess(hp)
    monkeypatch.setattr(train, "LOG_EVERY", 10)
    summary = train.train(hp)
    assert summary["epoch"] == 1
    acc = event_accumulator.EventAccumulator(
        os.path.join(hp.logdir, "train"), size_guidance={"tensors": 0}
    )
    acc.Reload()
    tags = acc.Tags()["tensors"]
    assert "branch/encoder_0/kappa_0" in tags and "branch/decoder_0/alpha_3" in tags
    assert "branch/encoder_0/kappa" in tags  # the histogram
    assert "train/branch_lr" in tags
    with open(os.path.join(hp.logdir, "specs")) as f:
        specs = f.read()
    assert "encoder_0/kappa\t" in specs and "decoder_0/alpha\t" in specs
    result = evaluate(hp.logdir, {"results_dir": hp.results_dir})
    # eval rebuilds the weighted model from the logdir's hparams and writes its results
    assert os.path.exists(result["results"]) and result["results"].endswith("ckpt-20")
    with open(result["results"], encoding="utf-8") as f:
        assert len(f.read().splitlines()) > 500


@pytest.mark.slow
def test_weighted_mixed_float16_keeps_the_simplex(tmp_path):
    """Under mixed_float16 the kappa/alpha gradients are unscaled by hand (the loss-scale
    optimizer only wraps the main Adam): they still train, stay on the simplex, and the
    loss falls."""
    hp = tiny(str(tmp_path), model_type="weighted", num_heads=4, precision="mixed_float16")
    trainer, _, _, precision = weighted_trainer(hp)
    assert precision == "mixed_float16"
    model = trainer.model
    before = model.variant.branch_weights(model)
    data = data_load.TrainData(hp)
    losses = []
    for epoch in range(3):
        for batch in data.dataset(epoch, 0, data.batches(epoch)):
            stats, _ = trainer.train_batch(*batch)
            losses.append(stats.loss_sum / stats.tokens)
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    after = model.variant.branch_weights(model)
    for name, w in after.items():
        assert on_simplex(w, 1e-5), name
    moved = max(np.max(np.abs(after[k] - before[k])) for k in before)
    assert moved > 1e-4


@pytest.mark.slow
def test_overflow_step_with_several_replicas(mirrored):
    """With 2 replicas (MirroredStrategy on 2 logical CPUs) the kappa/alpha optimizer
    decides in the cross-replica context: it skips the overflow step with the main one,
    and a finite step still moves it (mirrored_cases.py, run once for the session)."""
    out = mirrored["weighted_overflow"]
    assert out["replicas"] == 2
    first, skipped, finite = out["states"]
    assert first[:2] == [1, 1] and skipped == first  # nothing moved on the overflow step
    assert finite[:2] == [2, 2] and finite[2] != first[2] and finite[3] != first[3]
