"""Document context in the encoder (Transformer-XL's segment-level recurrence, Dai et al.
2019, 3.2, with a sentence as the segment): recurrence.encode_in_context,
sentence_states and context_of."""

import json
import signal

import numpy as np
import pytest
import tensorflow as tf

import export
import train
from eval import contrastive, evaluate, forced_scores
from helpers import (
    check_beam_scores,
    rand_ids,
    relative_model,
    results_hypotheses,
    tiny,
    translate_lines,
)
from test_budget import lr_at
from test_interrupts import ckpt_tensor, signal_after
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import greedy_search, translator
from transformer_tf2.layers import optimization, positions, recurrence
from transformer_tf2.models import checkpoints

RELATIVE = [name for name, family in positions.REGISTRY.items() if family.relative]


def norms_in_turn(*norms: str) -> list:
    """(family, norm): each relative family once, with ``norms`` in turn."""
    return [(k, norms[i % len(norms)]) for i, k in enumerate(RELATIVE)]


LAYERS = 2  # tiny_model's num_blocks


def document(seed, rows=2, sentences=6, vocab=23):
    """``sentences`` batches (rows, T_k) of ids, one per sentence of ``rows`` documents
    read in parallel: each sentence of its own length (some rows padded), widths vary."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(sentences):
        width = int(rng.integers(3, 7))
        ids = rand_ids(rng, (rows, width), vocab)
        for r in range(rows):
            ids[r, int(rng.integers(1, width + 1)) :] = 0  # at least one real token
        out.append(tf.constant(ids))
    return out


def real(out, ids):
    """The encoder output (N, T, d_model) at the real tokens of ids (PAD positions zeroed:
    nothing reads them, and with alibi_dir a PAD query's right-looking heads see only
    masked keys, whose count the context changes)."""
    return out.numpy() * (ids.numpy() != 0)[:, :, None]


def in_order(model, doc, sentences):
    """Each sentence's encoder output when the document is read in order, every
    sentence's states kept for the next ones (decoding's reuse)."""
    window, outs = [], []
    for ids in doc:
        context = recurrence.context_of(window)
        outs.append(real(model.encode(ids, context=context)[0], ids))
        window = (window + [recurrence.sentence_states(model, ids, context)])[-sentences:]
    return outs


def recomputed(model, doc, k, sentences, depth):
    """Sentence k encoded with only the ``depth`` sentences before it as its context
    (training's recomputation), all-PAD sentences where the document has fewer."""
    before = doc[max(0, k - depth) : k]
    pad = [tf.zeros_like(doc[0][:, :1])] * (depth - len(before))
    return real(recurrence.encode_in_context(model, doc[k], pad + before, sentences)[0], doc[k])


# each family with each norm once across the two tests (their pairs are complementary)
@pytest.mark.slow
@pytest.mark.parametrize("kind,norm", norms_in_turn("pre", "post"))
def test_recomputed_context_equals_reused_states(kind, norm):
    """With the num_blocks * M sentences before it, a sentence's context recomputed from
    scratch (training) gives the states of reading the whole document in order
    (decoding), to 1e-5; with only M it does not (the layer inputs of the earlier
    sentences depend on their own context)."""
    model = relative_model(kind, seed=1, norm=norm)
    doc = document(seed=2)
    for m in (1, 2):
        reused = in_order(model, doc, m)
        for k in range(len(doc)):
            got = recomputed(model, doc, k, m, LAYERS * m)
            np.testing.assert_allclose(got, reused[k], atol=1e-5, err_msg=f"M={m} k={k}")
        short = recomputed(model, doc, len(doc) - 1, 1, 1)
        assert np.abs(short - reused[-1]).max() > 1e-3


@pytest.mark.slow
def test_weighted_layers_take_the_context():
    model = relative_model("shaw", seed=3, model_type="weighted")
    doc = document(seed=4, sentences=4)
    reused = in_order(model, doc, 1)
    np.testing.assert_allclose(recomputed(model, doc, 3, 1, LAYERS), reused[3], atol=1e-5)
    with pytest.raises(ValueError, match="universal has no document memory"):
        recurrence.sentence_states(relative_model("shaw", model_type="universal"), doc[0])


def test_context_changes_the_output_and_empty_context_is_none():
    """The earlier sentence is attended to; a row whose earlier sentences are all PAD (the
    start of its document) is encoded as without context, whatever the other rows hold."""
    model = relative_model("t5", seed=5)
    src, before = document(seed=6, sentences=2)
    alone = model.encode(src)[0].numpy()
    with_context = recurrence.encode_in_context(model, src, [before], 1)[0].numpy()
    assert np.abs(with_context - alone).max() > 1e-2
    reset = before.numpy().copy()
    reset[0] = 0  # row 0 starts its document here
    mixed = recurrence.encode_in_context(model, src, [tf.constant(reset)], 1)[0].numpy()
    np.testing.assert_allclose(mixed[0], alone[0], atol=1e-6)
    np.testing.assert_allclose(mixed[1], with_context[1], atol=1e-6)
    np.testing.assert_array_equal(
        recurrence.encode_in_context(model, src, [before], 0)[0].numpy(), alone
    )


def test_context_is_left_aligned_whatever_the_padding():
    """The earlier sentences' tokens are moved to the right end of the context in order,
    so that padding a context sentence wider changes nothing."""
    model = relative_model("xl", seed=7)
    a = tf.constant([[5, 6, 0, 0], [7, 8, 9, 10]])
    b = tf.constant([[11, 0], [12, 13]])
    window = [recurrence.sentence_states(model, a), recurrence.sentence_states(model, b)]
    context = recurrence.context_of(window)
    states, mask = context[0]
    assert mask.shape == (2, 1, 1, 6)
    np.testing.assert_array_equal(
        mask[:, 0, 0].numpy(), [[False, False, False, True, True, True], [True] * 6]
    )
    embedded = [window[0][0][0].numpy(), window[1][0][0].numpy()]  # layer 0: the embeddings
    np.testing.assert_array_equal(
        states[0, 3:].numpy(), np.concatenate([embedded[0][0, :2], embedded[1][0, :1]])
    )
    np.testing.assert_array_equal(
        states[1].numpy(), np.concatenate([embedded[0][1], embedded[1][1]])
    )
    src = tf.constant([[14, 15, 16], [17, 18, 0]])
    narrow = recurrence.encode_in_context(model, src, [a, b], 2)[0].numpy()
    wide = recurrence.encode_in_context(
        model, src, [tf.pad(a, [[0, 0], [0, 3]]), tf.pad(b, [[0, 0], [0, 5]])], 2
    )[0].numpy()
    np.testing.assert_allclose(wide, narrow, atol=1e-6)


def test_no_gradient_reaches_the_context():
    """The context is stop-gradient (Dai et al. 3.2): the embedding rows of tokens that
    only the earlier sentence holds get no gradient, although the output depends on them;
    the weights still train through the current sentence."""
    model = relative_model("rotary", seed=8, share_embeddings=True)
    src = tf.constant([[5, 6, 7, 0], [8, 9, 10, 11]])
    before = tf.constant([[20, 21, 0], [20, 22, 21]])  # tokens 20..22 are only here
    with tf.GradientTape() as tape:
        out = recurrence.encode_in_context(model, src, [before], 1, training=False)[0]
        loss = tf.reduce_sum(out**2)
    grads = dict(
        zip(
            [v.path for v in model.trainable_variables],
            tape.gradient(loss, model.trainable_variables),
        )
    )
    emb = tf.convert_to_tensor(grads[model.src_embedding.embeddings.path])
    assert np.abs(emb.numpy()[20:23]).max() == 0.0
    assert np.abs(emb.numpy()[5:12]).max() > 0.0
    other = tf.constant([[20, 20, 0], [22, 22, 22]])
    moved = recurrence.encode_in_context(model, src, [other], 1)[0]
    assert np.abs((moved - out).numpy()).max() > 1e-3


# ---------------------------------------------------------------------------------------
# the memory_sentences setting, and decoding documents with the states reused
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_memory_needs_a_relative_family_and_layers_that_take_it():
    """memory_sentences is a model key whose default 0 is the sentence model; a memory
    model refuses, in one line each, an absolute position, the Universal Transformer
    and the TF1 mask defect."""
    assert "memory_sentences" in hparams.MODEL_KEYS and hparams.Hparams().memory_sentences == 0
    base = hparams.Hparams()
    assert hparams.apply(base, {"memory_sentences": 2, "position": "xl"}).memory_sentences == 2
    for extra, match in (
        ({"position": "sinusoid"}, "position=sinusoid is absolute: pick one of shaw, t5, xl"),
        ({"position": "xl", "model_type": "universal"}, "universal has no document memory"),
        ({"position": "xl", "key_mask_defect": True}, "key_mask_defect=true attends to padding"),
    ):
        with pytest.raises(hparams.UserError, match=match):
            hparams.apply(base, {"memory_sentences": 1, **extra})
    with pytest.raises(ValueError, match="is absolute"):  # a model built from keywords too
        relative_model("xl").__class__(23, 23, memory_sentences=1, position="sinusoid")


def corpus_of(docs_sentences: list[list[np.ndarray]]) -> data_load.Corpus:
    """A Corpus of the given documents' sources (the targets: one token each)."""
    flat = [s for doc in docs_sentences for s in doc]
    doc = np.array([d for d, sents in enumerate(docs_sentences) for _ in sents], np.int32)
    src_off = np.cumsum([0] + [len(s) for s in flat])
    ones = np.ones(len(flat), np.int32)
    return data_load.Corpus(np.concatenate(flat), src_off, ones, np.arange(len(flat) + 1), doc)


def three_documents(depth: int, extra: int = 4):
    """Three documents of 4, 1 and 3 random sentences for the lanes tests: (corpus, the
    source ids, hparams of 2 lanes and ``extra`` tokens of budget, the sources (N, T1),
    their context of ``depth`` sentences (data_load.context_batch), each sentence's
    decoding budget)."""
    rng = np.random.default_rng(10)
    docs = [[rand_ids(rng, (int(rng.integers(2, 7)),), 23) for _ in range(n)] for n in (4, 1, 3)]
    corpus = corpus_of(docs)
    src_ids = [corpus.src(i) for i in range(len(corpus))]
    hp = hparams.apply(hparams.Hparams(), {"eval_batch_size": 2, "max_len_extra": extra})
    idx = np.arange(len(corpus))
    src = tf.constant(data_load.build_batch(corpus, idx)[0])
    context = tf.constant(data_load.context_batch(corpus, idx, depth))
    limits = (src.numpy() != 0).sum(1) + extra
    return corpus, src_ids, hp, src, context, limits


# every family once, the norms in turn (the encoder's states are compared under both
# norms for every family above; what this adds, the lanes and the caches, is the same)
@pytest.mark.slow
@pytest.mark.parametrize("kind,norm", norms_in_turn("post", "pre"))
def test_documents_decode_in_lanes_as_recomputed(kind, norm):
    """Documents decoded as lanes (2 at a time, so a lane takes a new document: its
    memory starts empty), each sentence with the cached decoder over the encoder states
    its lane kept (reuse; greedy: in pieces of 2 sentences, so that lanes also start
    inside a document, from recomputed states), equal the full recomputation of
    training: each sentence
    encoded under its num_blocks x M sentences before (data_load.context_batch, empty
    across document boundaries), greedy by the naive full-pass decoder, and every beam
    hypothesis re-scored by the teacher-forced pass with that context, to 1e-4."""
    m = 1
    model = relative_model(kind, seed=9, norm=norm, memory_sentences=m)
    corpus, src_ids, hp, src, context, limits = three_documents(LAYERS * m)
    encoded = recurrence.encode_in_context(model, src, context, m)
    pieces = translator.Translator(model, None, hp, chunk=2)
    greedy = pieces.translate_ids(src_ids, docs=corpus.docs)
    naive = greedy_search.naive_greedy(model, src, int(limits.max()), limits, encoded=encoded)
    eos = data_load.EOS_ID
    for i, (out, ref) in enumerate(zip(greedy, naive)):
        row = list(out[0][0])
        n = row.index(eos) + 1 if eos in row else len(row)
        np.testing.assert_array_equal(row[:n], ref[:n], err_msg=f"sentence {i}")
    beam_hp = hparams.apply(hp, {"beam_size": 3})
    beams = translator.Translator(model, None, beam_hp).translate_ids(src_ids, docs=corpus.docs)
    ids, scores = [b[0] for b in beams], [b[1] for b in beams]
    check_beam_scores(model, src, ids, scores, limits, context)


@pytest.mark.slow
def test_memory_run_trains_evaluates_and_resumes_exactly(
    demo_prepro, tmp_path, capsys, monkeypatch
):
    """A memory model (xl, M = 1 and a decoder memory M_t = 1) on the demo's talks,
    trained for one epoch on the wsd schedule: each training pair carries the sentence
    before it and its target (num_blocks 1), and a run stopped by
    SIGTERM in its cooldown and resumed to the end of the epoch (where dev loss and dev
    BLEU read the dev talks in order) ends with the weights, Adam slots and budget
    fraction of the run never stopped, with dropout; its last update ran at
    peak * (1 - sqrt((used - 0.8) / 0.2)). The trained model then translates blank-line
    documents (translate.py) as the exported document signature translates each
    document, eval.py reads --test_src files the same way, and eval.py --contrastive
    scores a set."""
    base = dict(
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        position="xl",
        memory_sentences=1,
        target_memory_sentences=1,
        dropout_rate=0.3,
        lr_schedule="wsd",
        warmup_steps=5,
    )
    hp = tiny(str(tmp_path / "straight"), **base)
    epoch = len(data_load.TrainData(hp).batches(0))
    straight = train.train(hparams.apply(hp, {"max_steps": epoch}))
    out = capsys.readouterr().out
    docs = data_load.load_corpus(hp, "train").documents()
    assert (
        f"in {docs} documents; each pair carries the 1 sentence before it and the targets "
        "of the last 1" in out
    )
    assert 1 < docs < 300
    assert [h["dev_bleu"] is not None for h in straight["history"]] == [True]
    half = tiny(str(tmp_path / "resumed"), **base, max_steps=epoch)
    stop = int(0.8 * epoch) + 2  # its fraction (stop - 1) / epoch > 0.8: in the cooldown
    signal_after(monkeypatch, stop, signal.SIGTERM)
    stopped = train.train(half)
    assert stopped["step"] == stop and stopped["signal"] == signal.SIGTERM
    monkeypatch.undo()
    resumed = train.train(half)
    assert resumed["step"] == straight["step"] == epoch
    a, b = (tf.train.load_checkpoint(r["checkpoint"]) for r in (straight, resumed))
    names = [n for n in a.get_variable_to_shape_map() if n.startswith(("model/", "optimizer/"))]
    assert len(names) > 90
    for name in names:
        np.testing.assert_allclose(a.get_tensor(name), b.get_tensor(name), atol=1e-6, err_msg=name)
    used = ckpt_tensor(resumed["checkpoint"], "budget_used")
    np.testing.assert_allclose(used, (epoch - 1) / epoch, rtol=1e-6)
    assert ckpt_tensor(straight["checkpoint"], "budget_used") == used
    schedule = optimization.TransformerSchedule("wsd", warmup_steps=5, lr=half.lr)
    last = lr_at(schedule, epoch - 1, used) / half.lr
    np.testing.assert_allclose(last, 1 - np.sqrt((used - 0.8) / 0.2), rtol=1e-5)
    # translate.py: a blank line ends a document and stays; export: one document
    hp2, tok, model, _ = checkpoints.load_run(half.logdir, {})
    docs = [
        ["Die Frau liest ein Buch.", "Der Hund schläft im Garten.", "Er ist müde."],
        ["Sie lacht."],
    ]
    lines = docs[0] + [""] + docs[1]
    got = translate_lines(model, tok, hp2, lines)
    assert got[3] == "" and all(got[:3]) and got[4]
    module = export.ServingModule(model, tok, hp2)
    for doc, want in ((docs[0], got[:3]), (docs[1], got[4:])):
        out = module.translate_document(tf.constant(doc))["translations"].numpy()
        assert [t.decode() for t in out] == want
    src, ref = tmp_path / "test.de", tmp_path / "test.en"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ref.write_text("\n".join(got) + "\n", encoding="utf-8")
    result = evaluate(half.logdir, {}, "", str(src), str(ref))
    assert results_hypotheses(result["results"]) == got  # each line decoded as translate.py did
    assert result["chrf"] == pytest.approx(100.0)  # (BLEU needs 4-grams the model may not make)
    # eval.py --contrastive: each item's contrastive translation is the next one's
    # reference; the accuracy is the share of forced scores that prefer the reference
    items = [
        {"context": docs[0][:k], "source": docs[0][k], "reference": got[k], "contrastive": ""}
        for k in range(3)
    ]
    for k, it in enumerate(items):
        it["contrastive"] = got[(k + 1) % 3]
    path = tmp_path / "contrastive.jsonl"
    path.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    figures = contrastive(half.logdir, {"results_dir": str(tmp_path)}, str(path))
    candidates = [[it[key] for it in items] for key in ("reference", "contrastive")]
    # the decoder's memory reads the context's own translations, as eval.py gives them
    right, wrong = forced_scores(model, tok, items, candidates, 2, [got[:k] for k in range(3)])
    assert figures["accuracy"] == pytest.approx(np.mean(right > wrong))
    assert figures["chrf"] == pytest.approx(100.0)  # the sources in context, as above
    assert json.loads(open(figures["results"]).read())["items"] == 3
