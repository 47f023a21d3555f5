"""universal.py: the Universal Transformer with ACT (model_type=universal).

ACT arithmetic on hand-set probabilities, frozen states of halted positions, weight
sharing across depth, the coordinate embedding, the cache and beam search against the
full pass (ACT on and off), save/load, and training through train.py."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

import export
import train
from eval import evaluate
from helpers import (
    check_cached_equals_full,
    check_greedy_and_beam,
    rand_ids,
    tiny,
    tiny_model,
    translate_lines,
)
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import plots
from transformer_tf2.layers import modules
from transformer_tf2.models import checkpoints, universal
from transformer_tf2.models.model import Transformer
from transformer_tf2.training.trainer import Trainer
from transformer_tf2.utils import devices


def ut_model(seed=0, **kw):
    return tiny_model(seed=seed, **{"model_type": "universal", "ut_max_steps": 4, **kw})


# ---------------------------------------------------------------------------------------
# ACT arithmetic
# ---------------------------------------------------------------------------------------
def test_act_step_on_hand_set_probabilities():
    """Three positions over 4 steps (threshold 0.99):
    A: p 0.5, 0.6        -> halts at step 2 with R = 0.5; weights 0.5, 0.5
    B: p 0.1 every step  -> never passes 0.99: the remainder is forced at step 4, R = 0.7
    C: p 0.995           -> halts at step 1 with R = 1; weight 1."""
    probs = np.array(
        [[0.5, 0.1, 0.995], [0.6, 0.1, 0.3], [0.9, 0.1, 0.3], [0.9, 0.1, 0.3]], np.float32
    )
    halting = remainders = n_updates = tf.zeros(3)
    weights, running = [], []
    for t in range(4):
        w, r, halting, remainders, n_updates = universal.act_step(
            tf.constant(probs[t]), halting, remainders, n_updates, t == 3, 0.99
        )
        weights.append(w.numpy())
        running.append(r.numpy())
    weights = np.array(weights)  # (steps, positions)
    np.testing.assert_allclose(
        weights, [[0.5, 0.1, 1.0], [0.5, 0.1, 0.0], [0.0, 0.1, 0.0], [0.0, 0.7, 0.0]], atol=1e-6
    )
    np.testing.assert_allclose(weights.sum(axis=0), 1.0, atol=1e-6)
    np.testing.assert_allclose(remainders.numpy(), [0.5, 0.7, 1.0], atol=1e-6)
    np.testing.assert_array_equal(n_updates.numpy(), [2, 4, 1])
    np.testing.assert_array_equal(np.array(running), [[1, 1, 1], [1, 1, 0], [0, 1, 0], [0, 1, 0]])
    np.testing.assert_allclose(halting.numpy(), 1.0, atol=1e-6)


def test_halted_positions_keep_their_state():
    """Through the recurrence with a stub block (state + 1) and hand-set halting: a halted
    position's state is copied unchanged to the later steps (only the depth embedding is
    added to what the block sees), the output is the ACT-weighted sum of the block outputs,
    and the ponder cost is N + R over the real positions."""
    d = 8
    layer = universal.UniversalEncoder(
        max_steps=4, d_model=d, num_heads=2, d_ff=16, dropout_rate=0.0, name="probe"
    )
    probs = [[0.5, 0.995, 0.1], [0.6, 0.2, 0.1], [0.9, 0.2, 0.1], [0.9, 0.2, 0.1]]
    step = {"t": 0}

    def halting(inputs):
        p = tf.constant([probs[step["t"]]], tf.float32)
        step["t"] += 1
        return p

    layer.halting_probability = halting
    seen = []

    def apply(h, t):
        seen.append(h.numpy()[0])
        return h + 1.0

    x = tf.zeros((1, 3, d))
    real = tf.constant([[1.0, 1.0, 1.0]])
    out, report = layer.recur(x, real, apply)
    out = out.numpy()[0]
    depth = [universal.depth_encoding(t, d, tf.float32).numpy()[0, 0] for t in range(1, 5)]
    states = [np.zeros((3, d))]
    for t in range(4):  # the expected states: position 0 runs 2 steps, 1 runs 1, 2 runs 4
        runs = np.array([t < 2, t < 1, True])[:, None]
        states.append(np.where(runs, states[-1] + depth[t] + 1.0, states[-1]))
    for t in range(4):
        np.testing.assert_allclose(seen[t], states[t] + depth[t], atol=1e-6, err_msg=f"step {t}")
    weights = np.array([[0.5, 1.0, 0.1], [0.5, 0.0, 0.1], [0.0, 0.0, 0.1], [0.0, 0.0, 0.7]])
    expected = sum(weights[t][:, None] * (states[t] + depth[t] + 1.0) for t in range(4))
    np.testing.assert_allclose(out, expected, atol=1e-5)
    np.testing.assert_array_equal(report["ponder_steps"].numpy(), [[2, 1, 4]])
    cost = ((2 + 0.5) + (1 + 1.0) + (4 + 0.7)) / 3
    assert float(report["ponder_cost"]) == pytest.approx(cost, rel=1e-6)


# ---------------------------------------------------------------------------------------
# weight sharing and the coordinate embedding
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_parameter_count_does_not_depend_on_the_steps():
    counts = {k: ut_model(ut_max_steps=k).count_params() for k in (1, 2, 8)}
    assert counts[1] == counts[2] == counts[8]
    plain = tiny_model(num_blocks=1)
    # one block per stack + the halting units (d + 1 each) + 3 ponder statistics each
    assert counts[2] == plain.count_params() + 2 * (32 + 1) + 2 * 3
    off = ut_model(act=False)
    assert off.count_params() == plain.count_params() + 2 * 3
    assert "the parameter count does not depend" in "\n".join(ut_model().specs_lines())


@pytest.mark.slow
def test_without_act_the_output_is_k_unrolled_applications_of_one_block():
    rng = np.random.default_rng(1)
    src = tf.constant(rand_ids(rng, (2, 6), 23))
    outs = {}
    for k in (2, 8):
        m = ut_model(act=False, ut_max_steps=k)
        memory, mask = m.encode(src)
        enc = m.encoder_layers[0]
        x = m.src_embedding(src)
        for t in range(1, k + 1):
            x = enc.block(m.src_position(x) + universal.depth_encoding(t, 32, tf.float32), mask)
        np.testing.assert_allclose(memory.numpy(), x.numpy(), atol=1e-5)
        outs[k] = memory.numpy()
    assert np.abs(outs[2] - outs[8]).max() > 1e-2


def test_learned_positions_enter_at_every_step():
    """With learned positions the model's table is the one the stacks add at each step
    (the embedding adds none), and it is a single table per side."""
    m = ut_model(position="learned", act=False)
    tables = [w.path for w in m.weights if w.path.endswith("table")]
    assert len(tables) == 2
    src = tf.constant([[5, 6, 7]])
    x = m.embed(src, m.src_embedding, m.src_position, m.src_dropout, False)
    np.testing.assert_allclose(x.numpy(), m.src_embedding(src).numpy())


# ---------------------------------------------------------------------------------------
# decoding: cache = full pass, greedy and beam, ACT on and off
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("act", [True, False])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_cache_equals_full_pass_with_the_same_halting(act, norm):
    m = ut_model(act=act, norm=norm, seed=3)
    rng = np.random.default_rng(2)
    src = rand_ids(rng, (3, 7), 23)
    src[0, 4:] = 0
    tgt = rand_ids(rng, (3, 6), 23)
    check_cached_equals_full(m, tf.constant(src), tgt)
    if act:
        extras = {}
        memory, mask = m.encode(tf.constant(src))
        m.decode(tf.constant(tgt), memory, mask, extras=extras)
        full = extras["decoder_0"]["ponder_steps"].numpy()
        assert full.min() >= 1 and full.max() <= 4 and len(np.unique(full)) > 1
        cache = m.init_cache(memory, mask)
        for t in range(tgt.shape[1]):
            _, cache = m.decode_step(tf.constant(tgt[:, t]), cache)
        np.testing.assert_array_equal(cache["layers"][0]["ponder"].numpy(), full)


@pytest.mark.slow
@pytest.mark.parametrize("act", [True, False])
def test_greedy_and_beam_search_on_the_cache(act):
    """Greedy decoding equals the naive full-pass decoder; beam search with k = 1 is
    greedy, and k = 3 reorders every depth's keys/values with its hypotheses (each
    hypothesis re-scored by the full pass has the beam's score)."""
    m = ut_model(act=act, seed=5)
    check_greedy_and_beam(m, rand_ids(np.random.default_rng(3), (3, 5), 23), extra=4)


@pytest.mark.slow
def test_select_rows_picks_every_depth():
    m = ut_model(seed=1)
    src = tf.constant(rand_ids(np.random.default_rng(4), (2, 5), 23))
    memory, mask = m.encode(src)
    cache = m.init_cache(memory, mask)
    _, cache = m.decode_step(tf.constant([7, 9]), cache)
    picked = m.select_rows(cache, tf.constant([1, 1, 0]))
    layer = cache["layers"][0]
    for key in ("k", "v"):
        assert len(picked["layers"][0][key]) == 4
        for depth in range(4):
            np.testing.assert_array_equal(
                picked["layers"][0][key][depth].numpy(), layer[key][depth].numpy()[[1, 1, 0]]
            )
    np.testing.assert_array_equal(
        picked["layers"][0]["ponder"].numpy(), layer["ponder"].numpy()[[1, 1, 0]]
    )


# ---------------------------------------------------------------------------------------
# save / load, hparams
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_checkpoint_and_keras_round_trip(tmp_path):
    m = ut_model(seed=7, act_epsilon=0.05)
    src, tgt = tf.constant([[5, 6, 7, 3]]), tf.constant([[2, 8, 9]])
    ref = m((src, tgt)).numpy()
    path = tf.train.Checkpoint(model=m).write(str(tmp_path / "ckpt"))
    again = ut_model(seed=8, act_epsilon=0.05)
    tf.train.Checkpoint(model=again).read(path).assert_existing_objects_matched()
    np.testing.assert_allclose(again((src, tgt)).numpy(), ref, atol=1e-6)
    m.save(str(tmp_path / "m.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "m.keras"))
    assert loaded.config.ut_max_steps == 4 and loaded.config.act_epsilon == 0.05
    np.testing.assert_allclose(loaded((src, tgt)).numpy(), ref, atol=1e-6)


def test_hparams_of_the_universal_transformer():
    hp = hparams.apply(hparams.Hparams(), {"model_type": "universal", "ut_max_steps": "3"})
    assert hp.ut_max_steps == 3 and hp.act is True and hp.act_epsilon == 0.01
    for key in ("ut_max_steps", "act", "act_epsilon"):
        assert key in hparams.MODEL_KEYS
    with pytest.raises(hparams.UserError, match="--ut_max_steps must be a positive integer"):
        hparams.apply(hparams.Hparams(), {"ut_max_steps": 0})
    with pytest.raises(hparams.UserError, match="--act_epsilon must be in"):
        hparams.apply(hparams.Hparams(), {"act_epsilon": 1.0})
    with pytest.raises(hparams.UserError, match="--act_loss_weight must not be negative"):
        hparams.apply(hparams.Hparams(), {"act_loss_weight": -1})
    model = Transformer.from_hparams(hp, 23, 23)
    assert model.num_blocks == 1 and isinstance(model.encoder_0, universal.UniversalEncoder)
    # the paper's model is unchanged by the new keys' defaults
    plain = Transformer.from_hparams(hparams.Hparams(), 23, 23)
    assert isinstance(plain.encoder_0, modules.EncoderLayer) and plain.num_blocks == 2


@pytest.mark.slow
def test_extra_loss_is_the_weighted_ponder_cost_and_has_a_gradient():
    m = ut_model(seed=2, act_loss_weight=0.5)
    src = tf.constant(rand_ids(np.random.default_rng(6), (2, 5), 23))
    tgt = tf.constant(rand_ids(np.random.default_rng(7), (2, 4), 23))
    extras = {}
    with tf.GradientTape() as tape:
        memory, mask = m.encode(src, extras=extras)
        m.decode(tgt, memory, mask, extras=extras)
        loss = m.variant.training.extra_loss(m, extras)
    assert sorted(extras) == ["decoder_0", "encoder_0"]
    enc = m.variant.per_token(m, "encoder", extras).numpy()
    dec = m.variant.per_token(m, "decoder", extras).numpy()
    np.testing.assert_array_equal(enc, extras["encoder_0"]["ponder_steps"].numpy())
    assert float(loss) > 0.5 * (enc.mean() + dec.mean())  # N + R > N (R > 0)
    assert float(loss) <= 0.5 * (enc.mean() + dec.mean() + 2.0)
    halting = [m.encoder_layers[0].halting.kernel, m.decoder_layers[0].halting.kernel]
    grads = tape.gradient(loss, halting)
    assert all(g is not None and float(tf.reduce_max(tf.abs(g))) > 0 for g in grads)
    plain = ut_model(act=False)
    extras = {}
    plain.encode(src, extras=extras)
    assert extras == {} and plain.variant.per_token(plain, "encoder", extras) is None
    assert float(plain.variant.training.extra_loss(plain, extras)) == 0.0


# ---------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_universal_trains_logs_ponder_and_evaluates(demo_prepro, tmp_path, monkeypatch):
    """A one-epoch run learns (the training loss falls), TensorBoard has the ponder time
    and the ACT loss's share, and eval.py decodes the checkpoint."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        model_type="universal",
        ut_max_steps=3,
        num_epochs=1,
        attention_layers="last",
    )
    monkeypatch.setattr(train, "LOG_EVERY", 10)
    summary = train.train(hp)
    assert summary["train_loss"] < summary["first_loss"] - 0.3
    acc = event_accumulator.EventAccumulator(
        os.path.join(hp.logdir, "train"), size_guidance={"tensors": 0}
    )
    acc.Reload()
    tags = acc.Tags()["tensors"]
    for name in ("encoder", "decoder"):
        values = [
            float(tf.make_ndarray(e.tensor_proto)) for e in acc.Tensors(f"ponder/{name}_mean")
        ]
        assert all(1.0 <= v <= 3.0 for v in values), values
        assert f"ponder/{name}_max" in tags
    assert "train/act_loss" in tags
    assert "attention/ponder" in tags  # the ponder time per token of a dev sentence
    result = evaluate(hp.logdir, {"results_dir": hp.results_dir})
    assert os.path.exists(result["results"])
    hp1, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    att = plots.attention(model, tok, "Die Frau liest ein Buch.", hp.max_len_extra)
    assert att.ponder["source"].shape == (len(att.source),)
    assert att.ponder["translation"].shape == (len(att.translation),)
    assert set(np.unique(np.concatenate(list(att.ponder.values())))) <= {1.0, 2.0, 3.0}
    fig = plots.figures(att)["ponder"]
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == att.source
    plots.png(fig)
    # the exported graph (greedy and beam) translates as translate.py does
    sentences = ["Die Frau liest ein Buch.", "", "Der Hund schläft."]
    for beam in (1, 2):
        hp2, tok, model, _ = checkpoints.load_run(hp.logdir, {"beam_size": beam})
        module = export.ServingModule(model, tok, hp2)
        got = module.translate(tf.constant(sentences))["translations"].numpy()
        expected = translate_lines(model, tok, hp2, sentences)
        assert [s.decode("utf-8") for s in got] == expected


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_universal_trains_in_mixed_precision(demo_prepro, precision):
    """Block matmuls in the low precision, the halting arithmetic in float32: the losses
    stay finite and fall, and the ponder statistics stay within 1..ut_max_steps."""
    hp = hparams.apply(
        demo_prepro, {"model_type": "universal", "ut_max_steps": 3, "precision": precision}
    )
    tok = data_load.load_tokenizer(hp)
    strategy, resolved = devices.setup_devices(hp)
    assert resolved == precision
    trainer = Trainer(hp, tok, strategy, resolved)
    enc = trainer.model.encoder_layers[0]
    assert enc.block.compute_dtype != "float32" and enc.halting.compute_dtype == "float32"
    data = data_load.TrainData(hp)
    losses = []
    for epoch in range(1):
        for batch in data.dataset(epoch, 0, data.batches(epoch)):
            stats, _ = trainer.train_batch(*batch)
            losses.append(stats.loss_sum / stats.tokens)
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    for stack in (enc, trainer.model.decoder_layers[0]):
        assert 1.0 <= float(stack.ponder_mean) <= float(stack.ponder_max) <= 3.0


@pytest.mark.slow
def test_universal_with_the_tf1_switches():
    """The stacks pass the block's switches through: the TF1 attention (ReLU Q/K/V with
    biases, no W^O, query masking, LayerNorm epsilon 1e-8) and untied logits, with the
    cache still equal to the full pass."""
    m = ut_model(
        seed=4,
        qkv_activation="relu",
        qkv_bias=True,
        output_projection=False,
        query_masking=True,
        layer_norm_epsilon=1e-8,
        tie_softmax=False,
    )
    paths = [w.path for w in m.weights]
    assert not any(p.endswith("w_o") for p in paths)
    assert any("encoder_0/block/self_attn" in p and p.endswith("b_q") for p in paths), paths
    src = rand_ids(np.random.default_rng(9), (2, 6), 23)
    src[1, 3:] = 0
    tgt = rand_ids(np.random.default_rng(10), (2, 5), 23)
    check_cached_equals_full(m, tf.constant(src), tgt)
