"""Greedy and beam search decoding on hand-built toy models and a trained tiny model."""
import math

import numpy as np
import pytest
import tensorflow as tf

import model as MD
import modules as M

PAD, BOS, EOS, A, B, C = 0, 2, 3, 4, 5, 6
V = 8


class BigramToy:
    """A 'model' whose next-token distribution depends only on the previous token.

    It has the interface the decoders use (encode / init_cache / decode_step); the cache
    carries a dummy self-attention entry so the beam search reorders something real: it
    stores the previous token, and decode_step reads its distribution from there.
    """
    position = "sinusoid"
    max_position = 1024

    def __init__(self, table):
        probs = np.full((V, V), 1e-9)
        for prev, row in table.items():
            for tok, p in row.items():
                probs[prev, tok] = p
        self.logp = tf.constant(np.log(probs / probs.sum(1, keepdims=True)), tf.float32)

    def encode(self, src):
        return tf.cast(src[..., None], tf.float32), M.padding_mask(src)

    def init_cache(self, memory, mask, max_len):
        n = tf.shape(memory)[0]
        return {"step": tf.constant(0), "memory_mask": mask,
                "layers": [{"k": tf.zeros((n, 1, 1, 1)), "v": tf.zeros((n, 1, 1, 1))}]}

    def decode_step(self, tokens, cache):
        prev = tokens  # the cache's dummy entries are reordered alongside
        return tf.gather(self.logp, prev), dict(cache, step=cache["step"] + 1)


# From <S>: A is likelier than B, but every continuation of A is poor.
TRAP = {BOS: {A: 0.55, B: 0.45}, A: {C: 0.35, B: 0.33, EOS: 0.32}, B: {EOS: 0.95, C: 0.05},
        C: {EOS: 1.0}}


def run_beam(toy, k, alpha, n=1):
    src = tf.constant([[4, 3]] * n, tf.int32)
    ids, scores = MD.beam_loop(toy, src, tf.constant(8), k, alpha)
    return ids.numpy(), scores.numpy()


def test_beam_finds_what_greedy_misses():
    toy = BigramToy(TRAP)
    greedy = MD.greedy_loop(toy, tf.constant([[4, 3]]), tf.constant(8)).numpy()[0]
    assert list(greedy[:3]) == [A, C, EOS]            # 0.55 * 0.35 = 0.19
    ids, scores = run_beam(toy, k=2, alpha=0.0)
    assert list(ids[0, 0, :2]) == [B, EOS]            # 0.45 * 0.95 = 0.43
    assert scores[0, 0] == pytest.approx(math.log(0.45 * 0.95), abs=1e-5)
    assert scores[0, 0] >= scores[0, 1]


def test_beam_size_one_is_greedy():
    toy = BigramToy(TRAP)
    greedy = MD.greedy_loop(toy, tf.constant([[4, 3]]), tf.constant(8)).numpy()[0]
    ids, _ = run_beam(toy, k=1, alpha=0.6)
    assert list(ids[0, 0]) == list(greedy)


def test_length_penalty_flips_the_ranking():
    """[</S>] (p 0.3) against [A </S>] (p 0.7 * 0.4 = 0.28): without a length penalty the
    short one wins; with alpha = 1 the long one, scored log p / ((5 + 2) / 6)."""
    toy = BigramToy({BOS: {EOS: 0.3, A: 0.7}, A: {EOS: 0.4, B: 0.6}, B: {EOS: 0.3, C: 0.7},
                     C: {EOS: 0.3, B: 0.7}})
    ids, scores = run_beam(toy, k=2, alpha=0.0)
    assert list(ids[0, 0, :1]) == [EOS]
    assert scores[0, 0] == pytest.approx(math.log(0.3), abs=1e-5)
    ids, scores = run_beam(toy, k=2, alpha=1.0)
    assert list(ids[0, 0, :2]) == [A, EOS]
    assert scores[0, 0] == pytest.approx(math.log(0.28) / (7 / 6), abs=1e-5)


def test_finished_hypothesis_is_kept_apart():
    """A short hypothesis that finished early survives although the alive beams keep
    extending with higher running probabilities at first."""
    toy = BigramToy({BOS: {EOS: 0.4, A: 0.6}, A: {A: 0.5, B: 0.5}, B: {B: 0.5, C: 0.5},
                     C: {EOS: 0.5, C: 0.5}})
    ids, scores = run_beam(toy, k=2, alpha=0.0)
    assert list(ids[0, 0, :1]) == [EOS]
    assert scores[0, 0] == pytest.approx(math.log(0.4), abs=1e-5)


def test_n_best_sorted_and_padded_after_eos():
    toy = BigramToy(TRAP)
    ids, scores = run_beam(toy, k=3, alpha=0.6, n=2)
    assert ids.shape[:2] == (2, 3)
    assert np.all(np.diff(scores, axis=1) <= 0)
    for seq in ids.reshape(-1, ids.shape[-1]):
        seq = list(seq)
        if EOS in seq:
            assert all(t == PAD for t in seq[seq.index(EOS) + 1:])


def test_early_finishers_are_padded_not_extended():
    """In a batch, a sentence that ends at step 0 gets PAD while the other continues."""
    START2 = 7  # the second sentence reads its first distribution from this row

    class TwoStarts(BigramToy):
        def decode_step(self, tokens, cache):
            first = tf.logical_and(tf.equal(cache["step"], 0),
                                   tf.range(tf.shape(tokens)[0]) % 2 == 1)
            prev = tf.where(first, START2, tokens)
            return tf.gather(self.logp, prev), dict(cache, step=cache["step"] + 1)

    toy = TwoStarts({BOS: {EOS: 0.9, A: 0.1}, START2: {A: 1.0}, A: {B: 1.0}, B: {C: 1.0},
                     C: {EOS: 1.0}})
    out = MD.greedy_loop(toy, tf.constant([[4, 3], [4, 3]]), tf.constant(8)).numpy()
    assert out.tolist() == [[EOS, PAD, PAD, PAD], [A, B, C, EOS]]


@pytest.fixture(scope="module")
def trained():
    """A tiny Transformer trained on a toy copy-with-shift task."""
    import keras
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(40):
        s = rng.integers(4, 14, size=rng.integers(3, 7))
        pairs.append((list(s) + [EOS], [BOS] + list(s[::-1] + 1), list(s[::-1] + 1) + [EOS]))

    def pad(rows):
        out = np.zeros((len(rows), max(map(len, rows))), np.int32)
        for i, r in enumerate(rows):
            out[i, :len(r)] = r
        return tf.constant(out)

    src, dec, lab = (pad([p[i] for p in pairs]) for i in range(3))
    model = MD.Transformer(16, 16, d_model=32, d_ff=64, num_blocks=1, num_heads=2,
                           dropout_rate=0.0)
    model.build_all()
    opt = keras.optimizers.Adam(3e-3)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model((src, dec), training=True)
            real = tf.not_equal(lab, 0)
            loss = tf.reduce_mean(M.smoothed_cross_entropy(
                tf.boolean_mask(logits, real), tf.boolean_mask(lab, real), 0.0))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for _ in range(200):
        loss = step()
    assert float(loss) < 0.2
    return model, src


def test_cached_greedy_equals_uncached_on_trained_model(trained):
    model, src = trained
    cached = MD.greedy_decoder(model)(src, tf.constant(5)).numpy()
    naive = MD.naive_greedy(model, src, cached.shape[1])
    assert np.array_equal(cached, naive)
    assert (cached == EOS).any(axis=1).all(), "a trained model ends its sentences"


def test_beam_one_equals_greedy_on_trained_model(trained):
    model, src = trained
    greedy = MD.greedy_decoder(model)(src, tf.constant(5)).numpy()
    beam, _ = MD.beam_decoder(model, 1)(src, tf.constant(5))
    assert np.array_equal(beam.numpy()[:, 0], greedy)
    beam4, scores = MD.beam_decoder(model, 4)(src, tf.constant(5))
    assert beam4.shape[1] == 4 and np.all(np.diff(scores.numpy(), axis=1) <= 1e-6)


def test_xla_compiled_greedy_matches(trained):
    """The greedy loop compiles with XLA and gives the same output."""
    model, src = trained
    extra = tf.constant(5)
    assert np.array_equal(MD.greedy_decoder(model, jit_compile=True)(src, extra).numpy(),
                          MD.greedy_decoder(model)(src, extra).numpy())


def test_max_len_caps_the_output(trained):
    model, src = trained
    out = MD.greedy_decoder(model, max_len=2)(src, tf.constant(50)).numpy()
    assert out.shape[1] == 2
    beam, _ = MD.beam_decoder(model, 2, max_len=3)(src, tf.constant(50))
    assert beam.shape[2] <= 3
