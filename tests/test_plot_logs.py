"""plot_logs.py: the scalars of a run's TensorBoard logs, and the PNG plots of them."""

import os

import pytest
import tensorflow as tf

import plot_logs
from transformer_tf2.config import hparams

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def logdir(tmp_path):
    """A logdir/train with the scalars train.py writes, a text summary, and one step
    written twice (a resumed run)."""
    logdir = tmp_path / "log"
    writer = tf.summary.create_file_writer(str(logdir / "train"))
    with writer.as_default():
        for step in range(1, 6):
            tf.summary.scalar("train/loss", 10.0 - step, step=step)
            tf.summary.scalar("train/lr", 1e-4 * step, step=step)
            tf.summary.scalar("train/minutes", 0.5 * step, step=step)
        tf.summary.scalar("train/loss", 1.5, step=3)  # the resumed run's
        for step, bleu in ((2, 3.25), (4, 7.5)):
            tf.summary.scalar("dev/bleu", bleu, step=step)
            tf.summary.scalar("dev/loss", 9.0 - step, step=step)
        tf.summary.text("dev/translations", "| a | b | c |", step=2)
    writer.close()
    return str(logdir)


def test_read_scalars(logdir):
    series = plot_logs.read_scalars(logdir)
    assert set(series) == {"train/loss", "train/lr", "train/minutes", "dev/bleu", "dev/loss"}
    assert series["train/loss"] == [(1, 9.0), (2, 8.0), (3, 1.5), (4, 6.0), (5, 5.0)]
    assert series["dev/bleu"] == [(2, 3.25), (4, 7.5)]
    assert [step for step, _ in series["train/lr"]] == [1, 2, 3, 4, 5]
    assert series["train/lr"][-1][1] == pytest.approx(5e-4)


def test_plot_writes_three_pngs(logdir, tmp_path, capsys):
    out = str(tmp_path / "figures" / "demo")
    written = plot_logs.plot(logdir, out)
    assert written == [f"{out}_{name}.png" for name in ("loss", "lr", "bleu")]
    for path in written:
        with open(path, "rb") as f:
            assert f.read(8) == PNG
    assert sorted(os.listdir(tmp_path / "figures")) == [
        "demo_bleu.png",
        "demo_loss.png",
        "demo_lr.png",
    ]
    assert capsys.readouterr().out.splitlines() == [
        "step 2: dev BLEU 3.25",
        "step 4: dev BLEU 7.50",
    ]


def test_no_event_files_is_a_user_error(tmp_path):
    with pytest.raises(hparams.UserError, match="no TensorBoard event files"):
        plot_logs.read_scalars(str(tmp_path))


def test_minutes_axis_places_dev_bleu_at_its_wall_clock_minute(logdir, tmp_path, capsys):
    out = str(tmp_path / "figures" / "demo")
    written = plot_logs.plot(logdir, out, x="minutes")
    assert len(written) == 3
    assert capsys.readouterr().out.splitlines() == [
        "step 2 (1.0 min): dev BLEU 3.25",
        "step 4 (2.0 min): dev BLEU 7.50",
    ]


def test_minutes_axis_needs_the_minutes_scalar(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "log" / "train"))
    with writer.as_default():
        tf.summary.scalar("dev/bleu", 1.0, step=1)
    writer.close()
    with pytest.raises(hparams.UserError, match="no train/minutes scalar.*--x step"):
        plot_logs.plot(str(tmp_path / "log"), str(tmp_path / "out"), x="minutes")
    with pytest.raises(hparams.UserError, match="--x hours: choose one of step, minutes"):
        plot_logs.plot(str(tmp_path / "log"), str(tmp_path / "out"), x="hours")
