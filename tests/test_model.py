"""The Transformer of model.py (tiny sizes, CPU): causality, padding invariance, the
decoding cache against the full pass, mixed precision, the exact parameter count, the
specs lines, serialization, the variant registry, the TF1 switches (the defaults rebuild
the model of earlier versions and load their checkpoints), and a small run that has to
learn a toy mapping.
"""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import ROOT, analytic_count, check_cached_equals_full, rand_ids, tiny_model
from transformer_tf2.config import hparams
from transformer_tf2.data.data_load import BOS_ID, EOS_ID, PAD_ID
from transformer_tf2.decoding import greedy_search
from transformer_tf2.kernels import fast_ops, native
from transformer_tf2.layers import attention, modules, optimization
from transformer_tf2.models import variants, weighted
from transformer_tf2.models.model import VARIANTS, Transformer


# ---------------------------------------------------------------------------------------
# 3-4. causality and padding invariance
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_is_causal(norm):
    V = 23
    m = tiny_model(V, V, norm=norm)
    rng = np.random.default_rng(2)
    src = rand_ids(rng, (2, 6), V)
    tgt = rand_ids(rng, (2, 7), V)
    base = m((src, tgt)).numpy()
    for t in (0, 3, 5):
        changed = tgt.copy()
        changed[:, t + 1 :] = rand_ids(rng, changed[:, t + 1 :].shape, V)
        changed[:, t + 1 :] = np.where(
            changed[:, t + 1 :] == tgt[:, t + 1 :],
            (changed[:, t + 1 :] - 4 + 1) % (V - 4) + 4,
            changed[:, t + 1 :],
        )
        assert np.all(changed[:, t + 1 :] != tgt[:, t + 1 :])
        out = m((src, changed)).numpy()
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5)
        # and the change is visible later (the test is not vacuous)
        assert np.max(np.abs(out[:, t + 1 :] - base[:, t + 1 :])) > 1e-3


@pytest.mark.slow
def test_padding_invariance():
    V = 23
    m = tiny_model(V, V)
    rng = np.random.default_rng(3)
    src = rand_ids(rng, (2, 5), V)
    tgt = rand_ids(rng, (2, 6), V)
    base = m((src, tgt)).numpy()
    # PAD appended to the source changes nothing
    src_padded = np.concatenate([src, np.zeros((2, 4), np.int32)], axis=1)
    np.testing.assert_allclose(m((src_padded, tgt)).numpy(), base, atol=1e-5)
    # PAD appended to the target input leaves the real positions unchanged
    tgt_padded = np.concatenate([tgt, np.zeros((2, 3), np.int32)], axis=1)
    out = m((src, tgt_padded)).numpy()
    assert out.shape == (2, 9, V)
    np.testing.assert_allclose(out[:, :6], base, atol=1e-5)
    # a different real source token does change the output (not vacuous)
    other = src.copy()
    other[:, 2] = (other[:, 2] - 4 + 1) % (V - 4) + 4
    assert np.max(np.abs(m((other, tgt)).numpy() - base)) > 1e-3
    # batch padding: a short sentence padded in a batch equals it alone
    short = src[:1, :3]
    alone = m((short, tgt[:1])).numpy()
    in_batch = m((np.concatenate([np.pad(short, ((0, 0), (0, 2))), src[1:]]), tgt)).numpy()
    np.testing.assert_allclose(in_batch[:1], alone, atol=1e-5)


# ---------------------------------------------------------------------------------------
# 5. incremental decoding: the cache gives the full pass
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "norm,position",
    [("post", "sinusoid"), ("pre", "sinusoid"), ("post", "learned"), ("pre", "learned")],
)
def test_incremental_decoding_matches_full(norm, position):
    V = 19
    m = tiny_model(V, V, norm=norm, position=position, seed=5)
    rng = np.random.default_rng(4)
    src = rand_ids(rng, (3, 7), V)
    src[0, 4:] = PAD_ID  # lengths 4, 7, 2
    src[2, 2:] = PAD_ID
    T2 = 6
    tgt = np.concatenate([np.full((3, 1), BOS_ID, np.int32), rand_ids(rng, (3, T2 - 1), V)], axis=1)
    check_cached_equals_full(m, src, tgt)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_mixed_bfloat16_model(norm):
    """Under mixed_bfloat16 the logits are float32, close to the float32 model with the
    same weights, and incremental decoding still matches the full pass."""
    V = 19
    rng = np.random.default_rng(19)
    src = rand_ids(rng, (3, 6), V)
    src[0, 3:] = PAD_ID
    tgt = rand_ids(rng, (3, 5), V)
    ref_model = tiny_model(V, V, norm=norm, seed=20)
    ref = ref_model((src, tgt)).numpy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        m = tiny_model(V, V, norm=norm, seed=21)
        m.set_weights(ref_model.get_weights())
        assert m.tgt_embedding.compute_dtype == "bfloat16"
        full = m((src, tgt))
        assert full.dtype == tf.float32
        full = full.numpy()
        memory, mask = m.encode(src)
        cache = m.init_cache(memory, mask)
        for t in range(5):
            logits, cache = m.decode_step(tf.constant(tgt[:, t]), cache)
            assert logits.dtype == tf.float32
            np.testing.assert_allclose(logits.numpy(), full[:, t], atol=2e-2)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.all(np.isfinite(full))
    # bfloat16 has 8 bits of mantissa: agree with float32 to a few percent of the scale
    assert np.max(np.abs(full - ref)) < 0.1 * max(1.0, np.max(np.abs(ref))), np.max(
        np.abs(full - ref)
    )


# ---------------------------------------------------------------------------------------
# 8. parameter count
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_parameter_count_base_model():
    m = Transformer(  # the paper's base model (3, 6.1; the defaults are the demo's)
        32000, 32000, d_model=512, d_ff=2048, num_blocks=6, num_heads=8, position="sinusoid"
    )
    m.build()
    expected = analytic_count(32000, 32000, 512, 2048, 6)
    # 16,384,000 + 6 * (3,150,336 + 4,199,936) = 60,485,632
    assert expected == 60_485_632
    assert m.count_params() == expected
    assert sum(int(np.prod(v.shape)) for v in m.weights) == expected
    assert m.src_embedding is m.tgt_embedding


@pytest.mark.parametrize(
    "kw",
    [
        dict(src_vocab=301, tgt_vocab=257, share=False),
        dict(src_vocab=300, tgt_vocab=300, position="learned", max_position=64),
        dict(src_vocab=300, tgt_vocab=300, norm="pre"),
        dict(
            src_vocab=301,
            tgt_vocab=257,
            share=False,
            position="learned",
            max_position=50,
            norm="pre",
        ),
    ],
)
def test_parameter_count_variants(kw):
    d, d_ff, n = 48, 96, 3
    m = Transformer(
        kw["src_vocab"],
        kw["tgt_vocab"],
        d_model=d,
        d_ff=d_ff,
        num_blocks=n,
        num_heads=4,
        share_embeddings=kw.get("share", True),
        position=kw.get("position", "sinusoid"),
        max_position=kw.get("max_position", 1024),
        norm=kw.get("norm", "post"),
    )
    m.build()
    expected = analytic_count(
        kw["src_vocab"],
        kw["tgt_vocab"],
        d,
        d_ff,
        n,
        share=kw.get("share", True),
        position=kw.get("position", "sinusoid"),
        max_position=kw.get("max_position", 1024),
        norm=kw.get("norm", "post"),
    )
    assert m.count_params() == expected


def test_share_embeddings_requires_joint_vocab():
    with pytest.raises(ValueError):
        Transformer(10, 12, d_model=8, d_ff=16, num_blocks=1, num_heads=2, share_embeddings=True)


def test_specs_lines_end_with_total():
    m = tiny_model(23, 29)
    lines = m.specs_lines()
    total = sum(int(np.prod(v.shape)) for v in m.weights)
    assert total == analytic_count(23, 29, 32, 64, 2, share=False)
    assert lines[-1] == f"total parameters: {total:,}"
    assert len(lines) == len(m.weights) + 1


# ---------------------------------------------------------------------------------------
# 9. serialization
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "vocabs,kw", [((23, 23), dict(norm="pre", position="learned")), ((23, 29), dict())]
)
def test_checkpoint_round_trip(tmp_path, vocabs, kw):
    V1, V2 = vocabs
    rng = np.random.default_rng(10)
    src, tgt = rand_ids(rng, (2, 5), V1), rand_ids(rng, (2, 4), V2)
    m = tiny_model(V1, V2, seed=11, **kw)
    ref = m((src, tgt)).numpy()
    path = tf.train.Checkpoint(model=m).write(str(tmp_path / "ckpt"))
    fresh = tiny_model(V1, V2, seed=12, **kw)
    assert np.max(np.abs(fresh((src, tgt)).numpy() - ref)) > 1e-3  # different weights
    status = tf.train.Checkpoint(model=fresh).read(path)
    status.assert_existing_objects_matched()
    np.testing.assert_array_equal(fresh((src, tgt)).numpy(), ref)
    for a, b in zip(m.weights, fresh.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.slow
@pytest.mark.parametrize("shared", [False, True])
def test_keras_save_and_load(tmp_path, shared):
    """A .keras file reloads to the same Transformer, with its embedding shared or not."""
    V1, V2 = (23, 23) if shared else (23, 29)
    rng = np.random.default_rng(13)
    src, tgt = rand_ids(rng, (2, 5), V1), rand_ids(rng, (2, 4), V2)
    m = tiny_model(V1, V2, seed=14)
    ref = m((src, tgt)).numpy()
    path = str(tmp_path / "m.keras")
    m.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, Transformer)
    assert loaded.get_config()["tgt_vocab_size"] == V2
    assert (loaded.src_embedding is loaded.tgt_embedding) == shared
    np.testing.assert_array_equal(loaded((src, tgt)).numpy(), ref)


# ---------------------------------------------------------------------------------------
# 9b. one source of truth for the settings: hparams.ModelConfig
# ---------------------------------------------------------------------------------------
# every field that changes the model's function -> (another value, the settings it needs)
CHANGES = {
    "model_type": ("weighted", {}),
    "d_model": (16, {}),
    "d_ff": (32, {}),
    "num_blocks": (2, {}),
    "num_heads": (4, {}),
    "position": ("learned", {}),
    "max_position": (64, {"position": "learned"}),
    "max_relative_position": (2, {"position": "shaw"}),
    "t5_buckets": (8, {"position": "t5"}),
    "t5_max_distance": (6, {"position": "t5", "t5_buckets": 8}),
    "position_add_absolute": (True, {"position": "alibi"}),
    "norm": ("pre", {}),
    "memory_sentences": (1, {"position": "xl"}),
    "target_memory_sentences": (1, {"position": "xl"}),
    "share_embeddings": (False, {}),
    "qkv_activation": ("relu", {}),
    "qkv_bias": (True, {}),
    "output_projection": (False, {}),
    "query_masking": (True, {}),
    "key_mask_defect": (True, {}),
    "tie_softmax": (False, {}),
    "layer_norm_epsilon": (0.5, {}),
    "embedding_init": ("xavier", {}),
    "ut_max_steps": (2, {"model_type": "universal"}),
    "act": (False, {"model_type": "universal"}),
    "act_epsilon": (0.6, {"model_type": "universal"}),
}
TRAINING_ONLY = {
    "dropout_rate": (0.5, {}),
    "attention_dropout": (0.5, {}),
    "embedding_dropout": (0.5, {}),
    "residual_dropout": (0.5, {}),
    "act_loss_weight": (1.0, {"model_type": "universal"}),
}


def test_model_keys_are_the_config_fields():
    """MODEL_KEYS is the vocabulary plus every ModelConfig field not marked training-only;
    each one is an Hparams field that from_hparams copies, and the tests below know a
    change of each (a new field needs an entry in CHANGES or TRAINING_ONLY)."""
    fields = {f.name for f in dataclasses.fields(hparams.ModelConfig)}
    vocab = {"src_vocab_size", "tgt_vocab_size"}
    assert set(hparams.MODEL_KEYS) == {"vocab_type", "vocab_size", "min_cnt"} | (
        fields - vocab - set(TRAINING_ONLY)
    )
    assert set(CHANGES) | set(TRAINING_ONLY) == fields - vocab
    hp = hparams.apply(
        hparams.Hparams(), {"d_model": 24, "residual_dropout": 0.0, "share_embeddings": False}
    )
    c = hparams.ModelConfig.from_hparams(hp, 11, 13)
    assert (c.src_vocab_size, c.tgt_vocab_size, c.d_model) == (11, 13, 24)
    assert (c.rate("residual"), c.rate("embedding")) == (0.0, hp.dropout_rate)
    for name in fields - vocab - {"embedding_dropout", "residual_dropout"}:
        assert getattr(c, name) == getattr(hp, name), name
    m = Transformer(config=c)
    assert Transformer.from_config(m.get_config()).config == c
    # one default per setting: a model built without settings is hparams.py's default model
    default = hparams.ModelConfig.from_hparams(hparams.Hparams(), 11, 11)
    unresolved = dict(embedding_dropout=-1.0, residual_dropout=-1.0)  # -1: dropout_rate
    assert Transformer(11, 11).config == dataclasses.replace(default, **unresolved)
    assert default.d_model == hparams.Hparams.d_model
    with pytest.raises(TypeError, match="not both"):
        Transformer(11, 13, config=c)


PROBE_SRC = np.tile(np.arange(4, 16, dtype=np.int32), (2, 1))
PROBE_SRC[1, 8:] = PAD_ID  # a padded row: the masking switches show


def _config_probe(**kw):
    """A tiny built model (seed 0) and its initial weights."""
    keras.utils.set_random_seed(0)
    args = dict(d_model=8, d_ff=16, num_blocks=1, num_heads=2, max_position=32)
    m = Transformer(19, 19, **{**args, **kw})
    m.build_all()
    return m, [w.numpy() for w in m.weights]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHANGES) + sorted(TRAINING_ONLY))
def test_a_config_field_changes_the_function_iff_it_is_a_model_key(name):
    """A MODEL_KEYS field's change gives other weight shapes or, with the same weights
    (every one redrawn from one seeded generator, so that t5's zero table counts), other
    inference outputs; a training-only field's change gives neither (so leaving it out of
    MODEL_KEYS lets no resumed run build another model). embedding_init changes where
    the weights start, not the function: its change gives other initial weights."""
    value, needs = {**CHANGES, **TRAINING_ONLY}[name]
    base, init = _config_probe(**needs)
    other, init2 = _config_probe(**needs, **{name: value})
    assert getattr(other.config, name) == value != getattr(base.config, name)
    if name == "embedding_init":
        assert any(not np.array_equal(a, b) for a, b in zip(init, init2))
        return
    same = [w.shape for w in base.weights] == [w.shape for w in other.weights]
    if same:
        rng = np.random.default_rng(0)
        for a, b in zip(base.weights, other.weights):
            drawn = rng.normal(0.0, 0.5, size=a.shape).astype(a.dtype)
            a.assign(drawn)
            b.assign(drawn)
        tgt = PROBE_SRC[:, ::-1].copy()
        # a context of num_blocks earlier sentences, and their targets, which only a
        # memory model reads
        context = np.stack([tgt, PROBE_SRC], axis=1)[:, -base.num_blocks :]
        probe = (PROBE_SRC, tgt, context, context[:, ::-1])
        out = base(probe, training=False).numpy()
        same = np.allclose(out, other(probe, training=False).numpy(), atol=1e-6)
    assert same == (name in TRAINING_ONLY)


# ---------------------------------------------------------------------------------------
# 11. a real learning check
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_training_learns_toy_mapping():
    keras.utils.set_random_seed(21)
    rng = np.random.default_rng(21)
    V, n_pairs, T1, T2 = 16, 20, 7, 7  # tokens 4..13 in the source, +1 in the target
    src = np.zeros((n_pairs, T1), np.int32)
    tgt_in = np.zeros((n_pairs, T2), np.int32)
    tgt_out = np.zeros((n_pairs, T2), np.int32)
    targets = []
    for i in range(n_pairs):
        n = int(rng.integers(3, 7))
        s = rng.integers(4, 14, size=n)
        y = list(s[::-1] + 1)
        src[i, :n], src[i, n] = s, EOS_ID
        tgt_in[i, : n + 1] = [BOS_ID] + y
        tgt_out[i, : n + 1] = y + [EOS_ID]
        targets.append(y + [EOS_ID])
    model = Transformer(
        V,
        V,
        d_model=32,
        d_ff=64,
        num_blocks=1,
        num_heads=4,
        dropout_rate=0.0,
        share_embeddings=True,
    )
    model.build_all()
    opt = keras.optimizers.Adam(3e-3, beta_2=0.98, epsilon=1e-9)
    src_t, tin_t, tout_t = (tf.constant(a) for a in (src, tgt_in, tgt_out))

    def mean_loss(training):
        logits = model((src_t, tin_t), training=training)
        keep = tf.not_equal(tout_t, PAD_ID)
        return tf.reduce_mean(
            optimization.smoothed_cross_entropy(
                tf.boolean_mask(logits, keep), tf.boolean_mask(tout_t, keep), 0.0
            )
        )

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = mean_loss(True)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    first = float(train_step())
    for step in range(600):
        loss = float(train_step())
        if step > 50 and loss < 0.02:
            break
    final = float(mean_loss(False))
    assert first > 1.5, first  # started near log(V)
    assert final < 0.1, (step, final)
    out = greedy_search.greedy_decoder(model)(src_t, tf.constant(5, tf.int32)).numpy()
    correct = 0
    for row, y in zip(out, targets):
        got = list(row[: len(y)])
        correct += got == y
    assert correct >= 18, (correct, out)


# ---------------------------------------------------------------------------------------
# model variants
# ---------------------------------------------------------------------------------------
def test_variants_registry():
    assert set(VARIANTS) >= {"transformer", "weighted"}
    assert type(VARIANTS["transformer"]) is variants.Variant
    assert isinstance(VARIANTS["weighted"], weighted.Variant)
    for name, variant in VARIANTS.items():
        assert variant.name == name
    m = tiny_model(13, 13, num_blocks=1)
    assert m.variant is VARIANTS["transformer"] and m.model_type == "transformer"
    assert type(m.encoder_0) is modules.EncoderLayer
    assert type(m.decoder_0) is modules.DecoderLayer
    with pytest.raises(ValueError, match="model_type must be one of transformer, weighted"):
        Transformer(13, 13, d_model=8, d_ff=16, num_blocks=1, num_heads=2, model_type="nope")


@pytest.mark.slow
@pytest.mark.parametrize("native_decode", [False, True])
def test_select_rows_follows_the_hypotheses(native_decode):
    """Transformer.select_rows picks batch rows (a beam step's, a row picked twice) of
    every per-row entry of the cache; where the decoder's kernels read the encoder's side
    in place (reads_memory_rows), it gathers memory_rows instead of that side and the
    self-attention keys/values at the next step (order), and the next step computes
    what it computes on a cache gathered entry by entry."""
    if native_decode and native.compiler() is None:
        pytest.skip("no C++ compiler")
    m = tiny_model(17, 17, seed=3)
    rng = np.random.default_rng(3)
    src = rand_ids(rng, (3, 5), 17)
    kernels = fast_ops.Kernels.resolve([] if native_decode else ["native_decode"], decoding=True)

    def run(fn, *args):
        return fast_ops.under(kernels, fn)(*args)

    cache = run(m.init_cache, *m.encode(src))
    assert ("memory_rows" in cache) == native_decode == run(m.reads_memory_rows)
    for _ in range(2):
        _, cache = run(m.decode_step, tf.constant(rand_ids(rng, (3,), 17)), cache)
    index = tf.constant([2, 2, 0])
    new = run(m.select_rows, cache, index)
    assert new["step"] is cache["step"] and len(new["layers"]) == len(cache["layers"]) == 2
    np.testing.assert_array_equal(new["order"].numpy(), [2, 2, 0])
    for old, layer in zip(cache["layers"], new["layers"]):
        for key in ("k", "v"):
            assert np.abs(old[key].numpy()[:, :, :2]).max() > 0  # written positions
            if native_decode:  # gathered as the next step appends
                assert layer[key] is old[key]
            else:
                np.testing.assert_array_equal(layer[key].numpy(), old[key].numpy()[[2, 2, 0]])
        for key in ("cross_k", "cross_v"):
            if native_decode:
                assert layer[key] is old[key]
            else:
                np.testing.assert_array_equal(layer[key].numpy(), old[key].numpy()[[2, 2, 0]])
    if native_decode:
        assert new["memory_mask"] is cache["memory_mask"]
        np.testing.assert_array_equal(new["memory_rows"].numpy(), [2, 2, 0])
    token = tf.constant(rand_ids(rng, (3,), 17))
    logits, _ = run(m.decode_step, token, new)
    whole = dict(cache, memory_mask=tf.gather(cache["memory_mask"], index))
    whole["layers"] = [{key: tf.gather(t, index) for key, t in c.items()} for c in cache["layers"]]
    whole.pop("memory_rows", None)
    plain = fast_ops.Kernels.resolve(["native_decode"], decoding=True)
    expected, _ = fast_ops.under(plain, m.decode_step)(token, whole)
    np.testing.assert_allclose(logits.numpy(), expected.numpy(), atol=1e-5)


# ---------------------------------------------------------------------------------------
# 10. the TF1 switches: the defaults are the earlier model; the legacy preset is TF1's
# ---------------------------------------------------------------------------------------
# Written by an earlier version of this project (before the switches): for each configuration, a
# model built with keras.utils.set_random_seed(seed), the fingerprint of every variable
# (path, shape, sum, sum of squares), the logits of SRC/TGT, the greedy decoding of SRC
# (extra 4) and the model's checkpoint (tf.train.Checkpoint(model=m).write(...)).
BEFORE = os.path.join(ROOT, "tests", "data", "v8b6ba0e")
BEFORE_CONFIGS = {
    "paper": dict(src=11, tgt=11, seed=0, kw=dict(d_model=8, d_ff=16, num_blocks=1, num_heads=2)),
    "learned_pre_separate": dict(
        src=11,
        tgt=13,
        seed=1,
        kw=dict(
            d_model=8,
            d_ff=16,
            num_blocks=2,
            num_heads=2,
            position="learned",
            max_position=12,
            norm="pre",
            share_embeddings=False,
        ),
    ),
    "weighted": dict(
        src=11,
        tgt=11,
        seed=2,
        kw=dict(d_model=8, d_ff=16, num_blocks=1, num_heads=2, model_type="weighted"),
    ),
}
SRC = np.array([[5, 6, 7, 8, 3, 0], [9, 10, 4, 3, 0, 0]], np.int32)
TGT = np.array([[2, 5, 6, 7, 8], [2, 9, 4, 0, 0]], np.int32)


def before(name):
    with open(os.path.join(BEFORE, "golden.json")) as f:
        return json.load(f)[name]


# the earlier code's defaults (the paper's positions and dropout), which BEFORE_CONFIGS
# leave out (the defaults are now the demo's); a saved hparams.json always names them
EARLIER_DEFAULTS = dict(position="sinusoid", dropout_rate=0.1)


def built(name, seed=None):
    c = BEFORE_CONFIGS[name]
    keras.utils.set_random_seed(c["seed"] if seed is None else seed)
    model = Transformer(c["src"], c["tgt"], **{**EARLIER_DEFAULTS, **c["kw"]})
    model.build_all()
    return model


def fingerprint(model):
    """[path, shape, sum, sum of squares] of every variable (sums in float64)."""
    out = []
    for v in model.weights:
        x = v.numpy().astype(np.float64)
        out.append([v.path, list(v.shape), float(np.sum(x)), float(np.sum(np.square(x)))])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["paper", "learned_pre_separate"])
def test_defaults_build_the_earlier_model(name):
    """With every new switch at its default, the model has the variables of the earlier
    code: the same paths and shapes, and the same constant starts (LayerNorm's ones, the
    zero biases). Random starts changed for fresh runs (W^Q, W^K, W^V, W^O drawn apart,
    the learned position table at the token embeddings' scale); earlier checkpoints still
    load and decode the same (the next test)."""
    old, model = before(name), built(name)
    new = fingerprint(model)

    def layout(variables):  # paths inside the model (its own name depends on the session)
        return [(path.split("/", 1)[1], shape) for path, shape, *_ in variables]

    assert layout(new) == layout(old["variables"])
    constant = [
        i for i, v in enumerate(model.weights) if v.path.endswith(("gamma", "beta", "bias"))
    ]
    assert constant
    for i in constant:
        np.testing.assert_allclose(new[i][2:], old["variables"][i][2:], rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["paper", "learned_pre_separate", "weighted"])
def test_earlier_checkpoints_load_and_decode_the_same(name):
    """A checkpoint written by the earlier code restores every variable of the model the
    defaults build (none missing, none left over) and decodes the same ids."""
    old = before(name)
    model = built(name, seed=99)
    assert np.max(np.abs(model((SRC, TGT)).numpy() - old["logits"])) > 1e-3  # other weights
    status = tf.train.Checkpoint(model=model).read(os.path.join(BEFORE, name))
    status.assert_consumed()
    # (to a few float32 rounding steps: the CPU's own matmul kernels, AVX2 or AVX-512,
    # round differently; a weight restored wrong moves the logits by over 1e-3, above)
    np.testing.assert_allclose(model((SRC, TGT)).numpy(), old["logits"], rtol=1e-5, atol=1e-5)
    ids = greedy_search.greedy_decoder(model)(tf.constant(SRC), tf.constant(4, tf.int32))
    np.testing.assert_array_equal(ids.numpy(), old["greedy"])


def legacy_model(src_vocab=23, tgt_vocab=29, seed=0, **overrides):
    """A small model of the iwslt2016_legacy preset (its switches, smaller sizes)."""
    small = dict(d_model=32, d_ff=64, num_blocks=2, num_heads=4, **overrides)
    hp = hparams.apply(hparams.preset("iwslt2016_legacy"), small)
    keras.utils.set_random_seed(seed)
    return Transformer.from_hparams(hp, src_vocab, tgt_vocab)


def test_legacy_preset_builds_the_tf1_model():
    """iwslt2016_legacy: no W^O, ReLU(x W + b) projections, logits of their own (not the
    embedding), LayerNorm epsilon 1e-8, no residual dropout, dropout 0.1 on embeddings
    and attention weights, learned position tables of maxlen rows, Xavier embeddings."""
    m = legacy_model()
    paths = [v.path for v in m.weights]
    assert not [p for p in paths if p.endswith("/w_o")]
    assert len([p for p in paths if p.endswith(("/b_q", "/b_k", "/b_v"))]) == 3 * 6  # 2+4 attn
    for layer in m.encoder_layers + m.decoder_layers:
        for attn in (layer.self_attn, getattr(layer, "cross_attn", None)):
            if attn is not None:
                assert (
                    attn.qkv_activation == "relu" and attn.qkv_bias and not attn.output_projection
                )
                assert attn.dropout is not None and attn.dropout.rate == 0.1
        for res in (layer.res1, layer.res2):
            assert res.dropout.rate == 0.0 and res.ln.epsilon == 1e-8
    assert m.src_dropout.rate == m.tgt_dropout.rate == 0.1
    assert m.src_position.table.shape == m.tgt_position.table.shape == (10, 32)
    # untied logits: a (d_model, V) kernel and a bias, not the target embedding
    assert not m.tie_softmax and m.output_layer.kernel.shape == (32, 29)
    assert m.output_layer.bias.shape == (29,)
    hidden = tf.constant(np.random.default_rng(0).normal(size=(3, 32)), tf.float32)
    own = m.logits(hidden).numpy()
    w, b = m.output_layer.kernel.numpy(), m.output_layer.bias.numpy()
    np.testing.assert_allclose(own, hidden.numpy() @ w + b, atol=1e-5)
    assert np.max(np.abs(own - m.tgt_embedding.logits(hidden).numpy())) > 1e-2
    # ReLU projections: every query, key and value is non-negative, many are zero
    a = m.encoder_0.self_attn
    a.b_q.assign(np.full(32, 0.1, np.float32))  # the bias enters before the ReLU
    x = tf.constant(np.random.default_rng(1).normal(size=(2, 5, 32)), tf.float32)
    q = a._project(x, a.w_q, a.b_q).numpy()
    assert q.min() == 0.0 and (q == 0).mean() > 0.2
    expected = np.maximum(x.numpy() @ a.w_q.numpy() + 0.1, 0)
    expected = expected.reshape(2, 5, 4, 8).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(q, expected, atol=1e-5)
    # Xavier (Glorot uniform) embeddings: U(-a, a), a = sqrt(6 / (V + d_model))
    table = m.tgt_embedding.embeddings.numpy()
    limit = (6 / (29 + 32)) ** 0.5
    assert np.abs(table).max() <= limit and np.abs(table).max() > 0.8 * limit
    assert np.std(table) == pytest.approx(limit / 3**0.5, rel=0.1)


def test_without_output_projection_the_heads_go_straight_out():
    """output_projection=False: MultiHead(Q, K, V) = Concat(head_1..head_h), no W^O."""
    layer = attention.MultiHeadAttention(8, 2, output_projection=False)
    layer.build((None, None, 8), (None, None, 8))
    assert [v.path.rsplit("/", 1)[-1] for v in layer.weights] == ["w_q", "w_k", "w_v"]
    x = np.random.default_rng(2).normal(size=(1, 3, 8)).astype(np.float32)
    out, weights = layer(x, x, return_attention=True)
    v = (x @ layer.w_v.numpy()).reshape(1, 3, 2, 4).transpose(0, 2, 1, 3)
    heads = np.einsum("nhqk,nhkd->nhqd", weights.numpy(), v)
    np.testing.assert_allclose(out.numpy(), heads.transpose(0, 2, 1, 3).reshape(1, 3, 8), atol=1e-5)


@pytest.mark.slow
def test_query_masking_zeroes_pad_queries_only():
    """query_masking zeroes the attention weights of PAD queries (TF1); with the PAD keys
    masked, the real positions are the same with and without it."""
    V = 19
    rng = np.random.default_rng(5)
    src, tgt = rand_ids(rng, (2, 6), V), rand_ids(rng, (2, 5), V)
    src[0, 3:] = PAD_ID
    tgt[1, 3:] = PAD_ID
    plain = tiny_model(V, V, seed=6)
    masked = tiny_model(V, V, seed=6, query_masking=True)
    masked.set_weights(plain.get_weights())
    _, _, enc_w = masked.encode(src, return_attention=True)
    w = enc_w[0].numpy()  # (N, h, T1, T1)
    assert np.all(w[0, :, 3:] == 0) and np.allclose(w[0, :, :3].sum(-1), 1.0)
    memory, mask = masked.encode(src)
    _, dec_w = masked.decode(tgt, memory, mask, return_attention=True)
    self_w, cross_w = dec_w[0]
    assert np.all(self_w.numpy()[1, :, 3:] == 0) and np.all(cross_w.numpy()[1, :, 3:] == 0)
    out, ref = masked((src, tgt)).numpy(), plain((src, tgt)).numpy()
    np.testing.assert_allclose(out[0], ref[0], atol=1e-5)
    np.testing.assert_allclose(out[1, :3], ref[1, :3], atol=1e-5)
    assert np.max(np.abs(out[1, 3:] - ref[1, 3:])) > 1e-4  # the PAD positions did change


@pytest.mark.slow
def test_key_mask_defect_attends_to_padding():
    """key_mask_defect: as the TF1 code (its masks were read off the embeddings after the
    positions were added, never zero), PAD keys get attention and the output of a
    sentence depends on the padding after it; query masking does nothing either."""
    V = 19
    rng = np.random.default_rng(7)
    src, tgt = rand_ids(rng, (1, 4), V), rand_ids(rng, (1, 3), V)
    padded = np.concatenate([src, np.zeros((1, 3), np.int32)], axis=1)
    m = tiny_model(V, V, seed=8, key_mask_defect=True, query_masking=True)
    _, _, w = m.encode(padded, return_attention=True)
    assert w[0].numpy()[0, :, :, 4:].min() > 0  # every query attends to the PAD keys
    assert w[0].numpy()[0, :, 4:].sum(-1).min() > 0.99  # PAD queries not zeroed
    assert np.max(np.abs(m((padded, tgt)).numpy() - m((src, tgt)).numpy())) > 1e-4
    fixed = tiny_model(V, V, seed=8)
    np.testing.assert_allclose(fixed((padded, tgt)).numpy(), fixed((src, tgt)).numpy(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_legacy_model_incremental_decoding_matches_full(norm):
    """The cached decoder of the TF1 model (biases, ReLU, no W^O, query masks, untied
    logits, no padding masks) gives the logits of the full pass."""
    m = legacy_model(19, 19, seed=9, norm=norm, key_mask_defect=False)
    rng = np.random.default_rng(9)
    src = rand_ids(rng, (3, 7), 19)
    src[0, 4:] = PAD_ID
    tgt = np.concatenate([np.full((3, 1), BOS_ID, np.int32), rand_ids(rng, (3, 5), 19)], 1)
    check_cached_equals_full(m, src, tgt)
    defect = legacy_model(19, 19, seed=9, norm=norm)
    check_cached_equals_full(defect, src, tgt)


@pytest.mark.slow
def test_legacy_model_saves_and_loads(tmp_path):
    """The switches are in the layers' configs: a .keras file reloads the TF1 model."""
    m = legacy_model(19, 23, seed=10)
    rng = np.random.default_rng(10)
    src, tgt = rand_ids(rng, (2, 5), 19), rand_ids(rng, (2, 4), 23)
    ref = m((src, tgt)).numpy()
    m.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    assert not loaded.tie_softmax and loaded.key_mask_defect
    assert loaded.encoder_0.res1.ln.epsilon == 1e-8
    np.testing.assert_array_equal(loaded((src, tgt)).numpy(), ref)


# ---------------------------------------------------------------------------------------
# 11. every weight starts as it should
# ---------------------------------------------------------------------------------------
CONSTANT_INITIALIZERS = (
    keras.initializers.Zeros,
    keras.initializers.Ones,
    keras.initializers.Constant,
)


def built_with_initializers(monkeypatch, **kw):
    """tiny_model(**kw) and, for each of its variables, the initializer it was made with
    (every weight of a Keras layer goes through Layer.add_weight)."""
    made = []
    add_weight = keras.layers.Layer.add_weight

    def recording(self, *args, **kwargs):
        variable = add_weight(self, *args, **kwargs)
        made.append((variable, keras.initializers.get(kwargs.get("initializer"))))
        return variable

    monkeypatch.setattr(keras.layers.Layer, "add_weight", recording)
    model = tiny_model(**kw)
    monkeypatch.undo()
    by_id = {id(v): init for v, init in made}
    return model, [(v, by_id[id(v)]) for v in model.weights]


POSITIONS = hparams.CHOICES["position"]


@pytest.mark.slow
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("model_type", list(VARIANTS))
def test_no_two_random_weights_start_equal(model_type, position, monkeypatch):
    """Every randomly initialised weight has its own draw: no two of them (of one shape)
    start equal, in particular not W^Q, W^K, W^V and W^O of an attention sublayer (3.2.2),
    nor Shaw's a^K and a^V. Weights are told apart by their initializer, not their values:
    zeros and ones are equal by design. Pre-norm: post-norm has the same random weights,
    less the two final LayerNorms (ones and zeros)."""
    kw = dict(model_type=model_type, position=position, norm="pre")
    model, weights = built_with_initializers(monkeypatch, **kw)
    random = [
        (v.path, v.numpy()) for v, init in weights if not isinstance(init, CONSTANT_INITIALIZERS)
    ]
    assert len(random) >= 8 * 2  # the attention projections at least
    equal = [
        (a, b)
        for i, (a, x) in enumerate(random)
        for b, y in random[i + 1 :]
        if x.shape == y.shape and np.array_equal(x, y)
    ]
    assert not equal, f"{len(equal)} pairs start equal, e.g. {equal[:3]}"
    for path, x in random:
        assert np.std(x) > 0, path  # drawn, not constant


def test_self_attention_starts_spread_over_the_tokens():
    """With independent W^Q and W^K, a fresh head spreads its weight: a token's weight on
    itself is near the uniform 1/T (W^Q = W^K made it q_i . q_i, a squared norm: ~0.85 at
    d_model 256, 8 heads, 20 tokens)."""
    keras.utils.set_random_seed(0)
    attn = attention.MultiHeadAttention(256, 8)
    attn.build((None, None, 256), (None, None, 256))
    x = tf.random.stateless_normal((4, 20, 256), seed=(1, 2))
    _, weights = attn(x, x, return_attention=True)
    on_self = float(tf.reduce_mean(tf.linalg.diag_part(weights)))
    assert on_self < 0.1  # uniform: 0.05


def test_learned_positions_start_at_the_token_scale():
    """The learned table starts as loud as the token embeddings the model adds it to
    (N(0, d_model^-0.5) * sqrt(d_model): std 1), not 50 times quieter."""
    m = tiny_model(position="learned", d_model=64, num_heads=4, src_vocab=400, tgt_vocab=400)
    table = m.src_position.table.numpy()
    tokens = m.src_embedding.embeddings.numpy() * np.sqrt(64)
    assert np.std(table) == pytest.approx(1.0, rel=0.05)
    assert np.std(table) == pytest.approx(np.std(tokens), rel=0.1)
