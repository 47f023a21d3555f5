"""The demo corpus's document mode: episodes of two sentences in which a pronoun refers
back to a noun of the sentence before, a test bed that needs document context
(docs/document_context.md).

An episode is an introduction with two nouns, a person and an animal of different German
genders, then a sentence whose subject is the pronoun of one of them::

    Der Mann spielt mit der Katze.  /  The man is playing with the cat.
    Sie ist müde.                   /  It is tired.

The German pronoun follows the grammatical gender (er, sie, es), the English one the
antecedent: he or she for a person (by sex: das Mädchen is "she"), it for an animal. So
"Sie ist müde." alone is "She is tired." or "It is tired." with equal odds: for each
German pronoun the antecedent is a person or an animal half of the time, and every
predicate fits both (a predicate such as "is broken" would give the answer away). The
other noun of the introduction, of the other class and another gender, is the
distractor.

:func:`contrastive_item` gives the test form of an episode: its context, its source, the
correct translation and one that differs only in the pronoun (the file format of
``eval.py --contrastive``).
"""

from __future__ import annotations

import json
import random

from demo.corpus import NOUNS, NP

# introductions: (German, the case of the second noun, English); the first noun is the
# subject (nominative)
INTRODUCTIONS = (
    ("{a} sieht {b}", "acc", "{a} sees {b}"),
    ("{a} wartet auf {b}", "acc", "{a} is waiting for {b}"),
    ("{a} spielt mit {b}", "dat", "{a} is playing with {b}"),
    ("{a} steht neben {b}", "dat", "{a} is standing next to {b}"),
    ("{a} und {b} sind im Garten", "nom", "{a} and {b} are in the garden"),
    ("{a} sucht {b}", "acc", "{a} is looking for {b}"),
)
# what the pronoun's sentence says: true of a person and of an animal alike
PREDICATES = (
    ("ist müde", "is tired"),
    ("ist hungrig", "is hungry"),
    ("schläft jetzt", "is sleeping now"),
    ("ist sehr alt", "is very old"),
    ("ist noch klein", "is still small"),
    ("ist krank", "is sick"),
    ("ist heute glücklich", "is happy today"),
    ("bleibt im Haus", "stays in the house"),
    ("hat Durst", "is thirsty"),
    ("wartet draußen", "is waiting outside"),
)
GERMAN_PRONOUN = {"m": "er", "f": "sie", "n": "es"}
# the wrong English pronoun of the contrastive translation, for an animal antecedent
PERSON_PRONOUN = {"m": "he", "f": "she", "n": "she"}


def _persons(gender: str) -> list:
    return [
        n
        for n in NOUNS.values()
        if "person" in n.tags and n.tags & {"male", "female"} and n.gender == gender
    ]


def _animals(gender: str) -> list:
    return [n for n in NOUNS.values() if "animal" in n.tags and n.gender == gender]


PERSONS = {g: _persons(g) for g in "mfn"}
ANIMALS = {g: _animals(g) for g in "mfn"}


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def episode(rng: random.Random, gender: str = "", person: bool | None = None) -> dict:
    """One episode: {"pairs": [(German, English)] x 2, "context", "source",
    "reference", "contrastive", "pronoun" (as :func:`contrastive_item`), "antecedent",
    "distractor" (nouns)}. ``gender`` (m, f, n: the German pronoun) and ``person``
    (the antecedent's class) are drawn unless given."""
    gender = gender or rng.choice("mfn")
    if person is None:  # the antecedent's class, even for each German pronoun
        person = rng.random() < 0.5
    other = rng.choice([g for g in "mfn" if g != gender and (ANIMALS if person else PERSONS)[g]])
    antecedent = rng.choice((PERSONS if person else ANIMALS)[gender])
    distractor = rng.choice((ANIMALS if person else PERSONS)[other])
    first, second = (antecedent, distractor) if rng.random() < 0.5 else (distractor, antecedent)
    de, case, en = rng.choice(INTRODUCTIONS)
    a, b = NP(first, "def"), NP(second, "def")
    intro = (
        _sentence(de.format(a=a.de("nom"), b=b.de(case))),
        _sentence(en.format(a=a.en(), b=b.en())),
    )
    if person:
        right = "he" if "male" in antecedent.tags else "she"
        wrong = "it"
    else:
        right, wrong = "it", PERSON_PRONOUN[gender]
    pred_de, pred_en = rng.choice(PREDICATES)
    source = _sentence(f"{GERMAN_PRONOUN[gender]} {pred_de}")
    reference = _sentence(f"{right} {pred_en}")
    return {
        "pairs": [intro, (source, reference)],
        "context": [intro[0]],
        "source": source,
        "reference": reference,
        "contrastive": _sentence(f"{wrong} {pred_en}"),
        "pronoun": right,
        "antecedent": antecedent,
        "distractor": distractor,
    }


def contrastive_item(ep: dict) -> dict:
    """The line of a contrastive file (eval.py --contrastive) for an episode."""
    item = {k: ep[k] for k in ("context", "source", "reference", "contrastive", "pronoun")}
    return {**item, "target_context": [ep["pairs"][0][1]]}  # read by a decoder memory


def mixed_pairs(share: float, n: int, rng: random.Random, regular, seen: set | None = None):
    """``n`` pairs in order: episodes (their two sentences in a row) where a draw falls
    under ``share`` / 2, else ``regular()`` pairs. An episode whose two German sentences
    are in ``seen`` is drawn again (held-out sets); each one taken is added to it."""
    out: list = []
    while len(out) < n:
        if n - len(out) >= 2 and rng.random() < share / 2:
            ep = episode(rng)
            key = tuple(p[0] for p in ep["pairs"])
            if seen is not None:
                if key in seen:
                    continue
                seen.add(key)
            out += ep["pairs"]
        else:
            out.append(regular())
    return out


class Episodes:
    """What :func:`demo.corpus.write_demo_corpus` asks of a document mode: the pairs of
    each split with episodes mixed in (:meth:`mix`, all of them different: the held-out
    sets' episodes are not in training) and the contrastive file (:meth:`files`)."""

    def __init__(self, share: float, seed: int, contrastive: int = 1200):
        self.share, self.contrastive = share, contrastive
        self.rng = random.Random(seed * 3571 + 5)
        self.seen: set = set()

    def mix(self, n: int, regular) -> list:
        return mixed_pairs(self.share, n, self.rng, regular, self.seen)

    def files(self) -> dict[str, str]:
        """{"contrastive.jsonl": ``contrastive`` held-out items, one JSON object a line},
        exactly balanced: each German pronoun as often, its antecedent a person in half
        of its items (so that the source alone gives 50%)."""
        lines = []
        while len(lines) < self.contrastive:
            k = len(lines)
            ep = episode(self.rng, "mfn"[k % 3], k % 6 < 3)
            key = tuple(p[0] for p in ep["pairs"])
            if key not in self.seen:
                self.seen.add(key)
                lines.append(json.dumps(contrastive_item(ep), ensure_ascii=False))
        return {"contrastive.jsonl": "\n".join(lines) + "\n"}
