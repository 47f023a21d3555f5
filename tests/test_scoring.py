"""scoring.py and the Translator's scoring and alignments: given translations scored as the
searches score them, on every stream; eval.py's contrastive scores are the same numbers;
word alignments from the cross-attention."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import eval as eval_script
from helpers import rand_ids, tiny_model
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import beam_search, scoring
from transformer_tf2.decoding.translator import Translator, _tokens
from transformer_tf2.models import checkpoints

V = 23


def settings(**kw):
    values = {"max_len_extra": 6, "decode_streams": 1, "eval_batch_size": 2, **kw}
    return hparams.apply(hparams.Hparams(), values)


def sources(seed=0, lengths=(5, 9, 2, 7, 4, 6)):
    rng = np.random.default_rng(seed)
    return [list(rand_ids(rng, n, V)) for n in lengths]


@pytest.mark.slow
def test_a_searchs_own_hypotheses_score_what_the_search_scored():
    """Beam search without a length penalty (alpha 0) scores a hypothesis by its summed
    log-probability, </S> included: score_ids of each hypothesis gives it, greedy's (k =
    1) and each of a 3-beam's."""
    model = tiny_model(V, V, seed=5)
    srcs = sources()
    src = tf.constant(
        data_load.pad_batch([np.asarray(s + [data_load.EOS_ID], np.int32) for s in srcs])
    )
    t = Translator(model, None, settings())
    checked = 0
    for k in (1, 3):
        ids, scores = beam_search.beam_loop(model, src, tf.constant(6), k, alpha=0.0, n_best=k)
        for i, (hyps, row) in enumerate(zip(ids.numpy(), scores.numpy())):
            for hyp, score in zip(hyps, row):
                (logp,) = t.score_ids([srcs[i]], [_tokens(hyp)])
                assert len(logp) == len(_tokens(hyp)) + 1
                # one cut at its budget (no </S>) is scored without </S>
                want = logp.sum() if data_load.EOS_ID in hyp else logp[:-1].sum()
                np.testing.assert_allclose(want, score, atol=1e-4)
                checked += 1
    assert checked == 4 * len(srcs)


@pytest.mark.slow
def test_scores_are_the_same_on_every_stream_and_batch():
    model = tiny_model(V, V, seed=2)
    srcs = sources(1) + [[]]
    tgts = sources(2, (3, 1, 8, 0, 5, 2, 4))
    got = {}
    for streams, batch in ((1, 64), (3, 2)):
        t = Translator(model, None, settings(decode_streams=streams, eval_batch_size=batch))
        got[streams] = t.score_ids(srcs, tgts)
    for a, b, tgt in zip(got[1], got[3], tgts):
        assert a.shape == (len(tgt) + 1,)
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert all(lp.max() < 0 for lp in got[1])
    with pytest.raises(ValueError, match="7 sources against 6 targets"):
        Translator(model, None, settings()).score_ids(srcs, tgts[:6])


def test_eval_contrastive_scores_are_the_translators(quick_run):
    """eval.py's forced scores (contrastive accuracy) are score_ids' sums, for a model
    without document memory."""
    hp, _ = quick_run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    items = [
        {"context": [], "source": "Die Frau liest ein Buch.", "reference": "The woman reads."},
        {"context": [], "source": "Der Hund schläft.", "reference": "The dog is asleep."},
        {"context": [], "source": "Ein Mann.", "reference": ""},
    ]
    refs = [it["reference"] for it in items]
    other = ["A woman reads a book.", "Dogs.", "A man."]
    forced = eval_script.forced_scores(model, tok, items, [refs, other], batch_size=2)
    t = Translator(model, tok, hp)
    src = tok.encode_src([it["source"] for it in items])
    for row, targets in zip(forced, (refs, other)):
        mine = [lp.sum() for lp in t.score_ids(src, tok.encode_tgt(targets))]
        np.testing.assert_allclose(row, mine, atol=1e-4)


def test_words_of_pieces_and_the_hard_alignment():
    assert scoring.word_index(["▁Die", "▁Fra", "u", "▁liest", "."], "bpe") == [0, 1, 1, 2, 2]
    assert scoring.word_index(["lie", "▁st"], "bpe") == [0, 1]  # a first piece starts one
    assert scoring.word_index(["die", "frau"], "word") == [0, 1]
    weights = np.array(
        [
            [0.7, 0.1, 0.1, 0.1],  # target token 0 -> source token 0
            [0.1, 0.1, 0.6, 0.2],  # 1 -> 2
            [0.1, 0.5, 0.3, 0.1],  # 2 -> 1
        ]
    )
    # source tokens 1 and 2 are one word; target tokens 1 and 2 are one word
    assert scoring.hard_alignment(weights, [0, 1, 1, 2], [0, 1, 1]) == "0-0 1-1"
    assert scoring.hard_alignment(weights, [0, 1, 2, 3], [0, 1, 2]) == "0-0 1-2 2-1"
    assert scoring.hard_alignment(weights, [], [0]) == ""
    assert [scoring.alignment_layer(n) for n in (1, 2, 6)] == [0, 1, 5]


@pytest.mark.slow
def test_alignments_come_from_the_last_layers_attention():
    model = tiny_model(V, V, seed=3, num_blocks=2)
    srcs = sources(4, (4, 6, 3))
    t = Translator(model, None, settings())
    outs = t.translate_ids(srcs)
    tgts = [_tokens(o[0][0]) for o in outs]
    weights = t.align_ids(srcs, tgts)
    # the same rows as the full pass's attention of layer 1 (of 2), averaged over heads
    for s, tgt, w in zip(srcs, tgts, weights):
        src = tf.constant([s + [data_load.EOS_ID]])
        fed = tf.constant([[data_load.BOS_ID] + tgt])
        memory, mask = model.encode(src)
        _, maps = model.decode(fed, memory, mask, return_attention=True)
        want = maps[1][1].numpy()[0].mean(0)[: len(tgt), : len(s)]
        assert w.shape == (len(tgt), len(s))
        np.testing.assert_allclose(w, want, atol=1e-6)
        assert np.all(want.sum(1) <= 1 + 1e-6)
    tok = dataclasses.make_dataclass("Tok", ["kind"])("word")
    tok.src_tokens = tok.tgt_tokens = lambda ids: [str(i) for i in ids]
    t.tok = tok
    links = t.alignments(srcs, outs)
    for s, tgt, link, w in zip(srcs, tgts, links, weights):
        pairs = [tuple(map(int, p.split("-"))) for p in link.split()]
        assert {j for _, j in pairs} == set(range(len(tgt)))  # every target word aligned
        assert all(i == int(np.argmax(w[j])) for i, j in pairs)
