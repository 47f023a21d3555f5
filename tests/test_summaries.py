"""summaries.py and plots.py: the labelled attention figures and the TensorBoard records
of a training run."""

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from helpers import translate_lines
from transformer_tf2.data import data_load
from transformer_tf2.decoding import plots
from transformer_tf2.models import checkpoints
from transformer_tf2.training import summaries


@pytest.mark.slow
def test_attention_figures_are_labelled(quick_run):
    """plots.attention over the model's own greedy translation: every layer's maps with the
    right shapes, rows that are distributions, a causal decoder self-attention; each figure
    has one panel per head with the query tokens down and the key tokens across."""
    hp, _ = quick_run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    src = "Die Frau liest ein Buch."
    att = plots.attention(model, tok, src, hp.max_len_extra)
    src_ids = tok.encode_src([src])[0] + [data_load.EOS_ID]
    assert att.source == tok.src_tokens(src_ids) and att.source[-1] == "</S>"
    out = translate_lines(model, tok, hp, [src])
    assert att.text == out[0]  # the greedy translation
    t1, t2 = len(att.source), len(att.translation)
    assert att.decoder_input[0] == "<S>" and att.decoder_input[1:] == att.translation[:-1]
    shapes = {"encoder_self": (t1, t1), "decoder_self": (t2, t2), "decoder_cross": (t2, t1)}
    for name, (rows, cols) in shapes.items():
        assert len(att.maps[name]) == hp.num_blocks
        for w in att.maps[name]:
            assert w.shape == (hp.num_heads, rows, cols), name
            np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(att.maps["decoder_self"][-1], k=1) == 0.0)  # causal

    figs = plots.figures(att, "last")
    assert set(figs) == set(shapes)
    for name, fig in figs.items():
        rows, cols = att.labels(name)
        panels = [ax for ax in fig.axes if ax.images]
        assert len(panels) == hp.num_heads
        for ax in panels:
            assert [t.get_text() for t in ax.get_xticklabels()] == cols
            assert [t.get_text() for t in ax.get_yticklabels()] == rows
        assert plots.png(fig)[:8] == b"\x89PNG\r\n\x1a\n"
    cross_rows, cross_cols = att.labels("decoder_cross")
    assert (cross_rows, cross_cols) == (att.translation, att.source)
    every = plots.figures(att, "all")
    assert set(every) == {f"layer{k}/{n}" for k in range(1, hp.num_blocks + 1) for n in shapes}
    for fig in every.values():
        plots.png(fig)  # closes it


@pytest.mark.slow
def test_attention_summary_is_an_image_in_the_event_file(quick_run, tmp_path):
    hp, _ = quick_run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default(step=3):
        att = summaries.attention(model, tok, "Der Hund schläft.", hp.max_len_extra)
    writer.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    acc.Reload()
    tags = {t for t in acc.Tags()["tensors"] if t.startswith("attention/")}
    assert tags == {"attention/encoder_self", "attention/decoder_self", "attention/decoder_cross"}
    for tag in tags:
        assert acc.SummaryMetadata(tag).plugin_data.plugin_name == "images"
        event = acc.Tensors(tag)[0]
        assert event.step == 3
        width, height, png = tf.make_ndarray(event.tensor_proto)
        image = tf.image.decode_png(png).numpy()
        assert image.shape == (int(height), int(width), 3) and image.std() > 0
    assert att.text in acc.SummaryMetadata("attention/decoder_cross").summary_description


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
