"""greedy_search.py: sampling (top-k, top-p, temperature, seeds) and a forced target prefix,
on tiny random Transformers; the Translator's samples and prefixes on every stream."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from helpers import rand_ids, tiny_model
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import greedy_search
from transformer_tf2.decoding.greedy_search import Sampling, top_p_mask
from transformer_tf2.decoding.translator import Translator

V = 23


def sources(rng, lengths=(5, 9, 2, 7, 4, 6)):
    return [list(rand_ids(rng, n, V)) for n in lengths]


def padded(srcs):
    eos = [data_load.EOS_ID]
    return tf.constant(data_load.pad_batch([np.asarray(s + eos, np.int32) for s in srcs]))


def settings(**kw):
    values = {"max_len_extra": 6, "decode_streams": 1, "eval_batch_size": 2, **kw}
    return hparams.apply(hparams.Hparams(), values)


def first_token_probs(model, src, temperature: float, topk: int = 0):
    """The model's distribution of the first target token for one source, at the
    temperature, renormalized without <PAD> and <S> (and over the top k, if k > 0)."""
    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask)
    logits, _ = model.decode_step(tf.fill((1,), data_load.BOS_ID), cache)
    z = logits.numpy()[0].astype(np.float64) / temperature
    z[[data_load.PAD_ID, data_load.BOS_ID]] = -np.inf
    if topk:
        z[np.argsort(-z, kind="stable")[topk:]] = -np.inf
    p = np.exp(z - z.max())
    return p / p.sum()


@pytest.mark.slow
def test_top_k_1_samples_what_greedy_decodes_token_for_token():
    model = tiny_model(V, V, seed=3)
    src = padded(sources(np.random.default_rng(0)))
    extra = tf.constant(6)
    greedy = greedy_search.greedy_decoder(model)(src, extra).numpy()
    # (sampling never draws <PAD> or <S>: greedy picks neither here)
    assert not np.isin(greedy[:, :1], [data_load.PAD_ID, data_load.BOS_ID]).any()
    inner = greedy[greedy != data_load.PAD_ID]
    assert not np.isin(inner, [data_load.BOS_ID]).any()
    for seed in (0, 7):
        sample = greedy_search.greedy_decoder(model, strategy=Sampling(topk=1, seed=seed))
        ids = tf.range(src.shape[0])
        np.testing.assert_array_equal(sample(src, extra, ids).numpy(), greedy)


@pytest.mark.slow
@pytest.mark.parametrize("temperature, topk", [(1.0, 0), (0.6, 0), (1.5, 6)])
def test_first_tokens_drawn_follow_the_softmax_at_the_temperature(temperature, topk):
    """4,000 draws of the first token of one source against the model's distribution:
    Pearson's chi-square below its 0.999 quantile (df = categories - 1; categories with
    an expected count under 5 pooled), and no draw outside the allowed set. The draws
    are a fixed function of the seed, so the test does not flicker."""
    model = tiny_model(V, V, seed=4)
    src = padded([[5, 9, 11, 4]])
    p = first_token_probs(model, src, temperature, topk)
    n = 4000
    strategy = Sampling(topk=topk, temperature=temperature, seed=11)
    sample = greedy_search.greedy_decoder(model, max_len=1, strategy=strategy)
    batch = tf.repeat(src, n, axis=0)
    first = sample(batch, tf.constant(6), tf.range(n)).numpy()[:, 0]
    counts = np.bincount(first, minlength=V)
    assert counts[p == 0].sum() == 0  # <PAD>, <S>, and what top-k drops
    expected = n * p
    big = expected >= 5
    observed = np.r_[counts[big], counts[~big & (p > 0)].sum()]
    expect = np.r_[expected[big], expected[~big & (p > 0)].sum()]
    if expect[-1] < 5:  # too few to pool: fold into the smallest category
        observed, expect = observed[:-1], expect[:-1]
        observed[-1] += counts[~big & (p > 0)].sum()
        expect[-1] += expected[~big & (p > 0)].sum()
    chi2 = ((observed - expect) ** 2 / expect).sum()
    critical = {5: 20.5, 10: 29.6, 15: 37.7, 20: 45.3}  # chi-square 0.999 quantiles
    df = len(expect) - 1
    assert df >= 5
    bound = np.interp(df, list(critical), list(critical.values()))
    assert chi2 < bound, (chi2, df, observed, expect.round(1))
    # the sharper the temperature, the more often the most probable token
    assert counts.argmax() == p.argmax()


def test_top_p_keeps_the_smallest_set_reaching_p_and_its_ties():
    probs = tf.constant(
        [
            [0.5, 0.25, 0.125, 0.125],  # 0.75 reached by the first two
            [0.5, 0.25, 0.125, 0.125],  # 0.5 reached by the first alone
            [0.5, 0.125, 0.125, 0.25],  # (not sorted: only the leading mass counts)
            [0.25, 0.25, 0.25, 0.25],  # all tied with the first
            [0.5, 0.125, 0.125, 0.25],
        ]
    )
    topp = tf.constant([[0.75], [0.5], [0.55], [0.1], [1.0]])
    got = [top_p_mask(probs[i : i + 1], float(topp[i, 0])).numpy()[0] for i in range(5)]
    assert [list(g) for g in got] == [
        [True, True, False, False],
        [True, False, False, False],
        [True, True, True, True],  # 0.5 + 0.125 reaches 0.55; the other 0.125 ties it
        [True, True, True, True],
        [True, True, True, True],
    ]
    # through the strategy: what top-p drops is never drawn
    logits = tf.math.log(tf.constant([[1e-9] * 4 + [0.4, 0.3, 0.2, 0.1]]))
    z, tokens = Sampling(topk=0, topp=0.65).candidates(logits)
    kept = sorted(int(t) for t, v in zip(tokens.numpy()[0], z.numpy()[0]) if v > -np.inf)
    assert kept == [4, 5]  # 0.4 + 0.3 (the reserved ids 0-3 hold almost nothing)
    batch = tf.tile(logits, [500, 1])
    drawn = set(Sampling(topk=0, topp=0.65, seed=3)(batch, 0, tf.range(500)).numpy())
    assert drawn == {4, 5}


@pytest.mark.slow
def test_samples_are_the_seeds_whatever_the_streams_and_batches():
    model = tiny_model(V, V, seed=3)
    rng = np.random.default_rng(2)
    srcs = sources(rng) + [[]] + sources(rng, (3, 8))
    outs = {}
    for streams, batch in ((1, 64), (3, 2), (2, 3)):
        hp = settings(sampling_topk=0, seed=5, decode_streams=streams, eval_batch_size=batch)
        t = Translator(model, None, hp)
        assert t.streams == streams
        outs[streams] = t.translate_ids(srcs, n=3)
    assert outs[1][6] is None  # the empty source
    for i, o in enumerate(outs[1]):
        if o is None:
            continue
        assert o[0].shape[0] == 3
        for streams in (2, 3):
            got = outs[streams][i][0]
            width = max(got.shape[1], o[0].shape[1])
            a, b = (np.pad(x, [(0, 0), (0, width - x.shape[1])]) for x in (o[0], got))
            np.testing.assert_array_equal(a, b)
    # three samples of a sentence differ, and another seed draws others
    assert len({tuple(row) for row in outs[1][1][0]}) > 1
    other = Translator(model, None, settings(sampling_topk=0, seed=6)).translate_ids(srcs, n=3)
    assert any(not np.array_equal(a[0][:, :4], b[0][:, :4]) for a, b in zip(outs[1], other) if a)


@pytest.mark.slow
def test_a_prefix_of_greedys_own_output_changes_nothing_and_forces_its_tokens():
    model = tiny_model(V, V, seed=3)
    srcs = sources(np.random.default_rng(0))
    t = Translator(model, None, settings())
    plain = t.translate_ids(srcs)
    own = [list(o[0][0][:n]) for o, n in zip(plain, (1, 2, 3, 0, 2, 1))]
    prefixed = t.translate_ids(srcs, prefixes=own)
    for a, b in zip(plain, prefixed):
        np.testing.assert_array_equal(a[0], b[0])
    forced = [[9, 10, 11], [], [4], [17, 17], [5], [6, 7]]
    for strategy, hp in (
        ("greedy", settings()),
        ("beam", settings(beam_size=3)),
        ("sampling", settings(sampling_topk=5, seed=1)),
    ):
        outs = Translator(model, None, hp).translate_ids(srcs, prefixes=forced)
        for o, p in zip(outs, forced):
            for hyp in o[0]:  # every hypothesis
                assert list(hyp[: len(p)]) == p, strategy
    # a prefix longer than the budget is still decoded whole, then </S> or one more
    long = [[8] * 30]
    out = Translator(model, None, settings()).translate_ids([[5, 6]], prefixes=long)[0][0][0]
    assert list(out[:30]) == [8] * 30 and len(out) == 31


@pytest.mark.slow
def test_beam_scores_of_a_prefixed_search_count_the_prefix_tokens():
    """A prefixed beam hypothesis's score is its summed log-probability (the prefix's
    tokens included) over the length penalty, as the teacher-forced pass gives it."""
    from helpers import check_beam_scores

    model = tiny_model(V, V, seed=5)
    srcs = sources(np.random.default_rng(3), (4, 6, 3))
    hp = settings(beam_size=3)
    outs = Translator(model, None, hp).translate_ids(srcs, prefixes=[[9, 10], [], [4]])
    src = padded(srcs)
    longest = max(o[0].shape[1] for o in outs)
    ids = np.stack([np.pad(o[0], [(0, 0), (0, longest - o[0].shape[1])]) for o in outs])
    scores = np.stack([o[1] for o in outs])
    limits = [len(s) + 1 + hp.max_len_extra for s in srcs]
    check_beam_scores(model, src, ids, scores, limits)


def test_sampling_settings_are_checked_before_decoding():
    for values, words in (
        ({"sampling_topk": -1}, "--sampling_topk must not be negative"),
        ({"sampling_topk": 0, "sampling_topp": 0.0}, r"--sampling_topp must be in \(0, 1\]"),
        ({"sampling_topk": 0, "sampling_topp": float("nan")}, "--sampling_topp must be a finite"),
        ({"sampling_topk": 0, "sampling_temperature": 0.0}, "--sampling_temperature must be"),
        ({"sampling_topp": 0.9}, "which --sampling_topk 1 .* turns off"),
        ({"sampling_topk": 5, "beam_size": 4}, "samples one token at a time: drop --beam_size 4"),
    ):
        with pytest.raises(hparams.UserError, match=words):
            hparams.apply(hparams.Hparams(), values)
    hp = hparams.apply(hparams.Hparams(), {"sampling_topk": 0, "sampling_topp": 0.9})
    assert dataclasses.asdict(hp)["sampling_topp"] == 0.9


@pytest.mark.slow
def test_sampling_and_alignments_refuse_a_model_with_document_memory():
    model = tiny_model(V, V, seed=1, memory_sentences=1, position="xl")
    with pytest.raises(hparams.UserError, match="^sampling is not for a model with document"):
        Translator(model, None, settings(sampling_topk=0))
    t = Translator(model, None, settings())
    with pytest.raises(hparams.UserError, match="^alignments are not for a model with doc"):
        t.align_ids([[5, 6]], [[7]])
    with pytest.raises(hparams.UserError, match="^a target prefix is not for a model with"):
        t.translate_ids([[5, 6]], prefixes=[[7]])
