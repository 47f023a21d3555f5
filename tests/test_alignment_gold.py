"""The demo corpus's gold word alignment (demo/alignment.py) and the alignment scores that
bench/alignment.py prints against it."""

import dataclasses
import json

import pytest

import common

import alignment as alignment_bench  # bench/alignment.py (bench/ is on the pytest path)
import prepro
from demo import alignment, corpus
from transformer_tf2.config import hparams
from transformer_tf2.models import checkpoints


def words(de: str, en: str) -> set[tuple[str, str]]:
    """The gold links of a pair as (German word, English word)."""
    src, tgt = de.split(), en.split()
    return {(src[i], tgt[j]) for i, j in alignment.gold_links(de, en)}


def test_each_content_word_links_to_its_lexicon_translation():
    de = "Einige Bäcker müssen einen kleinen Bauernhof besuchen."
    en = "Some bakers have to visit a small farm."
    assert alignment.gold_links(de, en) == {(1, 1), (4, 6), (5, 7), (6, 4)}
    # a verb in the third person, a dass-verb, a name and a pronoun
    got = words("Sie hört, dass Jonas lernt.", "She hears that Jonas studies.")
    assert got == {("Sie", "She"), ("hört,", "hears"), ("Jonas", "Jonas"), ("lernt.", "studies.")}


def test_a_word_rendered_as_two_links_to_both_and_a_phrase_to_a_word_fans_in():
    got = words("Die Polizistin singt.", "The police officer sings.")
    assert got == {("Polizistin", "police"), ("Polizistin", "officer"), ("singt.", "sings.")}
    got = words("Heute Abend singt Anna.", "Tonight Anna sings.")
    assert {("Heute", "Tonight"), ("Abend", "Tonight")} <= got


def test_a_pair_that_reads_two_ways_has_no_link_there():
    # "gehen" twice: which "go" is which is not the lexicon's to say
    got = words(
        "Die starken Bäcker möchten in den Park gehen, um spazieren zu gehen.",
        "The strong bakers would like to go to the park to go for a walk.",
    )
    assert got == {("starken", "strong"), ("Bäcker", "bakers"), ("Park", "park")}
    # one "sie" that two entries (she, they) would both link: neither
    assert words("Sie schläft.", "She and they sleep.") == {("schläft.", "sleep.")}


def test_at_least_half_of_the_english_words_of_generated_pairs_have_a_gold_link():
    pairs = corpus.generate_pairs(500, 11)
    covered = sum(len({j for _, j in alignment.gold_links(de, en)}) for de, en in pairs)
    assert covered / sum(len(en.split()) for _, en in pairs) > 0.5


def test_agreement_scores_the_covered_target_words_only():
    gold = [{(0, 0), (1, 1), (2, 2)}, {(0, 1)}]
    # pair 1: one of three right; target word 3 has no gold and is not scored;
    # pair 2: right, with a second link to the same target word
    predicted = [{(0, 0), (1, 2), (2, 1), (3, 3)}, {(0, 1), (1, 1)}]
    got = alignment.agreement(predicted, gold)
    assert got["precision"] == pytest.approx(2 / 5)
    assert got["recall"] == pytest.approx(2 / 4)
    assert got["aer"] == pytest.approx(1 - 4 / 9)
    assert got["links"] == 4
    perfect = alignment.agreement(gold, gold)
    assert (perfect["precision"], perfect["recall"], perfect["aer"]) == (1.0, 1.0, 0.0)
    assert alignment.parse("0-0 3-12") == {(0, 0), (3, 12)}


def test_the_bench_scores_each_layer_and_the_diagonal_against_the_gold(quick_run, capsys):
    hp, _ = quick_run
    alignment_bench.main(["--logdir", hp.logdir, "--sentences", "12"])
    out = capsys.readouterr().out
    result = json.loads(out.splitlines()[-1][len(common.RESULT) :])
    rows = [f"layer {k}" for k in range(hp.num_blocks)] + ["diagonal"]
    assert set(result) == {"pairs", "left_out", "seconds", *rows}
    assert (result["pairs"], result["left_out"]) == (12, 0)
    src, tgt, _ = prepro.read_split(hp, "test")
    src, tgt = src[:12], tgt[:12]
    gold = [alignment.gold_links(a, b) for a, b in zip(src, tgt)]
    diagonal = [alignment_bench.diagonal(len(a.split()), len(b.split())) for a, b in zip(src, tgt)]
    assert result["diagonal"] == pytest.approx(alignment.agreement(diagonal, gold))
    assert {result[r]["links"] for r in rows} == {sum(map(len, gold))}
    assert all(0 <= result[r][k] <= 1 for r in rows for k in ("precision", "recall", "aer"))
    assert f"layer {hp.num_blocks - 1} *" in out  # translate.py's layer is marked
    assert alignment_bench.diagonal(3, 5) == {(0, 0), (0, 1), (1, 2), (2, 3), (2, 4)}


def test_the_bench_refuses_a_run_of_another_corpus_in_one_line(quick_run, monkeypatch):
    hp, _ = quick_run
    other = dataclasses.replace(hp, corpus="parallel")
    monkeypatch.setattr(checkpoints, "load_run", lambda *a, **k: (other, None, None, ""))
    with pytest.raises(hparams.UserError, match="trained on the parallel corpus.*demo preset"):
        alignment_bench.main(["--logdir", hp.logdir])
