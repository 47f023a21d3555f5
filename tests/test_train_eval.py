"""End to end: prepro -> train -> eval on a small generated corpus, resume, TensorBoard,
gradient accumulation, mixed precision, several replicas."""

import glob
import json
import math
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

import mirrored_cases
import prepro
import train
from eval import evaluate
from helpers import ROOT, results_hypotheses, tiny
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.evaluation import metrics
from transformer_tf2.models import checkpoints, variants
from transformer_tf2.models.model import Transformer
from transformer_tf2.training.trainer import StepStats, Trainer
from transformer_tf2.utils import devices


def test_max_steps_run_checkpoints_every_step(quick_run):
    """The quick run: stopped by max_steps inside the first epoch, a checkpoint per step,
    one dev evaluation of the final weights, the run's hparams, vocabulary fingerprint
    and specs in logdir."""
    hp, summary = quick_run
    assert summary["step"] == 3 and summary["epoch"] == 0
    assert [(h["epoch"], h["step"]) for h in summary["history"]] == [(1, 3)]
    assert summary["history"][0]["dev_bleu"] is not None
    assert summary["stop_reason"] == "max_steps=3 reached"
    assert summary["checkpoint"] == os.path.join(hp.logdir, "ckpt-3")
    assert np.isfinite(summary["train_loss"]) and np.isfinite(summary["first_loss"])
    for step in (1, 2, 3):
        assert os.path.exists(os.path.join(hp.logdir, f"ckpt-{step}.index"))
    assert hparams.load(os.path.join(hp.logdir, "hparams.json")) == hp
    with open(os.path.join(hp.logdir, "vocab.sha256")) as f:
        assert f.read().strip() == data_load.vocab_fingerprint(hp)
    with open(os.path.join(hp.logdir, "specs")) as f:
        specs = f.read().splitlines()
    assert specs[-1].startswith("total parameters: ")
    assert any("encoder_0/self_attn/w_q\t(32, 32)" in line for line in specs)


def test_step_stats_and_window():
    """StepStats are named sums; the Window turns them into per-token means."""
    stats = StepStats(30.0, 20.0, 10.0, 4.0)
    assert stats.grad_norm == 0.0 and stats._replace(grad_norm=2.0)[4] == 2.0
    window = train.Window()
    window.add(stats)
    window.add(StepStats(10.0, 10.0, 10.0, 6.0, 5.0))
    means = window.means()
    assert (means["loss"], means["nll"], means["accuracy"]) == (2.0, 1.5, 0.5)
    assert means["tokens_per_sec"] > 0


@pytest.mark.slow
def test_end_to_end_outputs(run):
    hp, summary, result = run
    assert summary["epoch"] == hp.num_epochs and summary["step"] > 0
    assert len(summary["history"]) == hp.num_epochs
    assert os.path.exists(summary["checkpoint"] + ".index")
    assert glob.glob(os.path.join(hp.logdir, "best", "ckpt-*.index"))
    text = open(result["results"], encoding="utf-8").read()
    assert text.count("- source: ") == 500 and text.count("- got: ") == 500
    labels = ("Bleu Score = ", "sacreBLEU = ", "sacreBLEU, lowercased = ", "BLEU (tokenize=none")
    for label in (*labels, "chrF = "):
        assert label in text
    figures = json.load(open(result["results"] + ".json"))
    assert figures["sentences"] == 500
    assert "tok:13a" in figures["sacrebleu_signature"]
    assert "case:lc" in figures["sacrebleu_lc_signature"]
    assert figures["sacrebleu_lc"] >= figures["sacrebleu"]
    assert "tok:none" in figures["bleu_tokenize_none_signature"]
    specs = open(os.path.join(hp.logdir, "specs")).read().splitlines()
    assert specs[-1].startswith("total parameters: ")
    assert any("encoder_0/self_attn/w_q" in line for line in specs)
    assert os.listdir(hp.evaldir), "dev translations are written after each epoch"


@pytest.mark.slow
def test_tensorboard_events(run):
    hp, _, _ = run
    events = glob.glob(os.path.join(hp.logdir, "train", "events.*"))
    assert events
    acc = event_accumulator.EventAccumulator(events[0], size_guidance={"tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    for tag in (
        "train/loss",
        "train/lr",
        "train/accuracy",
        "train/grad_norm",
        "train/tokens_per_sec",
        "dev/loss",
        "dev/bleu",
        "dev/translations",
        "attention/encoder_self",
        "attention/decoder_self",
        "attention/decoder_cross",
    ):
        assert tag in tags, tag
    plugins = {tag: acc.SummaryMetadata(tag).plugin_data.plugin_name for tag in tags}
    assert plugins["dev/translations"] == "text"
    assert plugins["attention/decoder_cross"] == "images"
    assert plugins["train/loss"] == "scalars"


@pytest.mark.slow
def test_resume_continues_step_count(tmp_path, quick_run, run):
    """A run stopped at max_steps (quick_run: 3 steps) and resumed without it ends at the
    step of the uninterrupted run (run: the same plan, 3 epochs)."""
    hp, first = quick_run
    assert first["step"] == 3 and first["epoch"] == 0
    shutil.copytree(hp.logdir, tmp_path / "log")  # quick_run's logdir is only read
    _, summary, _ = run
    resume = {"max_steps": 0, "logdir": str(tmp_path / "log"), "ckpt_every_steps": 0}
    second = train.train(hparams.apply(hp, resume))  # checkpoints per epoch, as run's
    assert second["step"] == summary["step"]
    assert second["epoch"] == hp.num_epochs


def test_eval_refuses_other_hparams(quick_run):
    hp, _ = quick_run
    with pytest.raises(hparams.UserError, match="d_model=32"):
        evaluate(hp.logdir, {"d_model": 64})


@pytest.mark.slow
def test_eval_refuses_foreign_checkpoint(tmp_path, quick_run):
    """A checkpoint of a differently shaped model gives one clear error."""
    hp, _ = quick_run
    other = tiny(
        str(tmp_path),
        prepro_dir=hp.prepro_dir,
        data_dir=hp.data_dir,
        d_model=16,
        d_ff=32,
        max_steps=1,
    )
    path = train.train(other)["checkpoint"]
    with pytest.raises(hparams.UserError, match="does not fit this model"):
        evaluate(hp.logdir, {"results_dir": str(tmp_path)}, ckpt=path)


@pytest.mark.slow
def test_long_sentence_decodes(tmp_path, quick_run):
    """A test sentence far longer than any training sentence decodes without error
    (the TF1 code crashed past its maxlen-row positional table)."""
    hp, _ = quick_run
    src, ref = tmp_path / "long.de", tmp_path / "long.en"
    src.write_text(
        " ".join(["Der Hund schläft und"] * 60) + " die Katze spielt.\nDie Frau liest.\n",
        encoding="utf-8",
    )
    ref.write_text(
        " ".join(["The dog sleeps and"] * 60) + " the cat plays.\nThe woman reads.\n",
        encoding="utf-8",
    )
    result = evaluate(
        hp.logdir,
        {"results_dir": str(tmp_path)},
        test_src=str(src),
        test_ref=str(ref),
        length_buckets="100",
    )
    with open(result["results"] + ".json") as f:
        saved = json.load(f)
    assert saved["sentences"] == 2
    # the long sentence has over 100 source tokens, the short one fewer
    buckets = saved["length_buckets"]
    assert [(b["bucket"], b["sentences"]) for b in buckets] == [("<=100", 1), (">=101", 1)]
    with open(result["results"]) as f:
        text = f.read()
    assert "sacreBLEU, source >=101 tokens (1 sentences) = " in text
    with pytest.raises(hparams.UserError, match="--length_buckets expects ascending"):
        evaluate(hp.logdir, {}, length_buckets="24,16")


@pytest.mark.slow
def test_cli_errors_are_one_line(tmp_path):
    """User errors exit with status 2 and a single 'error:' line, not a traceback."""
    cases = [
        (["prepro.py", "--d_modle", "3"], "did you mean --d_model"),
        (["prepro.py", "--preset", "nope"], "unknown preset"),
        (["prepro.py", "--preset", "multi30k", "--data_dir", str(tmp_path / "none")], "not found"),
        (["eval.py", "--logdir", str(tmp_path / "nolog")], "hparams.json not found"),
    ]
    for argv, expected in cases:
        proc = subprocess.run(
            [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2, (argv, proc.stderr)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and expected in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_mixed_precision_training_loss_falls(demo_prepro):
    """mixed_bfloat16 and mixed_float16 (with loss scaling) train on CPU: over the same 60
    batches the loss falls as it does in float32, and every update is applied."""
    hp_f32 = hparams.apply(demo_prepro, dict(warmup_steps=10, lr_schedule="kyubyong", lr=0.003))
    tok = data_load.load_tokenizer(hp_f32)
    data = data_load.TrainData(hp_f32)
    batches = [b for epoch in range(6) for b in data.dataset(epoch, 0, data.batches(epoch))]
    losses = {}
    for precision in ("float32", "mixed_bfloat16", "mixed_float16"):
        hp = hparams.apply(hp_f32, {"precision": precision})
        keras.utils.set_random_seed(hp.seed)
        strategy, resolved = devices.setup_devices(hp)
        assert resolved == precision
        trainer = Trainer(hp, tok, strategy, resolved)
        losses[precision] = []
        for batch in batches[:60]:
            stats, updated = trainer.train_batch(*batch)
            losses[precision].append(stats.loss_sum / stats.tokens)
            assert updated, precision
        assert trainer.step == 60, precision
    first, last = (
        {p: float(np.mean(v[sl])) for p, v in losses.items()} for sl in (slice(3), slice(-5, None))
    )
    # independent attention projections learn a little slower in the first steps than the
    # earlier tied start did; the three precisions alike
    assert last["float32"] < first["float32"] - 0.8, (first, last)
    for precision in ("mixed_bfloat16", "mixed_float16"):
        assert np.all(np.isfinite(losses[precision])), precision
        assert last[precision] < first[precision] - 0.8, (precision, first, last)
        assert abs(last[precision] - last["float32"]) < 0.1, (precision, last)


class L2Variant(variants.Training):
    """Training hooks whose extra loss depends on the weights: 0.5 * |E|^2 of the embedding."""

    def extra_loss(self, model, extras):
        return 0.5 * tf.reduce_sum(tf.square(model.tgt_embedding.embeddings))


@pytest.mark.slow
@pytest.mark.parametrize("extra_loss", [False, True])
def test_gradient_accumulation_equals_larger_batch(tmp_path, demo_prepro, extra_loss):
    """accum_steps=2 over batches b1, b2 gives the update of one batch b1 + b2, also with
    a variant's extra loss term (counted once per update)."""
    hp_full = demo_prepro
    base = dict(
        prepro_dir=hp_full.prepro_dir, data_dir=hp_full.data_dir, dropout_rate=0.0, clip_norm=1.0
    )
    hp_acc = tiny(str(tmp_path / "acc"), accum_steps=2, **base)
    hp_big = tiny(str(tmp_path / "big"), **base)
    tok = data_load.load_tokenizer(hp_acc)
    strategy, precision = devices.setup_devices(hp_acc)
    acc = Trainer(hp_acc, tok, strategy, precision)
    big = Trainer(hp_big, tok, strategy, precision)
    for a, b in zip(acc.model.weights, big.model.weights):
        b.assign(a)
    if extra_loss:
        acc.hooks = big.hooks = L2Variant()
    initial = [w.numpy() for w in acc.model.weights]
    data = data_load.TrainData(hp_acc)
    b1, b2 = data.batches(0)[:2]
    _, updated = acc.train_batch(*data_load.build_batch(data.corpus, b1))
    assert not updated and acc.step == 0
    _, updated = acc.train_batch(*data_load.build_batch(data.corpus, b2))
    assert updated and acc.step == 1
    _, updated = big.train_batch(*data_load.build_batch(data.corpus, np.concatenate([b1, b2])))
    assert updated and big.step == 1
    for a, b in zip(acc.model.weights, big.model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-6, err_msg=a.path)
    changed = [not np.allclose(a.numpy(), w0) for a, w0 in zip(acc.model.weights, initial)]
    assert sum(changed) > len(changed) // 2, "the update moved the weights"


@pytest.mark.slow
def test_accumulating_run_counts_updates(tmp_path, demo_prepro):
    """train() with accum_steps=3 makes one update per 3 batches, plus one for the rest."""
    hp_full = demo_prepro
    hp = tiny(
        str(tmp_path),
        prepro_dir=hp_full.prepro_dir,
        data_dir=hp_full.data_dir,
        accum_steps=3,
        num_epochs=1,
    )
    batches = len(data_load.TrainData(hp).batches(0))
    assert train.train(hp)["step"] == math.ceil(batches / 3)


@pytest.mark.slow
def test_epoch_checkpoint_holds_the_updated_best(run):
    """Each epoch's checkpoint already knows that epoch's dev BLEU (a resumed run never
    takes a worse epoch for the best)."""
    hp, summary, _ = run
    latest = tf.train.latest_checkpoint(hp.logdir)
    best = tf.train.load_checkpoint(latest).get_tensor("best_bleu/.ATTRIBUTES/VARIABLE_VALUE")
    assert best == pytest.approx(max(h["dev_bleu"] for h in summary["history"]), abs=1e-4)


def test_checkpoint_refuses_another_vocabulary(quick_run, tmp_path):
    hp, _ = quick_run
    logdir = tmp_path / "log"
    shutil.copytree(hp.logdir, logdir)
    (logdir / "vocab.sha256").write_text("0" * 64 + "\n")
    with pytest.raises(hparams.UserError, match="another vocabulary"):
        evaluate(str(logdir), {})
    with pytest.raises(hparams.UserError, match="another vocabulary"):
        train.train(hparams.apply(hp, {"logdir": str(logdir)}))


def test_resume_refuses_another_batch_plan(quick_run, tmp_path):
    hp, _ = quick_run
    shutil.copytree(hp.logdir, tmp_path / "log")  # quick_run's logdir is only read
    with pytest.raises(hparams.UserError, match="tokens_per_batch=600"):
        train.train(hparams.apply(hp, {"tokens_per_batch": 900, "logdir": str(tmp_path / "log")}))
    with pytest.raises(hparams.UserError, match="bpe_dropout=0.0"):
        train.train(hparams.apply(hp, {"bpe_dropout": 0.1, "logdir": str(tmp_path / "log")}))


@pytest.mark.slow
def test_mirrored_step_equals_single_device_step(demo_prepro, mirrored):
    """With 2 logical CPU devices, a MirroredStrategy step on a fixed batch (rows dealt out
    to the replicas) gives the loss and the updated weights of a single-device step, also
    with a variant's extra loss term (counted once, not once per replica). A NaN in one
    replica's gradients makes both skip the update. The Universal Transformer's ponder
    cost is each replica's own pass's (Training.extra_loss reads the layers' reports), and
    its gradient trains the halting units (mirrored_cases.py, run once for the session).
    With clip_norm, two steps that both clip give the one-device weights: the replicas'
    summed gradient is clipped by its own norm, which is the grad_norm both report. So do
    two updates of accum_steps=2 (each replica accumulates its rows of 2 batches), and
    the moving average of the weights (--ema_decay) that follows them. The replicas,
    which trace on threads of their own, use the run's C++ LayerNorm kernels."""
    values = {"dropout_rate": 0.0}
    for variant in ("plain", "extra", "universal", "clip", "accum"):
        check_mirrored(demo_prepro, values, variant, mirrored[variant])
    for variant in ("clip", "accum"):
        single_1, mirrored_1, single_2, mirrored_2 = mirrored[variant]["grad_norms"]
        assert min(single_1, single_2) > 2 * mirrored_cases.CLIP_NORM  # both updates clipped
        assert mirrored_1 == pytest.approx(single_1, rel=1e-5)
        assert mirrored_2 == pytest.approx(single_2, rel=1e-5)


def check_mirrored(hp, values, variant, out):
    assert out["replicas"] == 2
    assert out["mirrored"][2] == out["single"][2]  # target tokens of the batch
    assert out["mirrored"][0] == pytest.approx(out["single"][0], rel=1e-5)
    if variant == "universal":
        # the halting units moved, the same on both replicas (they apply one all-reduced
        # gradient: what differs is float32 rounding); a replica's ponder cost is a mean
        # over its own tokens, so the gradients differ a little from the one-device ones:
        # at most a sign flip of Adam's first step (about lr each), the halting units'
        # included (a gradient near 0 whose sign the rounding decides: seen once in 5 runs)
        step = out["nan"]["halting_moved"]
        assert step > 1e-6 and out["nan"]["halting_diff"] < 1e-3 * step
        assert out["diff"] < 2.5 * step and out["nan"]["halting_single"] < 2.5 * step
    else:
        assert out["diff"] < 1e-5  # the trainable weights
    if variant == "accum":  # the moving average of the weights, the same on 2 replicas
        lag = out["nan"]["ema_lag"]  # after 2 updates, the largest |shadow - weight|
        assert lag > 1e-6 and out["nan"]["ema_diff"] < 0.05 * lag, out["nan"]
    if variant == "plain":  # both replicas skipped the update, on every copy of a weight
        n = 2 * len(Transformer.from_hparams(hparams.apply(hp, values), 200, 200).weights)
        lib = out["nan"]["library"]  # the C++ kernels built (a C++ compiler is there)
        expect = {"skipped": 1.0, "step": 1, "copies": n, "unchanged": True}
        assert out["nan"] == {**expect, "native_ln": lib, "library": lib}


# the TF1 eval.py protocol on a fixture: (source, reference), maxlen 6, batches of 3
LEGACY_PAIRS = [
    ("Die Frau liest.", "The woman reads."),  # 0: 3 + 1 and 3 + 1 tokens: scored
    ("Der Hund schläft heute sehr tief und fest.", "The dog sleeps."),  # source 8 + 1
    ("Ein Mann.", "A man walks along the old street."),  # reference 7 + 1
    ("Die Frau & der Mann .", "The woman & the man ."),  # 3: 4 + 1 once cleaned: scored
    ("Das Kind spielt heute gern draußen", "The child plays."),  # source 6 + 1 > 6
    ("Das Kind spielt gern draußen", "The child likes playing outside"),  # 5: 5 + 1: scored
    ("Ein Hund.", "A dog."),  # 6: scored
    ("Zwei Katzen schlafen.", "Two cats sleep."),  # 7: scored
    ("Der Mann liest ein Buch.", "The man reads a book."),  # 8: scored
    ("Die Kinder lachen.", "The children laugh."),  # 9: within maxlen, last partial batch
]


@pytest.mark.slow
def test_legacy_protocol_scores_the_tf1_subset_the_tf1_way(tmp_path, demo_prepro):
    """eval.py with legacy_protocol (the iwslt2016_legacy preset's) on a word-level TF1
    model: of 10 test pairs, the 7 within maxlen (cleaned, </S> counted) are cut to 2
    whole batches of 3, in file order; sources and references are shown cleaned; each
    hypothesis is maxlen2 literal tokens (a model made to predict <UNK> and never </S>),
    whatever max_len_extra; the legacy figure is the TF1 BLEU of exactly those."""
    legacy = {k: v for k, v in hparams.PRESETS["iwslt2016_legacy"].items() if "dir" not in k}
    legacy = {k: v for k, v in legacy.items() if k not in ("corpus", "min_cnt", "num_epochs")}
    sizes = dict(d_model=32, d_ff=64, num_blocks=1, num_heads=2, dev_bleu_sents=4)
    limits = dict(maxlen1=6, maxlen2=6, pad_multiple=6, max_position=6, batch_size=3)
    hp = tiny(
        str(tmp_path),
        data_dir=demo_prepro.data_dir,
        **{**legacy, **sizes, **limits, "max_steps": 2, "max_len_extra": 1},
    )
    assert hp.legacy_protocol and hp.key_mask_defect and hp.vocab_type == "word"
    prepro.preprocess(hp)
    train.train(hp)
    _, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    bias = np.zeros(tok.tgt_vocab_size, np.float32)
    bias[data_load.UNK_ID], bias[data_load.EOS_ID] = 50.0, -50.0
    model.output_layer.bias.assign(bias)
    ckpt = tf.train.Checkpoint(model=model).save(str(tmp_path / "forced" / "ckpt"))
    for side, k in (("src", 0), ("ref", 1)):
        (tmp_path / f"test.{side}").write_text("".join(p[k] + "\n" for p in LEGACY_PAIRS))
    files = dict(test_src=str(tmp_path / "test.src"), test_ref=str(tmp_path / "test.ref"))
    result = evaluate(hp.logdir, {}, ckpt, **files)
    assert result["results"].endswith("_legacy")
    with open(result["results"] + ".json") as f:
        summary = json.load(f)
    settings = summary["decoding"]
    assert (settings["test_pairs"], settings["within_maxlen"], settings["scored"]) == (10, 7, 6)
    assert settings["max_len"] == 6 and settings["batch_size"] == 3
    with open(result["results"], encoding="utf-8") as f:
        blocks = f.read().split("\n\n")[:-1]
    fields = [[line.split(": ", 1)[1] for line in b.strip().split("\n")] for b in blocks]
    assert [src for src, _, _ in fields] == [
        "Die Frau liest",
        "Die Frau  der Mann",
        "Das Kind spielt gern draußen",
        "Ein Hund",
        "Zwei Katzen schlafen",
        "Der Mann liest ein Buch",
    ]
    refs = [ref for _, ref, _ in fields]
    assert refs[1] == "The woman  the man" and refs[5] == "The man reads a book"
    assert {got for _, _, got in fields} == {" ".join(["<UNK>"] * 6)}  # maxlen2 tokens
    hyps = [got for _, _, got in fields]
    assert summary["legacy_bleu"] == metrics.legacy_bleu(hyps, refs, clean_hyps=False)
    assert summary["sentences"] == 6
    # the ordinary protocol on the same model: every pair, budgets of source length + 1
    whole = evaluate(hp.logdir, {"legacy_protocol": False}, ckpt, **files)
    with open(whole["results"] + ".json") as f:
        assert json.load(f)["sentences"] == 10
    got = results_hypotheses(whole["results"])
    assert got[6] == " ".join(["<UNK>"] * 4)  # "Ein Hund." + </S>: 3 tokens + max_len_extra 1


@pytest.mark.slow
def test_two_runs_on_the_same_data_share_no_file(demo_prepro, tmp_path, monkeypatch):
    """evaldir follows logdir: two runs of the same data and settings, each with its own
    logdir and no --evaldir, write their dev translations inside their own logdir; their
    file names repeat (E{epoch}S{step}L{loss}), their paths never do, and nothing is
    written beside them (the working folder stays empty)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    written = {}
    for name in ("a", "b"):
        values = {"logdir": str(tmp_path / name), "evaldir": "", "num_epochs": 1, "average": 1}
        hp = hparams.apply(demo_prepro, values)
        assert hparams.eval_folder(hp) == str(tmp_path / name / "eval")
        train.train(hp)
        written[name] = {
            os.path.join(folder, f) for folder, _, names in os.walk(tmp_path / name) for f in names
        }
    assert os.listdir(tmp_path / "cwd") == []
    assert written["a"] and not written["a"] & written["b"]
    dev_a = sorted(os.listdir(tmp_path / "a" / "eval"))
    assert dev_a and dev_a == sorted(os.listdir(tmp_path / "b" / "eval"))  # same names
