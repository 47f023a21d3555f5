"""Hostile input, fuzzed with hypothesis: the corpus readers, the tokenizer round trip,
prepro, eval, translate and the exported graph. The only allowed outcomes are a result or
the project's own error (hparams.UserError); the SavedModel, which cannot raise it, gives
a documented result for every input class.

The input classes: empty and whitespace-only lines; lines far longer than maxlen;
control characters and NUL bytes; invalid UTF-8; CRLF line endings; a byte-order mark;
mixed scripts, emoji and combining characters; XML with entities, CDATA, nested tags or a
missing closing tag. Example counts are bounded and the runs derandomized, so that each
run tries the same examples.
"""

import itertools
import json
import os
import re
import unicodedata
import xml.sax.saxutils

import keras
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import export
import prepro
import translate
from eval import evaluate
from helpers import tiny
from transformer_tf2 import api
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.models import checkpoints
from transformer_tf2.models.model import Transformer
from transformer_tf2.utils import files


def fuzz(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


COUNTER = itertools.count()


def written(factory, name, data):
    """``data`` written to a fresh file per example (hypothesis reruns the test body in
    one test); its path."""
    path = str(factory.mktemp(f"fuzz{next(COUNTER)}") / name)
    write(path, data)
    return path


# ---------------------------------------------------------------------------------------
# The input classes
# ---------------------------------------------------------------------------------------
SPACES = ["", " ", "\t", "  \t ", "\u3000", "\xa0", "\u2009", "\x0b\x0c", "\x1c", "\x85"]
# C0 and C1 control characters, NUL included (\n ends a line, so it is left out)
CONTROL = st.text(
    st.sampled_from([chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)] if c != 0x0A]),
    max_size=4,
)
SCRIPTS = [
    "Die Frau liest ein Buch.",
    "Straße",
    "Grüße aus Köln",
    "日本語のテキスト",
    "Привет, мир",
    "مرحبا بالعالم",
    "שלום",
    "😀👍🏽🇩🇪",
    "e\u0301a\u0308o\u0302",  # combining accents
    "ﬁ ｆｕｌｌ ｗｉｄｔｈ",
    "\u200b\u200d\ufeff",  # zero-width characters, a BOM inside a line
    "a\u202eb",  # a right-to-left override
]
XMLISH = ["&amp;", "&lt;seg&gt;", "<b>x</b>", "<![CDATA[x]]>", "</seg>", "&#0;", "<seg"]
PIECE = st.one_of(
    st.sampled_from(SPACES),
    CONTROL,
    st.sampled_from(SCRIPTS),
    st.sampled_from(XMLISH),
    st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=12),
)
LONG = st.integers(40, 400).map(lambda n: " ".join(["Der Hund schläft"] * n))  # 150-1500 tokens
SHORT = st.lists(PIECE, max_size=6).map("".join)
# one line of text (no \n: each reader splits at it); one in four far longer than maxlen
LINE = st.one_of(SHORT, SHORT, SHORT, LONG)
INVALID_UTF8 = [b"\xff", b"\xfe\xfe", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\x80"]


@st.composite
def text_file(draw, min_lines=0, max_lines=8, invalid=50):
    """(bytes of a text file, its lines, the 1-based line holding invalid UTF-8 or 0);
    ``invalid``: in how many files of 100 a line is spoiled."""
    lines = draw(st.lists(LINE, min_size=min_lines, max_size=max_lines))
    bom, crlf = draw(st.booleans()), draw(st.booleans())
    encoded = [line.encode("utf-8") for line in lines]
    bad = 0
    if lines and draw(st.sampled_from([False] * (100 - invalid) + [True] * invalid)):
        bad = draw(st.integers(1, len(lines)))
        encoded[bad - 1] += draw(st.sampled_from(INVALID_UTF8))
    sep = b"\r\n" if crlf else b"\n"
    data = (b"\xef\xbb\xbf" if bom else b"") + sep.join(encoded) + (sep if lines else b"")
    if lines:  # the reader takes a file's leading U+FEFF for a byte-order mark
        lines = [(("\ufeff" if bom else "") + lines[0]).removeprefix("\ufeff"), *lines[1:]]
    return data, lines, bad


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------------------
# The corpus readers
# ---------------------------------------------------------------------------------------
def reads_as(reader, path, expected, error):
    """``reader(path)`` returns ``expected``, or raises the UserError that the regex
    ``error`` matches, if one is given."""
    if error:
        with pytest.raises(hparams.UserError, match=error):
            reader(path)
    else:
        assert reader(path) == expected


@pytest.mark.slow
@fuzz(200)
@given(file=text_file())
def test_read_lines(tmp_path_factory, file):
    """Lines with surrounding whitespace (CR included) removed, BOM dropped; invalid
    UTF-8 is one error naming the file and the line."""
    data, lines, bad = file
    path = written(tmp_path_factory, "corpus.de", data)
    error = bad and rf"^{re.escape(path)}:{bad}: not valid UTF-8"
    reads_as(files.read_lines, path, [line.strip() for line in lines], error)


ENTITIES = [("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'")]
ENTITIES += [("&#233;", "é"), ("&#x1F600;", "😀"), ("&#10;", "\n")]
XML_TEXT = st.text(
    st.characters(
        codec="utf-8", exclude_categories=["Cc", "Cs"], exclude_characters="\ufffe\uffff"
    ),
    max_size=10,
)


@st.composite
def xml_piece(draw):
    """(XML source, the text it stands for) of one piece of a <seg>."""
    text = draw(XML_TEXT)
    kind = draw(st.sampled_from(["text", "entity", "cdata", "nested", "space"]))
    if kind == "entity":
        return draw(st.sampled_from(ENTITIES))
    if kind == "cdata":
        text = text.replace("]]>", "")
        return f"<![CDATA[{text}]]>", text
    if kind == "nested":
        return (
            f"<b>{xml.sax.saxutils.escape(text)}<i>{xml.sax.saxutils.escape(text)}</i></b>",
            2 * text,
        )
    if kind == "space":
        return draw(st.sampled_from([(" ", " "), ("\n", " "), ("\t", " "), ("\r\n", " ")]))
    return xml.sax.saxutils.escape(text), text


@st.composite
def iwslt_xml(draw):
    """(bytes of an IWSLT test set, its segments' texts, whether it is broken)."""
    segs = draw(st.lists(st.lists(xml_piece(), max_size=5), max_size=5))
    body = "".join(
        f'<seg id="{i + 1}">{"".join(x for x, _ in seg)}</seg>\n' for i, seg in enumerate(segs)
    )
    head = '<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<srcset setlang="de">\n'
    doc = f'{head}<doc docid="talk" genre="lectures">\n{body}</doc>\n</srcset>\n</mteval>\n'
    broken = draw(st.sampled_from(["", "", "", "unclosed", "entity", "control"]))
    if broken == "unclosed":  # a missing closing tag
        doc = doc.replace("</doc>", "", 1)
    elif broken == "entity":  # an entity XML does not define
        doc = doc.replace("</mteval>", "&nbsp;</mteval>")
    elif broken == "control":
        doc = doc.replace("<doc ", "<doc \x01", 1)
    data = doc.encode("utf-8")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    texts = [" ".join("".join(t for _, t in seg).split()) for seg in segs]
    return data, texts, broken


@pytest.mark.slow
@fuzz(150)
@given(xml_file=iwslt_xml())
def test_read_iwslt_xml(tmp_path_factory, xml_file):
    """The <seg> texts with entities, CDATA and nested tags resolved; malformed XML is one
    error naming the file, line and column."""
    data, texts, broken = xml_file
    path = written(tmp_path_factory, "IWSLT16.TED.tst2014.de-en.de.xml", data)
    error = broken and rf"^{re.escape(path)}:\d+:\d+: malformed XML"
    reads_as(lambda p: prepro.read_iwslt_xml(p)[0], path, texts, error)


# ---------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def word_prepro(demo_prepro, tmp_path_factory):
    """The demo corpus preprocessed with the legacy word vocabulary."""
    folder = tmp_path_factory.mktemp("word")
    hp = hparams.apply(demo_prepro, {"vocab_type": "word", "prepro_dir": str(folder)})
    prepro.preprocess(hp)
    return hp


@pytest.fixture(scope="module")
def tokenizers(demo_prepro, word_prepro):
    alphabet = set()
    for split in ("train",):
        for side in data_load.read_raw(demo_prepro, split):
            alphabet.update("".join(side))
    alphabet = sorted(alphabet - {" "})
    return {
        "bpe": data_load.load_tokenizer(demo_prepro),
        "word": data_load.load_tokenizer(word_prepro),
    }, alphabet


@pytest.mark.slow
@fuzz(150)
@given(lines=st.lists(LINE, max_size=5), ids=st.lists(st.integers(0, 10**6), max_size=30))
def test_tokenizer_round_trip_never_fails(tokenizers, lines, ids):
    """Any text encodes to real token ids (no PAD, <S> or </S>) and decodes to one line of
    its own (NFKC-normalized) characters, spaces and unknown marks (BPE: ⁇), or of its
    cleaned words and <UNK> (word vocabulary); any id list decodes."""
    toks, _ = tokenizers
    for kind, tok in toks.items():
        for line, seq in zip(lines, tok.encode_src(lines)):
            assert all(3 < i < tok.src_vocab_size or i == data_load.UNK_ID for i in seq), kind
            text = tok.decode_tgt(tok.encode_tgt([line])[0])
            if kind == "bpe":
                assert set(text) <= set(unicodedata.normalize("NFKC", line)) | {" ", "⁇"}
            else:
                words = data_load.clean(line).split()
                assert text.split() == [w if w in tok.tgt_vocab else "<UNK>" for w in words]
        assert "\n" not in tok.decode_tgt(ids)


@fuzz(100)
@given(data=st.data())
def test_tokenizer_round_trip_of_known_text(tokenizers, data):
    """Text made of the training corpus's characters comes back exactly (BPE, whitespace
    runs made one space) or word for word (the word vocabulary, <UNK> for unknown words)."""
    toks, alphabet = tokenizers
    words = data.draw(st.lists(st.text(st.sampled_from(alphabet), min_size=1), max_size=8))
    spaces = data.draw(st.lists(st.sampled_from([" ", "  ", "\t"]), min_size=len(words)))
    line = "".join(w + s for w, s in zip(words, spaces))
    bpe, word = toks["bpe"], toks["word"]
    assert bpe.decode_tgt(bpe.encode_tgt([line])[0]) == " ".join(line.split())
    cleaned = data_load.clean(line).split()
    expected = " ".join(w if w in word.tgt_vocab else "<UNK>" for w in cleaned)
    assert word.decode_tgt(word.encode_tgt([line])[0]) == expected


# ---------------------------------------------------------------------------------------
# prepro, eval, translate and the exported graph
# ---------------------------------------------------------------------------------------
NORMAL = ["Die Frau liest ein Buch.", "Der Hund schläft im Garten.", "Zwei Kinder spielen."]


@st.composite
def parallel_corpus(draw):
    """{file name: (bytes, lines, bad line)} of a plain-text corpus (Multi30k layout):
    hostile lines among ordinary ones, now and then a side with one line too many."""
    corpus = {}
    for stem in ("train", "val", "test_2016_flickr"):
        n = draw(st.integers(0, 4))
        extra = draw(st.sampled_from([0] * 9 + [1]))
        for lang, count in (("de", n), ("en", n + extra)):
            data, lines, bad = draw(text_file(count, count, invalid=5))
            sep = b"\r\n" if b"\r\n" in data else b"\n"
            data += sep.join(s.encode() for s in NORMAL) + sep
            corpus[f"{stem}.{lang}"] = (data, lines + NORMAL, bad)
    return corpus


@pytest.mark.slow
@fuzz(20)
@given(corpus=parallel_corpus(), vocab_type=st.sampled_from(["bpe", "word"]))
def test_prepro_of_a_hostile_corpus(tmp_path_factory, corpus, vocab_type):
    """prepro either writes a consistent data set (as many encoded pairs as raw lines,
    pairs with an empty side dropped from train only) or stops with one clear error."""
    folder = tmp_path_factory.mktemp(f"fuzz{next(COUNTER)}")
    for name, (data, _, _) in corpus.items():
        write(str(folder / "data" / name), data)
    hp = tiny(
        str(folder),
        corpus="parallel",
        vocab_type=vocab_type,
        vocab_size=1000,  # above the corpus's distinct characters: every run builds one
        dev_stem="val",
        test_stem="test_2016_flickr",
    )
    expected = None  # prepro reads split by split: source, target, then their alignment
    for stem in ("train", "val", "test_2016_flickr"):
        (_, src, src_bad), (_, tgt, tgt_bad) = corpus[f"{stem}.de"], corpus[f"{stem}.en"]
        if src_bad or tgt_bad:
            name, line = (f"{stem}.de", src_bad) if src_bad else (f"{stem}.en", tgt_bad)
            expected = f"{folder / 'data' / name}:{line}: not valid UTF-8"
        elif len(src) != len(tgt):
            expected = f"{folder / 'data' / stem}.de has {len(src)} sentences but"
        if expected:
            break
    try:
        prepro.preprocess(hp)
    except hparams.UserError as e:
        assert expected and str(e).startswith(expected), e
        return
    assert expected is None
    for split, stem in (("train", "train"), ("dev", "val"), ("test", "test_2016_flickr")):
        pairs = [
            (a.strip(), b.strip()) for a, b in zip(corpus[f"{stem}.de"][1], corpus[f"{stem}.en"][1])
        ]
        if split == "train":
            pairs = [(a, b) for a, b in pairs if a and b]
        src, tgt = data_load.read_raw(hp, split)
        assert list(zip(src, tgt)) == pairs
        assert len(data_load.load_corpus(hp, split)) == len(pairs)
    data_load.load_tokenizer(hp)


@pytest.fixture(scope="module", params=["bpe", "word"])
def loaded(request, quick_run, word_prepro):
    """translate.py's translation of lines, and the exported translate function (built,
    not saved: the saved graph is the same), of the quick run's BPE model or of an
    untrained model on the word vocabulary."""
    pytest.importorskip("tensorflow_text")
    if request.param == "bpe":
        # at most 12 output tokens: an untrained model rarely ends a sentence by itself
        hp, tok, model, _ = checkpoints.load_run(quick_run[0].logdir, {"max_len": 12})
    else:
        hp = hparams.apply(word_prepro, {"max_len": 12, "position": "learned", "max_position": 64})
        tok = data_load.load_tokenizer(hp)
        keras.utils.set_random_seed(1)
        model = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
    translator = api.Translator(hp, tok, model)  # compiled once for every example

    def translate_lines(lines):
        return translate.translate_lines(translator, lines)

    return translate_lines, tok, export.ServingModule(model, tok, hp)


UNICODE_16_LATIN = [0xA7CB, 0xA7CC, 0xA7CD, 0xA7CE, 0xA7CF, 0xA7D2, 0xA7D4, 0xA7DA, 0xA7DB, 0xA7DC]
UNICODE_16_LATIN += [0xA7F1]


def exported(module, sentences):
    out = module.translate(tf.constant(sentences, tf.string))["translations"].numpy()
    return [s.decode("utf-8") for s in out]


@pytest.mark.slow
@fuzz(40)
@given(lines=st.lists(LINE, min_size=1, max_size=4))
def test_translate_and_the_exported_graph_agree(loaded, lines):
    """translate.py's path gives one output line per input line ('' for an empty one, a
    truncated translation for an overlong one); the exported graph gives the same."""
    translate_lines, tok, module = loaded
    if tok.kind == "word":  # Latin letters of Unicode 16: known to regex, not yet to RE2
        lines = [line.translate(dict.fromkeys(UNICODE_16_LATIN)) for line in lines]
    out = translate_lines(lines)
    assert len(out) == len(lines) and not any("\n" in o for o in out)
    for line, ids, o in zip(lines, tok.encode_src(lines), out):
        assert ids or o == "", line
    assert exported(module, [line.encode("utf-8") for line in lines]) == out


@fuzz(30)
@given(line=LINE, bad=st.sampled_from(INVALID_UTF8), at=st.integers(0, 60))
def test_exported_graph_replaces_invalid_utf8(loaded, line, bad, at):
    """The exported graph cannot raise the project's error: bytes that are not UTF-8
    become U+FFFD, as Python's errors="replace" makes them, and are translated."""
    translate_lines, _, module = loaded
    raw = line.encode("utf-8")
    data = raw[:at] + bad + raw[at:]
    expected = translate_lines([data.decode("utf-8", "replace")])
    assert exported(module, [data]) == expected


@pytest.mark.slow
@fuzz(10)
@given(src=text_file(max_lines=4, invalid=20), ref=text_file(max_lines=4, invalid=20))
def test_eval_of_hostile_test_files(quick_run, tmp_path_factory, src, ref):
    """eval.py on hostile --test_src/--test_ref files: results for every line, or one
    clear error (invalid UTF-8 with file and line, unaligned files, an empty test set)."""
    hp, _ = quick_run
    folder = tmp_path_factory.mktemp(f"fuzz{next(COUNTER)}")
    paths = [str(folder / "test.de"), str(folder / "test.en")]
    for path, (data, _, _) in zip(paths, (src, ref)):
        write(path, data)
    try:
        result = evaluate(hp.logdir, {"results_dir": str(folder / "results")}, "", *paths)
    except hparams.UserError as e:
        bad = [(p, f[2]) for p, f in zip(paths, (src, ref)) if f[2]]
        if bad:
            assert str(e).startswith(f"{bad[0][0]}:{bad[0][1]}: not valid UTF-8"), e
        elif len(src[1]) != len(ref[1]):
            assert "they must be aligned" in str(e)
        else:
            assert not src[1] and str(e).startswith("the test set is empty")
        return
    with open(result["results"] + ".json", encoding="utf-8") as f:
        assert json.load(f)["sentences"] == len(src[1]) == len(ref[1])
