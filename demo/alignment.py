"""The demo corpus's gold word alignment, and alignments scored against it.

The grammar of :mod:`demo.corpus` draws each content word of a pair from one lexicon
entry, which gives the word on both sides: *Studentinnen* and *students* are the plural
of one row of nouns.tsv. :func:`gold_links` finds those words again in a generated pair:

- each entry's German forms (nouns by case and number, adjectives with every ending,
  verbs in each person, tense and participle, possessives declined) and English forms
  (singular and plural; base, third person and past);
- names, cities, weekdays, numbers, pronouns, time and frequency adverbs and "sehr";
- a link for each entry whose forms occur once on each side, so that the pair cannot be
  read two ways; a word that two entries would link to different words gets none.

Articles, prepositions, auxiliaries, conjunctions and a separable verb's particle are
left out: the grammar renders them by rules (*im* for *in dem*, *did not*), not one word
for one word. The links are "sure" links in the sense of Och and Ney (2003, "A
Systematic Comparison of Various Statistical Alignment Models", 6): :func:`agreement`
scores an alignment on the target words that have one. Used by bench/alignment.py.
"""

from __future__ import annotations

import functools

from demo import corpus

_ENDINGS = ("", "e", "en", "em", "er", "es")
_EXTRA = [  # closed-class words with one rendering, beyond the tables
    ("ich", "i"),
    ("wir", "we"),
    ("er", "he"),
    ("es", "it"),
    ("sie", "she"),
    ("sie", "they"),
    ("uhr", "o'clock"),
]


def _words(text: str) -> tuple[str, ...]:
    """A lexicon form as the lower-case words :func:`_normalise` gives."""
    return tuple(_normalise(w) for w in text.split())


def _normalise(word: str) -> str:
    """A sentence's word as forms are matched: lower case, without the punctuation
    around it or an English possessive 's."""
    word = word.lower().strip('.,;:!?"()')
    return word[:-2] if word.endswith("'s") else word


def _verb_forms(v) -> tuple[set, set]:
    """German forms of a verb of verbs.tsv (without its separable prefix, as the finite
    verb stands, and with it, as infinitive, zu-infinitive and participle) and its
    English head words (base, third person, past; a particle is not the verb's word)."""
    stem = v.inf[:-2] if v.inf.endswith("en") else v.inf[:-1]
    de = {v.inf, v.s3, v.first, stem + "st", stem + "t", stem + "en", *v.praet}
    joined = v.prefix.strip()
    de |= {joined + v.inf, joined + "zu" + v.inf, v.part.replace(" ", "")}
    de |= {p + e for p in v.praet for e in ("", "st", "t", "n", "en")}
    heads = set()
    for base, past in [(v.en, v.en_past)] + [(b, p) for _, b, p in v.en_over]:
        for form in (base, corpus._en_third(base), past):
            heads.add(form.split()[0])
    return {_words(f) for f in de if f}, {(h,) for h in heads}


@functools.cache
def entries() -> tuple[tuple[frozenset, frozenset], ...]:
    """Each lexicon entry as (German forms, English forms), every form a tuple of
    normalised words."""
    out = []

    def add(de, en):
        out.append((frozenset(_words(f) for f in de), frozenset(_words(f) for f in en)))

    for n in corpus.NOUNS.values():
        de = {n.de} | ({n.pl, n.de_form("dat", True)} if n.pl else set())
        add(de, {n.en, n.en_pl})
    for a in corpus.ADJS.values():
        add({a.de} | {a.stem + e for e in _ENDINGS}, {a.en} | {w for _, w in a.over})
    for v in corpus.VERBS.values():
        de, en = _verb_forms(v)
        out.append((frozenset(de), frozenset(en)))
    for sg1, sg3, pl, en in corpus._MATRIX:
        add({sg1, sg3, pl}, {en, corpus._en_third(en)})
    for de, en in corpus._POSS.items():
        add({de + e for e in _ENDINGS}, {en})
    add({"dies" + e for e in _ENDINGS[1:]}, {"this", "these"})
    for name, _ in corpus._NAMES:
        add({name}, {name})
    pairs = corpus._CITIES + corpus._DAYS + corpus._NUMBERS + corpus._FREQ + corpus._INTENS
    for de, en, *_ in pairs + list(corpus._table("times.tsv")) + _EXTRA:
        if len(de.split()) == 1 or len(en.split()) == 1:  # a fan, never a phrase to phrase
            add({de}, {en})
    return tuple(out)


def _span(words: list[str], forms: frozenset) -> tuple[int, ...] | None:
    """The positions of the one place where ``forms`` occur in ``words`` (a longer form
    holding a shorter one is one place); None if none or several."""
    spans = [
        tuple(range(i, i + len(f)))
        for f in forms
        for i in range(len(words) - len(f) + 1)
        if tuple(words[i : i + len(f)]) == f
    ]
    if not spans:
        return None
    widest = max(spans, key=len)
    return widest if all(set(s) <= set(widest) for s in spans) else None


def gold_links(de: str, en: str) -> set[tuple[int, int]]:
    """The sure links ``{(i, j)}`` of one demo pair: German word i (the sentence split on
    spaces) gives English word j."""
    src, tgt = [_normalise(w) for w in de.split()], [_normalise(w) for w in en.split()]
    pairs = set()  # (German span, English span) of each entry found once on each side
    for de_forms, en_forms in entries():
        s, t = _span(src, de_forms), _span(tgt, en_forms)
        if s is not None and t is not None:
            pairs.add((s, t))
    claims: dict[tuple[str, int], int] = {}  # a word on either side -> pairs holding it
    for s, t in pairs:
        for key in [("de", i) for i in s] + [("en", j) for j in t]:
            claims[key] = claims.get(key, 0) + 1
    return {
        (i, j)
        for s, t in pairs
        if all(claims["de", i] == 1 for i in s) and all(claims["en", j] == 1 for j in t)
        for i in s
        for j in t
    }


def parse(line: str) -> set[tuple[int, int]]:
    """The links of a Pharaoh line ``"0-0 1-2"``."""
    return {tuple(int(x) for x in pair.split("-")) for pair in line.split()}


def agreement(predicted: list[set], gold: list[set]) -> dict[str, float]:
    """Precision, recall and alignment error rate of predicted links against the gold,
    pair by pair, on the target words the gold covers (the others have no gold to be
    right or wrong against): precision = |A ∩ S| / |A|, recall = |A ∩ S| / |S|, AER =
    1 - 2 |A ∩ S| / (|A| + |S|) (Och and Ney 2003, with the possible links the sure ones);
    A the predicted links of covered target words, S the gold. Also the covered share of
    the target words the links name."""
    hit = guessed = sure = 0
    for a, s in zip(predicted, gold, strict=True):
        covered = {j for _, j in s}
        a = {(i, j) for i, j in a if j in covered}
        hit, guessed, sure = hit + len(a & s), guessed + len(a), sure + len(s)
    return {
        "precision": hit / guessed if guessed else 0.0,
        "recall": hit / sure if sure else 0.0,
        "aer": 1 - 2 * hit / (guessed + sure) if guessed + sure else 1.0,
        "links": sure,
    }
