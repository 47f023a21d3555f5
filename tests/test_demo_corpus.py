"""Tests for demo/corpus.py: determinism, IWSLT layout, lexicon files, and grammar spot checks."""

import hashlib
import os
import re
import xml.etree.ElementTree as ET

import pytest

from demo import corpus as dc

TRAIN = ("train.tags.de-en.de", "train.tags.de-en.en")
DEV = ("IWSLT16.TED.tst2013.de-en.de.xml", "IWSLT16.TED.tst2013.de-en.en.xml")
TEST = ("IWSLT16.TED.tst2014.de-en.de.xml", "IWSLT16.TED.tst2014.de-en.en.xml")
ALL_FILES = TRAIN + DEV + TEST
SMALL = dict(n_train=1200, n_dev=300, n_test=250)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    dc.write_demo_corpus(str(d), seed=3, **SMALL)
    return d


@pytest.fixture(scope="module")
def pairs():
    return dc.generate_pairs(2000, seed=11)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _text_lines(path):
    return [ln for ln in _read(path).splitlines() if not ln.startswith("<")]


def _segs(path):
    root = ET.parse(path).getroot()
    return {
        doc.get("docid"): [(s.get("id"), s.text.strip()) for s in doc.iter("seg")]
        for doc in root.iter("doc")
    }


# ------------------------------------------------------------ determinism
def test_generate_pairs_deterministic():
    a = dc.generate_pairs(300, seed=5)
    assert a == dc.generate_pairs(300, seed=5)
    assert a != dc.generate_pairs(300, seed=6)
    assert len(a) == 300 and all(isinstance(x, tuple) and len(x) == 2 for x in a)


def test_files_byte_identical_for_same_seed(tmp_path, corpus):
    again = tmp_path / "again"
    other = tmp_path / "other"
    dc.write_demo_corpus(str(again), seed=3, **SMALL)
    dc.write_demo_corpus(str(other), seed=4, **SMALL)
    for name in ALL_FILES:
        with open(corpus / name, "rb") as f1, open(again / name, "rb") as f2:
            assert f1.read() == f2.read(), name
    assert _read(corpus / TRAIN[0]) != _read(other / TRAIN[0])
    # nothing but the six files is left behind (no temp files)
    assert sorted(os.listdir(again)) == sorted(ALL_FILES)


def test_interrupted_write_leaves_old_files(tmp_path, monkeypatch):
    d = tmp_path / "c"
    dc.write_demo_corpus(str(d), seed=1, n_train=200, n_dev=20, n_test=20)
    before = {n: _read(d / n) for n in ALL_FILES}

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(dc.os, "replace", boom)
    with pytest.raises(OSError):
        dc.write_demo_corpus(str(d), seed=2, n_train=200, n_dev=20, n_test=20)
    assert sorted(os.listdir(d)) == sorted(ALL_FILES)
    assert {n: _read(d / n) for n in ALL_FILES} == before


# sha256 of the files written for seed 0 with 1500 / 100 / 100 pairs (recorded before
# the lexicon moved into lexicon/*.tsv).  Any change to the generator, to the lexicon
# files (their row order included) or to the writer changes them: update them only
# for an intended change of the corpus.
PINNED_SIZES = dict(seed=0, n_train=1500, n_dev=100, n_test=100)
PINNED_SHA256 = {
    "train.tags.de-en.de": ("b55812e9a817561cc6cfff64f1bbaaf118f9d8310b644baccb50283ee5760f49"),
    "train.tags.de-en.en": ("6f7dcbe63ae0d9ebc95ccc863c90af4aee6e186cd871e763f425e332162a9bab"),
    "IWSLT16.TED.tst2013.de-en.de.xml": (
        "7481e5eaae2e6daf37ea00c38a0a6abf5887e497ff2a54a4dca9f9f36a8c313e"
    ),
    "IWSLT16.TED.tst2013.de-en.en.xml": (
        "57bb2c55bce54a23c5cd368f8a69e44e23aeb0fe48634d7c4675e1af3f71c68d"
    ),
    "IWSLT16.TED.tst2014.de-en.de.xml": (
        "a19dbe5b4026bdbf5484d93eae3e117f757f67a60ba58af96d0cf073deb9becf"
    ),
    "IWSLT16.TED.tst2014.de-en.en.xml": (
        "446f41a083e9912ef547d7a4faecac006a489eb90a6cc6d1673e1ebf690d3032"
    ),
}


def test_files_match_pinned_hashes(tmp_path):
    dc.write_demo_corpus(str(tmp_path), **PINNED_SIZES)
    assert sorted(os.listdir(tmp_path)) == sorted(PINNED_SHA256)
    got = {
        name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in PINNED_SHA256
    }
    assert got == PINNED_SHA256


def test_main_cli(tmp_path):
    out = tmp_path / "cli"
    dc.main(
        [
            "--data_dir",
            str(out),
            "--seed",
            "2",
            "--n_train",
            "150",
            "--n_dev",
            "20",
            "--n_test",
            "20",
        ]
    )
    assert sorted(os.listdir(out)) == sorted(ALL_FILES)
    assert len(_text_lines(out / TRAIN[0])) == 150


# ------------------------------------------------------------------ layout
def test_train_layout(corpus):
    de_lines = _read(corpus / TRAIN[0]).splitlines()
    en_lines = _read(corpus / TRAIN[1]).splitlines()
    assert len(de_lines) == len(en_lines)
    # metadata lines sit at the same positions in both files
    for a, b in zip(de_lines, en_lines):
        assert a.startswith("<") == b.startswith("<")
    de_text = [ln for ln in de_lines if not ln.startswith("<")]
    en_text = [ln for ln in en_lines if not ln.startswith("<")]
    assert len(de_text) == len(en_text) == SMALL["n_train"]
    assert all(ln.strip() == ln and ln for ln in de_text + en_text)

    tags = ["url", "keywords", "speaker", "talkid", "title", "description"]
    talk_sizes, i = [], 0
    while i < len(de_lines):
        head = de_lines[i : i + 6]
        assert [re.match(r"<(\w+)>", h).group(1) for h in head] == tags
        assert all(h.endswith("</%s>" % t) for h, t in zip(head, tags))
        assert "/talks/lang/de/" in head[0] and "/talks/lang/en/" in en_lines[i]
        assert head[3] == en_lines[i + 3]  # same talkid
        i += 6
        n = 0
        while i < len(de_lines) and not de_lines[i].startswith("<"):
            n, i = n + 1, i + 1
        talk_sizes.append(n)
    assert len(talk_sizes) >= 4
    assert all(100 <= n <= 300 for n in talk_sizes[:-1]) and 1 <= talk_sizes[-1] <= 300
    assert _read(corpus / TRAIN[0]).endswith("\n")


def test_train_matches_generate_pairs(corpus):
    expected = dc.generate_pairs(SMALL["n_train"], seed=3)
    assert _text_lines(corpus / TRAIN[0]) == [de for de, _ in expected]
    assert _text_lines(corpus / TRAIN[1]) == [en for _, en in expected]


@pytest.mark.parametrize(
    "files,setid,count",
    [
        (DEV, "IWSLT16.TED.tst2013", SMALL["n_dev"]),
        (TEST, "IWSLT16.TED.tst2014", SMALL["n_test"]),
    ],
)
def test_xml_layout(corpus, files, setid, count):
    de_path, en_path = (corpus / f for f in files)
    de_raw, en_raw = _read(de_path), _read(en_path)
    assert de_raw.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n')
    assert f'<srcset setid="{setid}" srclang="german">' in de_raw
    assert f'<refset setid="{setid}" srclang="german" trglang="english" refid="ref">' in en_raw
    for raw in (de_raw, en_raw):
        for line in raw.splitlines():
            if line.startswith("<seg"):
                assert re.fullmatch(r'<seg id="\d+"> \S.*\S </seg>', line), line
    de_root, en_root = ET.parse(de_path).getroot(), ET.parse(en_path).getroot()
    assert de_root.tag == en_root.tag == "mteval"
    assert de_root[0].tag == "srcset" and en_root[0].tag == "refset"
    de_docs, en_docs = _segs(de_path), _segs(en_path)
    assert list(de_docs) == list(en_docs) and len(de_docs) >= 2
    total = 0
    for docid, segs in de_docs.items():
        ids = [int(k) for k, _ in segs]
        assert ids == list(range(1, len(segs) + 1))
        assert [k for k, _ in en_docs[docid]] == [k for k, _ in segs]
        total += len(segs)
        doc = de_root.find(f".//doc[@docid='{docid}']")
        assert doc.get("genre") == "lectures"
        for tag in ("url", "keywords", "speaker", "talkid", "title"):
            assert doc.find(tag) is not None
    assert total == count


def test_xml_escaping_round_trips(tmp_path):
    meta = {
        "talkid": "7",
        "speaker": "A & B",
        "keywords": "talks, <x>",
        "title": {"de": "Hunde & Katzen <im> Haus", "en": "Dogs & cats"},
        "description": {"de": "d & d", "en": "e > e"},
    }
    pairs = [("Max sagt: 5 < 6 & 7 > 3.", "Max says: 5 < 6 & 7 > 3."), ("Ja.", "Yes.")]
    path = tmp_path / "x.xml"
    path.write_text(dc._xml_text(pairs, [(meta, 2)], "de", "S"), encoding="utf-8")
    raw = _read(path)
    assert "&amp;" in raw and "&lt;" in raw and "&gt;" in raw
    root = ET.parse(path).getroot()
    doc = root.find(".//doc")
    assert doc.find("title").text == "Hunde & Katzen <im> Haus"
    assert doc.find("speaker").text == "A & B"
    assert [s.text.strip() for s in doc.iter("seg")] == [p[0] for p in pairs]


def test_real_xml_titles_unescape(corpus):
    # titles in the XML are escaped; after parsing they equal a plain title
    for files in (DEV, TEST):
        root = ET.parse(corpus / files[0]).getroot()
        for doc in root.iter("doc"):
            title = doc.find("title").text
            assert ":" in title and "&amp;" not in title


def test_heldout_disjoint_from_train(corpus):
    train_de = set(_text_lines(corpus / TRAIN[0]))
    dev = [t for segs in _segs(corpus / DEV[0]).values() for _, t in segs]
    test = [t for segs in _segs(corpus / TEST[0]).values() for _, t in segs]
    assert len(dev) == SMALL["n_dev"] and len(test) == SMALL["n_test"]
    assert not train_de & set(dev)
    assert not train_de & set(test)
    assert not set(dev) & set(test)
    assert len(set(dev)) == len(dev) and len(set(test)) == len(test)
    # held-out talks have their own ids
    train_ids = set(re.findall(r"<talkid>(\d+)</talkid>", _read(corpus / TRAIN[0])))
    held_ids = set(_segs(corpus / DEV[0])) | set(_segs(corpus / TEST[0]))
    assert not train_ids & held_ids


# ----------------------------------------------------------------- lexicon
LEXICON_DIR = dc._LEXICON_DIR


def test_lexicon_files_parse():
    names = sorted(n for n in os.listdir(LEXICON_DIR) if n.endswith(".tsv"))
    assert names == sorted(dc._COLUMNS)
    for name in names:
        with open(os.path.join(LEXICON_DIR, name), encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
        assert lines[-1] == "", f"{name}: no newline at the end"
        header = lines[0].split("\t")
        assert tuple(header) == dc._COLUMNS[name], name
        rows = lines[1:-1]
        assert rows, f"{name}: no entries"
        for lineno, line in enumerate(rows, 2):
            fields = line.split("\t")
            assert len(fields) == len(header), f"{name}:{lineno}: {len(fields)} fields"
            assert fields[-1], f"{name}:{lineno}: last field empty"
            assert all(x == x.strip() for x in fields), f"{name}:{lineno}: stray spaces"
            assert "\r" not in line, f"{name}:{lineno}: CR"
        assert len(dc._read_lexicon(name)) == len(rows)


def test_lexicon_tables_loaded():
    for table in (
        dc.NOUNS,
        dc.ADJS,
        dc.PLACES,
        dc.VERBS,
        dc._NAMES,
        dc._CITIES,
        dc._NUMBERS,
        dc._DAYS,
        dc._TIMES,
        dc._MATRIX,
        dc._EATS,
        dc._PURPOSE,
        dc._STATE,
        dc._WEATHER,
        dc._TOPICS,
        dc._LAST_NAMES,
        dc._GERN_OK,
        dc._ZU_OK,
        dc._STATE_ADJ,
        dc._PERSON_PRED,
        dc._NO_MODAL,
        dc._STATIVE,
    ):
        assert len(table) > 0
    assert len(dc.NOUNS) > 150 and len(dc.VERBS) > 100 and len(dc.ADJS) > 60
    assert len(dc._NUMBER_WEIGHTS) == len(dc._NUMBERS)
    assert set(dc._FRAME_VERBS) == {"i", "m", "t", "d", "dt", "po", "pl", "ps", "cop", "ex"}
    # cross references between the files resolve
    assert set(dc.PLACES) <= set(dc.NOUNS)
    assert all(a in dc.NOUNS and set(f) <= set(dc.NOUNS) for a, f in dc._EATS.items())
    assert all(p in dc.NOUNS and k in dc.VERBS for p, lst in dc._PURPOSE.items() for k, _ in lst)
    assert set(dc._STATE) <= set(dc.ADJS)
    for kinds in list(dc._STATE.values()) + dc._WEATHER:
        assert all(key in dc.VERBS for key, _ in kinds["pos"] + kinds["con"])
    assert dc._GERN_OK | dc._NO_MODAL | dc._STATIVE <= set(dc.VERBS)
    # spot checks of the parsed columns
    assert dc.NOUNS["Junge"].weak and dc.NOUNS["Brot"].mass and dc.NOUNS["Urlaub"].pl is None
    assert dc.NOUNS["Polizist"].en == "police officer" and dc.NOUNS["Maus"].en_pl == "mice"
    assert dc.ADJS["teuer"].stem == "teur" and not dc.ADJS["rot"].gradable
    assert dc.ADJS["groß"].over == (("person", "tall"),)
    assert dc.PLACES["Straße"].dir is None and dc.PLACES["Bahnhof"].loc == ("an", "at")
    v = dc.VERBS["spazierengehen"]
    assert (v.prefix, v.inf, v.aux) == ("spazieren ", "gehen", "s")
    assert v.com == (("mit", "dat", "with", "person dog"),)
    assert dc.VERBS["hören"].en_over == (("music", "listen to", "listened to"),)
    assert dc.VERBS["sitzen"].loc_req and dc.VERBS["sitzen"].praet == ("saß", "saßen")
    assert dc._STATE["hungrig"]["con"][0] == ("essen", {"neg": True})
    assert dc._STATE["glücklich"]["con"] == []


def test_lexicon_reader_rejects_bad_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(dc, "_LEXICON_DIR", str(tmp_path))
    (tmp_path / "days.tsv").write_text("de\ten\nMontag\tMonday\n\nDienstag\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"days.tsv:4: 1 fields"):
        dc._read_lexicon("days.tsv")
    (tmp_path / "days.tsv").write_text("de\tenglish\nMontag\tMonday\n", encoding="utf-8")
    with pytest.raises(ValueError, match="header"):
        dc._read_lexicon("days.tsv")
    (tmp_path / "days.tsv").write_text("de\ten\nMontag\t\n", encoding="utf-8")
    with pytest.raises(ValueError, match="days.tsv:2"):
        dc._read_lexicon("days.tsv")
    (tmp_path / "days.tsv").write_text("de\ten\r\nMontag\tMonday\r\n", encoding="utf-8")
    assert dc._read_lexicon("days.tsv") == [{"de": "Montag", "en": "Monday"}]


# ------------------------------------------------------------- statistics
@pytest.mark.slow
def test_vocabulary_size():
    ps = dc.generate_pairs(20000, seed=0)
    de_types = {w.strip(".,").lower() for de, _ in ps for w in de.split()}
    en_types = {w.strip(".,").lower() for _, en in ps for w in en.split()}
    assert len(de_types) >= 300
    assert len(en_types) >= 300
    mean_de = sum(len(de.split()) for de, _ in ps) / len(ps)
    assert 8.5 <= mean_de <= 11.5


def test_sentence_surface(pairs):
    for de, en in pairs:
        for s in (de, en):
            assert s[0].isupper(), s
            assert s.endswith(".") and not s.endswith(".."), s
            assert "  " not in s and s == s.strip(), s
            assert " ," not in s and ",," not in s and " ." not in s, s
            assert not s.startswith("<"), s
        assert 4 <= len(de.split()) <= 20, de
        assert len(en.split()) <= 22, en


def test_english_morphology_in_generated_text(pairs):
    bases = (
        {v.en.split()[0] for v in dc.VERBS.values()}
        | {m[3] for m in dc._MATRIX}
        | {o[1].split()[0] for v in dc.VERBS.values() for o in v.en_over}
        | {"have", "want", "like", "be"}
    )
    for _, en in pairs:
        low = en.lower()
        for m in re.finditer(r"\b(?:does|do|did) not (\w+)", low):
            assert m.group(1) in bases, en
        for m in re.finditer(r"\b(?:will|can|cannot|could|to) (?:not )?(\w+)", low):
            if m.group(0).startswith("to "):
                continue  # "to" is also a preposition
            assert m.group(1) in bases | {"often"}, en
        assert not re.search(r"\ba [aeiou]", low), en
        assert not re.search(r"\ban [^aeiou\s]", low), en
        assert not re.search(r"\b(\w+) \1\b", low.replace("that that", "")), en


def test_german_agreement_in_generated_text(pairs):
    for de, _ in pairs:
        low = de.lower()
        assert "nicht kein" not in low and "kein nicht" not in low, de
        assert not re.search(r"\b(?:in|an|zu|von) dem\b", low), de  # contracted
        assert not re.search(r"\bein (?:zwei|drei|vier|viele)\b", low), de


# ----------------------------------------------------------------- grammar
@pytest.mark.parametrize(
    "args,expected",
    [
        (("Hund", "acc", "def", "groß"), ("den großen Hund", "the big dog")),
        (("Hund", "nom", "def", "groß"), ("der große Hund", "the big dog")),
        (("Hund", "nom", "indef", "groß"), ("ein großer Hund", "a big dog")),
        (("Hund", "acc", "indef", "groß"), ("einen großen Hund", "a big dog")),
        (("Kind", "dat", "indef", "klein"), ("einem kleinen Kind", "a small child")),
        (("Kind", "dat", "def", "klein"), ("dem kleinen Kind", "the small child")),
        (("Apfel", "acc", "zwei", "rot"), ("zwei rote Äpfel", "two red apples")),
        (("Apfel", "dat", "zwei", "rot"), ("zwei roten Äpfeln", "two red apples")),
        (("Frau", "dat", "indef", "alt"), ("einer alten Frau", "an old woman")),
        (("Frau", "dat", "dies", "alt"), ("dieser alten Frau", "this old woman")),
        (("Haus", "nom", "unser", "alt"), ("unser altes Haus", "our old house")),
        (("Haus", "dat", "mein", "neu"), ("meinem neuen Haus", "my new house")),
        (("Auto", "acc", "kein", "teuer"), ("kein teures Auto", "no expensive car")),
        (("Wald", "nom", "indef", "dunkel"), ("ein dunkler Wald", "a dark forest")),
        (("Kaffee", "acc", "zero", "heiß"), ("heißen Kaffee", "hot coffee")),
        (("Milch", "dat", "zero", "kalt"), ("kalter Milch", "cold milk")),
        (("Wasser", "nom", "zero", "kalt"), ("kaltes Wasser", "cold water")),
        (("Mann", "nom", "indef", "groß"), ("ein großer Mann", "a tall man")),
        (("Mann", "acc", "viele", "alt"), ("viele alte Männer", "many old men")),
        (("Mann", "dat", "viele", "alt"), ("vielen alten Männern", "many old men")),
        (("Eis", "acc", "indef"), ("ein Eis", "an ice cream")),
    ],
)
def test_noun_phrase(args, expected):
    assert dc.noun_phrase(*args) == expected


def test_noun_phrase_plural_and_weak_nouns():
    assert dc.noun_phrase("Kind", "dat", "def", plural=True) == ("den Kindern", "the children")
    assert dc.noun_phrase("Hund", "dat", "def", plural=True) == ("den Hunden", "the dogs")
    assert dc.noun_phrase("Auto", "dat", "def", plural=True) == ("den Autos", "the cars")
    assert dc.noun_phrase("Hund", "nom", "def", plural=True) == ("die Hunde", "the dogs")
    assert dc.noun_phrase("Junge", "acc", "def") == ("den Jungen", "the boy")
    assert dc.noun_phrase("Junge", "dat", "indef", "klein") == (
        "einem kleinen Jungen",
        "a small boy",
    )
    assert dc.noun_phrase("Junge", "nom", "def") == ("der Junge", "the boy")
    assert dc.noun_phrase("Maus", "nom", "drei", "grau") == ("drei graue Mäuse", "three gray mice")
    assert dc.noun_phrase("Hund", "acc", "def", "groß", intens="sehr") == (
        "den sehr großen Hund",
        "the very big dog",
    )
    assert dc.noun_phrase("Tasche", "nom", "kein", plural=True) == ("keine Taschen", "no bags")


@pytest.mark.parametrize(
    "args,expected",
    [
        (("Park",), ("im Park", "in the park")),
        (("Park", "dir"), ("in den Park", "to the park")),
        (("Kino", "dir"), ("ins Kino", "to the cinema")),
        (("Bahnhof",), ("am Bahnhof", "at the station")),
        (("Bahnhof", "dir"), ("zum Bahnhof", "to the station")),
        (("Bäckerei", "dir"), ("zur Bäckerei", "to the bakery")),
        (("Meer", "dir"), ("ans Meer", "to the sea")),
        (("Küche",), ("in der Küche", "in the kitchen")),
        (("Küche", "dir"), ("in die Küche", "into the kitchen")),
        (("Schule",), ("in der Schule", "at school")),
        (("Markt",), ("auf dem Markt", "at the market")),
        (("Park", "loc", "def", "groß"), ("im großen Park", "in the big park")),
        (("Garten", "loc", "unser"), ("in unserem Garten", "in our garden")),
        (("Stadt", "dir", "def", "alt"), ("in die alte Stadt", "to the old city")),
    ],
)
def test_place_phrase(args, expected):
    assert dc.place_phrase(*args) == expected


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        (
            dict(
                subject=("Frau", "def"),
                verb="lesen",
                obj=("Buch", "indef"),
                time=("heute", "today"),
                front="time",
            ),
            ("Heute liest die Frau ein Buch.", "Today the woman reads a book."),
        ),
        (
            dict(subject=("Junge", "def"), verb="gehen", comp=("nach Hause", "home"), tense="past"),
            ("Der Junge ist nach Hause gegangen.", "The boy went home."),
        ),
        (
            dict(subject=("Frau", "def"), verb="kaufen", obj=("Auto", "def"), tense="past"),
            ("Die Frau hat das Auto gekauft.", "The woman bought the car."),
        ),
        (
            dict(
                subject=("Frau", "def"), verb="kaufen", obj=("Auto", "def"), tense="past", neg=True
            ),
            ("Die Frau hat das Auto nicht gekauft.", "The woman did not buy the car."),
        ),
        (
            dict(subject=("Hund", "def"), verb="haben", obj=("Ball", "kein"), neg=True),
            ("Der Hund hat keinen Ball.", "The dog does not have a ball."),
        ),
        (
            dict(subject=("Kind", "drei"), verb="spielen", comp=("im Park", "in the park")),
            ("Drei Kinder spielen im Park.", "Three children play in the park."),
        ),
        (
            dict(subject=("Frau", "def"), verb="lesen", obj=("Buch", "def"), neg=True),
            ("Die Frau liest das Buch nicht.", "The woman does not read the book."),
        ),
        (
            dict(subject=("Mann", "def"), verb="anrufen", obj=("Frau", "def")),
            ("Der Mann ruft die Frau an.", "The man calls the woman."),
        ),
        (
            dict(subject=("Mann", "def"), verb="anrufen", obj=("Frau", "def"), tense="past"),
            ("Der Mann hat die Frau angerufen.", "The man called the woman."),
        ),
        (
            dict(subject="ich", verb="anrufen", obj=("Mann", "def"), modal="will"),
            ("Ich will den Mann anrufen.", "I want to call the man."),
        ),
        (
            dict(
                subject=("Frau", "def"), verb="geben", obj=("Apfel", "indef"), dat=("Kind", "def")
            ),
            ("Die Frau gibt dem Kind einen Apfel.", "The woman gives the child an apple."),
        ),
        (
            dict(
                subject=("Kind", "def", None, True),
                verb="essen",
                obj=("Apfel", "kein", None, True),
                neg=True,
            ),
            ("Die Kinder essen keine Äpfel.", "The children do not eat apples."),
        ),
        (
            dict(subject="wir", verb="fahren", comp=("nach Berlin", "to Berlin"), tense="fut"),
            ("Wir werden nach Berlin fahren.", "We will travel to Berlin."),
        ),
        (
            dict(subject=("Mann", "def"), verb="sein", comp=("müde", "tired")),
            ("Der Mann ist müde.", "The man is tired."),
        ),
        (
            dict(
                subject=("Mann", "def"), verb="sein", comp=("müde", "tired"), tense="past", neg=True
            ),
            ("Der Mann war nicht müde.", "The man was not tired."),
        ),
        (
            dict(
                subject=("Frau", "def"),
                verb="spazierengehen",
                comp=("im Park", "in the park"),
                tense="past",
            ),
            ("Die Frau ist im Park spazieren gegangen.", "The woman went for a walk in the park."),
        ),
        (
            dict(subject=("Kind", "def"), verb="aufstehen", modal="muss"),
            ("Das Kind muss aufstehen.", "The child has to get up."),
        ),
        (
            dict(subject=("Ball", "def"), verb="gehören", dat=("Junge", "def")),
            ("Der Ball gehört dem Jungen.", "The ball belongs to the boy."),
        ),
        (
            dict(subject=("Hund", "def"), verb="folgen", dat=("Mann", "def"), tense="past"),
            ("Der Hund ist dem Mann gefolgt.", "The dog followed the man."),
        ),
    ],
)
def test_simple_sentence(kwargs, expected):
    assert dc.simple_sentence(**kwargs) == expected


def test_subordinate_clause_is_verb_final():
    cl = dc.Clause(dc.VERBS["sein"], dc.NP(dc.NOUNS["Mann"]), comp=dc.PP("müde", "tired"))
    assert cl.de_sub("weil") == "weil der Mann müde ist"
    cl = dc.Clause(
        dc.VERBS["gehen"], dc.NP(dc.NOUNS["Junge"]), tense="past", comp=dc.PP("nach Hause", "home")
    )
    assert cl.de_sub("dass") == "dass der Junge nach Hause gegangen ist"
    cl = dc.Clause(dc.VERBS["anrufen"], dc.NP(dc.NOUNS["Frau"]), acc=dc.NP(dc.NOUNS["Mann"]))
    assert cl.de_sub("obwohl") == "obwohl die Frau den Mann anruft"
    assert cl.en() == "the woman calls the man"


def test_templates_produce_subordinate_clauses(pairs):
    de = [p[0] for p in pairs]
    for conj in (", weil ", ", dass ", ", obwohl ", ", wenn ", ", um ", "Weil ", "Wenn "):
        assert any(conj in s or s.startswith(conj) for s in de), conj
    # a fronted subordinate clause is followed by the finite verb (V2)
    for s, e in pairs:
        if s.startswith("Weil ") and e.startswith("Because "):
            assert ", " in s
