"""Tests for prepro: the corpus readers, the vocabularies and the preprocessing step.

preprocess() computes with numpy, regex and sentencepiece only (TensorFlow is imported,
through data_load, but not used).
"""

import collections
import gzip
import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

import prepro
from helpers import ROOT, tgz_bytes
from transformer_tf2.config import cli, hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load, download
from transformer_tf2.utils import files

# ---------------------------------------------------------------------------------------
# A small hand-written German-English corpus
# ---------------------------------------------------------------------------------------
SUBJECTS = [
    ("der Hund", "the dog"),
    ("die Katze", "the cat"),
    ("das Kind", "the child"),
    ("mein Bruder", "my brother"),
    ("unsere Lehrerin", "our teacher"),
]
VERBS = [("sieht", "sees"), ("mag", "likes"), ("sucht", "looks for"), ("findet", "finds")]
OBJECTS = [
    ("den Ball", "the ball"),
    ("einen Apfel", "an apple"),
    ("die Straße", "the street"),
    ("das große Haus", "the big house"),
    ("Peters Buch", "Peter's book"),
]
# pairs whose words occur exactly once (for min_cnt) and with an apostrophe in German
RARE = [
    ("Das Zebra schläft.", "The zebra sleeps."),
    ("Wie geht's, Peter?", "How is it going, Peter?"),
]


def make_pairs():
    """202 aligned pairs: 5 subjects x 4 verbs x 5 objects x 2 time phrases + 2 rare."""
    pairs, n = [], 0
    for de_s, en_s in SUBJECTS:
        for de_v, en_v in VERBS:
            for de_o, en_o in OBJECTS:
                for timed in (False, True):
                    n += 1
                    if timed:
                        h = n % 12 + 1
                        de = f"{de_s} {de_v} um {h} Uhr {de_o}."
                        en = f"{en_s} {en_v} {en_o} at {h} o'clock."
                    else:
                        de = f"{de_s} {de_v} heute {de_o}!"
                        en = f"{en_s} {en_v} {en_o} today!"
                    pairs.append((de[0].upper() + de[1:], en[0].upper() + en[1:]))
    return pairs + RARE


DEV = [
    ("Die Katze sucht heute den Ball.", "The cat looks for the ball today."),
    ("Mein Bruder mag das große Haus!", "My brother likes the big house!"),
    ("Das Kind findet einen Apfel um 3 Uhr.", "The child finds an apple at 3 o'clock."),
]
TEST = [
    ("Unsere Lehrerin sieht die Straße.", "Our teacher sees the street."),
    ("Der Hund mag Peters Buch.", "The dog likes Peter's book."),
]


def write_lines(path, lines):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


def write_parallel(data_dir, pairs=None, gz_test=True):
    """Multi30k-like layout: train.{de,en}, val.{de,en}, test_2016_flickr.{de,en}[.gz]."""
    os.makedirs(data_dir, exist_ok=True)
    pairs = make_pairs() if pairs is None else pairs
    for stem, split in (("train", pairs), ("val", DEV), ("test_2016_flickr", TEST)):
        for k, lang in enumerate(("de", "en")):
            name = f"{stem}.{lang}" + (".gz" if gz_test and stem.startswith("test") else "")
            write_lines(os.path.join(data_dir, name), [p[k] for p in split])


def parallel_hp(tmp, **kw):
    values = dict(
        corpus="parallel",
        data_dir=str(tmp / "data"),
        prepro_dir=str(tmp / "prepro"),
        logdir=str(tmp / "log"),
        evaldir=str(tmp / "eval"),
    )
    values.update(kw)
    return hparams.apply(hparams.Hparams(), values)


def mtimes(paths):
    return {p: os.stat(p).st_mtime_ns for p in paths}


# ---------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------
IWSLT_TRAIN_DE = """\
<url>http://www.ted.com/talks/ein_vortrag.html</url>
<keywords>talks, Wissenschaft, Natur</keywords>
<speaker>Erika Beispiel</speaker>
<talkid>4711</talkid>
<title>Erika Beispiel: Ein kleiner Vortrag</title>
<description>TED Talk Subtitles and Transcript: Eine Beschreibung.</description>
Heute erzähle ich von Bäumen.
  Sie wachsen langsam, aber stetig.   
<reviewer href="http://www.ted.com/profiles/1">Max Muster</reviewer>
<translator href="http://www.ted.com/profiles/2">Eva Muster</translator>
Und das ist gut so.
"""  # noqa: W291 (the trailing spaces of a line are part of the test)


def test_read_iwslt_train_drops_metadata_and_keeps_the_talk(tmp_path):
    p = tmp_path / "train.tags.de-en.de"
    p.write_text(IWSLT_TRAIN_DE, encoding="utf-8")
    assert prepro.read_iwslt_train(str(p)) == (
        [
            "Heute erzähle ich von Bäumen.",
            "Sie wachsen langsam, aber stetig.",
            "Und das ist gut so.",
        ],
        ["4711"] * 3,
    )
    # a second talk starts at its <talkid>; a line before any talk id is its own document
    second = IWSLT_TRAIN_DE.replace("4711", "12").replace("Heute", "Morgen")
    p.write_text("Vorweg.\n" + IWSLT_TRAIN_DE + second, encoding="utf-8")
    texts, docs = prepro.read_iwslt_train(str(p))
    assert texts[0] == "Vorweg." and texts[4] == "Morgen erzähle ich von Bäumen."
    assert docs == ["line1"] + ["4711"] * 3 + ["12"] * 3
    assert prepro.document_index(docs).tolist() == [0, 1, 1, 1, 2, 2, 2]


IWSLT_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<mteval>
<srcset setid="IWSLT16.TED.tst2013" srclang="german">
<doc docid="1" genre="lectures">
<url>http://www.ted.com/talks/x.html</url>
<description>Nicht mitnehmen.</description>
<keywords>talks</keywords>
<talkid>1</talkid>
<title>Ein Titel</title>
<seg id="1"> text &amp; more &lt;b&gt; </seg>
<seg id="2">Zeile
   über    zwei\tZeilen </seg>
<seg id="3"></seg>
</doc>
<doc docid="2" genre="lectures">
<seg id="1">Zweites Dokument, „Anführung“ &quot;x&quot;</seg>
<seg id="2">Ende.</seg>
</doc>
</srcset>
</mteval>
"""


def test_read_iwslt_xml(tmp_path):
    p = tmp_path / "IWSLT16.TED.tst2013.de-en.de.xml"
    p.write_text(IWSLT_XML, encoding="utf-8")
    assert prepro.read_iwslt_xml(str(p)) == (
        [
            "text & more <b>",
            "Zeile über zwei Zeilen",
            "",
            'Zweites Dokument, „Anführung“ "x"',
            "Ende.",
        ],
        ["1", "1", "1", "2", "2"],
    )


def test_read_iwslt_xml_document_ids(tmp_path):
    """docid names a segment's talk, else the <talkid> inside its <doc>, else its place;
    a segment outside every <doc> is a document of its own."""
    p = tmp_path / "docs.xml"
    p.write_text(
        '<mteval>\n<doc><talkid> 77 </talkid><seg id="1">a</seg><seg id="2">b</seg></doc>\n'
        '<doc genre="x"><seg id="1">c</seg></doc>\n<seg id="9">d</seg>\n'
        '<doc docid="5"><seg id="1">e</seg></doc>\n</mteval>\n',
        encoding="utf-8",
    )
    texts, docs = prepro.read_iwslt_xml(str(p))
    assert texts == ["a", "b", "c", "d", "e"]
    assert docs == ["77", "77", "doc2", "seg4", "5"]
    assert prepro.document_index(docs).tolist() == [0, 0, 1, 2, 3]
    assert prepro.document_index([]).tolist() == []


def test_read_iwslt_xml_malformed_names_file_and_line(tmp_path):
    p = tmp_path / "bad.xml"
    p.write_text(
        '<mteval>\n<doc docid="1">\n<seg id="1">gut</seg>\n'
        '<seg id="2">nicht geschlossen\n</doc>\n</mteval>\n',
        encoding="utf-8",
    )
    with pytest.raises(UserError) as e:
        prepro.read_iwslt_xml(str(p))
    msg = str(e.value)
    m = re.search(re.escape(str(p)) + r":(\d+):(\d+): malformed XML", msg)
    assert m, msg
    assert int(m.group(1)) == 5  # the </doc> that closes the open <seg>
    assert "</seg>" in msg


def test_read_iwslt_xml_bare_ampersand(tmp_path):
    p = tmp_path / "amp.xml"
    p.write_text('<mteval>\n<doc>\n<seg id="1">A & B</seg>\n</doc>\n</mteval>\n', encoding="utf-8")
    with pytest.raises(UserError, match=re.escape(str(p)) + r":3:\d+: malformed XML"):
        prepro.read_iwslt_xml(str(p))


@pytest.mark.parametrize(
    "reader",
    [files.read_text, files.read_lines, prepro.read_iwslt_train, prepro.read_iwslt_xml],
)
def test_non_utf8_names_file_and_line(tmp_path, reader):
    p = tmp_path / "latin1.de"
    p.write_bytes(b"<seg>eins</seg>\nzwei\ndr\xffei\nvier\n")
    with pytest.raises(UserError) as e:
        reader(str(p))
    msg = str(e.value)
    assert f"{p}:3:" in msg and "UTF-8" in msg and "0xff" in msg


def test_missing_file_names_path(tmp_path):
    p = tmp_path / "nowhere" / "train.de"
    for reader in (prepro.read_iwslt_train, prepro.read_iwslt_xml):
        with pytest.raises(UserError) as e:
            reader(str(p))
        assert str(p) in str(e.value) and "not found" in str(e.value)


def test_parallel_path_prefers_plain_then_gz(tmp_path):
    hp = parallel_hp(tmp_path)
    os.makedirs(hp.data_dir)
    gz = os.path.join(hp.data_dir, "train.de.gz")
    write_lines(gz, ["a"])
    assert prepro.corpus_files(hp)["train"][0] == gz
    write_lines(os.path.join(hp.data_dir, "train.de"), ["a"])
    assert prepro.corpus_files(hp)["train"][0] == os.path.join(hp.data_dir, "train.de")
    # missing both: the plain name (for the error message)
    assert prepro.corpus_files(hp)["dev"][1] == os.path.join(hp.data_dir, "val.en")


def test_iwslt_corpus_files():
    hp = hparams.apply(hparams.preset("iwslt2016"), {"data_dir": "D"})
    files = prepro.corpus_files(hp)
    assert files == {
        "train": ("D/train.tags.de-en.de", "D/train.tags.de-en.en"),
        "dev": ("D/IWSLT16.TED.tst2013.de-en.de.xml", "D/IWSLT16.TED.tst2013.de-en.en.xml"),
        "test": ("D/IWSLT16.TED.tst2014.de-en.de.xml", "D/IWSLT16.TED.tst2014.de-en.en.xml"),
    }


def test_read_split_mismatched_counts(tmp_path):
    hp = parallel_hp(tmp_path)
    os.makedirs(hp.data_dir)
    src = os.path.join(hp.data_dir, "train.de")
    tgt = os.path.join(hp.data_dir, "train.en")
    write_lines(src, ["eins", "zwei", "drei"])
    write_lines(tgt, ["one", "two"])
    with pytest.raises(UserError) as e:
        prepro.read_split(hp, "train")
    msg = str(e.value)
    assert f"{src} has 3 sentences" in msg and f"{tgt} has 2" in msg


def test_read_split_drops_pairs_with_an_empty_side(tmp_path):
    hp = parallel_hp(tmp_path)
    os.makedirs(hp.data_dir)
    write_lines(os.path.join(hp.data_dir, "train.de"), ["eins", "", "drei", "vier", " "])
    write_lines(os.path.join(hp.data_dir, "train.en"), ["one", "two", "", "four", "five"])
    # plain parallel text: each line is a document (its line number)
    assert prepro.read_split(hp, "train") == (["eins", "vier"], ["one", "four"], ["1", "4"])
    # dev/test keep empty lines so that references stay aligned
    write_lines(os.path.join(hp.data_dir, "val.de"), ["a", ""])
    write_lines(os.path.join(hp.data_dir, "val.en"), ["", "b"])
    assert prepro.read_split(hp, "dev") == (["a", ""], ["", "b"], ["1", "2"])


def test_read_split_empty_after_dropping(tmp_path):
    hp = parallel_hp(tmp_path)
    os.makedirs(hp.data_dir)
    write_lines(os.path.join(hp.data_dir, "train.de"), ["", "  ", "drei"])
    write_lines(os.path.join(hp.data_dir, "train.en"), ["one", "", ""])
    with pytest.raises(UserError, match="holds no sentence pairs"):
        prepro.read_split(hp, "train")
    write_lines(os.path.join(hp.data_dir, "val.de"), [])
    write_lines(os.path.join(hp.data_dir, "val.en"), [])
    with pytest.raises(UserError, match=re.escape(os.path.join(hp.data_dir, "val.de"))):
        prepro.read_split(hp, "dev")


def test_read_split_iwslt_layout(tmp_path):
    hp = hparams.apply(hparams.preset("iwslt2016"), {"data_dir": str(tmp_path)})
    (tmp_path / "train.tags.de-en.de").write_text(IWSLT_TRAIN_DE, encoding="utf-8")
    en = IWSLT_TRAIN_DE.replace("Heute erzähle ich von Bäumen.", "Today I talk about trees.")
    en = en.replace("Sie wachsen langsam, aber stetig.", "They grow slowly but steadily.")
    en = en.replace("Und das ist gut so.", "And that is good.")
    (tmp_path / "train.tags.de-en.en").write_text(en, encoding="utf-8")
    src, tgt, docs = prepro.read_split(hp, "train")
    assert src[1] == "Sie wachsen langsam, aber stetig."
    assert tgt[1] == "They grow slowly but steadily."
    assert len(src) == len(tgt) == 3 and docs == ["4711"] * 3
    for lang in ("de", "en"):
        (tmp_path / f"IWSLT16.TED.tst2013.de-en.{lang}.xml").write_text(IWSLT_XML, encoding="utf-8")
    src, tgt, docs = prepro.read_split(hp, "dev")
    assert src == tgt and len(src) == 5 and src[0] == "text & more <b>"
    assert docs == ["1", "1", "1", "2", "2"]
    # the two sides must hold the same talks: a talk id that differs is one line naming both
    en_xml = IWSLT_XML.replace('docid="2"', 'docid="3"')
    (tmp_path / "IWSLT16.TED.tst2013.de-en.en.xml").write_text(en_xml, encoding="utf-8")
    with pytest.raises(UserError, match=r"sentence 4 is in talk '2' in .*de\.xml but in talk '3'"):
        prepro.read_split(hp, "dev")


def test_missing_corpus_is_a_user_error(tmp_path):
    hp = parallel_hp(tmp_path)
    with pytest.raises(UserError) as e:
        prepro.preprocess(hp)
    msg = str(e.value)
    assert os.path.join(hp.data_dir, "train.de") in msg
    assert "--data_dir" in msg and "--download" in msg


# ---------------------------------------------------------------------------------------
# Word vocabulary
# ---------------------------------------------------------------------------------------
def test_legacy_clean():
    assert data_load.clean("Das kostet 5€, oder? Geht's über") == "Das kostet  oder Geht's über"
    assert data_load.clean("Straße, Größe & Maß: 100%!").split() == ["Straße", "Größe", "Maß"]
    assert data_load.clean("at 5 o'clock.") == "at  o'clock"
    assert data_load.clean("Œuvre façade naïve Ærø") == "Œuvre façade naïve Ærø"


def test_build_word_vocab_order_and_min_cnt():
    sents = ["b a b c", "b a, d!", "a 7 b"]
    vocab = prepro.build_word_vocab(sents, min_cnt=2)
    assert [w for w, _ in vocab[:4]] == ["<PAD>", "<UNK>", "<S>", "</S>"]
    assert vocab[4:] == [("b", 4), ("a", 3)]
    assert [w for w, _ in prepro.build_word_vocab(sents, 1)[4:]] == ["b", "a", "c", "d"]


@pytest.fixture(scope="module")
def word_prepro(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("word")
    write_parallel(str(tmp / "data"))
    hp = parallel_hp(tmp, vocab_type="word", min_cnt=2)
    prepro.preprocess(hp)
    return hp


def test_word_outputs_exist(word_prepro):
    hp = word_prepro
    outs = prepro.outputs(hp)
    assert [os.path.basename(p) for p in outs] == [
        "vocab.de.tsv",
        "vocab.en.tsv",
        "train.src",
        "train.tgt",
        "dev.src",
        "dev.tgt",
        "test.src",
        "test.tgt",
        "train.npz",
        "dev.npz",
        "test.npz",
    ]
    for p in outs:
        assert os.path.getsize(p) > 0, p
    assert hparams.load(os.path.join(hp.prepro_dir, "hparams.json")) == hp
    assert os.path.exists(os.path.join(hp.prepro_dir, "stamp.json"))
    leftovers = [f for f in os.listdir(hp.prepro_dir) if ".part" in f or ".tmp" in f]
    assert leftovers == []


def test_word_text_outputs(word_prepro):
    hp = word_prepro
    pairs = make_pairs()

    def read(name):
        with open(os.path.join(hp.prepro_dir, name), encoding="utf-8") as f:
            return f.read().split("\n")[:-1]

    assert read("train.src") == [p[0] for p in pairs]
    assert read("train.tgt") == [p[1] for p in pairs]
    assert read("dev.src") == [p[0] for p in DEV] and read("dev.tgt") == [p[1] for p in DEV]
    assert read("test.src") == [p[0] for p in TEST]  # read from the .gz files
    assert data_load.read_raw(hp, "test") == ([p[0] for p in TEST], [p[1] for p in TEST])


def _vocab_lines(hp, lang):
    with open(os.path.join(hp.prepro_dir, f"vocab.{lang}.tsv"), encoding="utf-8") as f:
        return f.read().split("\n")


def test_word_vocab_file_format(word_prepro):
    hp = word_prepro
    pairs = make_pairs()
    for k, lang in enumerate(("de", "en")):
        lines = _vocab_lines(hp, lang)
        assert lines[-1] == ""  # ends with a newline
        rows = [line.split("\t") for line in lines[:-1]]
        assert all(len(r) == 2 and r[1].isdigit() for r in rows)
        assert [r[0] for r in rows[:4]] == ["<PAD>", "<UNK>", "<S>", "</S>"]
        counts = [int(r[1]) for r in rows[4:]]
        assert counts == sorted(counts, reverse=True)
        assert min(counts) >= hp.min_cnt
        # exactly the words of the cleaned training side seen at least min_cnt times
        expected = collections.Counter(w for p in pairs for w in data_load.clean(p[k]).split())
        assert {r[0]: int(r[1]) for r in rows[4:]} == {
            w: c for w, c in expected.items() if c >= hp.min_cnt
        }
        tok = data_load.load_tokenizer(hp)
        vocab = tok.src_vocab if lang == "de" else tok.tgt_vocab
        assert [vocab[t] for t in data_load.RESERVED] == [0, 1, 2, 3]
        assert len(vocab) == len(rows)


def test_word_vocab_cleaning_and_min_cnt(word_prepro):
    de = {line.split("\t")[0] for line in _vocab_lines(word_prepro, "de")[:-1]}
    en = {line.split("\t")[0] for line in _vocab_lines(word_prepro, "en")[:-1]}
    # umlauts, ß and apostrophes are kept
    assert {"Straße", "große", "Uhr", "Peters"} <= de
    assert {"o'clock", "Peter's", "today"} <= en
    # digits and punctuation are removed
    for word in de | en:
        if word not in data_load.RESERVED:
            assert not re.search(r"[0-9.,!?]", word), word
    # min_cnt=2: words seen once are left out ("geht's" appears once)
    assert not {"Zebra", "schläft", "geht's", "Wie"} & de
    assert not {"zebra", "sleeps", "going", "Peter"} & en  # "Peter?" once; "Peter's" x40
    counts_en = dict(line.split("\t") for line in _vocab_lines(word_prepro, "en")[:-1])
    assert int(counts_en["the"]) > int(counts_en["dog"]) >= 40


def test_word_npz_encoding(word_prepro):
    hp = word_prepro
    tok = data_load.load_tokenizer(hp)
    corpus = data_load.load_corpus(hp, "train")
    pairs = make_pairs()
    assert len(corpus) == len(pairs) == 202
    for i in (0, 1, 57, 200, 201):
        de, en = pairs[i]
        want_src = [tok.src_vocab.get(w, data_load.UNK_ID) for w in data_load.clean(de).split()]
        assert corpus.src(i).tolist() == want_src
        assert corpus.tgt(i).tolist() == tok.encode_tgt([en])[0]
    # the rare pair "Das Zebra schläft." -> Das <UNK> <UNK>
    assert corpus.src(200).tolist()[1:] == [data_load.UNK_ID, data_load.UNK_ID]
    assert tok.decode_tgt(corpus.tgt(1).tolist() + [data_load.EOS_ID, 99]) == " ".join(
        data_load.clean(pairs[1][1]).split()
    )
    assert corpus.src_ids.dtype == np.int32 and corpus.src_off.dtype == np.int64
    assert int(corpus.src_ids.max()) < tok.src_vocab_size
    assert int(corpus.tgt_ids.max()) < tok.tgt_vocab_size
    assert len(data_load.load_corpus(hp, "dev")) == 3
    assert len(data_load.load_corpus(hp, "test")) == 2


# ---------------------------------------------------------------------------------------
# BPE
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bpe_prepro(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bpe")
    write_parallel(str(tmp / "data"))
    hp = parallel_hp(tmp, vocab_type="bpe", vocab_size=100)
    prepro.preprocess(hp)
    return hp


def test_bpe_outputs(bpe_prepro):
    hp = bpe_prepro
    outs = prepro.outputs(hp)
    assert os.path.basename(outs[0]) == "bpe.model" and len(outs) == 10
    assert all(os.path.exists(p) for p in outs)
    assert sorted(os.listdir(hp.prepro_dir)) == sorted(
        [os.path.basename(p) for p in outs] + ["bpe.vocab", "hparams.json", "stamp.json"]
    )
    assert hparams.load(os.path.join(hp.prepro_dir, "hparams.json")) == hp


def test_bpe_reserved_ids_and_size(bpe_prepro):
    tok = data_load.load_tokenizer(bpe_prepro)
    sp = tok.sp
    assert [sp.id_to_piece(i) for i in range(4)] == ["<PAD>", "<UNK>", "<S>", "</S>"]
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    assert sp.get_piece_size() == tok.src_vocab_size == tok.tgt_vocab_size
    assert 60 <= sp.get_piece_size() <= 100


def test_bpe_round_trip(bpe_prepro):
    tok = data_load.load_tokenizer(bpe_prepro)
    sp = tok.sp
    for de, en in make_pairs()[::7] + DEV + TEST:
        for s in (de, en):
            ids = sp.encode(s)
            assert data_load.UNK_ID not in ids, s
            assert sp.decode(ids) == s
    unseen = "Peters große Katze findet um 9 Uhr die Straße nicht!"
    assert sp.decode(sp.encode(unseen)) == unseen
    # encoded training data in the npz equals a fresh encoding
    corpus = data_load.load_corpus(bpe_prepro, "train")
    pairs = make_pairs()
    for i in (0, 99, 201):
        assert corpus.src(i).tolist() == sp.encode(pairs[i][0])
        assert tok.decode_tgt(corpus.tgt(i)) == pairs[i][1]


# ---------------------------------------------------------------------------------------
# Idempotency, rebuilds and the demo corpus
# ---------------------------------------------------------------------------------------
def test_second_run_is_up_to_date(tmp_path, capsys):
    write_parallel(str(tmp_path / "data"))
    hp = parallel_hp(tmp_path, vocab_type="bpe", vocab_size=100)
    prepro.preprocess(hp)
    out = capsys.readouterr().out
    assert "prepro: train: 202 sentence pairs" in out and "up to date" not in out
    before = mtimes(prepro.outputs(hp) + [os.path.join(hp.prepro_dir, "stamp.json")])

    # a model-only change (d_model) does not touch the data, but updates hparams.json
    hp2 = hparams.apply(hp, {"d_model": 64, "num_heads": 2})
    assert prepro.preprocess(hp2) == hp2
    out = capsys.readouterr().out
    assert out.strip() == f"prepro: {hp.prepro_dir} is up to date"
    assert mtimes(list(before)) == before
    assert hparams.load(os.path.join(hp.prepro_dir, "hparams.json")).d_model == 64

    # a different vocab_size rebuilds
    hp3 = hparams.apply(hp, {"vocab_size": 120})
    prepro.preprocess(hp3)
    out = capsys.readouterr().out
    assert "up to date" not in out and "202 sentence pairs" in out
    with open(os.path.join(hp.prepro_dir, "stamp.json"), encoding="utf-8") as f:
        assert json.load(f)["hparams"]["vocab_size"] == 120
    n3 = data_load.load_tokenizer(hp3).src_vocab_size
    assert n3 > 100
    with pytest.raises(UserError, match="rerun prepro"):
        data_load.load_tokenizer(hp)  # the saved vocabulary is now the 120 one
    prepro.preprocess(hp3)
    assert "up to date" in capsys.readouterr().out

    # force rebuilds even when up to date
    prepro.preprocess(hp3, force=True)
    assert "up to date" not in capsys.readouterr().out


def test_changed_input_rebuilds(tmp_path, capsys):
    write_parallel(str(tmp_path / "data"))
    hp = parallel_hp(tmp_path, vocab_type="word")
    prepro.preprocess(hp)
    capsys.readouterr()
    write_parallel(str(tmp_path / "data"), pairs=make_pairs() + [("Noch ein Satz.", "One more.")])
    prepro.preprocess(hp)
    out = capsys.readouterr().out
    assert "up to date" not in out and "prepro: train: 203 sentence pairs" in out
    assert len(data_load.load_corpus(hp, "train")) == 203


def test_interrupted_rebuild_is_not_up_to_date(tmp_path, capsys, monkeypatch):
    """BUG (prepro.py, preprocess): the old stamp.json stays in place while a rebuild
    rewrites the vocabulary and hparams.json. If that rebuild dies before the stamp is
    rewritten (Ctrl-C, OOM, a crash in encoding), a later run with the *old* settings finds
    all outputs plus a matching old stamp and says "up to date", although the vocabulary
    belongs to the interrupted settings and the .npz files to the old ones (ids can exceed
    the vocabulary size). Fix: delete stamp_path right after the up-to-date check."""
    write_parallel(str(tmp_path / "data"))
    hp_a = parallel_hp(tmp_path, vocab_type="word", min_cnt=1)
    prepro.preprocess(hp_a)
    hp_b = hparams.apply(hp_a, {"min_cnt": 3})

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(data_load, "encode_pairs", crash)
    with pytest.raises(KeyboardInterrupt):
        prepro.preprocess(hp_b)
    monkeypatch.undo()
    capsys.readouterr()

    prepro.preprocess(hp_a)
    out = capsys.readouterr().out
    de_words = {line.split("\t")[0] for line in _vocab_lines(hp_a, "de")[:-1]}
    assert "up to date" not in out
    assert "Zebra" in de_words  # seen once: must be in a min_cnt=1 vocabulary


def test_demo_corpus_is_generated_and_preprocessed(tmp_path, capsys):
    hp = hparams.apply(
        hparams.Hparams(),
        dict(
            data_dir=str(tmp_path / "demo"),
            prepro_dir=str(tmp_path / "prepro"),
            demo_size=300,
            vocab_size=200,
        ),
    )
    assert hp.corpus == "demo"
    prepro.preprocess(hp)
    out = capsys.readouterr().out
    assert f"generating the demo corpus in {hp.data_dir}" in out
    assert all(os.path.isfile(p) for pair in prepro.corpus_files(hp).values() for p in pair)
    assert "prepro: train: 300 sentence pairs" in out
    assert all(os.path.exists(p) for p in prepro.outputs(hp))
    corpus = data_load.load_corpus(hp, "train")
    assert len(corpus) == 300
    # the talks are kept: one document per <talkid> of train.tags / <doc> of the XML, in
    # order, each pair's index in the .npz
    for split, tag in (("train", "<talkid>"), ("dev", "<doc "), ("test", "<doc ")):
        with open(prepro.corpus_files(hp)[split][0], encoding="utf-8") as f:
            talks = f.read().count(tag)
        docs = data_load.load_corpus(hp, split).docs
        assert talks >= 1 and docs[0] == 0 and set(np.diff(docs)) <= {0, 1}
        assert int(docs[-1]) + 1 == talks, split
        assert f"prepro: {split}: {len(docs):,} sentence pairs in {talks:,} documents" in out
    dev_src, dev_tgt = data_load.read_raw(hp, "dev")
    assert len(dev_src) == len(dev_tgt) == len(data_load.load_corpus(hp, "dev")) > 0
    # the IWSLT code path read it: no metadata line leaked into the text
    train_src, _ = data_load.read_raw(hp, "train")
    assert not any(s.startswith("<") for s in train_src + dev_src)
    tok = data_load.load_tokenizer(hp)
    assert tok.decode_tgt(corpus.tgt(0)) == data_load.read_raw(hp, "train")[1][0]
    prepro.preprocess(hp)
    assert "up to date" in capsys.readouterr().out


def test_demo_size_change_regenerates_the_corpus(tmp_path, capsys):
    """BUG (prepro.py, ensure_corpus/_stamp): the demo corpus is generated only when its
    files are missing and demo_size is not part of the stamp, so after a first run a
    different --demo_size is silently ignored ("up to date", still the old corpus size).
    Fix: regenerate when the recorded (demo_size, seed) differ, e.g. write
    <data_dir>/demo.json next to the corpus and compare it in ensure_corpus, and add
    "demo_size" to the stamp keys."""
    values = dict(
        data_dir=str(tmp_path / "demo"), prepro_dir=str(tmp_path / "prepro"), vocab_type="word"
    )
    prepro.preprocess(hparams.apply(hparams.Hparams(), dict(values, demo_size=300)))
    capsys.readouterr()
    hp = hparams.apply(hparams.Hparams(), dict(values, demo_size=400))
    prepro.preprocess(hp)
    out = capsys.readouterr().out
    assert len(data_load.load_corpus(hp, "train")) == 400, out


def test_bpe_needs_a_piece_per_character(tmp_path):
    """More distinct characters than --vocab_size pieces: the advice is a larger one."""
    sentences = [chr(0x4E00 + i) * 3 + " " + chr(0x4E00 + i + 1) for i in range(80)]
    with pytest.raises(
        UserError, match=r"^sentencepiece could not build a 40-piece BPE model .*; try a larger"
    ):
        prepro.train_bpe(sentences, str(tmp_path / "bpe"), 40, 1)


# ---------------------------------------------------------------------------------------
# The IWSLT 2016 release as WIT3 publishes it: 2016-01.tgz (all pairs), with
# 2016-01/texts/de/en/de-en.tgz inside, whose de-en/ folder holds the files
# ---------------------------------------------------------------------------------------
N_TALK = 6  # training sentences per talk; two talks


def iwslt_pairs(split):
    """The (German, English) sentences of a split of the small IWSLT fixture."""
    if split == "train":
        return [(f"Das ist Satz {k}.", f"This is sentence {k}.") for k in range(1, 2 * N_TALK + 1)]
    n = 3 if split == "dev" else 2
    return [(f"{split} {k}: A & B <ok>", f"{split} {k}: A & B <ok>!") for k in range(1, n + 1)]


def iwslt_files():
    """name -> text of the de-en/ folder: train.tags (metadata lines start with '<') and
    the XML sets (XML-escaped <seg>s), dev = tst2013, test = tst2014."""
    out = {}
    for k, lang in enumerate(("de", "en")):
        lines = []
        for talk in (0, 1):
            lines += [
                f"<url>http://www.ted.com/talks/fixture_{talk}.html</url>",
                f"<talkid>{talk + 10}</talkid>",
                f"<title>Vortrag {talk}</title>",
            ]
            lines += [p[k] for p in iwslt_pairs("train")[talk * N_TALK : (talk + 1) * N_TALK]]
        out[f"train.tags.de-en.{lang}"] = "\n".join(lines) + "\n"
        for split, name in (("dev", "tst2013"), ("test", "tst2014")):
            segs = "".join(
                f'<seg id="{i}"> {xml_escape(p[k])} </seg>\n'
                for i, p in enumerate(iwslt_pairs(split), 1)
            )
            out[f"IWSLT16.TED.{name}.de-en.{lang}.xml"] = (
                '<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n'
                f'<srcset setid="IWSLT16.TED.{name}" srclang="german">\n'
                f'<doc docid="7" genre="lectures">\n<talkid>7</talkid>\n{segs}</doc>\n'
                "</srcset>\n</mteval>\n"
            )
    return out


def xml_escape(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def pair_tgz():
    """de-en.tgz: the folder de-en/ with the fixture's files."""
    return tgz_bytes([(f"de-en/{n}", t.encode()) for n, t in iwslt_files().items()])


def release_tgz():
    """2016-01.tgz: every pair's own tarball under 2016-01/texts/<s>/<t>/."""
    other = tgz_bytes([("fr-en/train.tags.fr-en.fr", b"Bonjour.\n")])
    return tgz_bytes(
        [
            ("2016-01/texts/fr/en/fr-en.tgz", other),
            ("2016-01/texts/de/en/de-en.tgz", pair_tgz()),
            ("2016-01/texts/en/fr/en-fr.tgz", other),
        ]
    )


def write_layout(root, layout):
    """Write the fixture in one layout under root; returns (--archive, --data_dir) to pass
    and the folder the files must be read from."""
    os.makedirs(root)
    data = os.path.join(root, "data")
    if layout in ("release", "pair", "data_dir_is_the_release"):
        name = "de-en.tgz" if layout == "pair" else "2016-01.tgz"
        path = os.path.join(root, name)
        with open(path, "wb") as f:
            f.write(pair_tgz() if layout == "pair" else release_tgz())
        if layout == "data_dir_is_the_release":
            return "", path, os.path.join(root, "de-en")
        return path, data, data
    if layout == "release_extracted":  # tar xzf 2016-01.tgz, the pair's tarball kept packed
        for pair, data in (("fr-en", b""), ("de-en", pair_tgz())):
            s, t = pair.split("-")
            os.makedirs(os.path.join(root, "2016-01", "texts", s, t))
            with open(os.path.join(root, "2016-01", "texts", s, t, f"{pair}.tgz"), "wb") as f:
                f.write(data)
        return "", os.path.join(root, "2016-01"), os.path.join(root, "2016-01")
    folder = os.path.join(root, "de-en")  # "folder": tar xzf de-en.tgz
    os.makedirs(folder)
    for name, text in iwslt_files().items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text)
    return folder, data, folder


def iwslt_hp(tmp, data_dir):
    values = dict(data_dir=data_dir, prepro_dir=str(tmp / "prepro"), vocab_type="word")
    return hparams.apply(hparams.preset("iwslt2016"), dict(values, min_cnt=1))


@pytest.mark.parametrize(
    "layout", ["release", "pair", "folder", "release_extracted", "data_dir_is_the_release"]
)
def test_iwslt_release_layouts(tmp_path, capsys, layout):
    archive, data_dir, folder = write_layout(str(tmp_path / "dl"), layout)
    before = all_files(tmp_path / "dl")
    hp = prepro.preprocess(iwslt_hp(tmp_path, data_dir), archive=archive)
    out = capsys.readouterr().out
    assert hp.data_dir == folder
    assert "prepro: train: 12 sentence pairs in 2 documents" in out
    assert "prepro: dev: 3 sentence pairs in 1 documents" in out
    for split in prepro.SPLITS:
        assert data_load.read_raw(hp, split) == tuple(map(list, zip(*iwslt_pairs(split))))
    assert data_load.read_raw(hp, "test")[1][1] == "test 2: A & B <ok>!"  # unescaped
    assert len(data_load.load_corpus(hp, "train")) == 12
    # only the de-en files reach the disk: no other pair, no tarball of the pair, no
    # temporary; none at all when the files are there already
    unpacked = set() if layout == "folder" else {os.path.join(folder, n) for n in iwslt_files()}
    assert all_files(tmp_path / "dl") - before == unpacked

    # a second run finds everything in place: nothing unpacked, nothing rebuilt
    mtimes_before = mtimes(os.path.join(folder, n) for n in iwslt_files())
    hp2 = prepro.preprocess(iwslt_hp(tmp_path, data_dir), archive=archive)
    assert hp2 == hp and capsys.readouterr().out.strip().endswith("is up to date")
    assert mtimes(list(mtimes_before)) == mtimes_before


def all_files(root):
    return {os.path.join(d, n) for d, _, names in os.walk(root) for n in names}


def run_prepro(monkeypatch, capsys, *args):
    """prepro.py's main as the command line runs it: (exit status, stdout, stderr)."""
    monkeypatch.setattr("sys.argv", ["prepro.py", *args])
    with pytest.raises(SystemExit) as e:
        cli.run_main(prepro.main)
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return e.value.code, out, err


def closed_port_url(name):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/{name}"


def test_iwslt_download_failing_says_where_the_release_is(tmp_path, monkeypatch, capsys):
    urls = [(closed_port_url("a/2016-01.tgz"), "2016-01.tgz")]
    urls.append((closed_port_url("b/2016-01.tgz"), "2016-01.tgz"))
    monkeypatch.setitem(download.SOURCES["iwslt2016"], "urls", urls)
    args = ["--data_dir", str(tmp_path / "data"), "--prepro_dir", str(tmp_path / "p")]
    code, out, err = run_prepro(
        monkeypatch, capsys, "--preset", "iwslt2016_paper", *args, "--download"
    )
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith(
        f"error: could not download the IWSLT 2016 release: {urls[0][0]}: "
    )
    assert err.endswith(
        ". It is published on the WIT3 2016-01 release page https://wit3.fbk.eu/2016-01: "
        "download 2016-01.tgz there (or texts/de/en/de-en.tgz inside it), then run: "
        "python prepro.py --preset iwslt2016_paper --archive PATH/2016-01.tgz\n"
    )
    assert f"; {urls[1][0]}: " in err
    assert os.listdir(tmp_path / "data") == []


def test_iwslt_archive_errors_are_one_line(tmp_path, monkeypatch, capsys):
    base = ["--preset", "iwslt2016", "--data_dir", str(tmp_path / "d")]
    code, _, err = run_prepro(monkeypatch, capsys, *base, "--archive", str(tmp_path / "no.tgz"))
    assert code == 2 and err == (
        f"error: --archive {tmp_path / 'no.tgz'} not found; pass the path of 2016-01.tgz, "
        "of de-en.tgz or of a folder holding train.tags.de-en.de\n"
    )
    other = tmp_path / "other.tgz"  # a tarball, but not of the release
    other.write_bytes(tgz_bytes([("2016-01/texts/fr/en/fr-en.tgz", b"")]))
    code, _, err = run_prepro(monkeypatch, capsys, *base, "--archive", str(other))
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: archive {other} holds neither de-en/train.tags.de-en.de nor")
    assert not (tmp_path / "d").exists() or os.listdir(tmp_path / "d") == []
    (tmp_path / "empty").mkdir()
    code, _, err = run_prepro(monkeypatch, capsys, *base, "--archive", str(tmp_path / "empty"))
    assert code == 2 and err.startswith(f"error: {tmp_path / 'empty'} holds neither the IWSLT")
    code, _, err = run_prepro(monkeypatch, capsys, "--preset", "multi30k", "--archive", str(other))
    assert code == 2 and err == (
        "error: --archive reads the IWSLT 2016 release, but the corpus is parallel; "
        "use it with --preset iwslt2016\n"
    )


@pytest.mark.slow
def test_prepro_refuses_what_train_would_refuse_before_writing(tmp_path):
    """The checks that positions.py and model.py register (here a document memory on
    absolute positions) apply to prepro.py's settings too: one line, nothing written."""
    proc = subprocess.run(
        [
            sys.executable,
            "prepro.py",
            "--memory_sentences",
            "2",
            "--position",
            "sinusoid",
            "--data_dir",
            str(tmp_path / "data"),
            "--prepro_dir",
            str(tmp_path / "prepro"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: memory_sentences=2 places the earlier sentences at negative relative "
        "positions; position=sinusoid is absolute: pick one of shaw, t5, xl, alibi, "
        "alibi_dir, rotary"
    ]
    assert os.listdir(tmp_path) == []
