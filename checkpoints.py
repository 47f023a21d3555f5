"""Checkpoints: the run's default model (best.json), choosing one to decode, averaging
several, restoring one, and telling a damaged checkpoint from one of another model, each
error one UserError line that names the file and what to do. Used by train.py,
decoding.py (loading a run) and average_checkpoints.py.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import tensorflow as tf

import files
from errors import UserError

DEFAULT_RECORD = "best.json"  # <logdir>/best.json: the run's default model (train.py)


def write_default(logdir: str, path: str, dev_bleu: float, what: str) -> None:
    """Record ``path`` (a checkpoint prefix under logdir) as the run's default model."""
    record = {"checkpoint": os.path.relpath(path, logdir), "dev_bleu": dev_bleu, "what": what}
    files.atomic_write(os.path.join(logdir, DEFAULT_RECORD), json.dumps(record, indent=2) + "\n")


def choose_checkpoint(logdir: str, ckpt: str = "") -> tuple[str, str]:
    """(checkpoint prefix, why it was chosen). ``ckpt``: a path, ``last`` (the newest
    checkpoint) or ``best``; "" = the default model: the one train.py recorded in
    <logdir>/best.json (the average of the last checkpoints where it won on dev, else
    the best by dev BLEU), else the best by dev BLEU, else the newest."""
    if ckpt not in ("", "best", "last"):
        return ckpt, "--ckpt"
    last = tf.train.latest_checkpoint(logdir)
    if ckpt != "last":
        record_path = os.path.join(logdir, DEFAULT_RECORD)
        if not ckpt and os.path.exists(record_path):
            try:
                with open(record_path, encoding="utf-8") as f:
                    record = json.load(f)
                path = os.path.join(logdir, record["checkpoint"])
                why = f"{record['what']}, dev BLEU {record['dev_bleu']:.2f}"
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise UserError(
                    f"{record_path} is unreadable ({e}); pass --ckpt last or --ckpt best, "
                    f"or delete it"
                ) from None
            if tf.io.gfile.exists(path + ".index"):
                return path, f"the default model: {why}; --ckpt last for the newest"
        best = tf.train.latest_checkpoint(os.path.join(logdir, "best"))
        if best:
            return best, "the best checkpoint by dev BLEU; --ckpt last for the newest"
        if ckpt == "best":
            raise UserError(f"{logdir} has no best checkpoint (no dev BLEU yet); use --ckpt last")
    if not last:
        raise UserError(f"no checkpoint in {logdir}: run train.py first or pass --ckpt")
    return last, "the newest checkpoint"


def spread_checkpoints(paths: list[str], n: int, gap: float) -> list[str]:
    """The ``n`` checkpoints to average: from the newest back, each at least ``gap``
    steps before the one taken after it (oldest first), or the last ``n`` where fewer
    lie so far apart. A run under a time budget saves at the epochs' ends as well as at
    the cooldown's planned points, and one of each can fall a step or two apart; their
    average would weigh that moment twice."""
    picked: list[str] = []
    after = float("inf")  # the step of the checkpoint taken last
    for path in reversed(paths):
        step = int(path.rsplit("-", 1)[1])  # <prefix>/ckpt-<step>
        if after - step >= gap:
            picked.append(path)
            after = step
        if len(picked) == n:
            return picked[::-1]
    return paths[-n:]


def average_weights(model, paths: list[str]):
    """Set the model's weights to the mean of its weights in checkpoints ``paths``;
    returns the tf.train.Checkpoint(model=model) that writes them (a fresh one would
    write no save counter, which restoring expects)."""
    checkpoint = tf.train.Checkpoint(model=model)
    total = [np.zeros(w.shape, np.float64) for w in model.weights]
    for path in paths:
        restore_checkpoint(checkpoint, path, "was it written by another run?")
        for acc, w in zip(total, model.weights):
            acc += w.numpy()
    for acc, w in zip(total, model.weights):
        w.assign((acc / len(paths)).astype(w.dtype))
    return checkpoint


_READ_ERRORS = (ValueError, AssertionError, IndexError, tf.errors.OpError)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def checkpoint_items(path: str) -> set[str]:
    """The top-level names checkpoint ``path`` holds ('model', 'optimizer', ...); empty
    if its index cannot be read (:func:`restore_checkpoint` says why)."""
    try:
        return {name.split("/")[0] for name, _ in tf.train.list_variables(path)}
    except _READ_ERRORS:
        return set()


def checkpoint_damage(path: str) -> str | None:
    """What is wrong with the files of checkpoint ``path`` ('<file> is missing' or
    '<file> is damaged (<reason>)'), or None if its index and every tensor read back
    (TensorFlow checks each tensor's checksum)."""
    index = path + ".index"
    if not tf.io.gfile.exists(index):
        return f"{index} is missing"
    try:
        reader = tf.train.load_checkpoint(path)
    except _READ_ERRORS as e:
        return f"{index} is damaged ({_first_line(e)})"
    try:
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except _READ_ERRORS as e:
        text, shards = str(e), sorted(tf.io.gfile.glob(path + ".data-*"))
        missing = re.search(re.escape(path) + r"\.data-\d+-of-\d+", text)
        if missing and missing.group(0) not in shards:
            return f"{missing.group(0)} is missing"
        shard = re.search(r" shard (\d+)", text)
        data = shards[int(shard.group(1))] if shard and len(shards) > 1 else shards[0]
        return f"{data} is damaged ({_first_line(e)})"
    return None


def previous_checkpoint(path: str) -> str | None:
    """The newest checkpoint before ``path`` (same folder and name, lower number: ckpt-5
    for ckpt-6) that reads back whole, or None."""
    folder, base = os.path.split(path)
    stem, _, number = base.rpartition("-")
    if not stem or not number.isdigit():
        return None
    older = []
    for index in tf.io.gfile.glob(os.path.join(folder, f"{stem}-*.index")):
        n = os.path.basename(index)[len(stem) + 1 : -len(".index")]
        if n.isdigit() and int(n) < int(number):
            older.append((int(n), index[: -len(".index")]))
    return next((p for _, p in sorted(older, reverse=True) if not checkpoint_damage(p)), None)


def restore_checkpoint(checkpoint, path: str, hint: str, partial: bool = True) -> None:
    """Restore checkpoint ``path`` into ``checkpoint`` (a tf.train.Checkpoint; with
    ``partial``, what it does not ask for is ignored). One UserError line if it is
    missing, damaged (naming the file, and the previous checkpoint to pass with --ckpt)
    or written for another model (``hint`` says what to check)."""
    if not tf.io.gfile.exists(path + ".index"):
        raise UserError(f"checkpoint {path} not found (expected {path}.index)")
    try:
        status = checkpoint.restore(path)
        (status.expect_partial() if partial else status).assert_existing_objects_matched()
        return
    except _READ_ERRORS as e:
        error = e
    damage = checkpoint_damage(path)
    if damage is None:
        raise UserError(
            f"checkpoint {path} does not fit this model ({_first_line(error)}); {hint}"
        ) from None
    previous = previous_checkpoint(path)
    fallback = (
        f"pass --ckpt {previous} to use the previous checkpoint"
        if previous
        else f"no earlier checkpoint in {os.path.dirname(path) or '.'} reads back: train again"
    )
    raise UserError(f"checkpoint {path} is damaged: {damage}; {fallback}") from None
