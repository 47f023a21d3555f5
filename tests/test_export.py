"""export.py: the SavedModel translates raw strings in a process without the project."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

import export
import prepro
import train
from helpers import tiny, translate_lines
from transformer_tf2.config import hparams
from transformer_tf2.models import checkpoints
from transformer_tf2.models.model import Transformer

LOADER = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencepieceTokenizer ops
assert not any(m in sys.modules for m in ("hparams", "model", "modules", "export"))
f = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = f(sentences=tf.constant(json.loads(sys.argv[2])))["translations"].numpy()
none = f(sentences=tf.constant([], tf.string))["translations"]  # an empty batch
print(json.dumps([[s.decode("utf-8") for s in out], none.shape.as_list()]))
"""

SENTENCES = [
    "Die Frau liest ein Buch.",
    "",
    "Der Hund schläft im Garten, weil es heiß ist.",
    "Heute kaufen zwei Kinder drei rote Äpfel.",
]


@pytest.mark.slow
def test_translator_module_matches_translate(quick_run):
    """The exported graph (in-graph BPE, greedy loop, detokenization), called in this
    process without saving it, translates as translate.py does."""
    pytest.importorskip("tensorflow_text")
    hp, _ = quick_run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    module = export.ServingModule(model, tok, hp)
    got = [
        s.decode("utf-8") for s in module.translate(tf.constant(SENTENCES))["translations"].numpy()
    ]
    assert got == translate_lines(model, tok, hp, SENTENCES)
    assert got[1] == ""


def test_exported_graph_reads_ids_as_the_tokenizer(quick_run):
    """<S> and <PAD> left out, an id past the vocabulary (the output rows are rounded up
    to a multiple of 8) read as <UNK>: as Tokenizer.decode_tgt does."""
    pytest.importorskip("tensorflow_text")
    hp, _ = quick_run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    module = export.ServingModule(model, tok, hp)
    rows = [[50, 2, 60, 3, 0, 0], [2, 2, 2, 0, 0, 0], [tok.tgt_vocab_size + 3, 70, 1, 90, 3, 0]]
    got = [s.decode("utf-8") for s in module.decode(tf.constant(rows)).numpy()]
    assert got == [tok.decode_tgt(row) for row in rows]
    assert got[1] == "" and "⁇" in got[2]


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 3])
def test_an_empty_batch_gives_an_empty_batch_in_every_signature(quick_run, beam_size):
    """[] to serving_default (greedy and beam search) and to a document model's
    serving_default and translate_document gives []; a batch after it still translates
    as translate.py does."""
    pytest.importorskip("tensorflow_text")
    hp, tok, model, _ = checkpoints.load_run(quick_run[0].logdir, {"beam_size": beam_size})
    memory = {"position": "xl", "memory_sentences": 1, "target_memory_sentences": 1}
    hp_docs = hparams.apply(hp, memory)
    documents = Transformer.from_hparams(hp_docs, tok.src_vocab_size, tok.tgt_vocab_size)
    documents.build_all()
    module, docs_module = (
        export.ServingModule(m, tok, h) for m, h in ((model, hp), (documents, hp_docs))
    )
    for signature in (module.translate, docs_module.translate, docs_module.translate_document):
        out = signature(tf.constant([], tf.string))["translations"]
        assert out.dtype == tf.string and out.shape == (0,)
    got = [
        s.decode("utf-8") for s in module.translate(tf.constant(SENTENCES))["translations"].numpy()
    ]
    assert got == translate_lines(model, tok, hp, SENTENCES)


@pytest.mark.slow
def test_bpe_savedmodel_round_trip_in_fresh_process(run, tmp_path):
    pytest.importorskip("tensorflow_text")
    hp, _, _ = run
    out_dir = export.export(hp.logdir, str(tmp_path / "saved"), {})
    assert os.path.exists(os.path.join(out_dir, "saved_model.pb"))
    assert sorted(os.listdir(tmp_path)) == ["saved"]  # no temporary folder left
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", LOADER, out_dir, json.dumps(SENTENCES)],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported, empty_batch = json.loads(proc.stdout.strip().splitlines()[-1])
    assert empty_batch == [0]
    hp2, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    assert exported == translate_lines(model, tok, hp2, SENTENCES)
    assert exported[1] == "" and all(exported[i] for i in (0, 2, 3))


@pytest.mark.slow
def test_word_vocabulary_savedmodel_matches_translate(run, tmp_path):
    """The word-level path: regex cleaning, lookup table and joined words in the graph."""
    hp_run, _, _ = run
    hp = tiny(
        str(tmp_path),
        data_dir=hp_run.data_dir,
        vocab_type="word",
        min_cnt=1,
        max_steps=30,
        position="learned",
        max_position=64,
    )
    prepro.preprocess(hp)
    train.train(hp)
    out_dir = export.export(hp.logdir, str(tmp_path / "saved"), {})
    f = tf.saved_model.load(out_dir).signatures["serving_default"]
    got = [s.decode("utf-8") for s in f(sentences=tf.constant(SENTENCES))["translations"].numpy()]
    hp2, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    assert got == translate_lines(model, tok, hp2, SENTENCES)
    assert got[1] == ""
