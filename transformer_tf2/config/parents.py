"""Settings a new run takes from a trained one: the vocabulary of a corpus encoded with a
parent's (``prepro.py --vocab_from``), the model of a fine-tuned run (``train.py
--init_from``, training/finetune.py). They read the parent's hparams.json alone, so prepro
needs no model code for them.
"""

from __future__ import annotations

import os

from transformer_tf2.config import hparams
from transformer_tf2.utils.errors import UserError

# the vocabulary settings a corpus encoded with a parent's vocabulary takes from it
VOCAB_KEYS = ("vocab_type", "vocab_size", "min_cnt", "src_lang", "tgt_lang")


def read_parent(logdir: str, who: str) -> hparams.Hparams:
    """The hparams of trained run ``logdir`` (one UserError line if it is none)."""
    path = os.path.join(logdir, "hparams.json")
    if not os.path.isfile(path):
        raise UserError(
            f"--{who} {logdir}: no {path}; name the logdir of a trained run (train.py writes "
            f"hparams.json there)"
        )
    return hparams.load(path)


def taken_from(hp: hparams.Hparams, parent: hparams.Hparams, keys, explicit: set, what: str):
    """``hp`` with ``keys`` set to the parent's values; a key given on the command line
    (``explicit``) with another value is one UserError line naming it."""
    for key in keys:
        if key in explicit and getattr(hp, key) != getattr(parent, key):
            raise UserError(
                f"--{key} {getattr(hp, key)!r} would change {what}, which has {key}="
                f"{getattr(parent, key)!r}; drop --{key}"
            )
    return hparams.apply(hp, {k: getattr(parent, k) for k in keys})
