"""summaries.py: the attention images and the TensorBoard records of a training run."""

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

import decoding
import summaries


def test_attention_images(quick_run):
    """One image per head of each last-layer map, teacher-forced on the reference: source
    tokens + </S> across, <S> + reference tokens down, each cell scale x scale pixels."""
    hp, _ = quick_run
    hp, tok, model, _ = decoding.load_run(hp.logdir, {})
    src, ref = "Die Frau liest ein Buch.", "The woman reads a book."
    t_src = len(tok.encode_src([src])[0]) + 1
    t_tgt = len(tok.encode_tgt([ref])[0]) + 1
    images = summaries.attention_images(model, tok, src, ref, scale=4)
    shapes = {
        "encoder_self": (t_src, t_src),
        "decoder_self": (t_tgt, t_tgt),
        "decoder_cross": (t_tgt, t_src),
    }
    assert set(images) == set(shapes)
    for name, (rows, cols) in shapes.items():
        image = images[name]
        assert image.shape == (hp.num_heads, 4 * rows, 4 * cols, 1), name
        assert image.dtype == np.float32 and image.min() >= 0.0 and image.max() <= 1.0
        # every query row is a distribution over the keys, drawn 4 pixels wide
        np.testing.assert_allclose(image[..., 0].sum(axis=-1), 4.0, rtol=1e-5)
    decoder_self = images["decoder_self"][..., 0][:, ::4, ::4]
    assert np.all(np.triu(decoder_self, k=1) == 0.0)  # causal


def test_records_written_inside_the_callers_writer(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    scores = {"sacrebleu": 12.5, "chrf": 40.0}
    with writer.as_default(step=7):
        summaries.train_scalars(
            {"loss": 3.0, "nll": 2.5, "accuracy": 0.25, "tokens_per_sec": 900.0},
            grad_norm=1.5,
            lr=1e-3,
        )
        summaries.dev_figures(2.0, 1.75, scores)
        summaries.sample_translations(["q1", "q2"], ["r1", "r2"], ["h1", "h2"], count=1)
    writer.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    acc.Reload()
    values = {
        tag: float(tf.make_ndarray(acc.Tensors(tag)[0].tensor_proto))
        for tag in acc.Tags()["tensors"]
        if tag != "dev/translations"
    }
    assert values == pytest.approx(
        {
            "train/loss": 3.0,
            "train/nll": 2.5,
            "train/accuracy": 0.25,
            "train/grad_norm": 1.5,
            "train/lr": 1e-3,
            "train/tokens_per_sec": 900.0,
            "dev/loss": 2.0,
            "dev/nll": 1.75,
            "dev/bleu": 12.5,
            "dev/chrf": 40.0,
        }
    )
    assert all(acc.Tensors(tag)[0].step == 7 for tag in values)
    table = tf.make_ndarray(acc.Tensors("dev/translations")[0].tensor_proto).item().decode()
    assert table.splitlines() == [
        "| source | reference | translation |",
        "|---|---|---|",
        "| q1 | r1 | h1 |",
    ]
