"""Fine-tuning: a new run that starts from the weights of a trained one (``--init_from
LOGDIR``), on data encoded with that run's vocabulary (``prepro.py --vocab_from``).

The new run has its own logdir. Its model settings are the parent's (hparams.json); a
command-line value that would change the model's function is refused, while the
training settings (lr, dropout, label smoothing, the schedule, the data) are its own. By
default the optimizer and the schedule start afresh, warmup included (step 0);
``--init_optimizer`` also takes the parent's Adam moments (the step still starts at 0).
A resumed fine-tuning run resumes from its own checkpoints, never the parent's again.
"""

from __future__ import annotations

import os

import tensorflow as tf

from transformer_tf2.config import hparams
from transformer_tf2.config.parents import read_parent, taken_from
from transformer_tf2.data import data_load
from transformer_tf2.models import checkpoints
from transformer_tf2.utils.errors import UserError


def parent_settings(hp: hparams.Hparams, explicit: set) -> hparams.Hparams:
    """With ``--init_from``: ``hp`` with the parent run's model settings (MODEL_KEYS),
    refusing a command-line value (``explicit``) that differs, and a logdir that is the
    parent's own. Without it: ``hp``."""
    if not hp.init_from:
        return hp
    if os.path.abspath(hp.init_from) == os.path.abspath(hp.logdir):
        raise UserError(
            f"--init_from {hp.init_from} is the run's own --logdir: a fine-tuned run needs a "
            f"logdir of its own (to continue {hp.logdir}, run without --init_from)"
        )
    parent = read_parent(hp.init_from, "init_from")
    return taken_from(hp, parent, hparams.MODEL_KEYS, explicit, f"the model of {hp.init_from}")


def check_vocabulary(hp: hparams.Hparams) -> None:
    """The run's data (``prepro_dir``) is encoded with the parent's vocabulary: its
    fingerprint is the one the parent's logdir recorded (vocab.sha256); else one line."""
    recorded = os.path.join(hp.init_from, "vocab.sha256")
    if not os.path.isfile(recorded):
        raise UserError(f"--init_from {hp.init_from}: no {recorded}; was it trained by train.py?")
    with open(recorded, encoding="utf-8") as f:
        parent = f.read().strip()
    if data_load.vocab_fingerprint(hp) != parent:
        raise UserError(
            f"the data in {hp.prepro_dir} is encoded with another vocabulary than "
            f"{hp.init_from}'s; encode it with the parent's: python prepro.py --vocab_from "
            f"{hp.init_from} --data_dir {hp.data_dir} --prepro_dir {hp.prepro_dir}"
        )


def start_from_parent(trainer, hp: hparams.Hparams, ckpt: str = "") -> str:
    """Put the parent's weights (its default model, or ``ckpt``: a path, ``best`` or
    ``last``) into ``trainer``'s model, and with ``init_optimizer`` its Adam moments (the
    optimizers' step back at 0); the moving average starts from the weights. Returns the
    line that says so."""
    path, why = checkpoints.choose_checkpoint(hp.init_from, ckpt)
    groups = trainer.group_optimizers
    optimizers = {
        "optimizer": trainer.optimizer,
        **{f"{n}_optimizer": o for n, o in groups.items()},
    }
    items = {"model": trainer.model}
    if hp.init_optimizer:
        present = checkpoints.checkpoint_items(path)
        if "optimizer" not in present:
            raise UserError(
                f"--init_optimizer: {path} ({why}) holds the weights alone, no optimizer; "
                f"pass --ckpt last (or best) to start from a full checkpoint of "
                f"{hp.init_from}, or drop --init_optimizer"
            )
        items.update(optimizers)
    checkpoints.restore_checkpoint(
        tf.train.Checkpoint(**items), path, f"was {hp.init_from} trained with these settings?"
    )
    for optimizer in [trainer.adam, trainer.optimizer, *groups.values()]:
        optimizer.iterations.assign(0)
    if trainer.ema:
        trainer.ema.reset()
    moments = "its Adam moments" if hp.init_optimizer else "a fresh optimizer"
    return (
        f"train: fine-tuning from {path} ({why}) of {hp.init_from}, with {moments} and the "
        f"schedule from step 0"
    )
