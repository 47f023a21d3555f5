"""Turn a run's TensorBoard logs into PNG plots (loss, lr and dev BLEU against steps or
minutes).

    python plot_logs.py --logdir log/demo --out figures/demo
    python plot_logs.py --logdir log/multi30k --x minutes --out figures/multi30k_minutes

Writes ``<out>_loss.png``, ``<out>_lr.png`` and ``<out>_bleu.png`` and prints the dev BLEU
curve per evaluation. ``--x minutes`` puts the run's wall-clock minutes on the x-axis (its
``train/minutes`` scalar, which counts every start of a resumed run and the dev
evaluations; a point between two logged steps is interpolated).
"""

# ruff: noqa: E402  (the script answers --help before TensorFlow is imported: cli.start)
from __future__ import annotations

from transformer_tf2.config import cli

SCRIPT = cli.Script(
    "plot_logs",
    __doc__,
    fields=("logdir",),
    options={
        "out": ("", "output path prefix of the PNGs (default: figures/<run>)"),
        "x": ("step", "x-axis: step | minutes (the run's wall-clock minutes)"),
    },
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import glob
import os

import matplotlib
import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from transformer_tf2.config.hparams import UserError
from transformer_tf2.utils import files

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)

PLOTS = {
    "loss": (("train/loss", "train loss"), ("dev/loss", "dev loss")),
    "lr": (("train/lr", "learning rate"),),
    "bleu": (("dev/bleu", "dev BLEU (sacreBLEU, greedy)"),),
}


def read_scalars(logdir: str) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from every event file under ``logdir/train``."""
    paths = sorted(glob.glob(os.path.join(logdir, "train", "events.out.tfevents.*")))
    if not paths:
        raise UserError(f"no TensorBoard event files in {logdir}/train: train a model first")
    series: dict[str, dict[int, float]] = {}
    for path in paths:
        acc = event_accumulator.EventAccumulator(path, size_guidance={"tensors": 0})
        acc.Reload()
        for tag in acc.Tags()["tensors"]:
            if acc.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
                continue
            for event in acc.Tensors(tag):
                value = float(tf.make_ndarray(event.tensor_proto))
                series.setdefault(tag, {})[event.step] = value  # a resumed run wins
    return {tag: sorted(points.items()) for tag, points in series.items()}


X_AXES = ("step", "minutes")


def minutes_of(series: dict[str, list[tuple[int, float]]], logdir: str):
    """step -> wall-clock minutes, interpolated from the run's ``train/minutes`` scalar."""
    if not series.get("train/minutes"):
        raise UserError(
            f"{logdir}/train has no train/minutes scalar (a run of an older version): "
            "plot it with --x step"
        )
    steps, minutes = zip(*series["train/minutes"])
    return lambda xs: np.interp(xs, steps, minutes)


def plot(logdir: str, out: str, x: str = "step") -> list[str]:
    if x not in X_AXES:
        raise UserError(f"--x {x}: choose one of {', '.join(X_AXES)}")
    series = read_scalars(logdir)
    to_x = minutes_of(series, logdir) if x == "minutes" else np.asarray
    written = []
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    for name, curves in PLOTS.items():
        fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
        for tag, label in curves:
            if tag in series:
                steps, values = zip(*series[tag])
                ax.plot(
                    to_x(steps),
                    values,
                    marker="o" if tag.startswith("dev") else None,
                    markersize=3,
                    label=label,
                )
        ax.set_xlabel("step" if x == "step" else "minutes of training (wall clock)")
        ax.set_title(f"{os.path.basename(os.path.normpath(logdir))}: {name}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = f"{out}_{name}.png"
        with files.atomic_path(path) as tmp:
            fig.savefig(tmp, format="png")
        plt.close(fig)
        written.append(path)
    for step, bleu in series.get("dev/bleu", []):
        at = "" if x == "step" else f" ({float(to_x([step])[0]):.1f} min)"
        print(f"step {step}{at}: dev BLEU {bleu:.2f}")
    return written


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    out = opts["out"] or os.path.join("figures", os.path.basename(os.path.normpath(hp.logdir)))
    for path in plot(hp.logdir, out, opts["x"]):
        print(f"wrote {path}")


if __name__ == "__main__":
    cli.run_main(main)
