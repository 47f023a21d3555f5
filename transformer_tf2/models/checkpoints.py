"""Checkpoints: the run's default model (best.json), choosing one to decode, averaging
several, restoring one, and telling a damaged checkpoint from one of another model, each
error one UserError line that names the file and what to do; a training run's logdir:
its lock, the check that it can be resumed, the cleanup of a killed save, and the choice
of the default model at the end of a run; :func:`load_run`, a trained run ready to
decode. Used by train.py, eval.py, translate.py, export.py and average_checkpoints.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import re
import shutil
import socket
import sys
import time

import numpy as np
import tensorflow as tf

from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.models.model import Transformer
from transformer_tf2.utils import devices, files
from transformer_tf2.utils.errors import UserError

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


def write_model(model, path: str, lost: str) -> None:
    """Write the model's weights alone as checkpoint ``path`` (``<folder>/<name>-<step>``,
    atomically), which load_run restores as any other; older ones of that name in the
    folder are removed after. ``lost``: what a failed write loses (files.atomic_path)."""
    checkpoint = tf.train.Checkpoint(model=model)
    checkpoint.save_counter  # noqa: B018 (created here: restoring expects it)
    with files.atomic_path(path, lost) as tmp:
        checkpoint.write(tmp)
    name = os.path.basename(path).rsplit("-", 1)[0]
    for old in glob.glob(os.path.join(os.path.dirname(path), f"{name}-*.index")):
        if old[: -len(".index")] != path:
            for part in glob.glob(old[: -len(".index")] + ".*"):
                with contextlib.suppress(OSError):
                    os.remove(part)


@contextlib.contextmanager
def own_weights_kept(model):
    """The model's own weights, put back after the ``with`` block (even on an error)."""
    own = [w.numpy() for w in model.weights]
    try:
        yield
    finally:
        for w, value in zip(model.weights, own):
            w.assign(value)


def scored(model, path: str, dev_bleu) -> float:
    """``dev_bleu()`` with the model's weights of checkpoint ``path``; the model's own
    weights are put back after."""
    with own_weights_kept(model):
        restore_checkpoint(tf.train.Checkpoint(model=model), path, "was it written by another run?")
        return dev_bleu()


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


def refuse_nonfinite(variables, step: int, lost: str) -> None:
    """A UserError, before anything is written, if one of ``variables`` (a model's
    weights, its optimizers' moments and the weights' moving average) holds a NaN or an
    Inf: such a checkpoint would only make the next run fail. The train step skips an
    update whose loss or gradient norm is not finite, and the settings' checks keep lr,
    the betas and epsilon finite; what is left (an overflow from a huge lr) is caught
    here, once per save."""
    bad = [
        getattr(v, "path", v.name)  # a Keras variable's path, a tf.Variable's name
        for v in variables
        if tf.as_dtype(v.dtype).is_floating
        and not bool(tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))))
    ]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise UserError(
            f"train: after step {step}, {bad[0]}{more} holds a NaN or an Inf, so no "
            f"checkpoint was written; {lost}; lower --lr or set --clip_norm"
        )


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


# ---------------------------------------------------------------------------------------
# A training run's logdir and its default model
# ---------------------------------------------------------------------------------------
def check_logdir(hp: hparams.Hparams) -> None:
    """A logdir holding a run with another model shape, another batch plan or another
    vocabulary cannot be resumed."""
    path = os.path.join(hp.logdir, "hparams.json")
    if os.path.exists(path):
        hparams.check_same(
            hparams.load(path),
            hp,
            hparams.MODEL_KEYS + hparams.RESUME_KEYS,
            f"the checkpoint in {hp.logdir}",
            "pass a new --logdir, or the same settings to resume it",
        )
    data_load.check_vocab_fingerprint(hp)


class LogdirLock:
    """One training run per logdir: the chief holds an exclusive ``fcntl.flock`` on
    ``<logdir>/train.lock`` for the whole run (other workers of a multi-worker run take
    none). The kernel releases it when its owner ends, however it ends; the file names
    the owner (pid, host, start time, command) for the message a second run gets. A
    logdir that cannot be written is one UserError line here, before any training."""

    def __init__(self, logdir: str, active: bool = True):
        self.path, self.active, self.file = os.path.join(logdir, "train.lock"), active, None

    def __enter__(self):
        if not self.active:
            return self
        with files.reporting(self.path, "nothing was written"):  # a read-only logdir
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self.file = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            owner = self.file.read().strip() or "a process that has not named itself yet"
            self.file.close()
            raise UserError(
                f"{os.path.dirname(self.path)} is in use by another training run ({owner}); "
                f"wait for it to end or stop it, or pass another --logdir"
            ) from None
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError):  # the lock holds even if its note cannot be written
            self.file.seek(0)
            self.file.truncate()
            self.file.write(
                f"pid {os.getpid()} on {socket.gethostname()}, started {started}: "
                f"{' '.join([os.path.basename(sys.executable)] + sys.argv)}\n"
            )
            self.file.flush()
        return self

    def __exit__(self, *exc):
        if self.file:
            self.file.close()  # releases the lock


def remove_partial_checkpoints(folder: str) -> None:
    """Remove what TensorFlow leaves of a checkpoint whose writing failed or was killed
    (``ckpt-N_temp`` folders, in ``folder`` and its ``best``); complete ones are kept."""
    for path in glob.glob(os.path.join(folder, "ckpt-*_temp")) + glob.glob(
        os.path.join(folder, "best", "ckpt-*_temp")
    ):
        shutil.rmtree(path, ignore_errors=True)


def average_last(
    hp, model, saved: list[str], step: int, best_bleu: float, chief: bool, dev_bleu
) -> dict | None:
    """The average of the last ``hp.average`` of a run's checkpoints ``saved`` (oldest
    first; Vaswani et al. 2017, 6.1; under wsd, spread over the cooldown:
    :func:`spread_checkpoints`) at step ``step``, put in ``model`` and scored on the dev
    subset by ``dev_bleu()`` (the model's dev BLEU as it is); written to
    ``<logdir>/averaged/avg-last<N>-<step>`` (by the ``chief``) if it beats the best
    checkpoint's ``best_bleu``. The model's own weights are put back after. Returns
    {checkpoints, dev_bleu, wins, path, seconds}, or None with too few checkpoints."""
    if hp.lr_schedule == "wsd":  # Budget.points: at least half their spacing apart
        gap = 0.5 * hp.cooldown * step / hp.average
        paths = spread_checkpoints(saved, hp.average, gap)
    else:
        paths = saved[-hp.average :]
    if len(paths) < hp.average:
        print(f"train: {len(paths)} checkpoint(s), fewer than --average {hp.average}: no average")
        return None
    t0 = time.time()
    out = os.path.join(hp.logdir, "averaged", f"avg-last{hp.average}-{step}")
    with own_weights_kept(model):
        weights = average_weights(model, paths)
        bleu = dev_bleu()
        wins = bleu > best_bleu
        if wins and chief:
            with files.atomic_path(out) as tmp:  # its .index and .data-* files
                weights.write(tmp)
    names = ", ".join(os.path.basename(p) for p in paths)
    print(
        f"train: the average of {names} has dev BLEU {bleu:.2f} against the best "
        f"checkpoint's {best_bleu:.2f}: "
        + (f"it is the default model ({out})" if wins else "the best checkpoint stays")
    )
    return {
        "checkpoints": paths,
        "dev_bleu": bleu,
        "wins": wins,
        "path": out if wins else "",
        "seconds": time.time() - t0,
    }


def record_default(logdir: str, candidates: list[dict]) -> dict | None:
    """``<logdir>/best.json``: the model eval.py, translate.py and export.py load by
    default (:func:`choose_checkpoint`), the best on the dev subset of ``candidates``
    ({path, dev_bleu, what}: the best checkpoint by dev BLEU or, with --ema_decay, its EMA
    weights and its own weights; the average of the last checkpoints where it won), the
    first of equals. The choice is printed (with the others' figures) and returned."""
    if not candidates:
        return None
    chosen = max(candidates, key=lambda c: c["dev_bleu"])  # the first of equals
    write_default(logdir, chosen["path"], chosen["dev_bleu"], chosen["what"])
    if len(candidates) > 1:
        others = "; ".join(
            f"{c['what']} {c['dev_bleu']:.2f}" for c in candidates if c is not chosen
        )
        print(
            f"train: the default model is the {chosen['what']} ({chosen['path']}, dev BLEU "
            f"{chosen['dev_bleu']:.2f}); against: {others}"
        )
    return chosen


def load_run(logdir: str, overrides: dict, ckpt: str = "", who: str = "eval"):
    """Hparams, tokenizer and restored model of a training run.

    ``overrides`` may change decoding settings; changing the model's shape is an error.
    A damaged default model (``ckpt`` "") gives way to the newest checkpoint that reads
    back (:func:`instead_of_damaged`), which the model's stderr line says.
    """
    saved = hparams.load(os.path.join(logdir, "hparams.json"))
    wanted = hparams.apply(saved, overrides)
    hparams.check_same(
        saved,
        wanted,
        hparams.MODEL_KEYS,
        f"the checkpoint in {logdir}",
        "evaluate with the settings it was trained with (drop those options)",
    )
    ignored = sorted(
        k for k in overrides if k not in hparams.DECODE_KEYS + hparams.MODEL_KEYS + ("logdir",)
    )
    if ignored:
        print(
            f"{who}: ignoring {', '.join('--' + k for k in ignored)}: the run's own "
            f"settings in {logdir}/hparams.json are used",
            file=sys.stderr,
        )
    decode = {k: v for k, v in overrides.items() if k in hparams.DECODE_KEYS}
    # float32 unless asked: a run trained in mixed precision saved that policy
    hp = hparams.apply(saved, {"precision": "float32", **decode, "logdir": logdir})
    tok = data_load.load_tokenizer(hp)
    data_load.check_vocab_fingerprint(hp)
    devices.setup_devices(hp, who)
    model = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
    path, why = choose_checkpoint(logdir, ckpt)
    checkpoint, hint = tf.train.Checkpoint(model=model), "was it trained with other hparams?"
    try:
        restore_checkpoint(checkpoint, path, hint)
    except UserError:
        fallback = None if ckpt else instead_of_damaged(logdir, path)
        if fallback is None:
            raise
        restore_checkpoint(checkpoint, fallback[0], hint)
        path, why = fallback
    print(f"{who}: model {path} ({why})", file=sys.stderr)
    return hp, tok, model, path


def instead_of_damaged(logdir: str, default: str) -> tuple[str, str] | None:
    """(checkpoint prefix, why) of the newest checkpoint in ``logdir`` that reads back,
    to load in place of the run's default model ``default`` (a best checkpoint or an
    average) where that is damaged; None where it is not damaged, is itself the newest
    checkpoint (its error names the previous one) or no checkpoint reads back."""
    last = tf.train.latest_checkpoint(logdir)
    damage = checkpoint_damage(default)
    if not last or damage is None or os.path.abspath(default) == os.path.abspath(last):
        return None
    newest = last if checkpoint_damage(last) is None else previous_checkpoint(last)
    if newest is None:
        return None
    return newest, (
        f"the newest checkpoint that reads back, in place of the default model {default}, "
        f"which is damaged: {damage}"
    )
