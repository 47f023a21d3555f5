"""Turn a run's TensorBoard logs into PNG plots (loss, lr and dev BLEU against steps).

    python plot_logs.py --logdir log/demo --out figures/demo

Writes ``<out>_loss.png``, ``<out>_lr.png`` and ``<out>_bleu.png`` and prints the dev BLEU
curve per epoch.
"""

from __future__ import annotations

import cli
import hparams

SCRIPT = cli.Script(
    "plot_logs",
    __doc__,
    fields=("logdir",),
    options={
        "out": ("", "output path prefix of the PNGs (default: figures/<run>)"),
    },
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import glob
import os

import matplotlib
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

import files
from hparams import UserError

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


def plot(logdir: str, out: str) -> list[str]:
    series = read_scalars(logdir)
    written = []
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    for name, curves in PLOTS.items():
        fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
        for tag, label in curves:
            if tag in series:
                steps, values = zip(*series[tag])
                ax.plot(
                    steps,
                    values,
                    marker="o" if tag.startswith("dev") else None,
                    markersize=3,
                    label=label,
                )
        ax.set_xlabel("step")
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
        print(f"step {step}: dev BLEU {bleu:.2f}")
    return written


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    out = opts["out"] or os.path.join("figures", os.path.basename(os.path.normpath(hp.logdir)))
    for path in plot(hp.logdir, out):
        print(f"wrote {path}")


if __name__ == "__main__":
    hparams.run_main(main)
