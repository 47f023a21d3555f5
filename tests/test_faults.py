"""Faults: NaN/Inf updates skipped in every precision, out-of-memory batches, damaged
checkpoints, a full disk and a logdir that cannot be written (injected in a child
process) each give one clear line and lose no file."""

import dataclasses
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

import average_checkpoints
import export
import train
import translate
from eval import evaluate, source_tag
from helpers import ROOT, tiny
from test_files import read_only_mount, unprivileged
from transformer_tf2.config import cli, hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding.translator import Translator
from transformer_tf2.models import checkpoints, variants
from transformer_tf2.models.model import Transformer
from transformer_tf2.training.trainer import Health, Trainer
from transformer_tf2.utils import devices

NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------------------------------
# NaN or Inf: the update is skipped by every optimizer
# ---------------------------------------------------------------------------------------
class Poisoned:
    """Training hooks whose extra loss gains ``value * sum(target embedding)`` while
    ``flag`` is set: a NaN or Inf gradient injected at will."""

    def __init__(self, hooks, value):
        self.hooks, self.value = hooks, value
        self.flag = tf.Variable(0.0, trainable=False)

    def __getattr__(self, name):
        return getattr(self.hooks, name)

    def extra_loss(self, model, extras):
        weight = tf.where(self.flag > 0, self.value, 0.0)
        embeddings = tf.cast(model.tgt_embedding.embeddings, tf.float32)
        return self.hooks.extra_loss(model, extras) + weight * tf.reduce_sum(embeddings)


def state(trainer):
    """Every weight and optimizer variable (all groups) as numpy, without the loss scale
    and its growth counter (which a skip halves and resets)."""
    optimizers = [trainer.optimizer, *trainer.group_optimizers.values()]
    scaling = ("dynamic_scale", "step_counter")
    variables = list(trainer.model.weights) + [
        v for opt in optimizers for v in opt.variables if not v.path.endswith(scaling)
    ]
    return [np.array(v.numpy()) for v in variables]


@pytest.mark.slow
@pytest.mark.parametrize(
    "precision, model_type, value, accum_steps",
    [
        ("float32", "transformer", NAN, 1),
        ("float32", "transformer", INF, 2),
        pytest.param("float32", "weighted", INF, 1, marks=pytest.mark.slow),
        pytest.param("mixed_bfloat16", "transformer", NAN, 1, marks=pytest.mark.slow),
        pytest.param("mixed_float16", "weighted", NAN, 1, marks=pytest.mark.slow),
    ],
)
def test_nan_or_inf_update_is_skipped_everywhere(
    demo_prepro, tmp_path, precision, model_type, value, accum_steps
):
    """An update whose gradients hold a NaN or an Inf changes no weight, no Adam slot and
    no step count - of the main optimizer nor of the Weighted Transformer's kappa/alpha
    group - and is reported as skipped (counted); the next batch trains normally.
    Under mixed_float16 the skip halves the loss scale."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        precision=precision,
        model_type=model_type,
        accum_steps=accum_steps,
    )
    tok = data_load.load_tokenizer(hp)
    strategy, precision = devices.setup_devices(hp)
    trainer = Trainer(hp, tok, strategy, precision)
    trainer.hooks = poisoned = Poisoned(trainer.hooks, value)
    flag = poisoned.flag
    data = data_load.TrainData(hp)
    batches = [data_load.build_batch(data.corpus, b) for b in data.batches(0)[:6]]

    def update(group):
        """Train on the batches of one update; the last one's (stats, updated)."""
        for b in group[:-1]:
            assert not trainer.train_batch(*b)[1]
        return trainer.train_batch(*group[-1])

    stats, updated = update(batches[0:accum_steps])
    assert updated and trainer.step == 1 and stats.skipped == 0
    before, scale = state(trainer), trainer.optimizer.scale_loss(1.0)
    flag.assign(1.0)
    stats, updated = update(batches[accum_steps : 2 * accum_steps])
    assert not updated and stats.skipped == 1 and stats.scale_skip == 0
    assert trainer.step == 1 and not np.isfinite(stats.grad_norm)
    for a, b in zip(before, state(trainer)):
        np.testing.assert_array_equal(a, b)
    if precision == "mixed_float16":
        assert float(trainer.optimizer.scale_loss(1.0)) == float(scale) / 2
    if model_type == "weighted":
        assert int(trainer.group_optimizers["branch"].iterations) == 1
    flag.assign(0.0)
    stats, updated = update(batches[2 * accum_steps : 3 * accum_steps])
    assert updated and stats.skipped == 0 and trainer.step == 2
    changed = [not np.array_equal(a, b) for a, b in zip(before, state(trainer))]
    assert sum(changed) > len(changed) // 2


@pytest.mark.slow
def test_loss_scale_overflow_is_skipped_but_not_counted(demo_prepro, tmp_path):
    """mixed_float16 with a loss scale far too large: float16 gradients overflow, the
    update is skipped and the scale halved, as at the start of training - a normal skip
    (scale_skip), not a counted one."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        precision="mixed_float16",
    )
    tok = data_load.load_tokenizer(hp)
    strategy, precision = devices.setup_devices(hp)
    trainer = Trainer(hp, tok, strategy, precision)
    data = data_load.TrainData(hp)
    batch = data_load.build_batch(data.corpus, data.batches(0)[0])
    trainer.optimizer.dynamic_scale.assign(2.0**60)
    stats, updated = trainer.train_batch(*batch)
    assert not updated and stats.skipped == 0 and stats.scale_skip == 1 and trainer.step == 0
    assert float(trainer.optimizer.dynamic_scale) == 2.0**59
    health = Health(hp, trainer, tf.summary.create_noop_writer())
    health.after(stats, updated)
    assert health.in_a_row == 0 and int(trainer.state.skipped_steps) == 0
    trainer.optimizer.dynamic_scale.assign(2.0**10)
    stats, updated = trainer.train_batch(*batch)
    assert updated and trainer.step == 1 and np.isfinite(stats.grad_norm)


@pytest.mark.slow
def test_max_bad_steps_stops_and_keeps_the_last_good_checkpoint(demo_prepro, tmp_path, monkeypatch):
    """NaN gradients from the 5th batch on: batches 5-7 are skipped and counted in
    TensorBoard, then the run stops with one line naming the likely causes; ckpt-4, the
    last good one, stays the newest checkpoint."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        ckpt_every_steps=2,
        max_bad_steps=3,
    )
    calls = tf.Variable(0, trainable=False)

    def extra_loss(self, model, extras):
        calls.assign_add(1)
        weight = tf.where(calls > 4, NAN, 0.0)
        return weight * tf.reduce_sum(model.tgt_embedding.embeddings)

    monkeypatch.setattr(variants.Training, "extra_loss", extra_loss)
    good = os.path.join(hp.logdir, "ckpt-4")
    expected = (
        "3 updates in a row after step 4 had a NaN or Inf loss or gradient and were skipped "
        "(max_bad_steps=3); likely causes: a learning rate too high (--lr, --warmup_steps), "
        "float16 overflow (--precision float32 or mixed_bfloat16), or bad data (epoch 1, "
        f"batches 5-7); the last good checkpoint {good} is kept"
    )
    with pytest.raises(hparams.UserError, match=re.escape(expected)):
        train.train(hp)
    assert tf.train.latest_checkpoint(hp.logdir) == good
    events = glob.glob(os.path.join(hp.logdir, "train", "events.*"))
    acc = event_accumulator.EventAccumulator(events[0], size_guidance={"tensors": 0})
    acc.Reload()
    counted = [
        (e.step, float(tf.make_ndarray(e.tensor_proto))) for e in acc.Tensors("train/skipped_steps")
    ]
    assert counted == [(1, 0.0), (4, 1.0), (4, 2.0), (4, 3.0)]


@pytest.mark.slow
def test_an_update_that_makes_a_weight_nan_is_never_saved(demo_prepro, tmp_path, monkeypatch):
    """A NaN planted in a weight by step 2's update (its loss and gradients were finite,
    so the step's guard let it through): the save of step 2 is refused in one line that
    names the weight and what is kept, and ckpt-1, finite, stays the newest checkpoint."""
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        max_steps=3,
        ckpt_every_steps=1,
    )
    train_batch = Trainer.train_batch

    def planted(self, *batch, stop=False):
        out = train_batch(self, *batch, stop=stop)
        if self.step == 2:
            weight = self.model.tgt_embedding.embeddings
            weight.assign(tf.tensor_scatter_nd_update(weight, [[3, 1]], [NAN]))
        return out

    monkeypatch.setattr(Trainer, "train_batch", planted)
    first = os.path.join(hp.logdir, "ckpt-1")
    expected = (
        "train: after step 2, transformer/tgt_embedding/embeddings holds a NaN or an Inf, so "
        f"no checkpoint was written; the 1 step since checkpoint {first} (step 1) is lost "
        "(a rerun resumes from it); lower --lr or set --clip_norm"
    )
    with pytest.raises(hparams.UserError, match=f"^{re.escape(expected)}$"):
        train.train(hp)
    assert tf.train.latest_checkpoint(hp.logdir) == first
    assert not glob.glob(os.path.join(hp.logdir, "ckpt-2*"))
    reader = tf.train.load_checkpoint(first)
    for name in reader.get_variable_to_dtype_map():
        value = reader.get_tensor(name)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            assert np.isfinite(value).all(), name


# ---------------------------------------------------------------------------------------
# Out of memory
# ---------------------------------------------------------------------------------------
def test_out_of_memory_names_the_batch_and_the_budget(demo_prepro, tmp_path, monkeypatch):
    """A ResourceExhaustedError from the train step, or from a decoding batch: one line
    naming the batch's shape and tokens_per_batch (or eval_batch_size)."""
    hp = tiny(str(tmp_path), data_dir=demo_prepro.data_dir, prepro_dir=demo_prepro.prepro_dir)

    def exhausted(*args, **kw):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    monkeypatch.setattr(Trainer, "train_step", exhausted)
    shape = r"\(\d+, \d+\)"
    with pytest.raises(
        hparams.UserError,
        match=rf"^out of memory on a training batch of shape {shape} \(source\) / {shape} "
        r"\(target\) under tokens_per_batch=600; train in a new --logdir with a lower "
        r"--tokens_per_batch \(and a higher --accum_steps to keep the batch size\)",
    ):
        train.train(hp)
    model = Transformer.from_hparams(hp, 200, 200)
    translator = Translator(model, data_load.load_tokenizer(hp), hp)
    translator.decode = exhausted
    with pytest.raises(
        hparams.UserError,
        match=r"^out of memory decoding a batch of shape \(2, \d+\) \(sentences x source "
        r"tokens; eval_batch_size=64, beam_size=1\): lower --eval_batch_size$",
    ):
        translator.translate(["Die Frau liest.", "Der Hund schläft."])


# ---------------------------------------------------------------------------------------
# Damaged checkpoints
# ---------------------------------------------------------------------------------------
def truncate(data):
    return data[: len(data) // 2]


def corrupt(data):
    """16 bytes flipped at a quarter and at three quarters of the file (in a data file,
    among the model's weights and among the optimizer's slots)."""
    out = bytearray(data)
    for start in (len(data) // 4, 3 * len(data) // 4):
        out[start : start + 16] = bytes(b ^ 0xFF for b in out[start : start + 16])
    return bytes(out)


DATA = ".data-00000-of-00001"
DAMAGE = {  # name: (file suffix, what happens to it, what the message says of it)
    "truncated index": (".index", truncate, "is damaged (not an sstable (bad magic number))"),
    "corrupted index": (".index", corrupt, "is damaged (Unable to read file"),
    "truncated data": (DATA, truncate, "is damaged (Read less bytes than requested)"),
    "corrupted data": (DATA, corrupt, "is damaged (TensorBundle at"),
    "deleted data": (DATA, None, "is missing"),
}


def damaged_copy(quick_run, folder, kind):
    """A copy of the quick run whose newest checkpoint (ckpt-3) is damaged and is its
    default model (its best checkpoint and best.json are removed); its hparams and the
    damaged file's path."""
    hp, _ = quick_run
    logdir = os.path.join(folder, "log")
    shutil.copytree(hp.logdir, logdir)
    shutil.rmtree(os.path.join(logdir, "best"))
    os.remove(os.path.join(logdir, "best.json"))
    suffix, change, _ = DAMAGE[kind]
    path = os.path.join(logdir, "ckpt-3" + suffix)
    if change is None:
        os.remove(path)
    else:
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(change(data))
    return hparams.apply(hp, {"logdir": logdir, "results_dir": os.path.join(folder, "r")}), path


def damaged_message(hp, path, kind):
    ckpt = os.path.join(hp.logdir, "ckpt-3")
    return (
        re.escape(f"checkpoint {ckpt} is damaged: {path} {DAMAGE[kind][2]}")
        + r"[^\n]*"
        + re.escape(
            f"; pass --ckpt {os.path.join(hp.logdir, 'ckpt-2')} to use the previous checkpoint"
        )
        + "$"
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_checkpoint_names_the_file_and_the_previous_one(quick_run, tmp_path, kind):
    """eval on a run whose newest checkpoint is truncated, corrupted or half missing: one
    line naming the file and ckpt-2; with --ckpt ckpt-2 it evaluates."""
    hp, path = damaged_copy(quick_run, str(tmp_path), kind)
    with pytest.raises(hparams.UserError, match=damaged_message(hp, path, kind)):
        evaluate(hp.logdir, {"results_dir": hp.results_dir})
    if kind == "corrupted data":
        previous = os.path.join(hp.logdir, "ckpt-2")
        src, ref = tmp_path / "test.de", tmp_path / "test.en"
        src.write_text("Die Frau liest ein Buch.\n", encoding="utf-8")
        ref.write_text("The woman reads a book.\n", encoding="utf-8")
        result = evaluate(hp.logdir, {"results_dir": hp.results_dir}, previous, str(src), str(ref))
        # named after the checkpoint and the source it decoded (eval.source_tag)
        tag = source_tag(str(src), ["Die Frau liest ein Buch."])  # test-<digest>
        assert result["results"].endswith("log_ckpt-2_" + tag)


@pytest.mark.slow
def test_every_script_names_a_damaged_checkpoint(quick_run, tmp_path, monkeypatch, capsys):
    """train (resume), translate, export and average_checkpoints give the same line; train
    and average_checkpoints then work from --ckpt ckpt-2 (train writes a sound ckpt-3)."""
    kind = "truncated data"
    hp, path = damaged_copy(quick_run, str(tmp_path), kind)
    message = damaged_message(hp, path, kind)
    previous = os.path.join(hp.logdir, "ckpt-2")
    with pytest.raises(hparams.UserError, match=message):
        train.train(hp)
    with pytest.raises(hparams.UserError, match=message):
        export.export(hp.logdir, str(tmp_path / "saved"), {})
    with pytest.raises(hparams.UserError, match=message):
        average_checkpoints.average(hp.logdir, 2)
    monkeypatch.setattr(sys, "argv", ["translate.py", "--logdir", hp.logdir])
    with pytest.raises(SystemExit) as stop:
        cli.run_main(translate.main)
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert stop.value.code == 2 and len(errors) == 1 and re.match("error: " + message, errors[0])
    averaged = average_checkpoints.average(hp.logdir, 2, str(tmp_path / "avg"), ckpt=previous)
    assert "ckpt-1, ckpt-2 ->" in capsys.readouterr().out and os.path.exists(averaged + ".index")
    summary = train.train(hp, ckpt=previous)
    assert summary["step"] == 3 and "resumed from " + previous in capsys.readouterr().out
    assert checkpoints.load_run(hp.logdir, {}, "last")[3] == os.path.join(hp.logdir, "ckpt-3")


def test_damaged_only_checkpoint_says_there_is_no_earlier_one(quick_run, tmp_path):
    hp, _ = damaged_copy(quick_run, str(tmp_path), "corrupted index")
    path = os.path.join(hp.logdir, "ckpt-1")
    with open(path + DATA, "r+b") as f:
        f.truncate(100)
    with pytest.raises(
        hparams.UserError,
        match=re.escape(f"checkpoint {path} is damaged: {path}{DATA} is damaged (")
        + r".*; no earlier checkpoint in "
        + re.escape(hp.logdir)
        + " reads back: train again$",
    ):
        checkpoints.load_run(hp.logdir, {}, path)


@pytest.mark.parametrize("case", ["best.json", "best/", "newest damaged too"])
def test_a_damaged_default_model_gives_way_to_the_newest_checkpoint_that_reads(
    quick_run, tmp_path, capsys, case
):
    """The run's default model, best/ckpt-3 (named by best.json, or found in best/ without
    it), is damaged while the run's newest checkpoint reads back: the default choice
    loads that one (ckpt-2 where ckpt-3 is damaged too) and its one stderr line says
    why; --ckpt best still names the damaged file."""
    hp, _ = quick_run
    logdir = str(tmp_path / "log")
    shutil.copytree(hp.logdir, logdir)
    if case == "best/":
        os.remove(os.path.join(logdir, "best.json"))
    best = os.path.join(logdir, "best", "ckpt-3")
    damaged = [best] + ([os.path.join(logdir, "ckpt-3")] if case == "newest damaged too" else [])
    for path in damaged:
        with open(path + DATA, "r+b") as f:
            f.truncate(100)
    capsys.readouterr()
    newest = os.path.join(logdir, "ckpt-2" if case == "newest damaged too" else "ckpt-3")
    assert checkpoints.load_run(logdir, {}, "", "translate")[3] == newest
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("translate: model")]
    assert len(lines) == 1 and re.fullmatch(
        re.escape(
            f"translate: model {newest} (the newest checkpoint that reads back, in place of the "
            f"default model {best}, which is damaged: {best}{DATA} is damaged ("
        )
        + r"[^\n]*\)\)",
        lines[0],
    )
    with pytest.raises(hparams.UserError, match=re.escape(f"checkpoint {best} is damaged: ")):
        checkpoints.load_run(logdir, {}, "best")


# ---------------------------------------------------------------------------------------
# A full disk, injected in a child process: a file-size limit (RLIMIT_FSIZE, with SIGXFSZ
# ignored, so that writes fail with EFBIG - also those of TensorFlow's C++ writers), or
# /dev/full (ENOSPC) under the temporary name of a file that Python writes
# ---------------------------------------------------------------------------------------
OUTCOME = r"""
from transformer_tf2.config import hparams
def outcome(fn):
    try:
        fn()
        return "no error"
    except hparams.UserError as e:
        return "UserError: " + str(e)
    except BaseException as e:
        return f"{type(e).__name__}: {e}"
"""  # put before a child process's script: how fn() ends, as one line

FULL_DISK = r"""
import json, os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
import tensorflow as tf
import average_checkpoints, export, prepro, train
from transformer_tf2.models import checkpoints
from transformer_tf2.utils import files
from transformer_tf2.config import hparams
from transformer_tf2.training import summaries
import translate
from eval import evaluate

cfg = json.loads(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)


def attempt(name, fault, fn):
    if isinstance(fault, int):  # a file-size limit
        resource.setrlimit(resource.RLIMIT_FSIZE, (fault, hard))
    elif fault:  # the file goes to /dev/full
        os.symlink("/dev/full", files.temporary_name(fault))
    try:
        result = outcome(fn)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    print(json.dumps([name, result]), flush=True)


def run(name):
    return hparams.apply(hparams.Hparams(), cfg[name])


def tensorboard():
    hp = run("log")
    hp = hparams.apply(hp, {"logdir": cfg["events"]})
    writer = tf.summary.create_file_writer(os.path.join(cfg["events"], "train"))
    lost = "the 1 step since checkpoint ckpt-0 (step 0) is lost (a rerun resumes from it)"
    with summaries.summaries_at(writer, 1, hp, lost):
        means = {"loss": 1.0, "nll": 1.0, "accuracy": 0.5, "tokens_per_sec": 1.0}
        summaries.train_scalars(means, 1.0, 1e-3)


def stdout():
    sys.stdout = open("/dev/full", "w")
    sys.argv = ["translate.py", "--logdir", run("log").logdir, "--input", cfg["input"]]
    try:
        translate.main()
    finally:
        sys.stdout = sys.__stdout__


def attention():
    _, tok, model, _ = checkpoints.load_run(run("log").logdir, {})
    translate.plot_attention(model, tok, "Die Frau liest ein Buch.", cfg["png"], 10)


log = run("log").logdir
limit = 64 * 1024  # above hparams.json, specs and the text files; below a checkpoint
# two steps after ckpt-3, then the dev evaluation and the checkpoint at the budget's end
ckpt_5 = {"max_steps": 5, "ckpt_every_steps": 0}
attempt("checkpoint", limit, lambda: train.train(hparams.apply(run("log"), ckpt_5)))
attempt("tensorboard", 256, tensorboard)
attempt("average", limit, lambda: average_checkpoints.average(log, 2, cfg["average"]))
attempt("export", limit, lambda: export.export(log, cfg["export"], {}))
results_dir = {"results_dir": os.path.dirname(cfg["results"])}
attempt("results", cfg["results"], lambda: evaluate(log, results_dir, "", *[cfg["input"]] * 2))
attempt("prepro", limit, lambda: prepro.preprocess(run("prepro"), force=True))
attempt("prepro npz", cfg["npz"], lambda: prepro.preprocess(run("prepro2"), force=True))
hp = hparams.apply(run("log"), {"max_steps": 7})  # another hparams.json than the last
attempt("hparams", os.path.join(log, "hparams.json"), lambda: train.train(hp))
attempt("attention", cfg["png"], attention)
attempt("stdout", None, stdout)
"""


@pytest.fixture(scope="module")
def full_disk(quick_run, demo_prepro, tmp_path_factory):
    """Runs FULL_DISK once; (its results, the paths, the files' bytes before)."""
    hp, _ = quick_run
    tmp = tmp_path_factory.mktemp("full_disk")
    paths = {
        "log": str(tmp / "log"),
        "events": str(tmp / "events"),
        "average": str(tmp / "avg" / "avg-last2"),
        "export": str(tmp / "exported"),
        # eval.py names a --test_src file's results after it (eval.source_tag)
        "results": str(
            tmp / "results" / ("log_ckpt-3_" + source_tag("input.de", ["Die Frau liest ein Buch."]))
        ),
        "input": str(tmp / "input.de"),
        "png": str(tmp / "attention.png"),
        "npz": str(tmp / "p2" / "prepro" / "train.npz"),
    }
    shutil.copytree(hp.logdir, paths["log"])
    own = {"logdir": paths["log"], "evaldir": str(tmp / "eval")}
    cfg = dict(paths, log=dataclasses.asdict(hparams.apply(hp, own)))
    for name in ("p1", "p2"):
        for sub in ("data", "prepro"):
            shutil.copytree(getattr(demo_prepro, f"{sub}_dir"), str(tmp / name / sub))
        dirs = {"data_dir": str(tmp / name / "data"), "prepro_dir": str(tmp / name / "prepro")}
        cfg["prepro" if name == "p1" else "prepro2"] = dataclasses.asdict(
            hparams.apply(demo_prepro, dirs)
        )
    average_checkpoints.average(paths["log"], 2, paths["average"])  # the previous versions
    os.makedirs(os.path.join(paths["export"], "variables"))
    os.makedirs(os.path.dirname(paths["results"]))
    for path, text in (
        (os.path.join(paths["export"], "saved_model.pb"), "an earlier export"),
        (os.path.join(paths["export"], "variables", "variables.index"), "its variables"),
        (paths["results"], "earlier results"),
        (paths["results"] + ".json", "{}"),
        (paths["png"], "an earlier plot"),
        (paths["input"], "Die Frau liest ein Buch.\n"),
    ):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    before = snapshot(str(tmp))
    proc = subprocess.run(
        [sys.executable, "-c", OUTCOME + FULL_DISK, json.dumps(cfg)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = dict(json.loads(line) for line in proc.stdout.splitlines() if line.startswith("["))
    return results, paths, before, str(tmp)


def snapshot(folder):
    """{path: bytes} of every file under folder; a symbolic link as its target, never
    read (a /dev/full link the fault left behind would read zeros without end)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if os.path.islink(path):
                out[path] = ("link to", os.readlink(path))
                continue
            with open(path, "rb") as f:
                out[path] = f.read()
    return out


def kept(before, folder, *paths):
    """Each of ``paths`` (a file, or every file under a folder) has its earlier bytes, and
    ``folder`` holds no temporary file or partial checkpoint."""
    now = snapshot(folder)
    for path in paths:
        old = {p: b for p, b in before.items() if p == path or p.startswith(path + os.sep)}
        assert old, path
        for p, data in old.items():
            assert now.get(p) == data, p
    leftovers = [p for p in now if ".tmp-" in p or "_temp" in p]
    assert not leftovers


LIMIT, FULL = "File too large", "No space left on device"


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        "checkpoint",
        "tensorboard",
        "average",
        "export",
        "results",
        "prepro",
        "prepro npz",
        "hparams",
        "attention",
        "stdout",
    ],
)
def test_full_disk_keeps_the_previous_files_and_says_where(full_disk, case):
    """Each writer, on a full disk: one UserError line naming the file and the cause; the
    file's previous version (or the previous checkpoint) intact, no temporary file left."""
    results, paths, before, tmp = full_disk
    log, prepro1 = paths["log"], os.path.join(tmp, "p1", "prepro")
    again = ": free some disk space and run again"
    expected, files_kept = {
        "checkpoint": (
            f"could not write {log}/ckpt-5 ({LIMIT}); the 2 steps since checkpoint "
            f"{log}/ckpt-3 (step 3) are lost (a rerun resumes from it){again}",
            [f"{log}/ckpt-3.index", f"{log}/ckpt-3{DATA}", f"{log}/checkpoint", f"{log}/best"],
        ),
        "tensorboard": (
            f"could not write {paths['events']}/train ({LIMIT}); the 1 step since checkpoint "
            f"ckpt-0 (step 0) is lost (a rerun resumes from it){again}",
            [],
        ),
        "average": (
            f"could not write {paths['average']} ({LIMIT}); its previous version is kept{again}",
            [paths["average"] + ".index", paths["average"] + DATA],
        ),
        "export": (
            f"could not write {paths['export']} ({LIMIT}); its previous version is kept{again}",
            [paths["export"]],
        ),
        "results": (
            f"could not write {paths['results']} ({FULL}); its previous version is kept{again}",
            [paths["results"], paths["results"] + ".json"],
        ),
        "prepro": (
            f"could not write {prepro1}/bpe.model ({LIMIT}); its previous version is kept{again}",
            [f"{prepro1}/bpe.model", f"{prepro1}/train.npz"],
        ),
        "prepro npz": (
            f"could not write {paths['npz']} ({FULL}); its previous version is kept{again}",
            [paths["npz"]],
        ),
        "hparams": (  # the version of the checkpoint case (max_steps=5) is kept
            f"could not write {log}/hparams.json ({FULL}); its previous version is kept{again}",
            [],
        ),
        "attention": (
            f"could not write {paths['png']} ({FULL}); its previous version is kept{again}",
            [paths["png"]],
        ),
        "stdout": (
            f"could not write to stdout ({FULL}); the output is incomplete: write it to a "
            f"disk with free space",
            [],
        ),
    }[case]
    assert results[case] == "UserError: " + expected
    kept(before, tmp, *files_kept)
    if case == "checkpoint":
        assert tf.train.latest_checkpoint(log) == f"{log}/ckpt-3"
        assert checkpoints.load_run(log, {}, "last")[3] == f"{log}/ckpt-3"
    if case == "hparams":
        assert hparams.load(f"{log}/hparams.json").max_steps == 5
    if case == "prepro":  # a later run sees that the data set is incomplete
        with pytest.raises(hparams.UserError, match="incomplete"):
            saved = hparams.load(os.path.join(prepro1, "hparams.json"))
            data_load.load_tokenizer(hparams.apply(saved, {"prepro_dir": prepro1}))


# ---------------------------------------------------------------------------------------
# A logdir this user cannot write (EACCES: a child process that file modes bind, for
# root too) or on a read-only file system (EROFS): one line naming the file, exit status 2
# ---------------------------------------------------------------------------------------
READ_ONLY = r"""
import contextlib, io, json, os, sys
import train
from transformer_tf2.config import cli
from transformer_tf2.utils import files

cfg = json.loads(sys.argv[1])


def attempt(name, fn):
    print(json.dumps([name, outcome(fn)]), flush=True)


def run(name, **kw):
    return hparams.apply(hparams.Hparams(), {**cfg["hp"], "logdir": cfg[name], **kw})


def script():  # train.py's main: its exit status and its stderr
    sys.argv = ["train.py", *cfg["argv"]]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            cli.run_main(train.main)
        except SystemExit as e:
            return e.code, err.getvalue()
    return 0, err.getvalue()


print(json.dumps(["script", script()]), flush=True)
attempt("logdir in it", lambda: train.train(run("logdir in it")))
attempt("hparams", lambda: train.train(run("hparams")))
once = {"max_steps": 1, "ckpt_every_steps": 0}  # no checkpoint before the best one
attempt("best checkpoint", lambda: train.train(run("best checkpoint", **once)))
attempt("summaries", lambda: train.train(run("summaries")))
translations = {"max_steps": 3, "ckpt_every_steps": 2, "evaldir": cfg["read-only eval"]}
attempt("dev translations", lambda: train.train(run("dev translations", **translations)))
# best.json's temporary name in this process: a file this user may not write
tmp = files.temporary_name(os.path.join(cfg["best.json"], "best.json"))
with open(tmp, "w") as f:
    f.write("not ours")
os.chmod(tmp, 0o444)
attempt("best.json", lambda: train.train(run("best.json", max_steps=4)))
"""


def train_argv(hp):
    """train.py's command line for the run ``hp``: every hyperparameter, by name."""
    return [x for k, v in dataclasses.asdict(hp).items() for x in (f"--{k}", str(v))]


def refused_child(prefix: list[str], script: str, *args):
    """``python script args`` from the repository root under the command ``prefix`` (a
    read-only mount, a user that file modes bind)."""
    command = prefix + [sys.executable, script, *map(str, args)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def error_lines(stderr):
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if "error" in line.lower()]


@pytest.mark.slow
def test_a_logdir_this_user_cannot_write_is_one_line(quick_run, tmp_path):
    """train.py into a read-only logdir: one line naming train.lock, exit status 2. And
    each later write of a training run, refused: the logdir's creation, hparams.json
    (in a read-only logdir whose lock file is writable), the best checkpoint, the
    TensorBoard events, the dev translations, best.json: one line naming the file and
    what is lost (the steps since the last checkpoint), the previous files kept."""
    hp, _ = quick_run
    folders = {
        name: str(tmp_path / name.replace(" ", "_"))
        for name in (
            "read-only",
            "hparams",
            "best checkpoint",
            "summaries",
            "best.json",
            "dev translations",
            "read-only eval",
        )
    }
    folders["logdir in it"] = os.path.join(folders["read-only"], "log")
    for name in ("read-only", "hparams", "best checkpoint", "summaries", "read-only eval"):
        os.makedirs(folders[name])
    shutil.copytree(hp.logdir, folders["best.json"])
    open(os.path.join(folders["hparams"], "train.lock"), "w").close()
    os.chmod(os.path.join(folders["hparams"], "train.lock"), 0o666)
    read_only = [
        folders["read-only"],
        folders["hparams"],
        os.path.join(folders["best checkpoint"], "best"),
        os.path.join(folders["summaries"], "train"),
        folders["read-only eval"],
    ]
    for folder in read_only:
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, 0o555)
    before = snapshot(str(tmp_path))
    cfg = dict(
        folders,
        hp=dataclasses.asdict(hparams.apply(hp, {"evaldir": str(tmp_path / "eval")})),
        argv=train_argv(hparams.apply(hp, {"logdir": folders["read-only"]})),
    )
    try:
        proc = subprocess.run(
            unprivileged() + [sys.executable, "-c", OUTCOME + READ_ONLY, json.dumps(cfg)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        for folder in read_only:
            os.chmod(folder, 0o755)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = dict(json.loads(line) for line in proc.stdout.splitlines() if line.startswith("["))
    do = "give this user write permission there, or choose another folder"
    status, stderr = results.pop("script")
    train_lock = os.path.join(folders["read-only"], "train.lock")
    assert status == 2 and error_lines(stderr) == [
        f"error: could not write {train_lock} (Permission denied); nothing was written: {do}"
    ]
    translations = results.pop("dev translations")  # E01S3L<dev loss>
    name = f"UserError: could not write {folders['read-only eval']}/E01S3L"
    assert translations.startswith(name) and translations.endswith(
        f" (Permission denied); the 1 step since checkpoint {folders['dev translations']}/"
        f"ckpt-2 (step 2) is lost (a rerun resumes from it): {do}"
    )
    logdir_in_it = os.path.join(folders["logdir in it"], "train.lock")
    expected = {
        "logdir in it": f"{logdir_in_it} (Permission denied); nothing was written",
        "hparams": f"{folders['hparams']}/hparams.json (Permission denied); its previous "
        f"version is kept",
        "best checkpoint": f"{folders['best checkpoint']}/best/ckpt-1 (Permission denied); "
        f"the 1 step trained so far is lost (no checkpoint yet)",
        "summaries": f"{folders['summaries']}/train (Permission denied); nothing is lost",
        "best.json": f"{folders['best.json']}/best.json (Permission denied); its previous "
        f"version is kept",
    }
    assert results == {
        name: f"UserError: could not write {x}: {do}" for name, x in expected.items()
    }
    kept(before, str(tmp_path), folders["best.json"] + "/best.json")
    assert not os.listdir(folders["read-only"]) and not os.listdir(read_only[2])


@pytest.mark.slow
def test_a_logdir_on_a_read_only_file_system_is_one_line(quick_run, tmp_path):
    """train.py into a logdir on a read-only file system: one line, exit status 2."""
    hp, _ = quick_run
    logdir = str(tmp_path / "log")
    os.makedirs(logdir)
    argv = train_argv(hparams.apply(hp, {"logdir": logdir}))
    proc = refused_child(read_only_mount(logdir), "train.py", *argv)
    assert proc.returncode == 2 and error_lines(proc.stderr) == [
        f"error: could not write {logdir}/train.lock (Read-only file system); nothing was "
        f"written: choose a folder on a writable file system"
    ]


@pytest.mark.slow
def test_a_results_folder_this_user_cannot_write_is_one_line_before_decoding(quick_run, tmp_path):
    """eval.py with a results folder it may not write: one line naming it, exit status 2,
    before any sentence is decoded (not a traceback after the whole test set)."""
    hp, _ = quick_run
    results = tmp_path / "results"
    results.mkdir()
    os.chmod(results, 0o555)
    proc = refused_child(unprivileged(), "eval.py", "--logdir", hp.logdir, "--results_dir", results)
    assert proc.returncode == 2 and error_lines(proc.stderr) == [
        f"error: could not write {results} (Permission denied); nothing was decoded yet: "
        "give this user write permission there, or choose another folder"
    ]
    assert "sentences in" not in proc.stdout and not os.listdir(results)
