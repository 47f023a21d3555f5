"""Tests for data_load: token ids, reading text files, tokenizer loading, encoding, length
filtering, batching, tf.data."""

import gzip
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import prepro
from transformer_tf2.config import hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.utils import files

PAD, UNK, BOS, EOS = 0, 1, 2, 3


# ---------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------
NOUNS = [
    ("Vogel", "bird"),
    ("Baum", "tree"),
    ("Fluss", "river"),
    ("Berg", "mountain"),
    ("Wald", "forest"),
    ("Garten", "garden"),
]
ADJS = [("alte", "old"), ("grüne", "green"), ("ruhige", "quiet"), ("schöne", "beautiful")]
TAILS = [
    ("", ""),
    (" im Süden", " in the south"),
    (" hinter dem kleinen Dorf am Meer", " behind the small village by the sea"),
    (
        " neben der Brücke, die über den breiten Fluss führt,",
        " next to the bridge that crosses the wide river,",
    ),
]


def make_pairs():
    """96 pairs of four length classes (varied lengths for the batching tests)."""
    pairs = []
    for de_n, en_n in NOUNS:
        for de_a, en_a in ADJS:
            for de_t, en_t in TAILS:
                pairs.append(
                    (
                        f"Der {de_a} {de_n} steht{de_t} dort.",
                        f"The {en_a} {en_n} stands there{en_t}.",
                    )
                )
    return pairs


def write_parallel(data_dir, train, dev=None, test=None):
    os.makedirs(data_dir, exist_ok=True)
    dev = dev or train[:5]
    test = test or train[5:9]
    for stem, split in (("train", train), ("val", dev), ("test_2016_flickr", test)):
        for k, lang in enumerate(("de", "en")):
            with open(
                os.path.join(data_dir, f"{stem}.{lang}"), "w", encoding="utf-8", newline="\n"
            ) as f:
                f.write("".join(p[k] + "\n" for p in split))


def word_hp(tmp, **kw):
    values = dict(
        corpus="parallel",
        data_dir=str(tmp / "data"),
        prepro_dir=str(tmp / "prepro"),
        vocab_type="word",
        min_cnt=1,
        maxlen1=100,
        maxlen2=100,
        tokens_per_batch=64,
        seed=5,
    )
    values.update(kw)
    return hparams.apply(hparams.Hparams(), values)


@pytest.fixture(scope="module")
def prepped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dl")
    write_parallel(str(tmp / "data"), make_pairs())
    hp = word_hp(tmp)
    prepro.preprocess(hp)
    return hp


def make_corpus(src, tgt):
    """A Corpus from lists of id lists (no specials)."""
    s_ids, s_off = data_load._flatten(src)
    t_ids, t_off = data_load._flatten(tgt)
    return data_load.Corpus(s_ids, s_off, t_ids, t_off)


def synthetic_lengths(n=3000, seed=0):
    """Source/target lengths (specials included) like a translation corpus."""
    rng = np.random.default_rng(seed)
    src = rng.integers(2, 61, size=n)
    tgt = np.clip(src + rng.integers(-4, 5, size=n), 2, 64)
    return src.astype(np.int64), tgt.astype(np.int64)


def synthetic_corpus(src_lens, tgt_lens, seed=0):
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, 50, size=int(n) - 1).tolist() for n in src_lens]
    tgt = [rng.integers(4, 50, size=int(n) - 1).tolist() for n in tgt_lens]
    return make_corpus(src, tgt)


def hp_with(**kw):
    return hparams.apply(hparams.Hparams(), kw)


# ---------------------------------------------------------------------------------------
# token ids and reading text files
# ---------------------------------------------------------------------------------------
def test_reserved_token_ids():
    assert data_load.RESERVED == ("<PAD>", "<UNK>", "<S>", "</S>")
    assert (
        (data_load.PAD_ID, data_load.UNK_ID, data_load.BOS_ID, data_load.EOS_ID)
        == (PAD, UNK, BOS, EOS)
        == (0, 1, 2, 3)
    )


def test_read_lines_strips_and_keeps_empty_lines(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes("eins \r\n\r\n  drei\r\nvier".encode())  # CRLF, no final newline
    assert files.read_lines(str(p)) == ["eins", "", "drei", "vier"]
    p.write_bytes(b"")
    assert files.read_lines(str(p)) == []


def test_read_gzipped_text(tmp_path):
    p = tmp_path / "train.de.gz"
    with gzip.open(p, "wb") as f:
        f.write("Grüße aus Köln\n  Straße  \n\nEnde\n".encode())
    assert files.read_lines(str(p)) == ["Grüße aus Köln", "Straße", "", "Ende"]
    assert files.read_text(str(p)) == "Grüße aus Köln\n  Straße  \n\nEnde\n"


def test_truncated_gzip_is_a_user_error(tmp_path):
    good = gzip.compress(("Ein Satz.\n" * 200).encode())
    p = tmp_path / "broken.de.gz"
    p.write_bytes(good[: len(good) // 2])
    with pytest.raises(UserError, match=re.escape(str(p)) + ".*could not be read"):
        files.read_lines(str(p))


@pytest.mark.parametrize("reader", [files.read_text, files.read_lines])
def test_missing_file_names_path(tmp_path, reader):
    p = tmp_path / "nowhere" / "train.de"
    with pytest.raises(UserError) as e:
        reader(str(p))
    assert str(p) in str(e.value) and "not found" in str(e.value)


# ---------------------------------------------------------------------------------------
# load_tokenizer
# ---------------------------------------------------------------------------------------
def test_load_tokenizer_ok(prepped):
    tok = data_load.load_tokenizer(prepped)
    assert tok.kind == "word"
    assert list(tok.src_vocab)[:4] == list(data_load.RESERVED)
    assert tok.tgt_words[:4] == list(data_load.RESERVED)
    assert tok.src_vocab_size == len(tok.src_vocab) > 20
    ids = tok.encode_src(["Der alte Vogel steht, 3 Zebras dort!"])[0]
    assert ids[:3] == [tok.src_vocab["Der"], tok.src_vocab["alte"], tok.src_vocab["Vogel"]]
    assert ids[4] == UNK and len(ids) == 6
    assert tok.src_tokens(ids) == ["Der", "alte", "Vogel", "steht", "<UNK>", "dort"]
    en = tok.encode_tgt(["The old bird stands there."])[0]
    assert tok.decode_tgt([BOS] + en + [EOS, 7, 7]) == "The old bird stands there"
    assert tok.decode_tgt([PAD] + en[:2] + [10**6]) == "The old <UNK>"
    assert tok.tgt_tokens(en[:2]) == ["The", "old"]


def test_load_tokenizer_other_preset_says_rerun_prepro(prepped):
    other = hparams.apply(hparams.preset("multi30k"), {"prepro_dir": prepped.prepro_dir})
    with pytest.raises(UserError) as e:
        data_load.load_tokenizer(other)
    msg = str(e.value)
    assert "rerun prepro" in msg and prepped.prepro_dir in msg
    assert "vocab_type='word' (you asked for 'bpe')" in msg
    assert "vocab_size=1000 (you asked for 8000)" in msg
    with pytest.raises(UserError, match=r"min_cnt=1 \(you asked for 20\).*rerun prepro"):
        data_load.load_tokenizer(hparams.apply(prepped, {"min_cnt": 20}))
    # a model-only difference is fine
    model_only = hparams.apply(prepped, {"d_model": 64, "num_heads": 2})
    assert data_load.load_tokenizer(model_only).kind == "word"


def test_load_tokenizer_missing_files(tmp_path):
    hp = word_hp(tmp_path)
    with pytest.raises(UserError, match="prepro"):  # no hparams.json
        data_load.load_tokenizer(hp)
    hparams.save(hp, os.path.join(hp.prepro_dir, "hparams.json"))
    with pytest.raises(UserError) as e:
        data_load.load_tokenizer(hp)
    assert os.path.join(hp.prepro_dir, "vocab.de.tsv") in str(e.value)
    assert "prepro.py" in str(e.value)
    bpe = hparams.apply(hp, {"vocab_type": "bpe"})
    hparams.save(bpe, os.path.join(hp.prepro_dir, "hparams.json"))
    with pytest.raises(UserError, match="bpe.model not found"):
        data_load.load_tokenizer(bpe)
    with pytest.raises(UserError, match="train.npz not found"):
        data_load.load_corpus(hp, "train")
    with pytest.raises(UserError, match="dev.src not found"):
        data_load.read_raw(hp, "dev")


def test_malformed_vocab_files(tmp_path):
    hp = word_hp(tmp_path)
    hparams.save(hp, os.path.join(hp.prepro_dir, "hparams.json"))
    de = os.path.join(hp.prepro_dir, "vocab.de.tsv")
    en = os.path.join(hp.prepro_dir, "vocab.en.tsv")
    good = "".join(f"{t}\t1000000000\n" for t in data_load.RESERVED)
    with open(en, "w", encoding="utf-8") as f:
        f.write(good + "the\t5\n")
    with open(de, "w", encoding="utf-8") as f:
        f.write(good + "der\t5\nkaputt\n")
    with pytest.raises(UserError, match=f"{de}:6: expected 'token<TAB>count'"):
        data_load.load_tokenizer(hp)
    with open(de, "w", encoding="utf-8") as f:
        f.write("der\t5\n" + good)
    with pytest.raises(UserError, match="first four tokens must be <PAD> <UNK> <S> </S>"):
        data_load.load_tokenizer(hp)
    with open(de, "w", encoding="utf-8") as f:
        f.write(good + "der\t5\n")
    # well-formed files, but prepro.py never finished (no stamp.json): refused
    with pytest.raises(UserError, match="incomplete .* rerun prepro.py"):
        data_load.load_tokenizer(hp)
    with open(os.path.join(hp.prepro_dir, "stamp.json"), "w") as f:
        f.write("{}")
    tok = data_load.load_tokenizer(hp)
    assert tok.src_vocab == {"<PAD>": 0, "<UNK>": 1, "<S>": 2, "</S>": 3, "der": 4}


# ---------------------------------------------------------------------------------------
# Encoding and batches
# ---------------------------------------------------------------------------------------
def test_corpus_lengths_include_specials():
    c = make_corpus([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    assert len(c) == 2
    assert c.src(0).tolist() == [5, 6, 7] and c.tgt(1).tolist() == [11, 12, 13]
    assert c.src_lens.tolist() == [4, 2] and c.tgt_lens.tolist() == [3, 4]


def test_build_batch_layout():
    c = make_corpus([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    src, dec, lab = data_load.build_batch(c, np.array([0, 1]))
    assert src.tolist() == [[5, 6, 7, EOS], [8, EOS, PAD, PAD]]
    assert dec.tolist() == [[BOS, 9, 10, PAD], [BOS, 11, 12, 13]]
    assert lab.tolist() == [[9, 10, EOS, PAD], [11, 12, 13, EOS]]
    assert src.dtype == dec.dtype == lab.dtype == np.int32
    src, dec, lab = data_load.build_batch(c, np.array([1]), multiple=8)
    assert src.shape == (1, 8) and dec.shape == lab.shape == (1, 8)
    assert src[0].tolist() == [8, EOS] + [PAD] * 6
    assert lab[0].tolist() == [11, 12, 13, EOS] + [PAD] * 4


def test_build_batch_on_prepro_output(prepped):
    corpus = data_load.load_corpus(prepped, "train")
    idx = np.array([3, 0, 50, 95])
    src, dec, lab = data_load.build_batch(corpus, idx)
    assert src.shape == (4, corpus.src_lens[idx].max())
    assert dec.shape == lab.shape == (4, corpus.tgt_lens[idx].max())
    for r, i in enumerate(idx):
        ls, lt = corpus.src_lens[i], corpus.tgt_lens[i]
        assert src[r, ls - 1] == EOS and (src[r, ls:] == PAD).all()
        assert (src[r, : ls - 1] == corpus.src(i)).all()
        assert dec[r, 0] == BOS and (dec[r, lt:] == PAD).all()
        assert (lab[r, : lt - 1] == dec[r, 1:lt]).all()  # labels = decoder input shifted left
        assert lab[r, lt - 1] == EOS and (lab[r, lt:] == PAD).all()
        assert EOS not in src[r, : ls - 1] and BOS not in dec[r, 1:]


def test_keep_by_length(capsys):
    # src lens (</S> incl.): 4 2 7 3 6 2 ; tgt lens: 3 4 2 8 5 2
    c = make_corpus(
        [[5] * 3, [5], [5] * 6, [5] * 2, [5] * 5, [5]],
        [[6] * 2, [6] * 3, [6], [6] * 7, [6] * 4, [6]],
    )
    hp = hp_with(maxlen1=6, maxlen2=5)
    keep = data_load.keep_by_length(c, hp, "train")
    assert keep.tolist() == [0, 1, 4, 5]
    out = capsys.readouterr().out
    assert out == ("data: dropped 2 of 6 train pairs longer than maxlen1=6 / maxlen2=5\n")
    assert data_load.keep_by_length(c, hp_with(maxlen1=7, maxlen2=8)).tolist() == list(range(6))
    assert capsys.readouterr().out == ""  # nothing dropped, nothing printed
    with pytest.raises(UserError, match="no dev pair .* fits maxlen1=1"):
        data_load.keep_by_length(c, hp_with(maxlen1=1, maxlen2=100), "dev")


def test_legacy_maxlen_filter_on_prepro_output(prepped, capsys):
    hp = hparams.apply(prepped, {"maxlen1": 10, "maxlen2": 10})
    corpus = data_load.load_corpus(hp, "train")
    keep = data_load.keep_by_length(corpus, hp)
    want = [i for i in range(len(corpus)) if corpus.src_lens[i] <= 10 and corpus.tgt_lens[i] <= 10]
    assert keep.tolist() == want and 0 < len(want) < len(corpus)
    assert f"dropped {len(corpus) - len(want)} of {len(corpus)} train" in capsys.readouterr().out


def _widths(batch, sl, tl, m):
    return data_load.round_up(int(max(sl[batch].max(), tl[batch].max())), m)


@pytest.mark.parametrize("multiple", [1, 8])
def test_make_batches_token_budget(multiple):
    sl, tl = synthetic_lengths()
    sl[[10, 20]] = [300, 5]  # longer than the budget on their own
    tl[[10, 20]] = [9, 400]
    budget = 256
    hp = hp_with(tokens_per_batch=budget, pad_multiple=multiple, seed=3)
    plan = data_load.make_batches(sl, tl, hp, epoch=0)
    singles = 0
    for b in plan:
        cost = len(b) * _widths(b, sl, tl, multiple)
        if cost > budget:
            assert len(b) == 1 and b[0] in (10, 20)
            singles += 1
    assert singles == 2
    # every index exactly once
    flat = np.concatenate(plan)
    assert len(flat) == len(sl) and np.array_equal(np.sort(flat), np.arange(len(sl)))
    # greedy cut: batches are well filled
    fill = np.mean([len(b) * _widths(b, sl, tl, multiple) / budget for b in plan if len(b) > 1])
    assert fill > 0.8


def test_make_batches_real_shapes_within_budget():
    sl, tl = synthetic_lengths(800, seed=1)
    corpus = synthetic_corpus(sl, tl)
    for m in (1, 8):
        hp = hp_with(tokens_per_batch=300, pad_multiple=m, seed=9)
        for b in data_load.make_batches(corpus.src_lens, corpus.tgt_lens, hp, epoch=2):
            src, dec, lab = data_load.build_batch(corpus, b, m)
            assert src.shape[0] == dec.shape[0] == len(b)
            assert len(b) * max(src.shape[1], dec.shape[1]) <= 300
            assert src.shape[1] % m == 0 and dec.shape[1] % m == 0
            assert src.shape[1] == data_load.round_up(int(corpus.src_lens[b].max()), m)


def test_make_batches_deterministic_per_seed_and_epoch():
    sl, tl = synthetic_lengths(1000)
    hp = hp_with(tokens_per_batch=200, seed=11)
    a = data_load.make_batches(sl, tl, hp, epoch=4)
    b = data_load.make_batches(sl, tl, hp, epoch=4)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    c = data_load.make_batches(sl, tl, hp, epoch=5)
    assert not np.array_equal(np.concatenate(a), np.concatenate(c))
    assert [len(x) for x in a] != [len(x) for x in c]  # batch order reshuffled too
    d = data_load.make_batches(sl, tl, hparams.apply(hp, {"seed": 12}), epoch=4)
    assert not np.array_equal(np.concatenate(a), np.concatenate(d))
    for plan in (c, d):
        assert np.array_equal(np.sort(np.concatenate(plan)), np.arange(1000))


def test_make_batches_fixed_batch_size():
    sl, tl = synthetic_lengths(1000)
    hp = hp_with(batch_size=32, tokens_per_batch=10, seed=2)  # the budget is ignored
    plan = data_load.make_batches(sl, tl, hp, epoch=0)
    sizes = sorted(len(b) for b in plan)
    assert sizes == [1000 % 32] + [32] * (1000 // 32)
    assert np.array_equal(np.sort(np.concatenate(plan)), np.arange(1000))
    # legacy preset: 32 sentences per batch
    legacy = hparams.preset("iwslt2016_legacy")
    assert {len(b) for b in data_load.make_batches(sl[:64], tl[:64], legacy, 0)} == {32}


def test_make_batches_sorted_by_length():
    sl, tl = synthetic_lengths(2000, seed=4)
    hp = hp_with(tokens_per_batch=512, seed=0)
    plan = data_load.make_batches(sl, tl, hp, epoch=0)
    # within a batch target lengths span a narrow range
    spans = [int(tl[b].max() - tl[b].min()) for b in plan]
    assert np.mean(spans) <= 2


def test_padding_fraction_sorted_vs_random():
    sl, tl = synthetic_lengths(3000, seed=6)
    corpus = synthetic_corpus(sl, tl, seed=6)
    hp = hp_with(tokens_per_batch=512, seed=6)
    plan = data_load.make_batches(corpus.src_lens, corpus.tgt_lens, hp, epoch=0)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(corpus))
    cuts = np.cumsum([len(b) for b in plan])[:-1]
    random_plan = np.split(perm, cuts)
    s_sorted, t_sorted = data_load.padding_fraction(plan, corpus)
    s_rand, t_rand = data_load.padding_fraction(random_plan, corpus)
    assert t_sorted < 0.1 and s_sorted < 0.2
    assert t_rand > 0.3 and t_sorted < t_rand / 5 and s_sorted < s_rand
    # the reported fraction matches the real padded arrays
    pads = total = 0
    for b in plan:
        _, dec, _ = data_load.build_batch(corpus, b)
        pads += int((dec == PAD).sum())
        total += dec.size
    assert t_sorted == pytest.approx(pads / total)
    # pad_multiple adds padding
    assert data_load.padding_fraction(plan, corpus, 8)[1] > t_sorted


def test_train_data_batches(prepped):
    hp = hparams.apply(prepped, {"maxlen1": 12, "maxlen2": 12})
    td = data_load.TrainData(hp)
    plan = td.batches(0)
    flat = np.concatenate(plan)
    assert np.array_equal(np.sort(flat), td.keep)
    assert len(td.keep) < len(td.corpus)
    for b in plan:
        assert (td.corpus.src_lens[b] <= 12).all() and (td.corpus.tgt_lens[b] <= 12).all()
        if len(b) > 1:
            assert len(b) * _widths(b, td.corpus.src_lens, td.corpus.tgt_lens, 1) <= 64


def test_train_data_budget_is_per_replica(prepped):
    """With 2 replicas a global batch holds up to 2 budgets; dealt out by rows, each
    replica gets about one budget."""
    hp = hparams.apply(prepped, {"tokens_per_batch": 96})
    one, two = data_load.TrainData(hp).batches(0), data_load.TrainData(hp, replicas=2).batches(0)
    c = data_load.TrainData(hp).corpus
    widths = [len(b) * _widths(b, c.src_lens, c.tgt_lens, 1) for b in two if len(b) > 1]
    assert max(widths) <= 192 and max(widths) > 96
    assert len(two) < 0.6 * len(one)
    assert sorted(np.concatenate(one)) == sorted(np.concatenate(two))
    for b in two:
        if len(b) > 1:  # rows r, r+2, ... go to replica r: each gets at most one budget
            w = _widths(b, c.src_lens, c.tgt_lens, 1)
            for r in range(2):  # (an odd row count gives one replica one row more)
                assert len(b[r::2]) * w <= 96 + w


def test_train_dataset_matches_plan(prepped):
    hp = hparams.apply(prepped, {"pad_multiple": 8, "tokens_per_batch": 96})
    td = data_load.TrainData(hp)
    plan = td.batches(1)
    assert len(plan) > 4
    got = list(td.dataset(1).as_numpy_iterator())
    assert len(got) == len(plan)
    rows = []
    for (src, dec, lab), idx in zip(got, plan):
        assert src.dtype == dec.dtype == lab.dtype == np.int32
        want = data_load.build_batch(td.corpus, idx, 8)
        for x, y in zip((src, dec, lab), want):
            assert np.array_equal(x, y)
        assert src.shape[1] % 8 == 0 and dec.shape[1] % 8 == 0
        rows.append(len(src))
    assert sum(rows) == len(td.keep) == len(td.corpus)
    skipped = list(td.dataset(1, skip=3).as_numpy_iterator())
    assert len(skipped) == len(plan) - 3
    for (src, dec, lab), (src2, dec2, lab2) in zip(skipped, got[3:]):
        assert np.array_equal(src, src2) and np.array_equal(lab, lab2)
    spec = td.dataset(0).element_spec
    assert all(s.dtype == tf.int32 and s.shape.rank == 2 for s in spec)
    # a fixed prefetch buffer, no autotuning: its model thread held finished epochs open
    assert td.dataset(0).options().autotune.enabled is False


def test_xla_batches_have_one_shape_per_width(prepped):
    """jit_compile: source and target share the batch width and rows are padded to
    budget // width, so the number of shapes is bounded by the number of widths."""
    hp = hparams.apply(prepped, {"pad_multiple": 8, "tokens_per_batch": 96, "jit_compile": True})
    td = data_load.TrainData(hp)
    plan = td.batches(0)
    shapes = set()
    for (src, dec, lab), idx in zip(td.dataset(0).as_numpy_iterator(), plan):
        width = src.shape[1]
        assert dec.shape == lab.shape == src.shape and width % 8 == 0
        assert len(src) == max(96 // width, len(idx))
        small = data_load.build_batch(td.corpus, idx, 8)  # the dynamic-shape batch
        for big, x in zip((src, dec, lab), small):
            assert np.array_equal(big[: x.shape[0], : x.shape[1]], x)
            assert not big[x.shape[0] :].any() and not big[:, x.shape[1] :].any()
        shapes.add(src.shape)
    widths = {s[1] for s in shapes}
    assert len(shapes) == len(widths) <= -(-max(hp.maxlen1, hp.maxlen2) // 8) + 1
    assert len(plan) > 3 * len(shapes)


def test_eval_batches():
    rng = np.random.default_rng(3)
    src = [rng.integers(4, 40, size=n) for n in (3, 12, 0, 7, 25, 1, 9, 9, 30, 2, 5)]
    seen = []
    widths = []
    for idx, batch in data_load.eval_batches(src, batch_size=4, max_src_len=8):
        assert batch.dtype == np.int32 and len(idx) == len(batch) <= 4
        for row, i in zip(batch, idx):
            body = list(src[i][:7])
            assert row[: len(body) + 1].tolist() == body + [EOS]
            assert (row[len(body) + 1 :] == PAD).all()
        widths.append(batch.shape[1])
        seen.extend(idx.tolist())
    assert sorted(seen) == list(range(len(src)))
    assert widths == sorted(widths) and max(widths) == 8  # truncated to max_src_len
    # no truncation when everything fits
    out = list(data_load.eval_batches(src, batch_size=100, max_src_len=1000))
    assert len(out) == 1 and out[0][1].shape == (len(src), 31)
    # padded to a multiple (a model that attends to padding sees it as in training), or
    # to at least a fixed width (the TF1 eval.py's maxlen); the longest are 4, 10, 14
    for multiple, width, expected in (
        (8, 0, [8, 16, 16]),
        (1, 10, [10, 10, 14]),
        (8, 10, [10, 16, 16]),
    ):
        batches = data_load.eval_batches(src, 4, 14, multiple=multiple, width=width)
        assert [b.shape[1] for _, b in batches] == expected, (multiple, width)


def test_read_raw_matches_encoded_splits(prepped):
    for split in ("train", "dev", "test"):
        src, tgt = data_load.read_raw(prepped, split)
        assert len(src) == len(tgt) == len(data_load.load_corpus(prepped, split))
    assert data_load.read_raw(prepped, "train")[0][:2] == [p[0] for p in make_pairs()[:2]]


def test_read_raw_keeps_alignment_with_carriage_returns(tmp_path):
    """BUG (data_load.py, read_raw): prepro keeps a stray '\\r' inside a line (read_lines
    only strips the ends), but read_raw opens {split}.src/.tgt in universal-newline mode,
    which turns that '\\r' into a line break: the references get one line more than the
    encoded corpus and eval/BLEU pair hypotheses with the wrong references.
    Fix: open(path, encoding="utf-8", newline="") in read_raw."""
    pairs = make_pairs()[:20]
    dev = [
        ("Erste Zeile\rzweite Hälfte.", "First line\rsecond half."),
        ("Der Baum steht dort.", "The tree stands there."),
    ]
    write_parallel(str(tmp_path / "data"), pairs, dev=dev)
    hp = word_hp(tmp_path)
    prepro.preprocess(hp)
    src, tgt = data_load.read_raw(hp, "dev")
    assert len(data_load.load_corpus(hp, "dev")) == 2
    assert len(src) == len(tgt) == 2
    assert tgt[1] == "The tree stands there."


def test_bpe_dropout_segments_each_epoch_anew(demo_prepro, capsys):
    """bpe_dropout: each epoch's pairs are a BPE-dropout segmentation of the raw training
    text: the same text (decoding gives each line back), more and shorter pieces, other
    pieces in another epoch, the same pieces for the same epoch in another process (a
    resume), and batches built from that epoch's ids; 0 keeps prepro's ids. Pairs the
    longer pieces push over maxlen are left out of that epoch, and train.py says how many."""
    hp = hparams.apply(demo_prepro, {"bpe_dropout": 0.2, "tokens_per_batch": 200})
    td = data_load.TrainData(hp)
    assert "bpe_dropout=0.2: each epoch segments the training pairs anew" in capsys.readouterr().out
    lens = td.corpus.src_lens
    cut = int(np.percentile(lens, 50))  # half the pairs fit with prepro's pieces
    short = hparams.apply(hp, {"maxlen1": cut, "maxlen2": 100})
    fewer = data_load.TrainData(short)
    out = capsys.readouterr().out
    left_out = len(fewer.corpus) - len(fewer.epoch_corpus(0)[1])
    assert left_out > len(fewer.corpus) - len(fewer.keep) > 0
    assert f"; {left_out:,} of its pairs exceed maxlen1/maxlen2 and are left out" in out
    assert (fewer.epoch_corpus(0)[0].src_lens[fewer.epoch_corpus(0)[1]] <= cut).all()
    tok = data_load.Tokenizer(hp)
    src, tgt = data_load.read_raw(hp, "train")
    one, keep = td.epoch_corpus(1)
    assert len(one) == len(td.corpus) and np.array_equal(one.docs, td.corpus.docs)
    for i in range(0, len(one), 7):
        assert tok.sp.decode(one.src(i).tolist()) == src[i]
        assert tok.sp.decode(one.tgt(i).tolist()) == tgt[i]
    grown = len(one.src_ids) / len(td.corpus.src_ids)
    assert 1.05 < grown < 3, grown
    zero = td.epoch_corpus(0)[0]
    changed = sum(not np.array_equal(zero.src(i), one.src(i)) for i in range(len(one)))
    assert changed > len(one) // 4
    again = data_load.TrainData(hp)
    assert np.array_equal(again.epoch_corpus(1)[0].tgt_ids, one.tgt_ids)
    plan = td.batches(1)
    assert np.array_equal(np.sort(np.concatenate(plan)), keep)
    assert [b.tolist() for b in again.batches(1)] == [b.tolist() for b in plan]
    got = list(td.dataset(1, skip=2, plan=plan).as_numpy_iterator())
    assert len(got) == len(plan) - 2
    for batch, idx in zip(got, plan[2:]):
        for x, y in zip(batch, data_load.build_batch(one, idx)):
            assert np.array_equal(x, y)
    plain = data_load.TrainData(hparams.apply(hp, {"bpe_dropout": 0.0}))
    assert plain.epoch_corpus(3)[0] is plain.corpus


def test_bpe_dropout_needs_bpe_and_a_rate_below_one(prepped):
    with pytest.raises(UserError, match="vocab_type=word has none"):
        hparams.apply(prepped, {"bpe_dropout": 0.1})
    with pytest.raises(UserError, match=r"--bpe_dropout must be in \[0, 1\)"):
        hp_with(bpe_dropout=1.0)


def test_a_prepro_dir_without_documents_makes_each_pair_one(demo_prepro, tmp_path):
    """A .npz written before documents were kept has no ``doc``: every pair is then its
    own document; one written now has the talks of the demo corpus, in order."""
    corpus = data_load.load_corpus(demo_prepro, "dev")
    assert corpus.doc is not None and 1 < corpus.documents() < len(corpus)
    assert corpus.docs[0] == 0 and set(np.diff(corpus.docs)) == {0, 1}
    old = tmp_path / "dev.npz"
    with np.load(os.path.join(demo_prepro.prepro_dir, "dev.npz")) as z:
        np.savez(old, **{k: z[k] for k in z.files if k != "doc"})
    hp = hparams.apply(demo_prepro, {"prepro_dir": str(tmp_path)})
    legacy = data_load.load_corpus(hp, "dev")
    assert legacy.doc is None and legacy.documents() == len(legacy) == len(corpus)
    assert legacy.docs.tolist() == list(range(len(corpus)))


def test_context_batch_holds_the_sentences_before_in_the_same_document():
    """Row r, sentence j of the context is the source depth - j sentences before pair
    idx[r] (oldest first), with </S>, right-padded; all PAD across a document boundary
    or before the corpus; a long sentence keeps its last max_len tokens."""
    s_ids = np.arange(10, 10 + 1 + 2 + 3 + 4 + 5, dtype=np.int32)  # lengths 1..5
    s_off = np.cumsum([0, 1, 2, 3, 4, 5])
    t_ids, t_off = np.ones(5, np.int32), np.arange(6)
    corpus = data_load.Corpus(s_ids, s_off, t_ids, t_off, doc=np.array([0, 0, 0, 1, 1], np.int32))
    eos = data_load.EOS_ID
    got = data_load.context_batch(corpus, np.array([2, 0, 4, 3]), depth=2)
    assert got.shape == (4, 2, 5) and got.dtype == np.int32
    src = [list(corpus.src(i)) + [eos] for i in range(5)]
    # two before: pair 0 for pair 2, none for pair 0 (the corpus starts), 4 and 3
    # (pairs 2 and 1 are in the other document); one before: pairs 1 and 3 for 2 and 4
    want = [[src[0], [], [], []], [src[1], [], src[3], []]]
    for j in range(2):
        for r in range(4):
            row = got[r, j]
            assert row[: len(want[j][r])].tolist() == want[j][r], (j, r)
            assert not row[len(want[j][r]) :].any(), (j, r)
    cut = data_load.context_batch(corpus, np.array([4]), depth=1, max_len=3)
    assert cut[0, 0].tolist() == src[3][-3:]
    # XLA's static shapes: a fixed width, all-PAD rows appended
    fixed = data_load.context_batch(corpus, np.array([2, 4]), depth=2, width=7, rows=3)
    assert fixed.shape == (3, 2, 7) and not fixed[2].any()
    assert (fixed[:2, :, :5] == got[[0, 2]]).all() and not fixed[:, :, 5:].any()
    # without documents every pair is its own: no context at all
    alone = data_load.Corpus(s_ids, s_off, t_ids, t_off)
    assert not data_load.context_batch(alone, np.array([1, 2, 4]), depth=3).any()
    assert data_load.context_batch(corpus, np.array([1, 2]), depth=0).shape == (2, 0, 1)
