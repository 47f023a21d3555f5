"""Deterministic synthetic German->English parallel corpus for the demo run.

The corpus is produced by a small hand-written grammar with real German
morphology (gender, case, strong/weak/mixed adjective declension, weak
nouns, separable verbs, verb-second and verb-final word order, perfect
tense with the right auxiliary, modal verbs, negation with ``nicht`` /
``kein``) and a single, deterministic English rendering of every German
sentence.  The files are laid out exactly like the IWSLT 2016 de-en
release, so the normal preprocessing code can read them unchanged::

    train.tags.de-en.de / .en                   (training text + <tag> lines)
    IWSLT16.TED.tst2013.de-en.de.xml / .en.xml  (dev set, mteval XML)
    IWSLT16.TED.tst2014.de-en.de.xml / .en.xml  (test set, mteval XML)

The module has three parts, in this order: the lexicon (read from data
files), the grammar (noun phrases, clauses, sentence templates, with
:func:`generate_pairs`), and the file writer (:func:`write_demo_corpus`,
:func:`main`), which only lays generated pairs out as IWSLT files.

Lexicon
-------
The vocabulary lives in the folder ``lexicon/`` beside this file and is read
once, at import time.  Each table is a UTF-8, tab-separated file with one
entry per line; the first line is a header naming the columns (checked
against :data:`_COLUMNS`); there is no quoting and there are no comments.
An empty field means "none", and the last column is never empty.  A field
holding several words or tags separates them with spaces; one holding
several specs or overrides separates them with ", ".  Row order matters:
the generator draws entries by position, so reordering a file changes the
corpus.  The files:

    nouns.tsv         nouns: gender, plurals, English, semantic tags
    adjectives.tsv    adjectives: stem, English, flags, nouns they modify
    places.tsv        place nouns: prepositions for "where" / "where to"
    verbs.tsv         verbs: forms, frame, selection tags, adjuncts, English
    names.tsv, cities.tsv, numbers.tsv, days.tsv, times.tsv
                      first names, cities, number words, weekdays, time
                      adverbials
    dass_verbs.tsv    verbs taking a dass-clause ("sagen, dass ...")
    animal_food.tsv   which animal eats what
    purposes.tsv      "um ... zu" purposes of going to a place
    weather.tsv       weather clauses
    consequences.tsv  what people do because of, or despite, a state or the weather
    talk_topics.tsv, surnames.tsv
                      metadata of the fake talks (file writer only)

``lexicon/README.md`` describes every column and its codes.  Small
closed-class tables that are grammar rather than vocabulary (articles and
adjective endings, pronouns, modal and auxiliary verbs, preposition
contractions) stay in this module.

Usage::

    python -m demo.corpus --data_dir data/demo --seed 0

Public API: :func:`generate_pairs`, :func:`write_demo_corpus`, :func:`main`;
the loaded tables :data:`NOUNS`, :data:`ADJS`, :data:`PLACES`, :data:`VERBS`;
lower-level helpers used by the tests: :func:`noun_phrase`,
:func:`place_phrase`, :func:`simple_sentence`.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
from dataclasses import dataclass, replace
from xml.sax.saxutils import escape

from transformer_tf2.utils import files

__all__ = [
    "generate_pairs",
    "main",
    "noun_phrase",
    "place_phrase",
    "simple_sentence",
    "write_demo_corpus",
]

###############################################################################
# Part 1 - lexicon: the vocabulary, read from lexicon/*.tsv
###############################################################################
# =============================================================== lexicon files
_LEXICON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lexicon")

# file name -> the header it must have
_COLUMNS = {
    "nouns.tsv": ("de", "gender", "plural", "en", "en_plural", "tags"),
    "adjectives.tsv": ("de", "stem", "en", "en_by_tag", "flags", "noun_tags"),
    "places.tsv": ("noun", "loc_de", "loc_en", "dir_de", "dir_en", "activities"),
    "verbs.tsv": (
        "key",
        "frame",
        "de",
        "de_1sg",
        "de_3sg",
        "praeteritum",
        "participle",
        "aux",
        "subj",
        "obj",
        "dat",
        "prep_obj",
        "loc",
        "dirs",
        "com",
        "spot",
        "flags",
        "en_by_obj",
        "en",
        "en_past",
    ),
    "names.tsv": ("name", "sex"),
    "cities.tsv": ("de", "en"),
    "numbers.tsv": ("de", "en", "weight"),
    "days.tsv": ("de", "en"),
    "times.tsv": ("de", "en", "tenses"),
    "dass_verbs.tsv": ("de_1sg", "de_3sg", "de_pl", "en"),
    "animal_food.tsv": ("animal", "food"),
    "purposes.tsv": ("place", "object", "verb"),
    "weather.tsv": (
        "weather",
        "de",
        "de_sub",
        "de_past",
        "de_past_sub",
        "en",
        "en_progressive",
        "en_past",
    ),
    "consequences.tsv": ("situation", "cause", "relation", "consequence"),
    "talk_topics.tsv": ("de", "en", "keywords"),
    "surnames.tsv": ("surname",),
}


def _read_lexicon(name: str) -> list[dict[str, str]]:
    """The rows of ``lexicon/<name>``, each a dict keyed by column name.

    Raises ValueError, naming the file and line, when the header is not
    ``_COLUMNS[name]``, a row has the wrong number of fields, or the last
    field of a row is empty.  Blank lines are skipped.
    """
    path = os.path.join(_LEXICON_DIR, name)
    columns = _COLUMNS[name]
    with open(path, encoding="utf-8", newline="") as f:
        lines = [line.rstrip("\r\n") for line in f]
    header = tuple(lines[0].split("\t")) if lines else ()
    if header != columns:
        raise ValueError(f"{path}:1: header {header} is not the expected {columns}")
    rows = []
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(columns) or not fields[-1]:
            raise ValueError(
                f"{path}:{lineno}: {len(fields)} fields (last one "
                f"{fields[-1]!r}); expected {len(columns)}, the last not empty"
            )
        rows.append(dict(zip(columns, fields, strict=True)))
    return rows


def _table(name: str) -> list[tuple[str, ...]]:
    """The rows of ``lexicon/<name>`` as tuples in column order."""
    return [tuple(row.values()) for row in _read_lexicon(name)]


def _with_flag(rows: list[dict[str, str]], flag: str, column: str) -> list[str]:
    """``row[column]`` of the rows whose ``flags`` field lists ``flag``, in file order."""
    return [row[column] for row in rows if flag in row["flags"].split()]


def _items(field: str) -> list[str]:
    """The ", "-separated items of a field (none for an empty field)."""
    return [item.strip() for item in field.split(",") if item.strip()]


# =============================================================== lexicon types
@dataclass(frozen=True)
class Noun:
    """A noun of nouns.tsv (German forms, English forms, semantic tags)."""

    de: str
    gender: str  # m, f, n
    weak: bool  # n-declension (den Jungen, dem Jungen)
    pl: str | None  # German plural, None if not used
    mass: bool
    en: str
    en_pl: str
    tags: frozenset

    def de_form(self, case: str, plural: bool) -> str:
        if plural:
            if case == "dat" and not self.pl.endswith(("n", "s")):
                return self.pl + "n"
            return self.pl
        if self.weak and case != "nom":
            return self.pl
        return self.de


@dataclass(frozen=True)
class Adj:
    """An adjective of adjectives.tsv (attributive stem, English, the noun tags it fits)."""

    de: str
    stem: str
    en: str
    over: tuple  # ((tag, english), ...)
    tags: frozenset
    gradable: bool

    def en_for(self, noun: Noun | None) -> str:
        if noun is not None:
            for tag, word in self.over:
                if tag in noun.tags:
                    return word
        return self.en


@dataclass(frozen=True)
class Place:
    """Prepositions and activities of a place noun (places.tsv)."""

    loc: tuple | None  # (German prep, English prep)
    dir: tuple | None
    acts: frozenset


@dataclass(frozen=True)
class Verb:
    """A verb of verbs.tsv: German forms, frame, selectional tags, adjunct specs, English."""

    key: str
    prefix: str  # separable prefix ("an", "spazieren " with a space)
    inf: str  # infinitive without the prefix
    s3: str  # 3rd singular present without the prefix
    part: str  # full participle
    aux: str  # "h" (haben) or "s" (sein)
    en: str  # English base form, may include a particle
    en_past: str
    frame: str
    subj: str  # subject tags
    obj: str = ""  # object tags (acc / dat-only / prep object)
    dat: str = ""  # recipient tags for ditransitives
    loc: tuple = ()  # locative specs
    dirs: tuple = ()  # directional specs (obligatory for frame "m")
    com: tuple = ()  # comitative / instrument specs
    prep: tuple = ()  # (German prep, case) of a prepositional object
    s1: str = ""
    praet: tuple = ()  # (sg, pl) simple past, used instead of the perfect
    en_over: tuple = ()  # ((tag, english, english past), ...) by object tag
    loc_req: bool = False
    spot: str = ""  # posture for position / placement verbs
    en_be: bool = False

    @property
    def pl(self) -> str:
        return self.inf

    @property
    def first(self) -> str:
        if self.s1:
            return self.s1
        stem = self.inf[:-2] if self.inf.endswith("en") else self.inf[:-1]
        return stem + "e"

    @property
    def inf_full(self) -> str:
        return self.prefix + self.inf

    @property
    def zu_inf(self) -> str:
        if not self.prefix:
            return "zu " + self.inf
        if self.prefix.endswith(" "):
            return self.prefix + "zu " + self.inf
        return self.prefix + "zu" + self.inf

    def en_forms(self, obj: NP | None = None) -> tuple[str, str, str]:
        base, past = self.en, self.en_past
        if obj is not None and obj.noun is not None:
            for tag, b, p in self.en_over:
                if tag in obj.noun.tags:
                    base, past = b, p
                    break
        return base, _en_third(base), past


# ========================================================== English morphology
def _en_plural(word: str) -> str:
    """Regular English plural of a (possibly multi-word) noun."""
    last = word.split()[-1]
    if last.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if len(last) > 1 and last[-1] == "y" and last[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _en_third(word: str) -> str:
    """English 3rd person singular of a (possibly multi-word) verb."""
    head, _, rest = word.partition(" ")
    if head == "have":
        form = "has"
    elif head.endswith(("s", "x", "ch", "sh", "z", "o")):
        form = head + "es"
    elif len(head) > 1 and head[-1] == "y" and head[-2] not in "aeiou":
        form = head[:-1] + "ies"
    else:
        form = head + "s"
    return form + (" " + rest if rest else "")


# ============================================================= lexicon loading
def _load_nouns() -> dict[str, Noun]:
    """nouns.tsv: plural "-" marks a mass noun, "~" a count noun used in the
    singular only; en_plural "." is the regular English plural; gender "mw" a
    weak masculine (n-declension: den Jungen)."""
    out = {}
    for row in _read_lexicon("nouns.tsv"):
        de, gender, pl, en = row["de"], row["gender"], row["plural"], row["en"]
        mass = pl == "-"
        en_pl = _en_plural(en) if row["en_plural"] == "." else row["en_plural"]
        tags = frozenset(row["tags"].split()) | ({"mass"} if mass else set())
        out[de] = Noun(
            de, gender[0], gender == "mw", None if pl in ("-", "~") else pl, mass, en, en_pl, tags
        )
    return out


def _load_adjectives(rows: list[dict[str, str]]) -> dict[str, Adj]:
    """adjectives.tsv: en_by_tag lists "tag=english" overrides (tall for a
    person); the flag "ungradable" rules out "sehr"."""
    out = {}
    for row in rows:
        over = tuple(tuple(item.split("=", 1)) for item in _items(row["en_by_tag"]))
        gradable = "ungradable" not in row["flags"].split()
        out[row["de"]] = Adj(
            row["de"], row["stem"], row["en"], over, frozenset(row["noun_tags"].split()), gradable
        )
    return out


def _load_places() -> dict[str, Place]:
    """places.tsv: prepositions (German, English) for location and direction;
    an empty direction means the place is never a destination."""
    out = {}
    for row in _read_lexicon("places.tsv"):
        dirn = (row["dir_de"], row["dir_en"]) if row["dir_de"] else None
        out[row["noun"]] = Place(
            (row["loc_de"], row["loc_en"]), dirn, frozenset(row["activities"].split())
        )
    return out


def _spec(item: str) -> str | tuple:
    """An adjunct spec of verbs.tsv: "P:prep:case:english:tags" becomes the tuple
    (prep, case, english, tags); the named specs ("L:act", "home_l", ...) stay str."""
    if item.startswith("P:"):
        prep, case, en_prep, tags = item[2:].split(":")
        return (prep, case, en_prep, tags)
    return item


def _load_verb(row: dict[str, str]) -> Verb:
    """One row of verbs.tsv: "|" ends a separable prefix (a space before it
    keeps the prefix a separate word); en_by_obj lists "tag=base/past"."""
    prefix, _, inf = row["de"].rpartition("|")
    flags = row["flags"].split()
    en_over = []
    for item in _items(row["en_by_obj"]):
        tag, forms = item.split("=", 1)
        base, past = forms.split("/")
        en_over.append((tag, base, past))
    return Verb(
        row["key"],
        prefix,
        inf,
        row["de_3sg"],
        row["participle"],
        {"haben": "h", "sein": "s"}[row["aux"]],
        row["en"],
        row["en_past"],
        row["frame"],
        row["subj"],
        obj=row["obj"],
        dat=row["dat"],
        loc=tuple(_spec(x) for x in _items(row["loc"])),
        dirs=tuple(_spec(x) for x in _items(row["dirs"])),
        com=tuple(_spec(x) for x in _items(row["com"])),
        prep=tuple(row["prep_obj"].split()),
        s1=row["de_1sg"],
        praet=tuple(row["praeteritum"].split()),
        en_over=tuple(en_over),
        loc_req="loc_req" in flags,
        spot=row["spot"],
        en_be="en_be" in flags,
    )


def _load_consequences() -> dict[str, dict[str, dict[str, list]]]:
    """consequences.tsv as situation ("state" / "weather") -> cause ->
    {"pos": [...], "con": [...]} ("because" / "although" rows); each entry is
    (verb key, forced parts), the parts parsed from "slot=value" words ("neg"
    alone: the consequence is negated)."""
    out: dict[str, dict] = {"state": {}, "weather": {}}
    for row in _read_lexicon("consequences.tsv"):
        key, *parts = row["consequence"].split()
        force: dict = {}
        for part in parts:
            if part == "neg":
                force["neg"] = True
            else:
                slot, value = part.split("=")
                force[slot] = value
        lists = out[row["situation"]].setdefault(row["cause"], {"pos": [], "con": []})
        lists[{"because": "pos", "although": "con"}[row["relation"]]].append((key, force))
    return out


def _by_frame(verbs: list[Verb]) -> dict[str, list[Verb]]:
    """frame -> its verbs, in file order."""
    out: dict[str, list[Verb]] = {}
    for verb in verbs:
        out.setdefault(verb.frame, []).append(verb)
    return out


def _load_eats() -> dict[str, list[str]]:
    """animal_food.tsv as animal -> the foods it eats (frame "fressen")."""
    out: dict[str, list[str]] = {}
    for animal, food in _table("animal_food.tsv"):
        out.setdefault(animal, []).append(food)
    return out


def _load_purposes() -> dict[str, list[tuple[str, str | None]]]:
    """purposes.tsv as place -> [(verb key, object tags or noun, or None)]."""
    out: dict[str, list[tuple[str, str | None]]] = {}
    for place, obj, key in _table("purposes.tsv"):
        out.setdefault(place, []).append((key, obj or None))
    return out


def _load_weather(consequences: dict[str, dict]) -> list[dict]:
    """weather.tsv: German main / subordinate clause in the present and past,
    English simple / progressive / past; plus the weather's consequences."""
    out = []
    for row in _read_lexicon("weather.tsv"):
        out.append(
            {
                "de": (row["de"], row["de_sub"], row["de_past"], row["de_past_sub"]),
                "en": (row["en"], row["en_progressive"], row["en_past"]),
                **consequences[row["weather"]],
            }
        )
    return out


NOUNS = _load_nouns()
_ADJ_ROWS = _read_lexicon("adjectives.tsv")
ADJS = _load_adjectives(_ADJ_ROWS)
PLACES = _load_places()
_VERB_ROWS = _read_lexicon("verbs.tsv")
_VERB_LIST = [_load_verb(row) for row in _VERB_ROWS]
VERBS = {v.key: v for v in _VERB_LIST}
assert len(VERBS) == len(_VERB_LIST), "duplicate verb keys"

_NOUN_LIST = list(NOUNS.values())
_ADJ_LIST = list(ADJS.values())
_FRAME_VERBS = _by_frame(_VERB_LIST)

# adjectives that can take "zu" (too), and those describing a passing state
# (only these combine with time / frequency adverbs in copula sentences)
_ZU_OK = set(_with_flag(_ADJ_ROWS, "takes_zu", "de"))
_STATE_ADJ = set(_with_flag(_ADJ_ROWS, "state", "de"))
_PERSON_PRED = _with_flag(_ADJ_ROWS, "person_state", "de")
# verbs that combine naturally with "gern" (English "like to ..."), verbs that
# do not take modal verbs (not done on purpose), stative verbs (no future, time
# or frequency adverbs)
_GERN_OK = set(_with_flag(_VERB_ROWS, "gern", "key"))
_NO_MODAL = set(_with_flag(_VERB_ROWS, "no_modal", "key"))
_STATIVE = set(_with_flag(_VERB_ROWS, "stative", "key"))

_NAMES = _table("names.tsv")  # (name, sex)
_CITIES = _table("cities.tsv")  # (German, English)
_NUMBERS = [(de, en) for de, en, _ in _table("numbers.tsv")]
_NUMBER_WEIGHTS = [int(weight) for *_, weight in _table("numbers.tsv")]  # drawing weights
_CLOCK = [("ein", "one")] + _NUMBERS[:11]
_DAYS = _table("days.tsv")
_ALL_TENSES = "pres past fut mpres mpast"
# (German, English, tenses it combines with)
_TIMES = (
    _table("times.tsv")
    + [("am " + d, "on " + e, _ALL_TENSES) for d, e in _DAYS]
    + [(f"um {d} Uhr", f"at {e} o'clock", _ALL_TENSES) for d, e in _CLOCK]
)
_MATRIX = _table("dass_verbs.tsv")  # (German 1sg, 3sg, pl, English base)
_EATS = _load_eats()
_PURPOSE = _load_purposes()
_CONSEQUENCES = _load_consequences()
# consequences of states: state adjective -> {"pos": [...], "con": [...]}
_STATE = _CONSEQUENCES["state"]
# weather: German main / subordinate / past, English simple / progressive / past
_WEATHER = _load_weather(_CONSEQUENCES["weather"])


@functools.cache
def _nouns_with(tags: str) -> tuple:
    """Nouns having at least one of the space-separated ``tags``."""
    want = set(tags.split())
    return tuple(n for n in _NOUN_LIST if n.tags & want)


@functools.cache
def _adjs_for(noun: Noun) -> tuple:
    """Adjectives that can modify ``noun``."""
    return tuple(a for a in _ADJ_LIST if a.tags & noun.tags)


@functools.cache
def _places_with(act: str) -> tuple:
    """Place nouns where the activity ``act`` happens."""
    return tuple(NOUNS[k] for k, p in PLACES.items() if act in p.acts)


###############################################################################
# Part 2 - grammar: closed classes, noun phrases, clauses, sentence templates
###############################################################################
# ============================================================== closed classes
# frequency adverbs (middle field in German, before the verb in English)
_FREQ = [
    ("oft", "often"),
    ("immer", "always"),
    ("manchmal", "sometimes"),
    ("selten", "rarely"),
    ("nie", "never"),
]
_INTENS = [("sehr", "very"), ("sehr", "very"), ("ziemlich", "rather")]

_MODALS = {
    # German present (1sg=3sg, pl), past (sg, pl); English by tense/negation
    "kann": (("kann", "können"), ("konnte", "konnten")),
    "muss": (("muss", "müssen"), ("musste", "mussten")),
    "will": (("will", "wollen"), ("wollte", "wollten")),
    "möchte": (("möchte", "möchten"), None),
}
_AUX = {"h": ("habe", "hat", "haben"), "s": ("bin", "ist", "sind")}
_WERDEN = ("werde", "wird", "werden")

# (German prep, English prep, noun tags) where things lie / stand / hang
_SPOTS = {
    "lie": [
        ("auf", "on", "surface"),
        ("unter", "under", "surface"),
        ("neben", "next to", "surface"),
        ("in", "in", "container"),
    ],
    "stand": [
        ("auf", "on", "surface"),
        ("neben", "next to", "surface"),
        ("unter", "under", "surface"),
    ],
    "hang": [("an", "on", "wall")],
    "hang_wear": [("an", "on", "door"), ("in", "in", "wardrobe")],
}


def _agr_idx(agr: str) -> int:
    """Index of an agreement (1sg, 3sg, pl) into the verb-form triples."""
    return {"1sg": 0, "3sg": 1, "pl": 2}[agr]


# ================================================================== declension
_DEF = {
    "nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"},
}
# endings of dies-/strong adjectives, of ein-words, and adjective endings
_STRONG = {
    "nom": {"m": "er", "f": "e", "n": "es", "pl": "e"},
    "acc": {"m": "en", "f": "e", "n": "es", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
_EIN = {
    "nom": {"m": "", "f": "e", "n": "", "pl": "e"},
    "acc": {"m": "en", "f": "e", "n": "", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
_WEAK_ADJ = {
    "nom": {"m": "e", "f": "e", "n": "e", "pl": "en"},
    "acc": {"m": "en", "f": "e", "n": "e", "pl": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"},
}
_MIXED_ADJ = {
    "nom": {"m": "er", "f": "e", "n": "es", "pl": "en"},
    "acc": {"m": "en", "f": "e", "n": "es", "pl": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"},
}
_POSS = {"mein": "my", "dein": "your", "unser": "our"}
_EIN_WORDS = {"indef": "ein", "kein": "kein", "mein": "mein", "dein": "dein", "unser": "unser"}
_DEF_LIKE = {"def", "dies", "mein", "dein", "unser"}

_PRONOUNS = {  # key: (German nominative, English, agreement)
    "ich": ("ich", "I", "1sg"),
    "wir": ("wir", "we", "pl"),
    "er": ("er", "he", "3sg"),
    "sie": ("sie", "she", "3sg"),
    "es": ("es", "it", "3sg"),
    "sie_pl": ("sie", "they", "pl"),
}

_CONTRACT = {
    ("in", "dem"): "im",
    ("an", "dem"): "am",
    ("zu", "dem"): "zum",
    ("zu", "der"): "zur",
    ("in", "das"): "ins",
    ("an", "das"): "ans",
    ("von", "dem"): "vom",
    ("bei", "dem"): "beim",
}
_DAT_PREPS = {"mit", "zu", "von", "aus", "bei", "nach", "seit"}


def _a_an(word: str) -> str:
    w = word.lower()
    if w.startswith(("one", "uni", "use", "eu")):
        return "a"
    if w.startswith(("hour", "honest")):
        return "an"
    return "an" if w[:1] in "aeiou" else "a"


@dataclass
class NP:
    """A noun phrase; renders itself in German (any case) and English."""

    noun: Noun | None = None
    det: str = "def"  # def indef kein zero dies mein dein unser viele einige num
    plural: bool = False
    adj: Adj | None = None
    intens: tuple | None = None  # ("sehr", "very")
    count: tuple | None = None  # ("zwei", "two") when det == "num"
    fixed: tuple | None = None  # (German, English, agreement, sex) names/pronouns
    pron_key: str | None = None

    @property
    def agr(self) -> str:
        if self.fixed:
            return self.fixed[2]
        return "pl" if self.plural else "3sg"

    @property
    def definite(self) -> bool:
        return self.fixed is not None or self.det in _DEF_LIKE

    @property
    def gkey(self) -> str:
        return "pl" if self.plural else self.noun.gender

    def de(self, case: str) -> str:
        if self.fixed:
            return self.fixed[0]
        g = self.gkey
        det = self.det
        if det == "def":
            art, table = _DEF[case][g], _WEAK_ADJ
        elif det == "dies":
            art, table = "dies" + _STRONG[case][g], _WEAK_ADJ
        elif det in _EIN_WORDS:
            art, table = _EIN_WORDS[det] + _EIN[case][g], _MIXED_ADJ
        elif det in ("viele", "einige"):
            art, table = det[:-1] + _STRONG[case][g], _STRONG
        elif det == "num":
            art, table = self.count[0], _STRONG
        else:  # zero article
            art, table = "", _STRONG
        words = [art]
        if self.adj is not None:
            if self.intens:
                words.append(self.intens[0])
            words.append(self.adj.stem + table[case][g])
        words.append(self.noun.de_form(case, self.plural))
        return " ".join(w for w in words if w)

    def article_de(self, case: str) -> str:
        """The bare definite article (for contraction checks)."""
        return _DEF[case][self.gkey] if self.det == "def" and not self.fixed else ""

    def en(self, kein: str = "a", bare: bool = False) -> str:
        if self.fixed:
            return self.fixed[1]
        noun = self.noun
        body = []
        if self.adj is not None:
            if self.intens:
                body.append(self.intens[1])
            body.append(self.adj.en_for(noun))
        body.append(noun.en_pl if self.plural else noun.en)
        det = self.det
        if det == "def":
            art = "" if bare else "the"
        elif det == "dies":
            art = "these" if self.plural else "this"
        elif det in _POSS:
            art = _POSS[det]
        elif det == "num":
            art = self.count[1]
        elif det == "viele":
            art = "many"
        elif det == "einige":
            art = "some"
        elif det == "kein" and kein == "no":
            art = "no"
        elif det in ("indef", "kein") and not self.plural and not noun.mass:
            art = _a_an(body[0])
        else:
            art = ""
        return " ".join(w for w in [art] + body if w)


def _pronoun(key: str) -> NP:
    de, en, agr = _PRONOUNS[key]
    return NP(fixed=(de, en, agr, None), pron_key=key)


def _name(name: str, sex: str) -> NP:
    return NP(fixed=(name, name, "3sg", sex))


def noun_phrase(
    noun: str,
    case: str = "nom",
    det: str = "def",
    adj: str | None = None,
    plural: bool = False,
    count: str | None = None,
    intens: str | None = None,
) -> tuple[str, str]:
    """Render a German noun phrase and its English translation.

    ``det`` is one of def, indef, kein, zero, dies, mein, dein, unser, viele,
    einige, or a German number word (zwei ... zwanzig) which implies plural.
    Example: ``noun_phrase("Hund", "acc", "def", "groß") ->
    ("den großen Hund", "the big dog")``.  A standalone kein-phrase is
    rendered "no ..." (inside a clause it becomes "does not ... a ...").
    """
    n = NOUNS[noun]
    cnt = None
    numbers = dict(_NUMBERS)
    if count is not None or det in numbers:
        word = count or det
        cnt, det, plural = (word, numbers[word]), "num", True
    if det in ("viele", "einige"):
        plural = True
    ints = None
    if intens:
        ints = (intens, dict(_INTENS)[intens])
    np_ = NP(n, det, plural, ADJS[adj] if adj else None, ints, cnt)
    return np_.de(case), np_.en(kein="no")


# ================================================================ prepositions
@dataclass(frozen=True)
class PP:
    """A ready phrase (prepositional phrase, predicate, adverbial) in German and English."""

    de: str
    en: str
    front: bool = True  # may stand in the Vorfeld


def _pp(prep: str, case: str, np_: NP, en_prep: str, bare: bool = False) -> PP:
    """Prepositional phrase, contracting "in dem" to "im" etc.; schools go bare ("at school")."""
    art = np_.article_de(case)
    np_de = np_.de(case)
    if (prep, art) in _CONTRACT:
        np_de = _CONTRACT[(prep, art)] + np_de[len(art) :]
    else:
        np_de = prep + " " + np_de
    bare = bare or (
        np_.noun is not None
        and "schoolish" in np_.noun.tags
        and np_.det == "def"
        and np_.adj is None
    )
    return PP(np_de, (en_prep + " " if en_prep else "") + np_.en(bare=bare))


def place_phrase(
    noun: str, kind: str = "loc", det: str = "def", adj: str | None = None, plural: bool = False
) -> tuple[str, str]:
    """Locative ("im Park", "in the park") or directional ("in den Park",
    "to the park") phrase for a place noun, using its usual preposition."""
    np_ = NP(NOUNS[noun], det, plural, ADJS[adj] if adj else None)
    pp = _place_pp(np_, kind)
    return pp.de, pp.en


def _place_pp(np_: NP, kind: str) -> PP:
    """Locative ("loc") or directional ("dir") phrase with the place's own preposition."""
    place = PLACES[np_.noun.de]
    prep, en = place.loc if kind == "loc" else place.dir
    case = "dat" if kind == "loc" or prep in _DAT_PREPS else "acc"
    return _pp(prep, case, np_, en)


_HOME = {
    "home_l": PP("zu Hause", "at home"),
    "home_d": PP("nach Hause", "home"),
    "home_arr": PP("zu Hause", "home"),
}


# ===================================================================== clauses
@dataclass
class Clause:
    """One clause: the verb, its arguments and adjuncts, tense, modal and
    negation; renders itself as a German main clause (verb second), a German
    subordinate clause (verb final), an "um ... zu" clause, and in English."""

    verb: Verb
    subj: NP
    tense: str = "pres"  # pres | past | fut
    modal: str | None = None  # kann muss will möchte
    neg: bool = False
    dat: NP | None = None
    acc: NP | None = None
    pobj: PP | None = None  # prepositional object (English NP only)
    com: PP | None = None  # comitative / instrument
    loc: PP | None = None  # optional locative adjunct
    comp: PP | None = None  # direction, location or predicate adjective
    time: tuple | None = None  # (German, English)
    mid: tuple | None = None  # frequency adverb (German, English) or ("gern", ...)
    front: str = "subj"  # subj time loc obj mid comp
    rel: PP | None = None  # relative clause attached to the object (", der ...")
    there: bool = False  # English "there is" rendering (position verbs)
    timeless: bool = False  # lasting property: no time or frequency adverbs

    # ------------------------------------------------------------ German
    @property
    def kein_used(self) -> bool:
        """Negation is carried by a "kein" noun phrase (no "nicht")."""
        return any(x is not None and x.det == "kein" for x in (self.acc, self.subj))

    @property
    def gern(self) -> bool:
        """The middle-field adverb is "gern" (English "like to")."""
        return self.mid is not None and self.mid[0] == "gern"

    def _subj_de(self) -> str:
        """German subject ("es" for "es gibt")."""
        return "es" if self.verb.frame == "ex" else self.subj.de("nom")

    def _fin_agr(self) -> str:
        """Agreement of the finite verb."""
        return "3sg" if self.verb.frame == "ex" else self.subj.agr

    def _finite(self) -> str:
        """Finite verb form (without separable prefix)."""
        v, i = self.verb, _agr_idx(self._fin_agr())
        if self.modal:
            pres, past = _MODALS[self.modal]
            forms = pres if self.tense == "pres" else past
            return forms[1] if i == 2 else forms[0]
        if self.tense == "fut":
            return _WERDEN[i]
        if self.tense == "past":
            if v.praet:
                return v.praet[1] if i == 2 else v.praet[0]
            return _AUX[v.aux][i]
        return (v.first, v.s3, "sind" if v.inf == "sein" else v.pl)[i]

    def _nonfinite(self) -> str:
        """Infinitive (modal, future) or participle (perfect) at the clause end;
        empty in a simple tense."""
        v = self.verb
        if self.modal or self.tense == "fut":
            return v.inf_full
        if self.tense == "past" and not v.praet:
            return v.part
        return ""

    def _midfield(self, exclude: set) -> list:
        """German middle-field constituents in order, without those in ``exclude``
        (subj time obj mid loc comp; the part standing in the Vorfeld)."""
        items = []
        late_subj = not self.subj.definite and self.verb.frame != "ex"
        if "subj" not in exclude and not late_subj:
            items.append(self._subj_de())
        if self.time and "time" not in exclude:
            items.append(self.time[0])
        if "subj" not in exclude and late_subj:
            items.append(self._subj_de())
        if self.dat is not None:
            items.append(self.dat.de("dat"))
        acc_def = self.acc is not None and self.acc.definite
        if acc_def and "obj" not in exclude:
            items.append(self.acc.de("acc"))
        if self.mid and "mid" not in exclude:
            items.append(self.mid[0])
        if self.neg and not self.kein_used:
            items.append("nicht")
        if self.acc is not None and not acc_def and "obj" not in exclude:
            items.append(self.acc.de("acc"))
        if self.com:
            items.append(self.com.de)
        if self.loc and "loc" not in exclude:
            items.append(self.loc.de)
        if self.pobj:
            items.append(self.pobj.de)
        if self.comp and "comp" not in exclude:
            items.append(self.comp.de)
        return items

    def _vorfeld(self) -> tuple[str, set]:
        """The German first position for ``front`` and the part it takes out of
        the middle field."""
        f = self.front
        if f == "time":
            return self.time[0], {"time"}
        if f == "loc":
            return self.loc.de, {"loc"}
        if f == "comp":
            return self.comp.de, {"comp"}
        if f == "obj":
            return self.acc.de("acc"), {"obj"}
        if f == "mid":
            return self.mid[0], {"mid"}
        return self._subj_de(), {"subj"}

    def de_main(self, vorfeld: str | None = None) -> str:
        """Verb-second main clause; ``vorfeld`` overrides the first position
        (e.g. a fronted subordinate clause), pushing the subject after the verb."""
        if vorfeld is None:
            vorfeld, exclude = self._vorfeld()
        else:
            exclude = set()
        words = [vorfeld, self._finite()] + self._midfield(exclude)
        if self.modal or self.tense == "fut" or (self.tense == "past" and not self.verb.praet):
            words.append(self._nonfinite())
        else:
            words.append(self.verb.prefix.strip())
        out = _join(words)
        if self.rel:
            out += ", " + self.rel.de
        return out

    def de_sub(self, intro: str, omit: set | None = None) -> str:
        """Verb-final clause introduced by ``intro`` (conjunction or relative
        pronoun); an empty intro gives a bare verb-final clause.  ``omit`` names
        middle-field parts left out ({"obj"} when the relative pronoun is the
        object)."""
        words = [intro] + self._midfield(omit or set())
        nonfin = self._nonfinite()
        if nonfin:
            words += [nonfin, self._finite()]
        else:
            words.append(self.verb.prefix + self._finite())
        return _join(words)

    def de_zu(self) -> str:
        """um ... zu infinitive clause body (no subject)."""
        return _join(["um"] + self._midfield({"subj"}) + [self.verb.zu_inf])

    # ----------------------------------------------------------- English
    def _en_verb(self, agr: str) -> list:
        """English verb group (auxiliaries, "not", adverb, main verb) for a
        subject with agreement ``agr``."""
        v = self.verb
        base, s3, past = v.en_forms(self.acc)
        neg = (self.neg or self.kein_used) and v.frame != "ex"
        mid = [self.mid[1]] if self.mid and not self.gern else []
        i = _agr_idx(agr)
        if v.en_be:
            if self.tense == "past":
                be = "were" if i == 2 else "was"
            else:
                be = ("am", "is", "are")[i]
            return [be] + (["not"] if neg else []) + mid
        if self.modal:
            return [self._en_modal(neg, i), base]
        if self.tense == "fut":
            return ["will"] + (["not"] if neg else []) + [base]
        if self.tense == "past":
            return ["did not", base] if neg else mid + [past]
        if self.gern:
            return ["likes to" if i == 1 else "like to", base]
        if neg:
            return ["does not" if i == 1 else "do not", base]
        return mid + [s3 if i == 1 else base]

    def _en_modal(self, neg: bool, i: int) -> str:
        """English for the modal ("can", "had to", "does not want to"); ``i`` is
        the agreement index (1sg, 3sg, pl)."""
        m, past_t = self.modal, self.tense == "past"
        if m == "kann":
            return ("could not" if neg else "could") if past_t else ("cannot" if neg else "can")
        if m == "möchte":
            return "would not like to" if neg else "would like to"
        word = {"muss": "have to", "will": "want to"}[m]
        if past_t:
            return "did not " + word if neg else _en_past_of(word)
        if neg:
            return ("does not " if i == 1 else "do not ") + word
        return _en_third(word) if i == 1 else word

    def en(self, front: bool = True) -> str:
        """English clause; with ``front`` a fronted German time adverbial is
        fronted in English too."""
        v = self.verb
        time_front = front and self.front == "time" and self.time is not None
        words = [self.time[1]] if time_front else []
        if v.frame == "ex" or self.there:
            words += self._en_there()
        else:
            words += self._en_plain()
        if self.time and not time_front:
            words.append(self.time[1])
        return _join(words)

    def _en_there(self) -> list:
        """ "there is / are X (place)" for "es gibt" and indefinite position subjects."""
        np_ = self.acc if self.verb.frame == "ex" else self.subj
        words = ["there"] + self._en_verb(np_.agr if not np_.noun.mass else "3sg")
        words.append(np_.en(kein="no"))
        if self.comp:
            words.append(self.comp.en)
        if self.loc:
            words.append(self.loc.en)
        return words

    def _en_plain(self) -> list:
        """Subject, verb group, objects (with a relative clause) and phrases."""
        words = [self.subj.en()] + self._en_verb(self.subj.agr)
        if self.dat is not None:
            words.append(self.dat.en())
        if self.acc is not None:
            words.append(self.acc.en())
            if self.rel:
                words.append(self.rel.en)
        for pp in (self.pobj, self.comp, self.com, self.loc):
            if pp:
                words.append(pp.en)
        return words

    def en_zu(self) -> str:
        """English "to ..." infinitive (the purpose of an "um ... zu" clause)."""
        base = self.verb.en_forms(self.acc)[0]
        words = ["to", base]
        if self.acc is not None:
            words.append(self.acc.en())
        for pp in (self.pobj, self.comp, self.com, self.loc):
            if pp:
                words.append(pp.en)
        return _join(words)


def _en_past_of(word: str) -> str:
    return {"have to": "had to", "want to": "wanted to"}[word]


def _join(words) -> str:
    return " ".join(w for w in words if w)


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + "."


# ================================================================== generation
class _Gen:
    """Random sentence generator; all randomness comes from ``rng``."""

    def __init__(self, rng: random.Random):
        self.r = rng

    # ----------------------------------------------------------- helpers
    def p(self, prob: float) -> bool:
        return self.r.random() < prob

    def choice(self, seq):
        return seq[self.r.randrange(len(seq))]

    def wchoice(self, items, weights):
        return self.r.choices(items, weights)[0]

    def noun(self, tags: str, exclude=()) -> Noun | None:
        cands = [n for n in _nouns_with(tags) if n.de not in exclude]
        return self.choice(cands) if cands else None

    def adj_for(self, np_: NP, p: float = 0.36):
        """With chance ``p``, give ``np_`` a fitting adjective (sometimes "sehr")."""
        if np_.noun is None or "bare" in np_.noun.tags or not self.p(p):
            return
        cands = _adjs_for(np_.noun)
        if not cands:
            return
        np_.adj = self.choice(cands)
        if np_.adj.gradable and np_.det != "kein" and self.p(0.15):
            np_.intens = self.choice(_INTENS)

    def np(
        self,
        noun: Noun,
        role: str = "obj",
        neg: bool = False,
        kein_ok: bool = False,
        adj_p: float = 0.36,
        dets: str | None = None,
        plural_ok: bool = True,
    ) -> NP:
        """Build an NP for ``noun``.  With ``neg`` the NP is either turned into
        a kein-phrase (when ``kein_ok``) or restricted to definite determiners."""
        r = self.r
        np_ = NP(noun)
        tags = noun.tags
        if "bare" in tags:
            np_.det = "kein" if neg else "zero"
            return np_
        if noun.mass:
            opts, w = ["zero", "def", "mein", "unser", "dies"], [40, 40, 6, 6, 8]
        elif noun.pl is None:
            opts, w = ["def", "indef", "mein", "dies"], [45, 40, 8, 7]
        else:
            np_.plural = (
                plural_ok and "solo" not in tags and r.random() < (0.25 if role == "pp" else 0.33)
            )
            if np_.plural:
                opts, w = (
                    ["def", "zero", "num", "mein", "unser", "dies", "viele", "einige"],
                    [36, 18, 22, 7, 5, 5, 5, 2],
                )
            else:
                opts, w = ["def", "indef", "mein", "unser", "dein", "dies"], [50, 26, 10, 5, 3, 6]
        if "kin" in tags and r.random() < 0.6:
            opts, w = ["mein", "unser", "dein"], [6, 3, 1]
        if "noposs" in tags:
            pairs = [(o, x) for o, x in zip(opts, w) if o not in _POSS]
            opts, w = zip(*pairs)
        if role == "subj" or tags & {"person", "baby"}:
            pairs = [(o, x) for o, x in zip(opts, w) if o != "zero" or noun.mass]
            opts, w = zip(*pairs)
        if role != "subj" and "kin" not in tags:  # "my" is rarer on objects
            w = [x / 3 if o in _POSS else x for o, x in zip(opts, w)]
        if dets:
            allowed = dets.split()
            pairs = [(o, x) for o, x in zip(opts, w) if o in allowed]
            if not pairs:
                pairs = [(allowed[0], 1)]
            opts, w = zip(*pairs)
        if neg:
            if kein_ok and r.random() < 0.55:
                np_.det = "kein"
                self.adj_for(np_, adj_p)
                return np_
            pairs = [(o, x) for o, x in zip(opts, w) if o in _DEF_LIKE] or [("def", 1)]
            opts, w = zip(*pairs)
        np_.det = self.wchoice(list(opts), list(w))
        if np_.det == "num":
            np_.count = self.wchoice(_NUMBERS, _NUMBER_WEIGHTS)
        self.adj_for(np_, adj_p)
        return np_

    def subject(
        self, tags: str, neg: bool = False, exclude=(), pron_p: float = 0.14, name_p: float = 0.12
    ) -> NP:
        """A subject with ``tags``: sometimes a pronoun or a name (humans), else a noun phrase."""
        want = set(tags.split())
        human = bool(want & {"person", "adult", "child"})
        if human and self.p(pron_p):
            key = self.wchoice(["ich", "wir", "er", "sie", "sie_pl"], [3, 2, 3, 3, 3])
            return _pronoun(key)
        if human and self.p(name_p):
            name, sex = self.choice(_NAMES)
            if name not in exclude:
                return _name(name, sex)
        noun = self.noun(tags, exclude)
        dets = None if not neg else "def mein unser dein dies"
        np_ = self.np(noun, "subj", dets=dets)
        return np_

    def person_obj(self, tags: str, exclude=(), neg=False, case="acc") -> NP:
        """A person as object: sometimes a name, else a noun phrase (definite when negated)."""
        if self.p(0.15):
            name, sex = self.choice([x for x in _NAMES if x[0] not in exclude])
            return _name(name, sex)
        noun = self.noun(tags, exclude)
        return self.np(noun, "obj", dets="def mein unser dein dies" if neg else None)

    def city(self) -> tuple:
        return self.choice(_CITIES)

    def spec_pp(self, spec, subj: NP | None = None, exclude=()) -> PP | None:
        """Build a PP from a locative/directional spec."""
        if spec == "instr":
            noun = self.noun("transport")
            return _pp("mit", "dat", NP(noun), "by", bare=True)
        if isinstance(spec, tuple):
            prep, case, en_prep, tags = spec
            noun = self.noun(tags, exclude)
            if noun is None:
                return None
            if "person" in tags.split() and self.p(0.15):
                name = self.choice(_NAMES)[0]
                return PP(prep + " " + name, en_prep + " " + name)
            np_ = self.np(
                noun, "pp", dets="def mein unser dies", adj_p=0.2, plural_ok=prep == "mit"
            )
            pp = _pp(prep, case, np_, en_prep)
            if case != "dat" or prep not in ("in", "an", "auf"):
                pp = PP(pp.de, pp.en, False)
            return pp
        if spec in _HOME:
            return _HOME[spec]
        if spec.startswith("city"):
            de, en = self.city()
            prep = {"city_l": ("in", "in"), "city_d": ("nach", "to"), "city_s": ("aus", "from")}[
                spec
            ]
            return PP(prep[0] + " " + de, prep[1] + " " + en)
        kind, act = spec.split(":")
        places = [n for n in _places_with(act) if n.de not in exclude]
        if not places:
            return None
        noun = self.choice(places)
        np_ = NP(noun, self.wchoice(["def", "indef", "unser", "mein", "dies"], [76, 6, 7, 6, 5]))
        if np_.det in _POSS and "noposs" in noun.tags:
            np_.det = "def"
        if np_.det == "indef" and noun.tags & {"room", "have", "furniture"}:
            np_.det = "def"
        if noun.de in ("Stadt", "Schule") or kind == "A":
            np_.det = "def"
        self.adj_for(np_, 0.15)
        if kind == "L":
            return _place_pp(np_, "loc")
        if kind == "A":  # arrive: German locative, English "at"
            pp = _place_pp(np_, "loc")
            return PP(pp.de, "at " + np_.en())
        return _place_pp(np_, "dir")

    def spot_pp(self, posture: str, case: str, noun: Noun | None, exclude=()) -> PP | None:
        """Where something lies / stands / hangs ("auf dem Tisch"); None if no spot fits."""
        animal = noun is not None and "animal" in noun.tags
        if posture == "hang" and noun is not None and "wear" in noun.tags:
            posture = "hang_wear"
        spots = [s for s in _SPOTS[posture] if not (animal and s[2] == "container")]
        prep, en_prep, tags = self.choice(spots)
        if animal:
            tags = "jumpon"
        noun = self.noun(tags, exclude)
        if noun is None:
            return None
        np_ = NP(noun, self.wchoice(["def", "mein", "unser", "dies"], [80, 8, 6, 6]))
        if np_.det in _POSS and "noposs" in noun.tags:
            np_.det = "def"
        self.adj_for(np_, 0.15)
        return _pp(prep, case, np_, en_prep)

    # ---------------------------------------------------- tense / adverbs
    def pick_tense(self, verb: Verb) -> tuple[str, str | None]:
        """(tense, modal or None) for ``verb``: stative verbs only present / past."""
        if verb.frame in ("ps", "cop", "ex") or verb.key in _STATIVE:
            return self.wchoice(["pres", "past"], [60, 40]), None
        t = self.wchoice(["pres", "past", "fut", "modal"], [44, 32, 8, 16])
        if t != "modal":
            return t, None
        if verb.key in _NO_MODAL:
            return self.wchoice(["pres", "past", "fut"], [50, 40, 10]), None
        m = self.wchoice(["kann", "muss", "will", "möchte"], [4, 3, 3, 2])
        if m == "möchte":
            return "pres", m
        return self.wchoice(["pres", "past"], [60, 40]), m

    def pick_time(self, tense: str, modal: str | None) -> tuple | None:
        """A time adverbial (German, English) that fits the tense."""
        key = ("m" + tense) if modal else tense
        opts = [t for t in _TIMES if key in t[2].split()]
        # day names and clock times are many; keep the plain adverbs common
        t = self.choice(opts)
        if (t[0].startswith("um ") or t[0][3:] in dict(_DAYS)) and self.p(0.5):
            t = self.choice(opts)
        return (t[0], t[1])

    # ------------------------------------------------------------ clauses
    def clause(
        self,
        verb: Verb | None = None,
        subj: NP | None = None,
        tense=None,
        modal="auto",
        neg=None,
        time_p=0.45,
        mid_p=0.1,
        allow_front=True,
        force: dict | None = None,
    ) -> Clause | None:
        """A random simple clause for ``verb`` (random when None), or None when the
        draw reaches a dead end (no word fits a slot); callers then draw again.

        ``subj``, ``tense``, ``modal`` ("auto": drawn with the tense) and ``neg``
        are drawn when not given; ``time_p`` / ``mid_p`` are the chances of a time
        adverbial and of a frequency adverb; ``force`` maps "acc", "comp" or "loc"
        to a ready-made part used instead of a drawn one.  Without ``allow_front``
        the subject stays in first position.
        """
        force = force or {}
        if verb is None:
            verb = self._random_verb()
        if tense is None:
            tense, drawn_modal = self.pick_tense(verb)
            if modal == "auto":
                modal = drawn_modal
        if modal == "auto":
            modal = None
        if neg is None:
            neg = self.p(0.17)
        if subj is None:
            subj = self._clause_subject(verb, neg)
        if neg and not subj.definite:
            neg = False
        cl = Clause(verb, subj, tense, modal, neg)
        excl = (subj.noun.de if subj.noun else subj.fixed[0],)
        if not self._add_arguments(cl, force, excl) or not self._add_adjuncts(cl, force, excl):
            return None
        for k in ("comp", "loc", "acc"):
            if k in force:
                setattr(cl, k, force[k])
        if verb.key in _STATIVE or cl.timeless:
            time_p = mid_p = 0
        self._add_time(cl, time_p)
        self._add_frequency(cl, mid_p)
        self._prune_negated(cl, allow_front)
        self._pick_front(cl, allow_front)
        return cl

    def _random_verb(self) -> Verb:
        """A verb: its frame drawn by weight (transitive most often), then uniformly."""
        frame = self.wchoice(
            ["i", "m", "t", "d", "dt", "po", "pl", "ps", "cop", "ex"],
            [14, 11, 30, 7, 5, 5, 5, 6, 10, 5],
        )
        return self.choice(_FRAME_VERBS[frame])

    def _clause_subject(self, verb: Verb, neg: bool) -> NP:
        """The subject: "es" for the existential, else drawn from the verb's
        subject tags (definite when a position verb is negated)."""
        if verb.frame == "ex":
            return _pronoun("es")
        subj = self.subject(verb.subj, neg=neg)
        if verb.frame == "ps" and not subj.definite and neg:
            subj.det = "def"
        return subj

    # ----------------------------------------------------- clause arguments
    def _add_arguments(self, cl: Clause, force: dict, excl: tuple) -> bool:
        """Fill the slots the verb's frame requires; False at a dead end."""
        f = cl.verb.frame
        if f in ("t", "d"):
            return self._object_args(cl, force, excl)
        if f == "dt":
            self._dative_args(cl, excl)
        elif f == "po":
            self._prep_object_args(cl, excl)
        elif f == "pl":
            return self._placement_args(cl)
        elif f == "ps":
            return self._position_args(cl, excl)
        elif f == "cop":
            return self._copula_args(cl, excl)
        elif f == "ex":
            self._existential_args(cl)
        return True

    def _object_args(self, cl: Clause, force: dict, excl: tuple) -> bool:
        """Accusative object (frames t and d; a forced one wins) and, for a
        ditransitive verb, the dative recipient; False when no object fits."""
        cl.acc = force["acc"] if "acc" in force else self._direct_object(cl, excl)
        if cl.acc is None:
            return False
        if cl.verb.frame == "d":
            excl2 = excl + ((cl.acc.noun.de,) if cl.acc.noun else ())
            cl.dat = self.person_obj(cl.verb.dat, excl2, cl.neg, "dat")
        return True

    def _direct_object(self, cl: Clause, excl: tuple) -> NP | None:
        """A drawn accusative object that fits the verb (for "fressen": what the
        subject animal eats), with the determiners the verb allows."""
        verb, neg = cl.verb, cl.neg
        tags = verb.obj
        if verb.key == "fressen":
            if cl.subj.noun is None or cl.subj.noun.de not in _EATS:
                return None
            noun = NOUNS[self.choice(_EATS[cl.subj.noun.de])]
        else:
            noun = self.noun(tags, excl)
        if noun is None:
            return None
        if "person" in noun.tags and "person" in tags.split() and self.p(0.15):
            return self.person_obj(tags, excl, neg)
        if verb.key in ("lieben", "kennen", "vermissen", "verstehen"):
            return self.np(noun, "obj", neg=neg, dets="def mein unser dein dies")
        if verb.key == "mögen":
            return self.np(
                noun,
                "obj",
                neg=neg,
                kein_ok=noun.mass or "bare" in noun.tags,
                dets="def mein unser dies zero",
            )
        if verb.key in ("haben", "haben_p"):
            return self.np(noun, "obj", neg=neg, kein_ok=True, dets="indef def num zero viele")
        return self.np(noun, "obj", neg=neg, kein_ok=True)

    def _dative_args(self, cl: Clause, excl: tuple) -> None:
        """Dative object of a dative-only verb ("dem Mann helfen"); "gehören"
        takes a definite singular subject and a person as the owner."""
        cl.dat = self.person_obj(cl.verb.obj, excl, True)
        if cl.verb.key == "gehören":
            if not cl.subj.definite or cl.subj.fixed:
                cl.subj.det = "def"
                cl.subj.plural = False
            cl.dat = self.person_obj("person", excl, True)

    def _prep_object_args(self, cl: Clause, excl: tuple) -> None:
        """Prepositional object ("auf den Bus warten"): a name, a city or an NP."""
        verb = cl.verb
        prep, case = verb.prep
        noun = self.noun(verb.obj, excl)
        if "person" in noun.tags and self.p(0.15):
            name, _ = self.choice([x for x in _NAMES if x[0] not in excl])
            cl.pobj = PP(prep + " " + name, name)
        elif "city" in verb.obj.split() and self.p(0.2):
            de, en = self.city()
            cl.pobj = PP(prep + " " + de, en)
        else:
            np_ = self.np(noun, "obj", dets="def mein unser dein dies")
            cl.pobj = _pp(prep, case, np_, "")

    def _placement_args(self, cl: Clause) -> bool:
        """Object and destination of a placement verb ("das Buch auf den Tisch
        legen"); False when no destination fits."""
        cl.acc = self.np(
            self.noun(cl.verb.obj), "obj", neg=cl.neg, dets="def mein unser dies indef"
        )
        if cl.acc.det == "kein":
            cl.acc.det = "def"
        cl.comp = self.spot_pp(cl.verb.spot, "acc", cl.acc.noun, (cl.acc.noun.de,))
        return cl.comp is not None

    def _position_args(self, cl: Clause, excl: tuple) -> bool:
        """Location of a position verb ("liegt auf dem Tisch"); an indefinite
        subject gives English "there is ..." with the location fronted."""
        cl.comp = self.spot_pp(cl.verb.spot, "dat", cl.subj.noun, excl)
        if cl.comp is None:
            return False
        if cl.subj.noun is not None and not cl.subj.definite:
            cl.front, cl.there = "comp", True
        return True

    def _copula_args(self, cl: Clause, excl: tuple) -> bool:
        """Predicate of "sein": mostly an adjective, else a location; the subject
        becomes a definite noun phrase without adjective."""
        subj = cl.subj
        subj.adj = subj.intens = None
        if subj.noun is not None and not subj.definite:
            subj.det, subj.count = "def", None
        places = self._copula_places(subj)
        if not places or self.p(0.65):
            return self._copula_adjective(cl)
        cl.comp = self.spec_pp(self.choice(places), subj, excl)
        return cl.comp is not None

    @staticmethod
    def _copula_places(subj: NP) -> list[str]:
        """Location specs a copula subject can be at (people, pets, small things)."""
        tags = subj.noun.tags if subj.noun is not None else {"person"}
        if tags & {"person", "pet"}:
            return ["L:stay", "L:play", "L:sit", "home_l", "L:walk", "L:work"]
        if tags & {"thing", "food", "drink", "furniture"} and "vehicle" not in tags:
            return ["L:exist_in"]
        return []

    def _copula_adjective(self, cl: Clause) -> bool:
        """Adjective predicate ("ist sehr müde"); one naming a lasting property
        makes the clause timeless.  False when no adjective fits the subject."""
        noun = cl.subj.noun
        cands = _adjs_for(noun) if noun else [a for a in _ADJ_LIST if "person" in a.tags]
        if not cands:
            return False
        adj = self.choice(cands)
        if noun is None:
            adj = ADJS[self.choice(_PERSON_PRED)]
        word_de, word_en = adj.de, adj.en_for(noun or NOUNS["Frau"])
        if adj.gradable and self.p(0.25):
            i = self.choice(_INTENS + ([("zu", "too")] if adj.de in _ZU_OK else []))
            word_de, word_en = i[0] + " " + adj.de, i[1] + " " + word_en
        cl.comp = PP(word_de, word_en)
        cl.timeless = adj.de not in _STATE_ADJ
        return True

    def _existential_args(self, cl: Clause) -> None:
        """Place and indefinite theme of "es gibt" ("im Garten gibt es einen
        Vogel"); negated, the theme takes "kein"."""
        act = self.choice(["exist_out", "exist_in"])
        place = NP(
            self.choice(_places_with(act)), self.wchoice(["def", "unser", "mein"], [80, 10, 10])
        )
        self.adj_for(place, 0.15)
        cl.loc = _place_pp(place, "loc")
        noun = self.noun("bird pet" if act == "exist_out" else "thing food furniture")
        cl.acc = self.np(noun, "obj", neg=cl.neg, kein_ok=True, dets="indef zero num viele einige")
        if cl.neg:
            cl.acc.det = "kein"
            cl.acc.count = None
        if cl.acc.det not in ("indef", "zero", "num", "viele", "einige", "kein"):
            cl.acc.det = "zero" if cl.acc.plural or noun.mass else "indef"

    # ------------------------------------------------------ clause adjuncts
    def _add_adjuncts(self, cl: Clause, force: dict, excl: tuple) -> bool:
        """Locative (frames i and t; obligatory for some verbs), direction (frame
        m, obligatory) and comitative; False at a dead end.  A forced part
        suppresses the drawn locative / direction."""
        verb, f = cl.verb, cl.verb.frame
        free = "loc" not in force and "comp" not in force
        if f in ("i", "t") and verb.loc and free and (verb.loc_req or self.p(0.65)):
            pp = self.spec_pp(self.choice(verb.loc), cl.subj, excl)
            if pp is None:
                return False
            if verb.loc_req:
                cl.comp = pp
            else:
                cl.loc = pp
        if f == "m" and "comp" not in force:
            cl.comp = self.spec_pp(self.choice(verb.dirs), cl.subj, excl)
            if cl.comp is None:
                return False
        if verb.com and not cl.neg and self.p(0.3):
            cl.com = self.spec_pp(self.choice(verb.com), cl.subj, excl)
        return True

    def _add_time(self, cl: Clause, time_p: float) -> None:
        """With chance ``time_p``, a time adverbial that fits the tense (state and
        position clauses take only a few)."""
        f = cl.verb.frame
        if cl.gern or not time_p or not self.p(time_p):
            return
        cl.time = self.pick_time(cl.tense, cl.modal)
        if f in ("cop", "ps", "ex") and cl.time[0].startswith(("um ", "jeden", "in der")):
            cl.time = None
        if f == "ps" and cl.time and cl.time[0] not in ("heute", "gestern", "jetzt"):
            cl.time = None

    def _add_frequency(self, cl: Clause, mid_p: float) -> None:
        """With chance ``mid_p``, a frequency adverb or "gern" - only in a plain
        affirmative present / past clause with a definite subject and no time."""
        if not (
            mid_p
            and not cl.neg
            and not cl.modal
            and cl.tense != "fut"
            and cl.time is None
            and cl.subj.definite
            and cl.verb.key != "gehören"
            and self.p(mid_p)
        ):
            return
        human = cl.subj.noun is None or "person" in cl.subj.noun.tags
        if cl.tense == "pres" and cl.verb.key in _GERN_OK and human and self.p(0.35):
            cl.mid = ("gern", "")
        else:
            cl.mid = self.choice(_FREQ)

    def _prune_negated(self, cl: Clause, allow_front: bool) -> None:
        """A negated clause keeps its locative only when that is fronted, and
        loses its comitative."""
        if not cl.neg:
            return
        if cl.loc and cl.verb.frame != "ex":
            if allow_front and cl.loc.front and self.p(0.5):
                cl.front = "loc"
            else:
                cl.loc = None
        cl.com = None

    def _pick_front(self, cl: Clause, allow_front: bool) -> None:
        """Topicalisation: draw what stands before the finite verb (subject,
        time, locative, a masculine object or a frequency adverb); without
        ``allow_front`` the subject is put back there."""
        if allow_front and cl.front == "subj":
            opts, w = ["subj"], [60]
            if cl.time:
                opts.append("time")
                w.append(45)
            if cl.loc and cl.loc.front:
                opts.append("loc")
                w.append(18)
            acc = cl.acc
            if (
                acc is not None
                and cl.verb.frame == "t"
                and acc.noun is not None
                and acc.definite
                and not acc.plural
                and acc.noun.gender == "m"
                and acc.det != "kein"
                and not cl.rel
            ):
                opts.append("obj")
                w.append(6)
            if cl.mid and cl.mid[0] in ("oft", "manchmal"):
                opts.append("mid")
                w.append(10)
            if cl.verb.frame == "ex":
                opts, w = (
                    ["subj", "loc"] + (["time"] if cl.time else []),
                    [30, 50] + ([30] if cl.time else []),
                )
            cl.front = self.wchoice(opts, w)
        elif not allow_front and cl.front != "subj":
            cl.front = "subj"
            if cl.there:  # an indefinite subject needs the locative up front
                cl.subj.det = "def"
                cl.there = False


def noun_is(np_: NP, tags: str) -> bool:
    """Whether the noun of ``np_`` has one of ``tags`` (names and pronouns: always)."""
    if np_.noun is None:
        return True
    return bool(np_.noun.tags & set(tags.split()))


# ------------------------------------------------------------------- templates
def _coref_pronoun(np_: NP) -> NP | None:
    """Pronoun referring back to ``np_`` (German by gender, English by sex)."""
    if np_.pron_key:
        return _pronoun(np_.pron_key)
    if np_.fixed:
        sex = np_.fixed[3]
        return _pronoun("er" if sex == "m" else "sie")
    if np_.plural:
        return _pronoun("sie_pl")
    n = np_.noun
    de = {"m": "er", "f": "sie", "n": "es"}[n.gender]
    if "person" in n.tags:
        if "male" in n.tags:
            en = "he"
        elif "female" in n.tags:
            en = "she"
        else:
            return None
    elif "animal" in n.tags:
        en = "it"
    else:
        return None
    return NP(fixed=(de, en, "3sg", None))


class _Templates(_Gen):
    """Sentence templates: simple clauses and combinations with weil / obwohl /
    deshalb / aber / wenn / dass / um ... zu / und and relative clauses."""

    def consequence(
        self,
        spec,
        subj: NP,
        tense: str,
        ref: NP | None = None,
        neg: bool = False,
        concessive: bool = False,
    ) -> Clause | None:
        """Clause for a consequence spec (verb key, forced parts) with subject
        ``subj``; ``ref`` is the noun phrase the subject stands for (for
        selectional checks).  None when the verb does not suit the subject."""
        key, force_spec = spec
        verb = VERBS[key]
        if not self._consequence_fits(verb, subj, ref or subj):
            return None
        neg = neg or force_spec.get("neg", False)
        force = self._forced_parts(verb, force_spec, neg)
        modal = self._consequence_modal(tense, neg, concessive)
        cl = self.clause(
            verb, subj, tense, modal, neg, time_p=0.2, mid_p=0, allow_front=False, force=force
        )
        if cl is not None:
            cl.com = None
            if "loc" not in force:
                cl.loc = None
        return cl

    @staticmethod
    def _consequence_fits(verb: Verb, subj: NP, ref: NP) -> bool:
        """Whether ``verb`` suits the subject that stands for ``ref`` (a pronoun
        only for human subjects; "fressen" only for animals with known food)."""
        if not noun_is(ref, verb.subj):
            return False
        if ref.noun is None and not set(verb.subj.split()) & {"person", "adult", "child"}:
            return False
        return verb.key != "fressen" or (subj.noun is not None and subj.noun.de in _EATS)

    def _forced_parts(self, verb: Verb, force_spec: dict, neg: bool) -> dict:
        """Ready-made clause parts for the "slot": value pairs of a consequence
        spec: home / doctor phrases, an object noun phrase, or a place phrase."""
        force = {}
        for k, val in force_spec.items():
            if k == "neg":
                continue
            if val in _HOME:
                force[k] = _HOME[val]
            elif val == "Arzt":
                force[k] = PP("zum Arzt", "to the doctor")
            elif k == "acc":
                force[k] = self._forced_object(NOUNS[val], neg)
            elif verb.key == "schwimmen":
                force[k] = _pp("in", "dat", NP(NOUNS[val], "def"), "in")
            else:
                kind = "dir" if verb.frame == "m" else "loc"
                force[k] = _place_pp(NP(NOUNS[val], "def"), kind)
        return force

    def _forced_object(self, noun: Noun, neg: bool) -> NP:
        """Object noun phrase for a forced object noun, mostly indefinite."""
        np_ = self.np(
            noun, "obj", neg=neg, kein_ok=True, adj_p=0.1, dets=None if neg else "zero indef def"
        )
        if not neg and np_.det == "def" and self.p(0.6):
            np_.det = "zero" if noun.mass else "indef"
            np_.plural, np_.count = False, None
        if np_.det == "zero" and not noun.mass and not np_.plural:
            np_.det = "indef"
        return np_

    def _consequence_modal(self, tense: str, neg: bool, concessive: bool) -> str | None:
        """Sometimes a modal in the present: "will"/"kann" when negated, "muss"
        in a concessive ("although ..."), else "will"/"möchte"."""
        if tense != "pres" or not self.p(0.15):
            return None
        if neg:
            return self.choice(["will", "kann"])
        if concessive:
            return "muss"
        return self.choice(["will", "möchte"])

    def state_sentence(self):
        """A state ("müde") and what the subject does because or although of it."""
        state = self.choice(list(_STATE))
        subj = self.subject("person animal", neg=True, pron_p=0.15, name_p=0.15)
        if subj.noun is not None:
            subj.adj = subj.intens = None
            if "animal" in subj.noun.tags and state not in ("müde", "hungrig", "durstig"):
                return None
        pron = _coref_pronoun(subj)
        if pron is None:
            return None
        tense = self.wchoice(["pres", "past"], [65, 35])
        adj = ADJS[state]
        adj_pp = PP(adj.de, adj.en)
        if self.p(0.2):
            adj_pp = PP("sehr " + adj.de, "very " + adj.en)
        form = self.wchoice(
            ["weil", "weil_f", "obwohl", "obwohl_f", "deshalb", "aber"], [30, 18, 14, 10, 14, 14]
        )
        concessive = form.startswith("obwohl") or form == "aber"
        opts = _STATE[state]["con" if concessive else "pos"]
        if not opts:
            return None
        if form in ("weil", "obwohl"):  # consequence first: full NP there
            cons_subj, state_subj = subj, pron
        else:  # state first: full NP there
            cons_subj, state_subj = pron, subj
        st = Clause(VERBS["sein"], state_subj, tense, comp=adj_pp)
        cons = self.consequence(
            self.choice(opts), cons_subj, tense, ref=subj, concessive=concessive
        )
        if cons is None:
            return None
        if form == "weil":
            return (cons.de_main() + ", " + st.de_sub("weil"), cons.en() + " because " + st.en())
        if form == "obwohl":
            return (
                cons.de_main() + ", " + st.de_sub("obwohl"),
                cons.en() + ", although " + st.en(),
            )
        if form == "weil_f":
            return (
                cons.de_main(vorfeld=st.de_sub("weil") + ","),
                "because " + st.en() + ", " + cons.en(),
            )
        if form == "obwohl_f":
            return (
                cons.de_main(vorfeld=st.de_sub("obwohl") + ","),
                "although " + st.en() + ", " + cons.en(),
            )
        if form == "deshalb":
            return (
                st.de_main() + ", " + cons.de_main(vorfeld="deshalb"),
                st.en() + ", so " + cons.en(),
            )
        return (st.de_main() + ", aber " + cons.de_main(), st.en() + ", but " + cons.en())

    def weather_sentence(self):
        """The weather and what someone does because, although or when it holds."""
        w = self.choice(_WEATHER)
        form = self.wchoice(
            ["wenn_f", "wenn", "weil_f", "weil", "obwohl_f", "obwohl", "deshalb", "aber"],
            [20, 10, 12, 14, 8, 8, 14, 14],
        )
        concessive = form.startswith("obwohl") or form == "aber"
        if form.startswith("wenn"):
            tense = "fut" if form == "wenn_f" and self.p(0.3) else "pres"
        else:
            tense = self.wchoice(["pres", "past"], [60, 40])
        subj = self.subject("person", neg=True)
        if subj.noun is not None:
            subj.adj = subj.intens = None
        spec = self.choice(w["con"] if concessive else w["pos"])
        cons = self.consequence(spec, subj, tense)
        if cons is None:
            return None
        past = tense == "past"
        de_main, de_sub = (w["de"][2], w["de"][3]) if past else (w["de"][0], w["de"][1])
        en_simple, en_prog, en_past = w["en"]
        en_w = en_past if past else (en_simple if form.startswith("wenn") else en_prog)
        if form == "wenn_f":
            head = "if" if tense == "fut" else "when"
            return (
                cons.de_main(vorfeld="wenn " + de_sub + ","),
                head + " " + en_w + ", " + cons.en(),
            )
        if form == "wenn":
            return cons.de_main() + ", wenn " + de_sub, cons.en() + " when " + en_w
        if form == "weil_f":
            return (
                cons.de_main(vorfeld="weil " + de_sub + ","),
                "because " + en_w + ", " + cons.en(),
            )
        if form == "weil":
            return cons.de_main() + ", weil " + de_sub, cons.en() + " because " + en_w
        if form == "obwohl_f":
            return (
                cons.de_main(vorfeld="obwohl " + de_sub + ","),
                "although " + en_w + ", " + cons.en(),
            )
        if form == "obwohl":
            return cons.de_main() + ", obwohl " + de_sub, cons.en() + ", although " + en_w
        if form == "deshalb":
            return (de_main + ", " + cons.de_main(vorfeld="deshalb"), en_w + ", so " + cons.en())
        return de_main + ", aber " + cons.de_main(), en_w + ", but " + cons.en()

    def dass_sentence(self):
        """ "X sagt / glaubt / weiß, dass ..." with a verb-final subordinate clause."""
        subj = self.subject("person", neg=True, pron_p=0.3)
        if subj.noun is not None:
            subj.adj = subj.intens = None
        verb = self.choice(_MATRIX)
        i = _agr_idx(subj.agr)
        neg = verb[3] in ("believe", "think") and self.p(0.2)
        inner = self.clause(allow_front=False, time_p=0.25, neg=False if neg else None)
        if inner is None or inner.there:
            return None
        en_v = verb[3]
        if neg:
            en = ("does not " if i == 1 else "do not ") + en_v
        else:
            en = _en_third(en_v) if i == 1 else en_v
        de = _join([subj.de("nom"), verb[i], "nicht" if neg else ""])
        return de + ", " + inner.de_sub("dass"), _join(
            [subj.en(), en, "that", inner.en(front=False)]
        )

    def relative_sentence(self):
        """A transitive main clause whose object has a relative clause: "der im
        Park spielt", "das sehr alt ist" or "den die Frau gekauft hat"."""
        verb = self.choice(_FRAME_VERBS["t"])
        cl = self.clause(verb, time_p=0.2, mid_p=0, neg=False)
        if cl is None or cl.acc is None or cl.acc.noun is None or cl.acc.noun.mass:
            return None
        if cl.acc.det in ("kein", "zero", "num", "viele", "einige"):
            return None
        cl.loc = cl.com = cl.mid = None
        cl.front = "time" if cl.time else "subj"
        kind = self.wchoice(["subj_i", "subj_cop", "obj"], [40, 25, 35])
        tense = cl.tense if cl.tense in ("pres", "past") else "pres"
        if kind == "subj_i":
            rel = self._relative_intransitive(cl.acc, tense)
        elif kind == "subj_cop":
            rel = self._relative_copula(cl.acc, tense)
        else:
            rel = self._relative_object(cl, tense)
        if rel is None:
            return None
        cl.rel = rel
        return cl.de_main(), cl.en()

    @staticmethod
    def _relative_subject(ante: NP) -> NP:
        """Nominative relative pronoun for ``ante``: der / die / das, who / that."""
        who = "who" if "person" in ante.noun.tags else "that"
        return NP(fixed=(_DEF["nom"][ante.gkey], who, ante.agr, None))

    def _relative_intransitive(self, ante: NP, tense: str) -> PP | None:
        """Relative clause with an intransitive verb and a location ("der im
        Park spielt"); None when no verb fits the antecedent."""
        verbs = [v for v in _FRAME_VERBS["i"] if noun_is(ante, v.subj) and v.loc]
        if not verbs:
            return None
        rv = self.choice(verbs)
        rel_subj = self._relative_subject(ante)
        rc = self.clause(rv, rel_subj, tense, None, False, time_p=0.15, mid_p=0, allow_front=False)
        if rc is None:
            return None
        if rc.loc is None and rc.comp is None:
            rc.loc = self.spec_pp(self.choice(rv.loc), rel_subj)
            if rc.loc is None:
                return None
        return PP(rc.de_sub(""), rc.en(front=False))

    def _relative_copula(self, ante: NP, tense: str) -> PP | None:
        """Relative clause "das (sehr) alt ist" with an adjective other than the
        antecedent's own; None when none fits."""
        cands = [a for a in _adjs_for(ante.noun) if ante.adj is None or a.de != ante.adj.de]
        if not cands:
            return None
        adj = self.choice(cands)
        word = PP(adj.de, adj.en_for(ante.noun))
        if adj.gradable and self.p(0.3):
            word = PP("sehr " + word.de, "very " + word.en)
        rc = Clause(VERBS["sein"], self._relative_subject(ante), tense, comp=word)
        return PP(rc.de_sub(""), rc.en(front=False))

    def _relative_object(self, cl: Clause, tense: str) -> PP | None:
        """Relative clause whose pronoun is the object ("den die Frau gekauft
        hat"), with another transitive verb and subject than ``cl``'s."""
        ante, verb = cl.acc, cl.verb
        if "person" in ante.noun.tags:
            return None
        verbs = [
            v
            for v in _FRAME_VERBS["t"]
            if ante.noun.tags & set(v.obj.split())
            and v.key != "fressen"
            and v.inf != verb.inf
            and v.en != verb.en
        ]
        if not verbs:
            return None
        rv = self.choice(verbs)
        rs = self.subject(rv.subj, neg=True, pron_p=0.2)
        if rs.noun is not None:
            rs.adj = rs.intens = None
            if rs.noun.de == ante.noun.de or (
                cl.subj.noun is not None and rs.noun.de == cl.subj.noun.de
            ):
                return None
        pronoun = _DEF["acc"][ante.gkey]
        rc = Clause(rv, rs, tense, acc=NP(fixed=(pronoun, "that", ante.agr, None)))
        en_cl = replace(rc, acc=ante)
        return PP(
            rc.de_sub(pronoun, omit={"obj"}),
            _join(["that", rs.en(), _join(en_cl._en_verb(rs.agr))]),
        )

    def purpose_sentence(self):
        """ "X geht in den Supermarkt, um Brot zu kaufen" (purposes.tsv)."""
        place = self.choice(list(_PURPOSE))
        key, tags = self.choice(_PURPOSE[place])
        pv = VERBS[key]
        subj = self.subject(
            "adult" if "adult" in pv.subj or "person" in pv.subj else pv.subj, neg=True
        )
        if not noun_is(subj, pv.subj) or (subj.noun is None and key == "spielen"):
            return None
        go = VERBS["gehen"]
        comp = _place_pp(NP(NOUNS[place], "def"), "dir")
        tense, modal = self.pick_tense(go)
        if modal == "kann":
            modal = "will"
        main = self.clause(go, subj, tense, modal, False, time_p=0.2, mid_p=0, force={"comp": comp})
        if main is None:
            return None
        main.com = None
        force = {}
        if tags in NOUNS:
            force["acc"] = NP(NOUNS[tags], "def", True)
        elif tags:
            noun = self.noun(tags)
            if "kin" in noun.tags or "friend" in noun.tags:
                force["acc"] = NP(noun, self.choice(["mein", "unser"]))
            else:
                force["acc"] = self.np(noun, "obj", dets="zero indef num", adj_p=0.15)
                if force["acc"].det == "zero" and not noun.mass and not force["acc"].plural:
                    force["acc"].det = "indef"
        zu = self.clause(
            pv, subj, "pres", None, False, time_p=0, mid_p=0, allow_front=False, force=force
        )
        if zu is None:
            return None
        zu.loc = zu.com = None
        return main.de_main() + ", " + zu.de_zu(), main.en() + " " + zu.en_zu()

    def und_sentence(self):
        """Two main clauses with different subjects joined by "und"."""

        def pick():
            verbs = [
                v
                for f in ("i", "t", "m", "d")
                for v in _FRAME_VERBS[f]
                if "person" in v.subj.split() or "adult" in v.subj.split()
            ]
            return self.choice(verbs)

        a = self.clause(pick(), time_p=0.2, mid_p=0.05)
        if a is None or a.tense not in ("pres", "past"):
            return None
        b = self.clause(pick(), tense=a.tense, modal=None, time_p=0.0, mid_p=0.05)
        if b is None or (b.subj.noun or b.subj.fixed) == (a.subj.noun or a.subj.fixed):
            return None
        return a.de_main() + " und " + b.de_main(), a.en() + " and " + b.en()

    def simple_sentence(self):
        """One random simple clause."""
        cl = self.clause()
        if cl is None:
            return None
        return cl.de_main(), cl.en()

    def pair(self) -> tuple[str, str]:
        """One (German, English) sentence pair from a random template, 4 to 20 German words."""
        while True:
            kind = self.wchoice(
                ["simple", "state", "weather", "dass", "relative", "purpose", "und"],
                [36, 12, 10, 12, 14, 9, 7],
            )
            out = getattr(self, kind + "_sentence")()
            if out is None:
                continue
            de, en = _sentence(out[0]), _sentence(out[1])
            n = len(de.split())
            if 4 <= n <= 20 and len(en.split()) <= 22:
                return de, en


def generate_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (German, English) sentence pairs, deterministic for ``seed``."""
    gen = _Templates(random.Random(seed))
    return [gen.pair() for _ in range(n)]


def simple_sentence(
    subject: tuple,
    verb: str,
    obj: tuple | None = None,
    tense: str = "pres",
    neg: bool = False,
    modal: str | None = None,
    comp: tuple | None = None,
    time: tuple | None = None,
    front: str = "subj",
    dat: tuple | None = None,
) -> tuple[str, str]:
    """Render one clause from explicit parts (used by the tests).

    ``subject``/``obj``/``dat`` are ``noun_phrase`` argument tuples
    ``(noun, det, adj, plural)`` or a pronoun key ("ich", "er", ...);
    ``comp`` is a (German, English) pair, ``time`` likewise.
    """

    def mk(spec):
        if spec is None:
            return None
        if isinstance(spec, str):
            return _pronoun(spec)
        noun, det, adj, plural = (list(spec) + [None, None, False])[:4]
        np_ = NP(NOUNS[noun], det or "def", bool(plural), ADJS[adj] if adj else None)
        numbers = dict(_NUMBERS)
        if det in numbers:
            np_.det, np_.count, np_.plural = "num", (det, numbers[det]), True
        return np_

    cl = Clause(
        VERBS[verb],
        mk(subject),
        tense,
        modal,
        neg,
        dat=mk(dat),
        acc=mk(obj),
        comp=PP(*comp) if comp else None,
        time=time,
        front=front,
    )
    return _sentence(cl.de_main()), _sentence(cl.en())


###############################################################################
# Part 3 - file writer: lays generated pairs out as the IWSLT 2016 de-en
# files.  It draws sentences only through generate_pairs and _Templates.pair.
###############################################################################
_TOPICS = _table("talk_topics.tsv")  # (German title, English title, keywords)
_LAST_NAMES = [surname for (surname,) in _table("surnames.tsv")]


def _talk_meta(rng: random.Random, talkid: int) -> dict:
    """Fake TED-talk metadata (speaker, title, keywords) for one talk."""
    first = rng.choice(_NAMES)[0]
    speaker = f"{first} {rng.choice(_LAST_NAMES)}"
    de_t, en_t, kw = rng.choice(_TOPICS)
    return {
        "talkid": str(talkid),
        "speaker": speaker,
        "keywords": "talks, " + kw,
        "title": {"de": f"{speaker}: {de_t}", "en": f"{speaker}: {en_t}"},
        "description": {
            "de": f"TED Talk Untertitel und Transkript: {de_t}",
            "en": f"TED Talk Subtitles and Transcript: {en_t}",
        },
    }


def _split_talks(rng: random.Random, n: int, lo: int, hi: int) -> list[int]:
    """Sizes of consecutive talks of ``lo`` to ``hi`` sentences covering ``n``."""
    sizes = []
    while n > 0:
        k = min(n, rng.randint(lo, hi))
        sizes.append(k)
        n -= k
    return sizes


def _url(lang: str, talkid: str) -> str:
    return f"http://www.ted.com/talks/lang/{lang}/demo_talk_{talkid}.html"


def _train_text(pairs, talks, lang: str) -> str:
    """train.tags.de-en.<lang>: per talk six <tag> lines, then its sentences."""
    lines, i = [], 0
    idx = 0 if lang == "de" else 1
    for meta, size in talks:
        lines += [
            f"<url>{_url(lang, meta['talkid'])}</url>",
            f"<keywords>{meta['keywords']}</keywords>",
            f"<speaker>{meta['speaker']}</speaker>",
            f"<talkid>{meta['talkid']}</talkid>",
            f"<title>{meta['title'][lang]}</title>",
            f"<description>{meta['description'][lang]}</description>",
        ]
        lines += [p[idx] for p in pairs[i : i + size]]
        i += size
    return "\n".join(lines) + "\n"


def _xml_text(pairs, talks, lang: str, setid: str) -> str:
    """mteval XML of a dev / test set: srcset (German) or refset (English)."""
    idx = 0 if lang == "de" else 1
    if lang == "de":
        head = f'<srcset setid="{setid}" srclang="german">'
        tail = "</srcset>"
    else:
        head = f'<refset setid="{setid}" srclang="german" trglang="english" refid="ref">'
        tail = "</refset>"
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>", head]
    i = 0
    for meta, size in talks:
        lines += [
            f'<doc docid="{meta["talkid"]}" genre="lectures">',
            f"<url>{escape(_url(lang, meta['talkid']))}</url>",
            f"<description>{escape(meta['description'][lang])}</description>",
            f"<keywords>{escape(meta['keywords'])}</keywords>",
            f"<speaker>{escape(meta['speaker'])}</speaker>",
            f"<talkid>{meta['talkid']}</talkid>",
            f"<title>{escape(meta['title'][lang])}</title>",
        ]
        for k, p in enumerate(pairs[i : i + size], 1):
            lines.append(f'<seg id="{k}"> {escape(p[idx])} </seg>')
        lines.append("</doc>")
        i += size
    lines += [tail, "</mteval>"]
    return "\n".join(lines) + "\n"


def _heldout(gen: _Templates, n: int, seen: set) -> list:
    """``n`` new pairs whose German is not in ``seen`` (which they are added to)."""
    out, tries = [], 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise RuntimeError("could not generate enough unique held-out sentences")
        de, en = gen.pair()
        if de in seen:
            continue
        seen.add(de)
        out.append((de, en))
    return out


def write_demo_corpus(
    data_dir: str,
    seed: int = 0,
    n_train: int = 20000,
    n_dev: int = 500,
    n_test: int = 500,
    episodes=None,
) -> None:
    """Write the synthetic corpus into ``data_dir`` in the IWSLT16 de-en layout.
    ``episodes``: a document mode (demo.documents.Episodes) that mixes its episodes into
    every split and writes its own files too; None: the sentences alone."""
    os.makedirs(data_dir, exist_ok=True)
    if episodes is None:
        train = generate_pairs(n_train, seed)
    else:
        train = episodes.mix(n_train, _Templates(random.Random(seed)).pair)
    meta_rng = random.Random(seed * 7919 + 17)
    held_gen = _Templates(random.Random(seed * 104729 + 1))

    talks, tid = [], 1
    for size in _split_talks(meta_rng, n_train, 100, 300):
        talks.append((_talk_meta(meta_rng, tid), size))
        tid += 1
    texts = {
        "train.tags.de-en.de": _train_text(train, talks, "de"),
        "train.tags.de-en.en": _train_text(train, talks, "en"),
    }
    seen = {de for de, _ in train}
    for setid, n, first_id in (
        ("IWSLT16.TED.tst2013", n_dev, 5001),
        ("IWSLT16.TED.tst2014", n_test, 6001),
    ):
        if episodes is None:
            pairs = _heldout(held_gen, n, seen)
        else:
            pairs = episodes.mix(n, lambda: _heldout(held_gen, 1, seen)[0])
        docs, tid = [], first_id
        for size in _split_talks(meta_rng, n, 60, 140):
            docs.append((_talk_meta(meta_rng, tid), size))
            tid += 1
        for lang in ("de", "en"):
            texts[f"{setid}.de-en.{lang}.xml"] = _xml_text(pairs, docs, lang, setid)
    if episodes is not None:
        texts.update(episodes.files())
    for name, text in texts.items():
        files.atomic_write(os.path.join(data_dir, name), text)


def parser() -> argparse.ArgumentParser:
    """The command line's parser (``python -m demo.corpus --help``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data_dir", default="data/demo", help="output directory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n_train", type=int, default=20000)
    ap.add_argument("--n_dev", type=int, default=500)
    ap.add_argument("--n_test", type=int, default=500)
    return ap


def main(argv=None) -> None:
    """Command line: write the demo corpus into --data_dir."""
    args = parser().parse_args(argv)
    write_demo_corpus(args.data_dir, args.seed, args.n_train, args.n_dev, args.n_test)
    print(f"wrote demo corpus to {args.data_dir}")


if __name__ == "__main__":
    main()
