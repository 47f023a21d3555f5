"""ctranslate.py and export.py --format ctranslate2: the converted model computes the same
log-probabilities and the same greedy outputs as ours."""

import os
import types

import numpy as np
import pytest
import tensorflow as tf

import export
from helpers import tiny_model, translate_lines
from transformer_tf2.config import hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.decoding import greedy_search
from transformer_tf2.decoding.translator import Translator
from transformer_tf2.export import ctranslate
from transformer_tf2.models import checkpoints

ctranslate2 = pytest.importorskip("ctranslate2")  # the [dev] extra installs it

VOCAB = 23


def word_tokenizer(vocab: int = VOCAB):
    """A stand-in for data_load.Tokenizer over a word vocabulary w0, w1, ..."""
    names = list(data_load.RESERVED) + [f"w{i}" for i in range(4, vocab)]
    words = {w: i for i, w in enumerate(names)}
    tokens = lambda ids: [names[int(i)] for i in ids]  # noqa: E731
    return types.SimpleNamespace(
        kind="word", src_vocab=words, tgt_vocab=words, src_tokens=tokens, tgt_tokens=tokens
    )


def converted(tmp_path, model, tok=None):
    tok = tok or word_tokenizer(model.config.src_vocab_size)
    out = str(tmp_path / "ct2")
    ctranslate.convert(model, tok, out)
    return ctranslate2.Translator(out, device="cpu", intra_threads=1), tok


def our_log_probs(model, src, tgt):
    """Per target token (</S> included) log-probabilities of tgt given src, teacher forced."""
    n = len(src)
    width = max(map(len, src)) + 1
    src_ids = np.zeros((n, width), np.int32)
    for i, s in enumerate(src):
        src_ids[i, : len(s) + 1] = s + [data_load.EOS_ID]
    t_width = max(map(len, tgt)) + 1
    dec_in = np.zeros((n, t_width), np.int32)
    for i, t in enumerate(tgt):
        dec_in[i, : len(t) + 1] = [data_load.BOS_ID] + t
    logp = tf.nn.log_softmax(model((tf.constant(src_ids), tf.constant(dec_in))), -1).numpy()
    out = []
    for i, t in enumerate(tgt):
        labels = t + [data_load.EOS_ID]
        out.append([float(logp[i, j, y]) for j, y in enumerate(labels)])
    return out


CASES = {
    "post-norm, sinusoid": {},
    "pre-norm, learned, own output layer": dict(norm="pre", position="learned", tie_softmax=False),
    "no W^O, two vocabularies, epsilon 1e-5": dict(
        output_projection=False, share_embeddings=False, layer_norm_epsilon=1e-5
    ),
    # distances past the clip (sources of 9 tokens, k = 3)
    "Shaw's relative positions": dict(position="shaw", max_relative_position=3),
    # the buckets past the exact ones, both directions in the encoder
    "T5's bias, pre-norm": dict(position="t5", norm="pre", t5_buckets=8, t5_max_distance=6),
    "rotary positions": dict(position="rotary"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_converted_model_scores_every_token_as_ours(tmp_path, case):
    model = tiny_model(VOCAB, VOCAB, seed=3, **CASES[case])
    rng = np.random.default_rng(0)
    for stack in (model.src_relative, model.tgt_relative):
        if stack is not None and stack.kind == "t5":  # T5's table starts at zero
            stack.table.assign(rng.normal(size=stack.table.shape).astype(np.float32))
    translator, tok = converted(tmp_path, model)
    src = [list(rng.integers(4, VOCAB, size=n)) for n in (5, 9, 2)]
    tgt = [list(rng.integers(4, VOCAB, size=n)) for n in (7, 3, 6)]
    words = list(tok.src_vocab)
    theirs = translator.score_batch(
        [[words[i] for i in s] for s in src], [[words[i] for i in t] for t in tgt]
    )
    ours = our_log_probs(model, src, tgt)
    for mine, result in zip(ours, theirs):
        assert len(result.log_probs) == len(mine)  # </S> scored too
        np.testing.assert_allclose(result.log_probs, mine, atol=1e-5)


@pytest.mark.slow
def test_greedy_outputs_are_ours_token_for_token(tmp_path):
    model = tiny_model(VOCAB, VOCAB, seed=5, norm="pre")
    translator, tok = converted(tmp_path, model)
    rng = np.random.default_rng(1)
    src = [list(rng.integers(4, VOCAB, size=n)) for n in (4, 8, 1, 6)]
    extra = 5
    ids = np.zeros((len(src), 9), np.int32)
    for i, s in enumerate(src):
        ids[i, : len(s) + 1] = s + [data_load.EOS_ID]
    ours = greedy_search.greedy_loop(model, tf.constant(ids), tf.constant(extra)).numpy()
    result = translator.translate_batch(
        ctranslate.source_tokens(tok, src), beam_size=1, max_decoding_length=9 + extra
    )
    for row, s, r in zip(ours, src, result):
        budget = len(s) + 1 + extra  # our per-sentence limit, </S> included
        theirs = ctranslate.target_ids(tok, r.hypotheses[0])[:budget]
        if len(theirs) < budget:
            theirs.append(data_load.EOS_ID)
        mine = [int(t) for t in row if t != data_load.PAD_ID]
        assert mine == theirs


@pytest.mark.slow
def test_what_ctranslate2_cannot_run_is_refused_in_one_line(tmp_path):
    for kw, words in (
        (
            dict(position="xl"),
            "position=xl has no counterpart in CTranslate2, which takes "
            "the families sinusoid, learned, shaw, t5, rotary",
        ),
        (dict(position="alibi_dir"), "position=alibi_dir has no counterpart"),
        (dict(position="rotary", position_add_absolute=True), "position_add_absolute"),
        (dict(model_type="universal"), "model_type=universal"),
        (dict(qkv_bias=True), "qkv_bias"),
    ):
        model = tiny_model(VOCAB, VOCAB, **kw)
        with pytest.raises(UserError, match=f"^cannot convert to CTranslate2: .*{words}"):
            ctranslate.convert(model, word_tokenizer(), str(tmp_path / "x"))
        assert not os.path.exists(tmp_path / "x")


@pytest.mark.slow
def test_export_writes_a_ctranslate2_model_that_translates_as_translate_py(run, tmp_path):
    """export.py --format ctranslate2 on the suite's trained run (3 epochs): the folder
    holds the weights, the vocabulary and the sentencepiece model; CTranslate2's greedy
    translation of raw sentences, segmented by that model, is translate.py's, and each of
    its beam hypotheses has the log-probability our model gives it; int8 weights load."""
    import sentencepiece as spm

    hp, *_ = run
    out = str(tmp_path / "ct2")
    export.export_ctranslate2(hp.logdir, out, {}, "", "none")
    assert {"model.bin", "bpe.model", "config.json"} <= set(os.listdir(out))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "bpe.model"))
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    sentences = data_load.read_raw(hp, "test")[0][:16]
    pieces = [sp.encode(s, out_type=str) for s in sentences]
    limit = max(len(p) for p in pieces) + 1 + hp.max_len_extra
    translator = ctranslate2.Translator(out, device="cpu")
    result = translator.translate_batch(pieces, beam_size=1, max_decoding_length=limit)
    theirs = []
    for p, r in zip(pieces, result):
        ids = ctranslate.target_ids(tok, r.hypotheses[0])[: len(p) + 1 + hp.max_len_extra]
        theirs.append(tok.decode_tgt(ids))
    assert theirs == translate_lines(model, tok, hp, sentences)
    beams = translator.translate_batch(
        pieces,
        beam_size=3,
        num_hypotheses=3,
        return_scores=True,
        length_penalty=0,  # scores are sums of log-probabilities
        max_decoding_length=limit,
    )
    rows = [
        ([sp.piece_to_id(x) for x in p], ctranslate.target_ids(tok, h), score)
        for p, r in zip(pieces, beams)
        for h, score in zip(r.hypotheses, r.scores)
    ]
    assert len(rows) == 3 * len(sentences)
    ours = our_log_probs(model, [r[0] for r in rows], [r[1] for r in rows])
    # a hypothesis ended by </S> scores it; one cut at the length limit does not
    ours = [sum(x if len(r[1]) < limit else x[:-1]) for x, r in zip(ours, rows)]
    np.testing.assert_allclose(ours, [r[2] for r in rows], rtol=1e-4, atol=1e-3)
    int8 = str(tmp_path / "ct2_int8")
    export.export_ctranslate2(hp.logdir, int8, {}, "", "int8")
    assert ctranslate2.Translator(int8).translate_batch(pieces[:1])[0].hypotheses


def test_export_py_takes_format_and_quantization_and_refuses_a_wrong_one(
    quick_run, tmp_path, monkeypatch, capsys
):
    hp, _ = quick_run
    out = str(tmp_path / "int8")
    argv = ["export.py", "--logdir", hp.logdir, "--export_dir", out]
    monkeypatch.setattr("sys.argv", argv + ["--format", "ctranslate2", "--quantization", "int8"])
    export.main()
    assert "CTranslate2, weights int8" in capsys.readouterr().out
    assert ctranslate2.Translator(out).translate_batch([["▁Die"]])[0].hypotheses
    for extra, words in (
        (["--format", "onnx"], "--format takes savedmodel or ctranslate2, not 'onnx'"),
        (["--quantization", "int8"], "--quantization applies to --format ctranslate2 only"),
        (["--format", "ctranslate2", "--quantization", "int4"], "--quantization must be one of"),
    ):
        monkeypatch.setattr("sys.argv", argv + extra)
        with pytest.raises(UserError, match=words):
            export.main()


def eos_prone(seed: int):
    """A tiny pre-norm model with its own output layer whose </S> bias makes most
    outputs end before their budget (a random model's rarely do)."""
    model = tiny_model(VOCAB, VOCAB, seed=seed, norm="pre", tie_softmax=False)
    bias = model.output_layer.bias
    bias.assign(bias.numpy() + 3.0 * (np.arange(VOCAB) == data_load.EOS_ID))
    return model


@pytest.mark.slow
def test_prefixed_greedy_and_beam_outputs_are_ctranslate2s_target_prefix_outputs(tmp_path):
    """Forced through a prefix, then searching freely: our greedy best outputs are
    CTranslate2's with ``target_prefix``, token for token, for every sentence that ends
    within its budget on both sides. Our beam's (k 3, no length penalty on either side)
    are too, but where our best is the prefix and </S> at once, from a candidate after
    the first: at that step CTranslate2 penalizes </S> in every candidate but the first
    (its decoding.cc, against short outputs without length normalization), where ours
    keeps it among the finished, where it scores higher under the model than
    CTranslate2's best (2 of the 8 sentences here)."""
    model = eos_prone(seed=6)
    ct2, tok = converted(tmp_path, model)
    rng = np.random.default_rng(4)
    src = [list(rng.integers(4, VOCAB, size=n)) for n in (4, 8, 2, 6, 5, 7, 3, 9)]
    prefixes = [[5], [6, 7], [], [8, 9, 10], [11], [12, 4], [13], [14, 15]]
    extra, same = 6, {1: 0, 3: 0}
    for k in (1, 3):
        hp = hparams.apply(
            hparams.Hparams(),
            {"beam_size": k, "length_penalty": 0.0, "max_len_extra": extra, "decode_streams": 1},
        )
        ours = Translator(model, None, hp).translate_ids(src, prefixes=prefixes)
        result = ct2.translate_batch(
            ctranslate.source_tokens(tok, src),
            target_prefix=[tok.tgt_tokens(p) if p else None for p in prefixes],
            beam_size=k,
            length_penalty=0,
            max_decoding_length=max(map(len, src)) + 1 + extra,
            min_decoding_length=0,  # (CTranslate2's default 1 never ends at once; ours may)
        )
        for s, p, mine, r in zip(src, prefixes, ours, result):
            best = [int(t) for t in mine[0][0] if t != data_load.PAD_ID]
            theirs = ctranslate.target_ids(tok, r.hypotheses[0])
            assert best[: len(p)] == p and theirs[: len(p)] == p
            if data_load.EOS_ID not in best or len(theirs) + 1 >= len(s) + 1 + extra:
                continue  # cut at a budget, which the two count differently
            if best == theirs + [data_load.EOS_ID]:
                same[k] += 1
                continue
            assert k > 1 and best == p + [data_load.EOS_ID], (s, p, best, theirs)
            score = Translator(model, None, hp).score_ids([s, s], [best[:-1], theirs])
            assert score[0].sum() > score[1].sum(), (s, p, best, theirs)
    assert same[1] >= 6 and same[3] >= 4, same


@pytest.mark.slow
def test_scores_of_given_translations_are_ctranslate2s_score_batch(tmp_path):
    model = tiny_model(VOCAB, VOCAB, seed=7)
    ct2, tok = converted(tmp_path, model)
    rng = np.random.default_rng(8)
    src = [list(rng.integers(4, VOCAB, size=n)) for n in (5, 9, 2, 6)]
    tgt = [list(rng.integers(4, VOCAB, size=n)) for n in (7, 3, 6, 1)]
    hp = hparams.apply(hparams.Hparams(), {"eval_batch_size": 3, "decode_streams": 2})
    ours = Translator(model, None, hp).score_ids(src, tgt)
    words = list(tok.src_vocab)
    theirs = ct2.score_batch(
        [[words[i] for i in s] for s in src], [[words[i] for i in t] for t in tgt]
    )
    for mine, result in zip(ours, theirs):
        np.testing.assert_allclose(mine, result.log_probs, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("max_len_extra", [10, 2])
def test_the_servers_engine_is_ctranslate2s_own_output_at_each_sentences_budget(
    run, tmp_path, max_len_extra
):
    """The server's CTranslate2 engine, greedy, on the run's 1,000 test and dev sentences
    in batches of 64 in their order (what a full server decodes: one translate_batch call
    a batch, at its largest budget, each sentence ended at its own by the step callback):
    each sentence's tokens, score and runaway flag are CTranslate2's own for that sentence
    decoded beside the sentences of its own budget alone (max_decoding_length = its
    budget), so padding beside longer sources changes nothing but a score's last bits.
    With max_len_extra 2, many sentences run away (reach their budget): their cut
    hypotheses keep their own scores and flags. And the same beside the batch: a
    sentence's output does not depend on its batch mates."""
    from transformer_tf2.serving.ctranslate2_engine import CTranslate2Engine

    hp = run[0]
    out = str(tmp_path / "ct2")
    export.export_ctranslate2(hp.logdir, out, {}, "", "none")
    sentences = data_load.read_raw(hp, "test")[0] + data_load.read_raw(hp, "dev")[0]
    assert len(sentences) == 1000
    settings = {"beam_size": 1, "max_len_extra": max_len_extra}
    engine = CTranslate2Engine(out, hp, settings, workers=2)
    assert (engine.workers, engine.threads) == (2, 1)  # one thread per replica
    got = [h for k in range(0, 1000, 64) for h in engine.translate(sentences[k : k + 64])]
    # CTranslate2's own: the sentences of each budget decoded together at that budget
    ids = engine.tok.encode_src(sentences)
    budgets = [engine._budget(len(row), 0) for row in ids]
    own: list = [None] * 1000
    for budget in sorted(set(budgets)):
        rows = [i for i, b in enumerate(budgets) if b == budget]
        results = engine.translator.translate_batch(
            ctranslate.source_tokens(engine.tok, [ids[i] for i in rows]),
            beam_size=1,
            max_decoding_length=budget,
            min_decoding_length=0,
            length_penalty=0.0,
            return_scores=True,
        )
        for i, r in zip(rows, results):
            text = engine.tok.decode_tgt(ctranslate.target_ids(engine.tok, r.hypotheses[0]))
            own[i] = (text, r.scores[0], len(r.hypotheses[0]) >= budget)
    assert [h[0].text for h in got] == [o[0] for o in own]
    assert [h[0].runaway for h in got] == [o[2] for o in own]
    np.testing.assert_allclose([h[0].score for h in got], [o[1] for o in own], atol=1e-4)
    assert len(set(budgets)) > 5  # batches of many budgets, each sentence cut at its own
    if max_len_extra == 2:
        assert sum(o[2] for o in own) > 100
    # a sentence alone decodes as in its batch
    alone = [engine.translate([sentences[i]])[0][0] for i in range(0, 1000, 97)]
    assert [h.text for h in alone] == [got[i][0].text for i in range(0, 1000, 97)]
