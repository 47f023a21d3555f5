"""Several decoding streams (``decode_streams``): batches decoded at once on threads of
their own give the outputs of one stream, and eval.py and translate.py give each stream
one thread before TensorFlow starts."""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import eval as eval_script
from helpers import run_json_script
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import translator
from transformer_tf2.decoding.translator import Translator
from transformer_tf2.models import checkpoints
from transformer_tf2.models.model import Transformer


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 3])
def test_several_streams_translate_as_one(run, beam):
    hp, *_ = run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {"beam_size": beam, "eval_batch_size": 8})
    src, _ = data_load.read_raw(hp, "test")
    ids = tok.encode_src(src[:24])  # 3 batches
    outs = {}
    for streams in (1, 3):
        translator = Translator(model, tok, dataclasses.replace(hp, decode_streams=streams))
        assert translator.streams == streams
        outs[streams] = translator.translate_ids(ids)
    assert len(outs[1]) == 24 and all(o is not None for o in outs[1])
    for one, three in zip(outs[1], outs[3]):
        np.testing.assert_array_equal(one[0], three[0])
        np.testing.assert_array_equal(one[1], three[1])


THREADS = """
import json, sys
import tensorflow as tf
from transformer_tf2.config import hparams
from transformer_tf2.decoding import translator
hp = hparams.apply(hparams.preset("demo"), json.loads(sys.argv[1]))
streams = translator.decoding_process(hp, json.loads(sys.argv[2]))
grappler_off = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer")
gpu = bool(tf.config.list_physical_devices("GPU"))
print(json.dumps([streams, tf.config.threading.get_intra_op_parallelism_threads(),
                  tf.config.threading.get_inter_op_parallelism_threads(),
                  bool(grappler_off) == (not gpu)]))
"""


@pytest.mark.slow
def test_each_stream_gets_one_thread_before_tensorflow_starts():
    # a fresh process each: TensorFlow's thread pools are fixed once it runs an op; each
    # also turns Grappler off on a CPU-only machine (the last entry: as it should be)
    two = json.dumps({"decode_streams": 2})
    assert run_json_script(THREADS, two, "null") == [2, 1, 2, True]
    assert run_json_script(THREADS, two, "129") == [2, 1, 2, True]  # 2 batches of 128
    # one batch, or one stream, keeps TensorFlow's own threads (0: its default)
    assert run_json_script(THREADS, two, "128") == [1, 0, 0, True]
    assert run_json_script(THREADS, json.dumps({"decode_streams": 1}), "null") == [1, 0, 0, True]


@pytest.mark.parametrize("beam", [1, 3])
def test_decoding_without_grappler_gives_the_same_translations(beam):
    # translator.decoding_process turns Grappler off for eval.py and translate.py: the
    # same tokens, and a beam's scores to their last bits (its arithmetic rewrites round
    # differently); conftest turns it back on after the test
    sizes = {"d_model": 32, "num_heads": 4, "d_ff": 64, "num_blocks": 2, "beam_size": beam}
    hp = hparams.apply(hparams.Hparams(), {**sizes, "max_len_extra": 6, "decode_streams": 1})
    keras.utils.set_random_seed(3)
    model = Transformer.from_hparams(hp, 40, 40)
    rng = np.random.default_rng(0)
    ids = [rng.integers(4, 40, size=int(n)).tolist() for n in rng.integers(1, 12, size=24)]
    outs = {}
    for off in (False, True):
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": off})
        outs[off] = Translator(model, None, hp).translate_ids(ids)
    assert tf.config.optimizer.get_experimental_options()["disable_meta_optimizer"]
    for on, off in zip(outs[False], outs[True]):
        np.testing.assert_array_equal(on[0], off[0])
        np.testing.assert_allclose(on[1], off[1], rtol=0, atol=1e-5)


def test_the_default_is_one_stream_per_core_of_this_process(monkeypatch):
    hp = hparams.preset("demo")
    assert hp.decode_streams == 0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert translator.stream_count(hp) == 3
    assert translator.stream_count(dataclasses.replace(hp, decode_streams=5)) == 5
    with pytest.raises(hparams.UserError, match="--decode_streams must not be negative"):
        hparams.apply(hp, {"decode_streams": -1})


def test_several_streams_take_the_largest_batch_first():
    # sorted sources make the last batch the longest: taken last, it ran alone at the
    # end; the streams now start with it, and every batch still comes back once
    sizes = {"d_model": 16, "num_heads": 4, "d_ff": 32, "num_blocks": 1, "decode_streams": 2}
    hp = hparams.apply(hparams.Hparams(), sizes)
    t = Translator(Transformer.from_hparams(hp, 24, 24), None, hp)
    widths = [3, 5, 5, 9, 2]
    batches = [([i], np.zeros((4 if w != 9 else 2, w), np.int32)) for i, w in enumerate(widths)]
    started = []

    def record(idx, batch):
        started.append(idx[0])
        return batch.shape

    done = list(t._map_batches(record, batches, progress=False))
    # sizes 12, 20, 20, 18, 8: ties keep their order
    assert [idx[0] for idx, _ in done] == [1, 2, 3, 0, 4]
    assert started[:2] in ([1, 2], [2, 1]) and sorted(started) == [0, 1, 2, 3, 4]
    assert [shape for _, shape in done] == [(4, 5), (4, 5), (2, 9), (4, 3), (4, 2)]
    # scoring's batches are tuples of arrays: their sizes add up
    pairs = [([0], (np.zeros((2, 3)), np.zeros((2, 1)))), ([1], (np.zeros((2, 5)), np.zeros(8)))]
    assert [idx for idx, _ in translator.largest_first(pairs)] == [[1], [0]]
    one = dataclasses.replace(hp, decode_streams=1)  # one stream: the batches in order
    record_one = Translator(t.model, None, one)._map_batches(record, batches, False)
    assert [idx[0] for idx, _ in record_one] == [0, 1, 2, 3, 4]


def test_nothing_to_decode_needs_no_stream():
    sizes = {"d_model": 16, "num_heads": 4, "d_ff": 32, "num_blocks": 1, "decode_streams": 2}
    hp = hparams.apply(hparams.Hparams(), sizes)
    model = Transformer.from_hparams(hp, 24, 24)
    assert Translator(model, None, hp).translate_ids([[], []]) == [None, None]


def test_eval_counts_its_sources_before_tensorflow_starts(tmp_path):
    prepro = tmp_path / "prepro"
    prepro.mkdir()
    (prepro / "test.src").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "own.de").write_text("x\n" * 7, encoding="utf-8")
    logdir = tmp_path / "log"
    logdir.mkdir()
    hparams.save(
        dataclasses.replace(hparams.Hparams(), prepro_dir=str(prepro)), str(logdir / "hparams.json")
    )
    assert eval_script.count_sources(str(logdir), "") == 3
    assert eval_script.count_sources(str(logdir), str(tmp_path / "own.de")) == 7
    assert eval_script.count_sources(str(tmp_path / "nowhere"), "") is None  # no run: unknown
    assert eval_script.count_sources(str(logdir), str(tmp_path / "missing.de")) is None
