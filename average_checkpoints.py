"""Average the weights of a run's last N checkpoints into one checkpoint for eval.py.

    python average_checkpoints.py --preset multi30k --last 5
    python eval.py --preset multi30k --ckpt log/multi30k/averaged/avg-last5
    python average_checkpoints.py --preset multi30k --last 5 --ckpt log/multi30k/ckpt-9000

Averaging the last checkpoints (Vaswani et al. 2017, section 6.1, averaged the last 5
for the base model) usually gains a little BLEU over the last one alone. Only the model
weights are averaged; the result holds no optimizer state. ``--ckpt`` makes the N end at
that checkpoint (to leave out a newer one, e.g. a damaged one).
"""

# ruff: noqa: E402  (the script answers --help before TensorFlow is imported: cli.start)
from __future__ import annotations

from transformer_tf2.config import cli

DEFAULT_LAST = 5  # checkpoints averaged by default (hparams.Hparams.keep_ckpts keeps as many)
SCRIPT = cli.Script(
    "average_checkpoints",
    __doc__,
    fields=("logdir",),
    options={
        "last": (DEFAULT_LAST, "how many of the latest checkpoints to average"),
        "out": ("", "output checkpoint prefix (default: <logdir>/averaged/avg-last<N>)"),
        "ckpt": ("", "average the checkpoints up to this one, not up to the latest"),
    },
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import os

import tensorflow as tf

from transformer_tf2.config.hparams import UserError
from transformer_tf2.models import checkpoints
from transformer_tf2.utils import files


def run_checkpoints(logdir: str) -> list[str]:
    """The run's checkpoint prefixes, oldest first (as CheckpointManager lists them)."""
    state = tf.train.get_checkpoint_state(logdir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    return [p if os.path.isabs(p) else os.path.join(logdir, os.path.basename(p)) for p in paths]


def average(logdir: str, last: int, out: str = "", ckpt: str = "") -> str:
    """Write the average of the last ``last`` checkpoints (up to ``ckpt``, if given);
    returns its prefix."""
    paths = run_checkpoints(logdir)
    if last < 1:
        raise UserError(f"--last must be at least 1; got {last}")
    if ckpt:
        names = [os.path.basename(p) for p in paths]
        if os.path.basename(ckpt) not in names:
            raise UserError(
                f"--ckpt {ckpt} is not one of the checkpoints of {logdir} ({', '.join(names)})"
            )
        paths = paths[: names.index(os.path.basename(ckpt)) + 1]
    if len(paths) < last:
        raise UserError(
            f"{logdir} holds {len(paths)} checkpoint(s), fewer than --last "
            f"{last}; lower --last or raise --keep_ckpts when training"
        )
    paths = paths[-last:]
    hp, tok, model, _ = checkpoints.load_run(logdir, {}, paths[-1], "average_checkpoints")
    weights = checkpoints.average_weights(model, paths)
    out = out or os.path.join(logdir, "averaged", f"avg-last{last}")
    with files.atomic_path(out) as tmp:  # its .index and .data-* files
        weights.write(tmp)
    print(f"average_checkpoints: {', '.join(os.path.basename(p) for p in paths)} -> {out}")
    return out


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    average(hp.logdir, opts["last"], opts["out"], opts["ckpt"])


if __name__ == "__main__":
    cli.run_main(main)
