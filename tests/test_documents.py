"""The demo corpus's document mode (demo/documents.py) and eval.py's contrastive set."""

import json
import random
from collections import Counter

import numpy as np
import pytest
import tensorflow as tf

import eval as evaluation
from demo import corpus as dc
from demo import documents
from helpers import relative_model
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.layers import recurrence

ENGLISH = {"er": ("he", "it"), "sie": ("she", "it"), "es": ("she", "it")}


def test_an_episode_needs_its_context():
    """The pronoun follows the antecedent's German gender; its English, the antecedent's
    class (a person by sex, an animal: it); the distractor is of the other class and
    another gender; the contrastive translation differs in the pronoun alone."""
    rng = random.Random(0)
    for _ in range(300):
        ep = documents.episode(rng)
        (intro_de, intro_en), (src, ref) = ep["pairs"]
        pronoun = src.split()[0].lower()
        assert ep["context"] == [intro_de] and ep["source"] == src and ep["reference"] == ref
        right, wrong = ref.split(), ep["contrastive"].split()
        assert right[1:] == wrong[1:] and right[0] != wrong[0]
        assert {right[0].lower(), wrong[0].lower()} == set(ENGLISH[pronoun])
        antecedent, distractor = ep["antecedent"], ep["distractor"]
        for noun in (antecedent, distractor):
            assert dc.NP(noun, "def").de("nom").split()[1] in intro_de and noun.en in intro_en
        assert antecedent.gender == {"er": "m", "sie": "f", "es": "n"}[pronoun]
        assert distractor.gender != antecedent.gender
        person = "person" in antecedent.tags
        assert (right[0] == "It") != person and ("person" in distractor.tags) != person


def test_classes_are_balanced_for_each_german_pronoun():
    """For each German pronoun the antecedent is a person or an animal about half of the
    time, so that the source sentence alone gives 50%."""
    rng = random.Random(1)
    counts = Counter()
    for _ in range(3000):
        ep = documents.episode(rng)
        counts[(ep["source"].split()[0], ep["pronoun"] == "it")] += 1
    for pronoun in ("Er", "Sie", "Es"):
        person, animal = counts[(pronoun, False)], counts[(pronoun, True)]
        assert 0.45 < person / (person + animal) < 0.55, (pronoun, person, animal)


def test_document_mode_mixes_episodes_and_holds_the_contrastive_set_out(tmp_path):
    """Episodes sit in the talks as two sentences in a row; no episode of the dev, test
    or contrastive sets is in training; the contrastive file has 1,200 items, each with
    its context. The default corpus is written as before (test_demo_corpus)."""
    d = tmp_path / "docs"
    dc.write_demo_corpus(
        str(d),
        seed=3,
        n_train=1200,
        n_dev=100,
        n_test=100,
        episodes=documents.Episodes(0.4, seed=3),
    )
    src = [ln for ln in (d / "train.tags.de-en.de").read_text().splitlines() if ln[0] != "<"]
    starts = [i for i, s in enumerate(src) if s.split()[0] in ("Er", "Sie", "Es")]
    assert len(starts) > 150
    train_eps = {(src[i - 1], src[i]) for i in starts}
    items = [json.loads(x) for x in (d / "contrastive.jsonl").read_text().splitlines()]
    assert len(items) == 1200 and all(len(it["context"]) == 1 for it in items)
    assert not train_eps & {(it["context"][0], it["source"]) for it in items}
    classes = Counter((it["source"].split()[0], it["pronoun"] == "it") for it in items)
    assert set(classes.values()) == {200} and len(classes) == 6  # exactly balanced


def test_demo_documents_setting():
    assert hparams.Hparams().demo_documents == 0.0
    with pytest.raises(hparams.UserError, match="--demo_documents must be in"):
        hparams.apply(hparams.Hparams(), {"demo_documents": 1.0})


def test_a_contrastive_file_is_checked_line_by_line(tmp_path):
    path = tmp_path / "set.jsonl"
    good = {"context": [], "source": "a", "reference": "b", "contrastive": "c"}
    path.write_text(json.dumps(good) + "\n\n" + "{not json\n")
    with pytest.raises(hparams.UserError, match=r"set.jsonl, line 3: not a JSON object"):
        evaluation.read_contrastive(str(path))
    path.write_text(json.dumps({**good, "context": "a sentence"}) + "\n")
    with pytest.raises(hparams.UserError, match=r"line 1: \"context\" must be a list"):
        evaluation.read_contrastive(str(path))
    path.write_text(json.dumps({"source": "a"}) + "\n")
    with pytest.raises(hparams.UserError, match="needs the keys context, source, reference"):
        evaluation.read_contrastive(str(path))
    low, high = evaluation.wilson(95, 100)
    assert round(low, 4) == 0.8882 and round(high, 4) == 0.9785


class Ids:
    """A tokenizer stand-in whose sentences are space-separated ids."""

    def encode_src(self, lines):
        return [np.array([int(t) for t in line.split()], np.int32) for line in lines]

    encode_tgt = encode_src


@pytest.mark.slow
@pytest.mark.parametrize("target_memory", [0, 1])
def test_forced_scores_are_the_cached_decoders_log_probabilities(target_memory):
    """A memory model's forced score of a target, with the item's context (and, for a
    decoder memory, the context's translations), is the sum of the log-probabilities
    that the cached decoder gives its tokens step by step after encoding the source in
    that context."""
    model = relative_model("xl", seed=11, memory_sentences=1, target_memory_sentences=target_memory)
    items = [
        {"context": ["5 6 7", "8 9"], "source": "10 11 12"},
        {"context": [], "source": "13 14"},
        {"context": ["15 16 17 18"], "source": "19"},
    ]
    translations = [["20 21", "22"], [], ["4 4 4"]]
    targets = ["4 5 6", "7", "8 9 10 11"]
    got = evaluation.forced_scores(
        model, Ids(), items, [targets], batch_size=2, targets=translations
    )[0]
    eos, bos = data_load.EOS_ID, data_load.BOS_ID
    for item, before, target, score in zip(items, translations, targets, got):
        src = tf.constant([[int(t) for t in item["source"].split()] + [eos]])
        context = [tf.constant([[int(t) for t in s.split()] + [eos]]) for s in item["context"]]
        tgt_context = [tf.constant([[bos] + [int(t) for t in s.split()]]) for s in before]
        enc_window, dec_window = recurrence.document_windows(model, context, tgt_context)
        memory, mask = model.encode(src, context=recurrence.context_of(enc_window))
        cache = model.init_cache(memory, mask, recurrence.context_of(dec_window))
        total, token = 0.0, data_load.BOS_ID
        for nxt in [int(t) for t in target.split()] + [eos]:
            logits, cache = model.decode_step(tf.constant([token]), cache)
            total += float(tf.nn.log_softmax(logits)[0, nxt])
            token = nxt
        assert score == pytest.approx(total, abs=1e-4)
