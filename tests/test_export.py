"""export.py: the SavedModel translates raw strings in a process without the project."""
import json
import os
import subprocess
import sys

import pytest

from conftest import tiny

LOADER = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencepieceTokenizer ops
assert not any(m in sys.modules for m in ("hparams", "model", "modules", "export"))
f = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = f(sentences=tf.constant(json.loads(sys.argv[2])))["translations"].numpy()
print(json.dumps([s.decode("utf-8") for s in out]))
"""

SENTENCES = ["Die Frau liest ein Buch.", "", "Der Hund schläft im Garten, weil es heiß ist.",
             "Heute kaufen zwei Kinder drei rote Äpfel."]


def test_bpe_savedmodel_round_trip_in_fresh_process(run, tmp_path):
    pytest.importorskip("tensorflow_text")
    import eval as E
    import export
    import translate
    hp, _, _ = run
    out_dir = export.export(hp.logdir, str(tmp_path / "saved"), {})
    assert os.path.exists(os.path.join(out_dir, "saved_model.pb"))
    assert not os.path.exists(out_dir + ".part")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", LOADER, out_dir, json.dumps(SENTENCES)],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = json.loads(proc.stdout.strip().splitlines()[-1])
    hp2, tok, model, _ = E.load_run(hp.logdir, {})
    assert exported == translate.translate_lines(model, tok, hp2, SENTENCES)
    assert exported[1] == "" and all(exported[i] for i in (0, 2, 3))


def test_word_vocabulary_savedmodel_matches_translate(run, tmp_path):
    """The word-level path: regex cleaning, lookup table and joined words in the graph."""
    import tensorflow as tf
    import eval as E
    import export
    import prepro
    import train as T
    import translate
    hp_run, _, _ = run
    hp = tiny(str(tmp_path), data_dir=hp_run.data_dir, vocab_type="word", min_cnt=1,
              max_steps=30, position="learned", max_position=64)
    prepro.preprocess(hp)
    T.train(hp)
    out_dir = export.export(hp.logdir, str(tmp_path / "saved"), {})
    f = tf.saved_model.load(out_dir).signatures["serving_default"]
    got = [s.decode("utf-8") for s in f(sentences=tf.constant(SENTENCES))["translations"]
           .numpy()]
    hp2, tok, model, _ = E.load_run(hp.logdir, {})
    assert got == translate.translate_lines(model, tok, hp2, SENTENCES)
    assert got[1] == ""
