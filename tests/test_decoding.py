"""greedy_search.py and beam_search.py: greedy and beam search on hand-built toy models, on
random and trained tiny Transformers; decoding budgets; the BLEU figures (metrics.py)."""

import math

import keras
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf
from nltk.translate.bleu_score import corpus_bleu

from helpers import rand_ids, tiny_model
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.data.data_load import EOS_ID, PAD_ID, UNK_ID
from transformer_tf2.decoding import beam_search, greedy_search, translator
from transformer_tf2.evaluation import metrics
from transformer_tf2.layers import attention, optimization
from transformer_tf2.models.model import Transformer

PAD, BOS, EOS, A, B, C = 0, 2, 3, 4, 5, 6
V = 8


class BigramToy:
    """A 'model' whose next-token distribution depends only on the previous token.

    It has the interface the decoders use (encode / init_cache / decode_step /
    select_rows / cache_shapes); the cache carries a dummy self-attention entry so the
    beam search picks something real, the rows of its hypotheses.
    """

    max_length = None  # the position family's longest length: none

    def __init__(self, table):
        probs = np.full((V, V), 1e-9)
        for prev, row in table.items():
            for tok, p in row.items():
                probs[prev, tok] = p
        self.logp = tf.constant(np.log(probs / probs.sum(1, keepdims=True)), tf.float32)

    def encode(self, src):
        return tf.cast(src[..., None], tf.float32), attention.padding_mask(src)

    def init_cache(self, memory, mask):
        n = tf.shape(memory)[0]
        return {
            "step": tf.constant(0),
            "memory_mask": mask,
            "layers": [{"k": tf.zeros((n, 1, 1, 1)), "v": tf.zeros((n, 1, 1, 1))}],
        }

    def decode_step(self, tokens, cache):
        prev = tokens  # the cache's dummy entries are reordered alongside
        return tf.gather(self.logp, prev), dict(cache, step=cache["step"] + 1)

    @staticmethod
    def select_rows(cache, index):
        """The rows ``index`` of every per-row entry (a beam's hypotheses, sentences
        leaving the batch)."""
        layers = tf.nest.map_structure(lambda t: tf.gather(t, index), cache["layers"])
        return dict(cache, memory_mask=tf.gather(cache["memory_mask"], index), layers=layers)

    @staticmethod
    def cache_shapes(cache):
        return tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), cache)


# From <S>: A is likelier than B, but every continuation of A is poor.
TRAP = {
    BOS: {A: 0.55, B: 0.45},
    A: {C: 0.35, B: 0.33, EOS: 0.32},
    B: {EOS: 0.95, C: 0.05},
    C: {EOS: 1.0},
}


def run_beam(toy, k, alpha, n=1):
    src = tf.constant([[4, 3]] * n, tf.int32)
    ids, scores = beam_search.beam_loop(toy, src, tf.constant(8), k, alpha, n_best=k)
    return ids.numpy(), scores.numpy()


def test_beam_finds_what_greedy_misses():
    toy = BigramToy(TRAP)
    greedy = greedy_search.greedy_loop(toy, tf.constant([[4, 3]]), tf.constant(8)).numpy()[0]
    assert list(greedy[:3]) == [A, C, EOS]  # 0.55 * 0.35 = 0.19
    ids, scores = run_beam(toy, k=2, alpha=0.0)
    assert list(ids[0, 0, :2]) == [B, EOS]  # 0.45 * 0.95 = 0.43
    assert scores[0, 0] == pytest.approx(math.log(0.45 * 0.95), abs=1e-5)
    assert scores[0, 0] >= scores[0, 1]


def test_beam_size_one_is_greedy():
    toy = BigramToy(TRAP)
    greedy = greedy_search.greedy_loop(toy, tf.constant([[4, 3]]), tf.constant(8)).numpy()[0]
    ids, _ = run_beam(toy, k=1, alpha=0.6)
    assert list(ids[0, 0]) == list(greedy)


def test_length_penalty_flips_the_ranking():
    """[</S>] (p 0.3) against [A </S>] (p 0.7 * 0.4 = 0.28): without a length penalty the
    short one wins; with alpha = 1 the long one, scored log p / ((5 + 2) / 6)."""
    toy = BigramToy(
        {
            BOS: {EOS: 0.3, A: 0.7},
            A: {EOS: 0.4, B: 0.6},
            B: {EOS: 0.3, C: 0.7},
            C: {EOS: 0.3, B: 0.7},
        }
    )
    ids, scores = run_beam(toy, k=2, alpha=0.0)
    assert list(ids[0, 0, :1]) == [EOS]
    assert scores[0, 0] == pytest.approx(math.log(0.3), abs=1e-5)
    ids, scores = run_beam(toy, k=2, alpha=1.0)
    assert list(ids[0, 0, :2]) == [A, EOS]
    assert scores[0, 0] == pytest.approx(math.log(0.28) / (7 / 6), abs=1e-5)


def test_finished_hypothesis_is_kept_apart():
    """A short hypothesis that finished early survives although the alive beams keep
    extending with higher running probabilities at first."""
    toy = BigramToy(
        {BOS: {EOS: 0.4, A: 0.6}, A: {A: 0.5, B: 0.5}, B: {B: 0.5, C: 0.5}, C: {EOS: 0.5, C: 0.5}}
    )
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
            assert all(t == PAD for t in seq[seq.index(EOS) + 1 :])


class CountingToy(BigramToy):
    """A BigramToy that records how many rows each decoding step computes (eager)."""

    def __init__(self, table):
        super().__init__(table)
        self.rows = []

    def decode_step(self, tokens, cache):
        self.rows.append(int(tf.shape(tokens)[0]))
        return super().decode_step(tokens, cache)


def test_the_decoder_computes_the_live_hypotheses_only():
    """k = 3, n_best = 1, alpha = 0. The first step computes one row (the k hypotheses are
    all <S>). It keeps A (log 0.5), finishes </S> (log 0.3) and keeps B (log 0.2), which can
    no longer beat that finished one (log 0.2 < log 0.3 at any length): the second step
    computes A alone, not A, B and the </S> slot, and gives A </S> (0.5 * 0.9), which ends
    the search. Two sentences, one forced through the prefix B C: one row each inside it."""
    table = {BOS: {A: 0.5, EOS: 0.3, B: 0.2}, A: {EOS: 0.9, C: 0.1}, B: {C: 1.0}, C: {EOS: 1.0}}
    toy = CountingToy(table)
    src = tf.constant([[4, 3]], tf.int32)
    ids, scores = beam_search.beam_loop(toy, src, tf.constant(8), 3, 0.0)
    assert toy.rows == [1, 1]
    assert list(ids[0, 0, :2]) == [A, EOS]
    assert scores.numpy()[0, 0] == pytest.approx(math.log(0.5 * 0.9), abs=1e-5)
    toy.rows = []
    prefix = greedy_search.Prefix(tf.constant([[B, C], [PAD, PAD]]), tf.constant([2, 0]))
    src2 = tf.constant([[4, 3], [4, 3]], tf.int32)
    ids, scores = beam_search.beam_loop(toy, src2, tf.constant(8), 3, 0.0, prefix=prefix)
    # step 0: one row per sentence; step 1: B (forced) and the other's A; step 2: C </S>
    assert toy.rows == [2, 2, 1]
    assert list(ids[0, 0, :3]) == [B, C, EOS] and list(ids[1, 0, :2]) == [A, EOS]
    assert scores.numpy()[0, 0] == pytest.approx(math.log(0.2), abs=1e-5)


def test_early_finishers_are_padded_not_extended():
    """In a batch, a sentence that ends at step 0 gets PAD while the other continues."""
    START2 = 7  # the second sentence reads its first distribution from this row

    class TwoStarts(BigramToy):
        def decode_step(self, tokens, cache):
            first = tf.logical_and(
                tf.equal(cache["step"], 0), tf.range(tf.shape(tokens)[0]) % 2 == 1
            )
            prev = tf.where(first, START2, tokens)
            return tf.gather(self.logp, prev), dict(cache, step=cache["step"] + 1)

    toy = TwoStarts(
        {BOS: {EOS: 0.9, A: 0.1}, START2: {A: 1.0}, A: {B: 1.0}, B: {C: 1.0}, C: {EOS: 1.0}}
    )
    out = greedy_search.greedy_loop(toy, tf.constant([[4, 3], [4, 3]]), tf.constant(8)).numpy()
    assert out.tolist() == [[EOS, PAD, PAD, PAD], [A, B, C, EOS]]


class TrigramToy(BigramToy):
    """A 'model' whose next-token distribution depends on the last two tokens; the one
    before the last lives in the cache, so a beam search that reorders the cache wrongly
    scores its hypotheses wrongly."""

    def __init__(self, seed):
        z = np.random.default_rng(seed).normal(scale=2.0, size=(V, V, V))
        z[..., PAD] = -30.0
        self.logp3 = tf.constant(z - np.log(np.exp(z).sum(-1, keepdims=True)), tf.float32)

    def init_cache(self, memory, mask):
        n = tf.shape(memory)[0]
        return {
            "step": tf.constant(0),
            "memory_mask": mask,
            "layers": [{"before_last": tf.fill((n,), BOS)}],
        }

    def decode_step(self, tokens, cache):
        before = cache["layers"][0]["before_last"]
        logp = tf.gather_nd(self.logp3, tf.stack([before, tokens], axis=1))
        return logp, dict(cache, step=cache["step"] + 1, layers=[{"before_last": tokens}])

    def replay(self, seq):
        """The log-probability of seq (up to its </S>), token by token without a cache."""
        logp3, total, before, last = self.logp3.numpy(), 0.0, BOS, BOS
        for tok in seq:
            total += logp3[before, last, tok]
            before, last = last, tok
            if tok == EOS:
                break
        return total


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_beam_reorders_the_cache_with_its_hypotheses(seed):
    toy = TrigramToy(seed)
    ids, scores = run_beam(toy, k=3, alpha=0.0, n=2)
    for sent_ids, sent_scores in zip(ids, scores):
        for seq, score in zip(sent_ids, sent_scores):
            assert score == pytest.approx(toy.replay(seq), abs=1e-4), seq


def test_decoding_budgets_and_length_penalty():
    """Each sentence gets its own budget: its length (</S> included, PAD not) + extra,
    capped by max_len and by a learned position table."""
    src = tf.constant([[5, 6, 7, EOS, PAD, PAD], [5, EOS, PAD, PAD, PAD, PAD]])
    sinusoid = tiny_model(11, 11, num_blocks=1)
    limits, longest = greedy_search.decode_budgets(sinusoid, src, 3)
    assert limits.numpy().tolist() == [7, 5] and int(longest) == 7
    limits, longest = greedy_search.decode_budgets(sinusoid, src, 3, max_len=6)
    assert limits.numpy().tolist() == [6, 5] and int(longest) == 6
    assert greedy_search.source_limit(sinusoid) == 1024
    learned = tiny_model(11, 11, num_blocks=1, position="learned", max_position=6)
    assert greedy_search.decode_budgets(learned, src, 3)[0].numpy().tolist() == [6, 5]
    assert greedy_search.source_limit(learned) == 6
    assert int(greedy_search.max_decode_len(learned, 2, 3)) == 5
    # GNMT: ((5 + |Y|) / 6) ^ alpha
    np.testing.assert_allclose(beam_search.length_penalty(7, 0.6).numpy(), 2.0**0.6, rtol=1e-6)
    assert float(beam_search.length_penalty(3, 0.0)) == 1.0


def test_scores_of_translations():
    refs = ["The dog sleeps in the garden today.", "A cat.", "My brother finds an apple."]
    figures = metrics.scores(refs, refs)
    assert figures["sacrebleu"] == pytest.approx(100.0)
    assert figures["chrf"] == pytest.approx(100.0)
    assert figures["legacy_bleu"] == pytest.approx(100.0)
    assert "tok:13a" in figures["sacrebleu_signature"]
    assert "case:mixed" in figures["sacrebleu_signature"]
    assert "case:lc" in figures["sacrebleu_lc_signature"]
    assert "tok:13a" in figures["sacrebleu_lc_signature"]
    assert "tok:none" in figures["bleu_tokenize_none_signature"]
    hyps = ["The dog sleeps in the house today.", "A dog.", "My sister finds an apple."]
    worse = metrics.scores(hyps, refs)
    for key in ("sacrebleu", "sacrebleu_lc", "bleu_tokenize_none", "chrf", "legacy_bleu"):
        assert 0.0 < worse[key] < 100.0, key
    # case: the lowercased score forgives what the cased one counts, as sacrebleu -lc does
    shouted = metrics.scores([r.upper() for r in refs], refs)
    assert shouted["sacrebleu"] < 10.0
    assert shouted["sacrebleu_lc"] == pytest.approx(100.0)
    lc = sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score
    assert worse["sacrebleu_lc"] == pytest.approx(lc, abs=1e-9)
    # the legacy figure counts only pairs whose both sides have more than 3 words
    assert metrics.legacy_bleu(["A dog."], ["A cat."]) == 0.0
    assert metrics.legacy_bleu(refs[:2] + ["x"], refs) == pytest.approx(100.0)


# ---------------------------------------------------------------------------------------
# the TF1 eval.py protocol
# ---------------------------------------------------------------------------------------
class WordsToy:
    """The parts of a word-level data_load.Tokenizer the TF1 protocol uses."""

    kind = "word"
    tgt_words = ["<PAD>", "<UNK>", "<S>", "</S>", "the", "dog", "sleeps"]

    def encode_src(self, lines):
        return [[UNK_ID] * len(data_load.clean(line).split()) for line in lines]

    encode_tgt = encode_src


def test_legacy_subset_is_the_tf1_test_subset():
    """A pair counts when both sides, cleaned and with </S> counted, fit maxlen1 and
    maxlen2 (TF1: max(len(x), len(y)) <= maxlen); whole batches of batch_size of those,
    in file order, are scored."""
    hp = hparams.apply(hparams.Hparams(), dict(maxlen1=4, maxlen2=5, batch_size=2))
    sources = ["a b c", "a b c d", "a", "a & b , c", "a b", "a", "a b c"]
    refs = ["w x y z", "w", "v w x y z", "w", "w", "w", "w x"]
    # fit: 0 (3+1, 4+1), 3 (cleaned: 3+1), 4, 5, 6; not 1 (source 4+1), 2 (target 5+1)
    assert metrics.legacy_subset(WordsToy(), sources, refs, hp) == ([0, 3, 4, 5], 5)
    hp3 = hparams.apply(hp, {"batch_size": 3})
    assert metrics.legacy_subset(WordsToy(), sources, refs, hp3) == ([0, 3, 4], 5)
    with pytest.raises(hparams.UserError, match="batch_size 0"):
        metrics.legacy_subset(WordsToy(), sources, refs, hparams.apply(hp, {"batch_size": 0}))


def test_legacy_words_are_the_literal_tokens_before_eos():
    tok = WordsToy()
    assert translator.legacy_words(tok, [4, 5, UNK_ID, 6, EOS_ID, 5, PAD_ID]) == [
        "the",
        "dog",
        "<UNK>",
        "sleeps",
    ]
    # a predicted PAD or <S> stays too, and without </S> every token counts
    assert translator.legacy_words(tok, [PAD_ID, 2, 4]) == ["<PAD>", "<S>", "the"]


def test_legacy_bleu_keeps_unk_in_the_hypotheses():
    """The TF1 protocol scores hypotheses as they are (<UNK> a word of its own that
    matches nothing) against the cleaned references, counting pairs whose both sides
    have more than 3 words; nltk corpus_bleu x 100."""
    refs = ["The dog sleeps in the garden.", "A cat sits on the mat today.", "No."]
    hyps = ["The dog sleeps in the <UNK>", "A cat sits on the mat today", "No"]
    expected = 100 * corpus_bleu(
        [[r.split()] for r in ("The dog sleeps in the garden", "A cat sits on the mat today")],
        [h.split() for h in hyps[:2]],
    )
    assert 50 < expected < 100
    assert metrics.legacy_bleu(hyps, refs, clean_hyps=False) == pytest.approx(expected)
    # cleaning the hypotheses, as the whole-test-set figure does, reads <UNK> as UNK
    assert metrics.legacy_bleu(hyps, refs) == pytest.approx(expected)
    unk_ref = ["The dog sleeps in the UNK"] + refs[1:]
    assert metrics.legacy_bleu(hyps, unk_ref) == pytest.approx(
        100 * corpus_bleu([[r.split()] for r in unk_ref[:2]], [h.split() for h in unk_ref[:2]])
    )
    assert metrics.legacy_bleu(hyps, unk_ref, clean_hyps=False) < metrics.legacy_bleu(hyps, unk_ref)


# ---------------------------------------------------------------------------------------
# random and trained tiny Transformers
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sentences_that_stop_leave_the_batch_and_the_others_decode_as_alone():
    """Rows with budgets of 3 to 8 steps stop one after another and leave the batch (their
    caches, memory masks and cross-attention keys dropped); every row's output equals
    its decoding alone, PAD after its own budget."""
    m = tiny_model(23, 23, seed=4)
    rng = np.random.default_rng(9)
    lengths = [7, 2, 5, 3]
    src = np.zeros((4, 7), np.int32)
    for row, n in enumerate(lengths):
        src[row, :n] = rand_ids(rng, (n,), 23)
    extra = tf.constant(1, tf.int32)
    greedy = greedy_search.greedy_decoder(m)
    batch = greedy(tf.constant(src), extra).numpy()
    for row, n in enumerate(lengths):
        alone = greedy(tf.constant(src[row : row + 1, :n]), extra).numpy()[0]
        np.testing.assert_array_equal(batch[row, : len(alone)], alone, err_msg=f"row {row}")
        assert not batch[row, len(alone) :].any() and len(alone) <= n + 1


@pytest.mark.slow
@pytest.mark.parametrize("position,max_position", [("sinusoid", 1024), ("learned", 6)])
def test_greedy_decoder_matches_naive(position, max_position):
    V = 11
    m = tiny_model(V, V, seed=7, position=position, max_position=max_position)
    rng = np.random.default_rng(8)
    src = rand_ids(rng, (3, 5), V)
    src[1, 3:] = PAD_ID
    extra = 3
    # the budget is source length + extra, capped by a learned position table
    L = min(src.shape[1] + extra, max_position)
    limits = np.minimum((src != PAD_ID).sum(axis=1) + extra, max_position)
    fast = greedy_search.greedy_decoder(m)(tf.constant(src), tf.constant(extra, tf.int32)).numpy()
    slow = greedy_search.naive_greedy(m, src, L, limits)
    assert slow.shape == (3, L)
    assert 1 <= fast.shape[1] <= L
    np.testing.assert_array_equal(fast, slow[:, : fast.shape[1]])
    # the cached decoder stops early only when every row has emitted </S>
    if fast.shape[1] < L:
        assert np.all((fast == EOS_ID).any(axis=1))
        assert np.all(slow[:, fast.shape[1] :] == PAD_ID)


@pytest.fixture(scope="module")
def trained():
    """A tiny Transformer trained on a toy copy-with-shift task."""
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(40):
        s = rng.integers(4, 14, size=rng.integers(3, 7))
        pairs.append((list(s) + [EOS], [BOS] + list(s[::-1] + 1), list(s[::-1] + 1) + [EOS]))

    def pad(rows):
        out = np.zeros((len(rows), max(map(len, rows))), np.int32)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return tf.constant(out)

    src, dec, lab = (pad([p[i] for p in pairs]) for i in range(3))
    sizes = dict(d_model=32, d_ff=64, num_blocks=1, num_heads=2)
    model = Transformer(16, 16, **sizes, position="sinusoid", dropout_rate=0.0)
    model.build_all()
    opt = keras.optimizers.Adam(3e-3)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model((src, dec), training=True)
            real = tf.not_equal(lab, 0)
            loss = tf.reduce_mean(
                optimization.smoothed_cross_entropy(
                    tf.boolean_mask(logits, real), tf.boolean_mask(lab, real), 0.0
                )
            )
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for _ in range(200):
        loss = step()
    assert float(loss) < 0.2
    return model, src


@pytest.mark.slow
def test_cached_greedy_equals_uncached_on_trained_model(trained):
    model, src = trained
    cached = greedy_search.greedy_decoder(model)(src, tf.constant(5)).numpy()
    naive = greedy_search.naive_greedy(model, src, cached.shape[1])
    assert np.array_equal(cached, naive)
    assert (cached == EOS).any(axis=1).all(), "a trained model ends its sentences"


@pytest.mark.slow
def test_beam_one_equals_greedy_on_trained_model(trained):
    model, src = trained
    greedy = greedy_search.greedy_decoder(model)(src, tf.constant(5)).numpy()
    beam, _ = beam_search.beam_decoder(model, 1)(src, tf.constant(5))
    assert np.array_equal(beam.numpy()[:, 0], greedy)
    beam4, scores = beam_search.beam_decoder(model, 4, n_best=4)(src, tf.constant(5))
    assert beam4.shape[1] == 4 and np.all(np.diff(scores.numpy(), axis=1) <= 1e-6)
    # a beam that stops once its n best are final gives the n best of the beam that
    # searches until all 4 are: the same ids, the same scores
    for n in (1, 2):
        ids, got = beam_search.beam_decoder(model, 4, n_best=n)(src, tf.constant(5))
        width = ids.shape[2]
        assert ids.shape[1] == n and width <= beam4.shape[2]
        np.testing.assert_array_equal(ids.numpy(), beam4.numpy()[:, :n, :width])
        assert not beam4.numpy()[:, :n, width:].any()  # PAD past the shorter buffer
        np.testing.assert_array_equal(got.numpy(), scores.numpy()[:, :n])


@pytest.mark.slow
def test_max_len_caps_the_output(trained):
    model, src = trained
    out = greedy_search.greedy_decoder(model, max_len=2)(src, tf.constant(50)).numpy()
    assert out.shape[1] == 2
    beam, _ = beam_search.beam_decoder(model, 2, max_len=3)(src, tf.constant(50))
    assert beam.shape[2] <= 3


def test_bleu_by_source_length_with_bootstrap_intervals():
    """Buckets <=2, 3-4, >=5 source tokens: counts, each bucket's sacreBLEU equal to the
    corpus figure of its sentences alone, a 95% interval around it that is fixed by the
    seed and narrows to a point when every sentence scores the same."""
    refs = ["the cat sat on the mat", "a dog runs in the park", "it rains today",
            "she reads a good book", "we eat bread", "the sun is very hot today"]  # fmt: skip
    hyps = ["the cat sat on a mat", "a dog runs in the park", "it rained today",
            "she reads a book", "we ate bread", "the sun is hot today"]  # fmt: skip
    lengths = [1, 2, 3, 4, 5, 9]
    got = metrics.bleu_by_length(hyps, refs, lengths, (2, 4), resamples=200, seed=1)
    assert [(b["bucket"], b["sentences"]) for b in got] == [("<=2", 2), ("3-4", 2), (">=5", 2)]
    for b, rows in zip(got, [(0, 1), (2, 3), (4, 5)]):
        pick = [hyps[i] for i in rows], [[refs[i] for i in rows]]
        assert b["sacrebleu"] == pytest.approx(sacrebleu.corpus_bleu(*pick).score, abs=1e-9)
        lo, hi = b["ci95"]
        assert lo <= b["sacrebleu"] <= hi and hi > lo
    again = metrics.bleu_by_length(hyps, refs, lengths, (2, 4), resamples=200, seed=1)
    assert again == got
    same = metrics.bleu_by_length(["a b c d"] * 3, ["a b c d"] * 3, [1, 1, 1], (8,), 50)
    assert same[0]["ci95"] == pytest.approx([100.0, 100.0]) and same[1] == {
        "bucket": ">=9", "sentences": 0, "sacrebleu": None, "ci95": None}  # fmt: skip
    assert metrics.length_bucket_names((16, 24)) == ["<=16", "17-24", ">=25"]
