"""positions.py: each relative position family against a reference written from its
paper's formula with Python loops, translation invariance, the decoding cache in every
variant, export, and the hparams of the switch."""

import ast
import glob
import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import export
import train
from helpers import (
    ROOT,
    SMALL,
    check_cached_equals_full,
    check_greedy_and_beam,
    rand_ids,
    relative_model,
    tiny,
    tiny_model,
    translate_lines,
)
from transformer_tf2.config import families, hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.decoding import greedy_search
from transformer_tf2.layers import positions
from transformer_tf2.layers.attention import MultiHeadAttention
from transformer_tf2.models import checkpoints
from transformer_tf2.training.trainer import Trainer

D, H, T = 16, 2, 8  # d_model, heads, positions: distances up to 7 pass k and the buckets
DK = D // H
RELATIVE = [name for name, family in positions.REGISTRY.items() if family.relative]


def attention(kind, causal=False, seed=0):
    """A self-attention sublayer with ``kind`` positions; every weight random (the zero
    initial t5 table and xl u, v would hide their terms)."""
    keras.utils.set_random_seed(seed)
    stack = positions.StackPosition(kind, D, H, causal, **SMALL)
    stack.build()
    mha = MultiHeadAttention(D, H, position=stack)
    mha.build((None, None, D), (None, None, D))
    rng = np.random.default_rng(seed)
    for w in stack.weights:
        w.assign(rng.normal(size=w.shape).astype(np.float32))
    return mha


def t5_bucket_ref(d, buckets, max_distance, bidirectional):
    """Raffel et al. 2020: half the buckets exact, the rest log-spaced to max_distance."""
    base = 0
    if bidirectional:
        buckets //= 2
        base, n = (buckets if d > 0 else 0), abs(d)
    else:
        n = max(-d, 0)
    exact = buckets // 2
    if n < exact:
        return base + n
    log_part = math.log(n / exact) / math.log(max_distance / exact) * (buckets - exact)
    return base + min(buckets - 1, exact + int(log_part))


def rotate_ref(vec, pos):
    """RoFormer eq. 34: pair (2i, 2i+1) times the rotation by pos * 10000^(-2i/d)."""
    out = vec.copy()
    for i in range(len(vec) // 2):
        a = pos * 10000.0 ** (-2 * i / len(vec))
        c, s = math.cos(a), math.sin(a)
        out[2 * i] = c * vec[2 * i] - s * vec[2 * i + 1]
        out[2 * i + 1] = s * vec[2 * i] + c * vec[2 * i + 1]
    return out


def naive(mha, x, mask, offset=0):
    """The sublayer's output (N, T, d_model) from the papers' formulas, pair by pair.
    mask (N, T, T) bool: True where query i may attend to key j."""
    kind, stack, rel = mha.relative.stack.kind, mha.relative.stack, mha.relative
    q, k, v = (x @ w.numpy() for w in (mha.w_q, mha.w_k, mha.w_v))  # (N, T, D)
    n_, t_ = x.shape[:2]
    z = np.zeros((n_, t_, D))
    slopes = positions.alibi_slopes(H)
    left = (H + 1) // 2  # alibi_dir's encoder: heads < left look left, the others right
    dir_slopes = positions.alibi_slopes(left) + positions.alibi_slopes(H - left)
    for n in range(n_):
        for h in range(H):
            cols = slice(h * DK, (h + 1) * DK)
            for i in range(t_):
                logits, values = [], []
                for j in range(t_):
                    qi, kj, vj = q[n, i, cols], k[n, j, cols], v[n, j, cols]
                    if kind == "rotary":
                        qi, kj = rotate_ref(qi, offset + i), rotate_ref(kj, offset + j)
                    e = qi @ kj
                    if kind == "shaw":  # Shaw eq. 4 and 3, a_ij = w_clip(j - i, k)
                        r = min(max(j - i, -2), 2) + 2
                        e += qi @ rel.a_k.numpy()[r]
                        vj = vj + rel.a_v.numpy()[r]
                    if kind == "xl":  # Dai eq. in 3.3: (a) + (b) + (c) + (d)
                        d = i - j
                        f = 10000.0 ** (-np.arange(0, D, 2) / D)
                        r_d = np.concatenate([np.sin(d * f), np.cos(d * f)]) @ rel.w_r.numpy()
                        u, vb = stack.u.numpy()[h], stack.v.numpy()[h]
                        e = qi @ kj + qi @ r_d[cols] + u @ kj + vb @ r_d[cols]
                    e /= math.sqrt(DK)
                    if kind == "t5":
                        b = t5_bucket_ref(j - i, 8, 6, not stack.causal)
                        e += stack.table.numpy()[b, h]
                    seen = mask[n, i, j]
                    if kind == "alibi" or (kind == "alibi_dir" and stack.causal):
                        e -= slopes[h] * abs(i - j)
                    if kind == "alibi_dir" and not stack.causal:
                        e -= dir_slopes[h] * abs(i - j)
                        seen = seen and (j <= i if h < left else j >= i)
                    logits.append(e if seen else -np.inf)
                    values.append(vj)
                if max(logits) == -np.inf:  # a PAD query seeing nothing (alibi_dir)
                    z[n, i] = np.nan
                    continue
                w = np.exp(np.array(logits) - max(logits))
                z[n, i, cols] = (w / w.sum()) @ np.array(values)
    return z @ mha.w_o.numpy()


def masks(causal):
    """(N=2, T, T) masks: the second sentence has two PAD keys; causal below the diagonal."""
    m = np.ones((2, T, T), bool)
    m[1, :, T - 2 :] = False
    if causal:
        m &= np.tril(np.ones((T, T), bool))[None]
    return m


# ---------------------------------------------------------------------------------------
# each family against its paper
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", RELATIVE)
def test_each_family_equals_its_papers_formula(kind, causal):
    mha = attention(kind, causal)
    x = np.random.default_rng(1).normal(size=(2, T, D)).astype(np.float32)
    mask = masks(causal)
    got = mha(tf.constant(x), tf.constant(x), tf.constant(mask[:, None])).numpy()
    want = naive(mha, x, mask)
    # alibi_dir: the right-looking head of a PAD query at the end sees no real key (its
    # output is never used); the others equal the formula
    seen = ~np.isnan(want[..., 0])
    assert np.isfinite(got).all() and seen.sum() == 2 * T - 2 * (kind == "alibi_dir" and not causal)
    np.testing.assert_allclose(got[seen], want[seen], atol=2e-5)


def test_t5_buckets_by_hand():
    """T5's defaults (32 buckets, max_distance 128): encoder distances 0..7 exact, then
    log-spaced (8 -> 8, 16 -> 10, 32 -> 12, 64 -> 14, 127 -> 15, 128+ -> 15), keys after
    the query 16 further; the decoder has 32 buckets for the past: 0..15 exact, then
    16 -> 16, 32 -> 21, 64 -> 26, 127+ -> 31; keys after the query fall in bucket 0."""
    d = tf.constant([0, -1, -7, -8, -16, -32, -64, -127, -128, -1000, 1, 7, 16, 1000])
    enc = positions.t5_bucket(d, 32, 128, bidirectional=True).numpy().tolist()
    assert enc == [0, 1, 7, 8, 10, 12, 14, 15, 15, 15, 17, 23, 26, 31]
    dec = positions.t5_bucket(d, 32, 128, bidirectional=False).numpy().tolist()
    assert dec[:10] == [0, 1, 7, 8, 16, 21, 26, 31, 31, 31] and dec[10:] == [0] * 4
    for x in range(-200, 200):
        for bi in (True, False):
            ref = t5_bucket_ref(x, 32, 128, bi)
            assert positions.t5_bucket(tf.constant(x), 32, 128, bi).numpy() == ref


def test_alibi_slopes_are_the_geometric_sequence():
    assert positions.alibi_slopes(8) == [2.0**-k for k in range(1, 9)]
    assert positions.alibi_slopes(4) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    # 6 heads: the 4 of h = 4, then the odd ones of h = 8
    assert positions.alibi_slopes(6) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]


def test_directional_alibi_by_hand():
    """4 heads: 0 and 1 look left, 2 and 3 right, each pair with ALiBi's slopes of 2 heads
    (2^-4, 2^-8); the other side is masked; the diagonal is open in every head."""
    dist = positions.distances(tf.range(3), tf.range(3))  # j - i
    got = positions.directional_alibi(dist, 4).numpy()
    m = positions.MASK_VALUE
    d = np.array([[0, 1, 2], [1, 0, 1], [2, 1, 0]], np.float32)
    for h, slope in enumerate([2.0**-4, 2.0**-8, 2.0**-4, 2.0**-8]):
        want = -slope * d
        hidden = np.triu(np.ones((3, 3), bool), 1) if h < 2 else np.tril(np.ones((3, 3), bool), -1)
        want[hidden] = m
        np.testing.assert_array_equal(got[h], want)
    # 3 heads: two look left (the slopes of 2 heads), one right (the slope of 1 head)
    three = positions.directional_alibi(dist, 3).numpy()
    assert three[0, 2, 1] == -(2.0**-4) and three[1, 2, 1] == -(2.0**-8)
    assert three[2, 1, 2] == -(2.0**-8) and three[2, 2, 1] == m


@pytest.mark.parametrize("kind", ["alibi", "alibi_dir"])
def test_directional_alibi_tells_a_source_from_its_reversal(kind):
    """The symmetric alibi encoder gives a reversed source the mirrored states (it cannot
    tell left from right); alibi_dir's states change."""
    m = tiny_model(position=kind)
    ids = np.array([[5, 6, 7, 8, 9, 10]], np.int32)  # no </S>, no PAD: nothing marks an end
    fwd = m.encode(tf.constant(ids))[0].numpy()[0]
    rev = m.encode(tf.constant(ids[:, ::-1].copy()))[0].numpy()[0]
    diff = np.abs(fwd - rev[::-1]).max()
    if kind == "alibi":
        assert diff < 1e-4
    else:
        assert diff > 0.1


def shifted(t_q, t_k, width):
    """relative_shift of a (1, 1, t_q, width) matrix whose column c holds the distance
    D - c (D = t_q - 1), tagged with its row: 10 * distance + row."""
    dist = (t_q - 1) - np.arange(width)  # largest first
    x = np.tile(dist, (1, 1, t_q, 1)).astype(np.float32) * 10 + np.arange(t_q)[:, None]
    return positions.relative_shift(tf.constant(x), t_k).numpy()[0, 0]


@pytest.mark.parametrize("t_q, t_k", [(3, 5), (5, 3), (1, 1), (1, 4), (4, 4)])
def test_relative_shift_is_exact_in_both_directions(t_q, t_k):
    """The shift puts distance i - j at [i, j] for every pair, as a gather would, with
    the width XL gives it (T_q + T_k: one distance more than the pairs need) and with
    the tightest (T_q + T_k - 1, where that is at least T_k + 1)."""
    want = (np.arange(t_q)[:, None] - np.arange(t_k)[None]) * 10 + np.arange(t_q)[:, None]
    for width in {t_q + t_k, max(t_q + t_k - 1, t_k + 1)}:
        np.testing.assert_array_equal(shifted(t_q, t_k, width), want)


@pytest.mark.parametrize("t", [1, 2, 6])
def test_relative_shift_causal_width_is_exact_where_the_mask_keeps(t):
    """Causal self-attention (T_q = T_k = t) gets width t + 1 (distances t - 1 .. -1):
    every pair j <= i holds distance i - j."""
    got = shifted(t, t, t + 1)
    want = (np.arange(t)[:, None] - np.arange(t)[None]) * 10 + np.arange(t)[:, None]
    keep = np.tril(np.ones((t, t), bool))
    np.testing.assert_array_equal(got[keep], want[keep])
    assert got.shape == (t, t)


def test_rotary_scores_depend_on_the_distance_alone():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(1, 1, 1, DK)), rng.normal(size=(1, 1, 1, DK))

    def score(i, j):
        a = positions.rotate(tf.constant(q, tf.float32), tf.constant([i]))
        b = positions.rotate(tf.constant(k, tf.float32), tf.constant([j]))
        return float(tf.reduce_sum(a * b))

    assert score(3, 1) == pytest.approx(score(10, 8), abs=1e-5)
    assert abs(score(3, 1) - score(3, 2)) > 1e-3
    got = positions.rotate(tf.constant(q, tf.float32), tf.constant([5]))[0, 0, 0]
    np.testing.assert_allclose(got, rotate_ref(q[0, 0, 0], 5), atol=1e-6)


# ---------------------------------------------------------------------------------------
# translation invariance
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", RELATIVE)
def test_shifting_every_position_leaves_relative_attention_unchanged(kind):
    mha = attention(kind)
    x = tf.random.stateless_normal((2, T, D), seed=(3, 4))
    mask = tf.constant(masks(False)[:, None])
    at0 = mha(x, x, mask, offset=0).numpy()
    np.testing.assert_allclose(mha(x, x, mask, offset=9).numpy(), at0, atol=1e-5)


@pytest.mark.parametrize("kind", ["sinusoid", "learned"])
def test_shifting_every_position_changes_absolute_attention(kind):
    m = tiny_model(position=kind, max_position=64)
    x = m.src_embedding(tf.constant(rand_ids(np.random.default_rng(4), (2, T), 23)))
    attn = m.encoder_0.self_attn
    at0 = attn(m.src_position(x), m.src_position(x)).numpy()
    at9 = attn(m.src_position(x, offset=9), m.src_position(x, offset=9)).numpy()
    assert np.max(np.abs(at9 - at0)) > 1e-2


# ---------------------------------------------------------------------------------------
# the model: absolute positions, parameters, the cache
# ---------------------------------------------------------------------------------------
def test_no_absolute_position_unless_asked():
    ids = tf.constant([[5, 6, 7, 3]])
    alone = tiny_model(position="shaw")
    emb = alone.src_embedding(ids)
    got = alone.embed(ids, alone.src_embedding, alone.src_position, alone.src_dropout, False)
    np.testing.assert_array_equal(got.numpy(), emb.numpy())
    both = tiny_model(position="shaw", position_add_absolute=True)
    got = both.embed(ids, both.src_embedding, both.src_position, both.src_dropout, False)
    want = both.src_embedding(ids) + positions.sinusoid_encoding(tf.range(4), 32)[None]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)


@pytest.mark.slow
def test_parameters_of_each_family():
    """2 + 2 self-attention sublayers, d_model 32, 4 heads (d_k 8), k = 2, 8 buckets."""
    base = tiny_model().count_params()
    extra = {
        "shaw": 4 * 2 * 5 * 8,  # a^K, a^V (2k + 1, d_k) per layer
        "t5": 2 * 8 * 4,  # one (buckets, h) table per stack
        "xl": 4 * 32 * 32 + 2 * 2 * 4 * 8,  # W_R per layer, u and v (h, d_k) per stack
        "alibi": 0,
        "alibi_dir": 0,
        "rotary": 0,
    }
    for kind, n in extra.items():
        assert tiny_model(position=kind, **SMALL).count_params() == base + n, kind
    t5 = tiny_model(position="t5", **SMALL)
    tables = [lay.self_attn.relative.stack.table for lay in t5.encoder_layers]
    assert tables[0] is tables[1] is t5.src_relative.table  # shared by the stack's layers
    assert t5.decoder_0.cross_attn.relative is None  # cross-attention stays plain


SRC = np.array([[5, 6, 7, 8, 9, 10, 11, 3], [12, 13, 14, 3, 0, 0, 0, 0]], np.int32)
TGT = np.array([[2, 5, 6, 7, 8, 9, 10, 11, 12], [2, 9, 4, 0, 0, 0, 0, 0, 0]], np.int32)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["transformer", "weighted", "universal"])
@pytest.mark.parametrize("kind", RELATIVE)
def test_cache_equals_full_pass(kind, model_type):
    """Teacher forcing, position by position on the cache, past the clipping distance."""
    m = relative_model(kind, model_type=model_type)
    check_cached_equals_full(m, SRC, TGT)


@pytest.mark.slow
@pytest.mark.parametrize(
    # every family on the paper's layers; the weighted layers' cache (test_cache_equals_full_pass
    # runs each family through it) in the loops once, with xl's shifted distances
    "kind, model_type",
    [(kind, "transformer") for kind in RELATIVE] + [("xl", "weighted")],
)
def test_greedy_and_beam_on_the_cache(kind, model_type):
    m = relative_model(kind, seed=3, model_type=model_type)
    check_greedy_and_beam(m, rand_ids(np.random.default_rng(5), (3, 6), 23), extra=6)


@pytest.mark.slow
@pytest.mark.parametrize("kind", RELATIVE)
def test_mixed_precision_follows_float32(kind):
    """Under mixed_bfloat16 (matmuls in bfloat16, the relative biases and the softmax in
    float32) each family gives the float32 logits to bfloat16's precision, and decodes."""
    ref = relative_model(kind)
    weights = [w.numpy() for w in ref.weights]
    want = ref((SRC, TGT)).numpy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    m = relative_model(kind)
    for w, value in zip(m.weights, weights):
        w.assign(value)
    got = m((SRC, TGT))
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got.numpy(), want, atol=0.15)
    out = greedy_search.greedy_decoder(m)(tf.constant(SRC), tf.constant(3, tf.int32))
    assert out.shape[0] == 2


@pytest.mark.slow
def test_export_with_relative_positions(demo_prepro, tmp_path):
    """A briefly trained xl model exports (greedy and beam search in the graph) and the
    SavedModel translates as translate.py does."""
    pytest.importorskip("tensorflow_text")
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        position="xl",
        max_steps=40,
    )
    train.train(hp)
    sentences = ["Die Frau liest ein Buch.", "", "Der Hund schläft im Garten."]
    for beam in (1, 2):
        out = export.export(hp.logdir, str(tmp_path / f"saved{beam}"), {"beam_size": beam})
        f = tf.saved_model.load(out).signatures["serving_default"]
        got = [s.decode() for s in f(sentences=tf.constant(sentences))["translations"].numpy()]
        hp2, tok, model, _ = checkpoints.load_run(hp.logdir, {"beam_size": beam})
        assert got == translate_lines(model, tok, hp2, sentences)
        assert got[1] == "" and got[0]


# ---------------------------------------------------------------------------------------
# the registry: a new family is one class in one file
# ---------------------------------------------------------------------------------------
class Sides(positions.Encoding):
    """A toy relative family, defined here alone: one learned logit bias per head for
    keys on the left of the query, on it and on its right (a table per stack)."""

    name, relative = "sides", True

    def build_stack(self, stack):
        stack.sides = stack.add_weight(name="sides", shape=(3, stack.num_heads))

    def terms(self, layer, q, q_pos, k_pos, div):
        side = tf.sign(positions.distances(q_pos, k_pos)) + 1  # (T_q, T_k) in 0, 1, 2
        return q, tf.transpose(tf.gather(layer.stack.sides.value, side), (2, 0, 1)), None


@pytest.fixture
def sides(monkeypatch):
    """The toy family registered, with its row in config's table (as a new family adds
    one to config/families.py)."""
    monkeypatch.setitem(families.POSITIONS, Sides.name, families.Position(relative=True))
    positions.register(Sides)
    yield Sides
    del positions.REGISTRY[Sides.name]


@pytest.mark.slow
def test_a_family_in_a_test_file_trains_a_step_and_decodes(sides, demo_prepro, tmp_path):
    """Registered, the toy family is a valid --position: the trainer builds the model
    with it, one update moves its weights, and greedy decoding runs with the cache."""
    assert "sides" in hparams.CHOICES["position"]
    hp = hparams.apply(demo_prepro, {"position": "sides", "logdir": str(tmp_path / "log")})
    tok = train.data_load.load_tokenizer(hp)
    trainer = Trainer(hp, tok, tf.distribute.get_strategy(), "float32")
    model = trainer.model
    assert not model.absolute and model.src_relative.family.name == "sides"
    table = model.src_relative.sides
    before = table.numpy().copy()
    rng = np.random.default_rng(0)
    src = rand_ids(rng, (4, 7), tok.src_vocab_size)
    tgt = rand_ids(rng, (4, 6), tok.tgt_vocab_size)
    stats = trainer.train_step(src, tgt[:, :-1], tgt[:, 1:])
    assert np.isfinite(stats.loss_sum) and stats.tokens == 20
    assert np.abs(table.numpy() - before).max() > 0
    check_cached_equals_full(model, src, tgt)


def test_the_registry_gives_the_choices_and_the_checks(sides):
    """hparams' position choices are the registry's names (also before positions.py is
    imported: its built-in tuple names the same families); each family's check runs in
    hparams.apply."""
    assert list(hparams.CHOICES["position"]) == list(positions.REGISTRY)
    with pytest.raises(UserError, match="--position must be one of"):
        hparams.apply(hparams.Hparams(), {"position": "sidez"})
    code = (
        "from transformer_tf2.config import hparams; print(','.join(hparams.CHOICES['position']))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip().split(",") == [n for n in positions.REGISTRY if n != "sides"]
    assert hparams.apply(hparams.Hparams(), {"position": "sides"}).position == "sides"
    with pytest.raises(UserError, match="position=learned is absolute already"):
        hparams.apply(hparams.Hparams(), {"position": "learned", "position_add_absolute": True})


def test_no_module_outside_the_registry_compares_a_position_name():
    """Outside positions.py, no project module compares a position setting (a name with
    'position' or 'kind' in it) with a family's name: they ask the family instead."""
    names = set(positions.REGISTRY)
    found = []
    paths = glob.glob(os.path.join(ROOT, "*.py"))
    paths += glob.glob(os.path.join(ROOT, "transformer_tf2", "**", "*.py"), recursive=True)
    assert len(paths) > 50
    for path in sorted(paths):
        if os.path.basename(path) == "positions.py":
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            texts = [ast.unparse(x) for x in sides]
            constants = {
                c.value
                for x in sides
                for c in ast.walk(x)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
            if constants & names and any("position" in t or "kind" in t for t in texts):
                found.append(f"{os.path.basename(path)}:{node.lineno} {ast.unparse(node)}")
    assert found == []


# ---------------------------------------------------------------------------------------
# hparams
# ---------------------------------------------------------------------------------------
def test_hparams_of_the_switch():
    hp = hparams.Hparams()
    assert (hp.position, hp.max_relative_position, hp.t5_buckets, hp.t5_max_distance) == (
        "xl",  # the demo's (hparams.py's defaults are the demo's run)
        16,
        32,
        128,
    )
    assert not hp.position_add_absolute
    keys = ("max_relative_position", "t5_buckets", "t5_max_distance", "position_add_absolute")
    assert set(keys) <= set(hparams.MODEL_KEYS)
    assert set(RELATIVE) <= set(hparams.CHOICES["position"])
    assert hparams.apply(hp, {"position": "xl", "t5_buckets": "16"}).t5_buckets == 16
    assert hparams.apply(hp, {"sinusoid": "false"}).position == "learned"


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"position": "relative"}, "--position must be one of"),
        ({"max_relative_position": 0}, "--max_relative_position must be a positive"),
        ({"t5_buckets": 7}, "--t5_buckets must be an even number"),
        ({"t5_buckets": 32, "t5_max_distance": 16}, "must exceed t5_buckets / 2 (16)"),
        ({"position": "sinusoid", "position_add_absolute": True}, "sinusoid is absolute already"),
        ({"position": "xl", "d_model": 9, "num_heads": 1}, "position=xl needs an even"),
        ({"position": "rotary", "d_model": 12, "num_heads": 4}, "must be even"),
        ({"position": "alibi_dir", "num_heads": 1}, "alibi_dir splits the encoder's heads"),
    ],
)
def test_hparams_checks(overrides, words):
    with pytest.raises(UserError) as err:
        hparams.apply(hparams.Hparams(), overrides)
    assert words in str(err.value)
