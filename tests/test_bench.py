"""The throughput benchmark's arithmetic: windows, per-window peak fractions, FLOP counts
and the peak-RSS reset (no timing here: timed figures live in bench/ only)."""

import argparse
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

import common

import ab
import length_generalisation as lengths
import search
import train_throughput as throughput  # bench/ is on the pytest pythonpath (setup.cfg)
from transformer_tf2.config import hparams


def test_window_bounds_split_the_timed_steps():
    assert throughput.window_bounds(45) == [0, 15, 30, 45]
    assert throughput.window_bounds(10) == [0, 4, 7, 10]


def test_each_window_is_compared_with_the_better_probe_around_it():
    peaks = throughput.Peaks("float32")
    peaks.fp32 = peaks.own_peaks = [100.0, 200.0, 50.0, 80.0]
    times = [1.0] * 6  # two steps per window
    flops = [60e9, 60e9, 100e9, 100e9, 40e9, 40e9]
    tokens = [10.0, 30.0, 20.0, 20.0, 5.0, 5.0]
    lab = np.array([[5, 6, 0, 0]])  # half padding
    res = throughput.timed_result(
        times, tokens, flops, [True] + [False] * 5, [(lab, lab, lab)], peaks
    )
    # windows: 60, 100, 40 GFLOP/s against max(100, 200), max(200, 50), max(50, 80)
    assert abs(res["of_fp32"] - 0.5) < 1e-12 and abs(res["of_own"] - 0.5) < 1e-12
    np.testing.assert_allclose(res["of_fp32_windows"], [0.3, 0.5, 0.5])
    assert res["tok_s"] == 20.0  # windows 20, 20, 5 tokens/s
    assert abs(res["matmul_flop_s"] - 60e9) < 1
    assert abs(res["steady_tok_s"] - 80 / 5) < 1e-9  # the first step's shape was new
    assert res["tgt_padding"] == 0.5 and res["peak_fp32"] == 200.0


def test_matmul_flops_by_hand():
    # one pair, S = 2 source and T = 3 target positions, d 4, d_ff 8, 1 layer, V 10
    S, T, d, f, V = 2, 3, 4, 8, 10
    enc = 2 * S * (4 * d * d + 2 * d * f) + 4 * S * S * d
    dec = (
        2 * T * (4 * d * d + 2 * d * f)
        + 4 * T * T * d
        + 2 * T * 2 * d * d
        + 2 * S * 2 * d * d
        + 4 * T * S * d
    )
    assert throughput.matmul_flops([S], [T], d, f, 1, V) == 3 * (enc + dec + 2 * T * d * V)


def test_peak_rss_reset():
    """A freed 64 MiB block raises the peak; the reset brings it back down (Linux)."""
    if not os.path.exists("/proc/self/clear_refs"):
        assert throughput.peak_rss_mb() > 0
        return
    throughput.reset_peak_rss()  # earlier tests may have peaked higher
    before = throughput.peak_rss_mb()
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, written
    assert throughput.peak_rss_mb() >= before + 60
    del block  # numpy returns it to the OS
    throughput.reset_peak_rss()
    assert throughput.peak_rss_mb() < before + 32


def test_keep_rewrite_needs_the_median_bar_and_every_pair():
    assert throughput.keep_rewrite([0.31, 0.268, 0.263])
    assert not throughput.keep_rewrite([0.033, 0.02, 0.348])  # median 3.3 %
    assert not throughput.keep_rewrite([0.20, 0.10, -0.01])  # one pair against it
    assert not throughput.keep_rewrite([])


def test_ablation_configurations_interleave_on_and_off():
    cfgs = throughput.ablation_configurations("multi30k", ["dense2d", "xent_grad"], 2)
    assert [(c["rewrite"], c["ablate"]) for c in cfgs] == [  # on off, off on: drift cancels
        ("dense2d", []),
        ("dense2d", ["dense2d"]),
        ("dense2d", ["dense2d"]),
        ("dense2d", []),
        ("xent_grad", []),
        ("xent_grad", ["xent_grad"]),
        ("xent_grad", ["xent_grad"]),
        ("xent_grad", []),
    ]
    assert all(c["hparams"]["precision"] == "float32" and not c["probe"] for c in cfgs)


def test_a_precision_switch_is_judged_by_its_cost(capsys):
    """f32_logits buys accuracy: mixed_bfloat16 pairs on request, and the verdict says
    whether its median cost stays within 3 %, not whether it gains 5 %."""
    cfgs = throughput.ablation_configurations("multi30k", ["f32_logits"], 3, "mixed_bfloat16")
    assert len(cfgs) == 6 and all(c["hparams"]["precision"] == "mixed_bfloat16" for c in cfgs)
    for on_off, verdict in (((980.0, 1000.0), "within"), ((950.0, 1000.0), "over")):
        rows = [dict(cfg=c, tok_s=on_off[0] if not c["ablate"] else on_off[1]) for c in cfgs]
        throughput.print_ablation(rows)
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert f"-> {verdict} (its cost" in last, last


def test_paired_windows_become_on_off_pairs(capsys):
    """--paired: one child per switch (a+b: both together) whose three windows are the
    pairs print_ablation judges."""
    (cfg,) = throughput.paired_configurations(
        "multi30k", ["f32_scores+f32_logits"], 90, "mixed_bfloat16"
    )
    assert cfg["side"] == "paired" and cfg["steps"] == 90
    assert cfg["hparams"]["precision"] == "mixed_bfloat16"
    assert cfg["hparams"]["norm"] == "post"  # the paper's, which keras-hub's row mirrors
    (pre,) = throughput.paired_configurations("multi30k", ["native_ln"], 90, norm="pre")
    assert pre["hparams"]["norm"] == "pre" and pre["hparams"]["precision"] == "float32"
    rows = throughput.paired_rows(
        dict(cfg=cfg, windows=[[99.0, 100.0], [96.0, 100.0], [98.0, 100.0]])
    )
    assert [r["tok_s"] for r in rows] == [99.0, 100.0, 96.0, 100.0, 98.0, 100.0]
    throughput.print_ablation(rows)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "-2.0%" in last and "-> within (its cost 2.0%" in last, last


@pytest.mark.slow
def test_the_moving_average_is_paired_on_the_presets_model(demo_prepro, capsys):
    """--ablate ema --paired --paired_size preset: the preset's own model, a trainer with
    --ema_decay against one without (run here for real on the tiny demo), judged against
    the 3% bar."""
    (cfg,) = throughput.paired_configurations("multi30k", ["ema"], 90, size="preset")
    multi30k = hparams.preset("multi30k")
    assert cfg["size"] == "preset" and cfg["rewrite"] == "ema"
    for key in ("d_model", "d_ff", "num_blocks", "num_heads", "tokens_per_batch", "norm"):
        assert cfg["hparams"][key] == getattr(multi30k, key), key
    tiny = {k: getattr(demo_prepro, k) for k in ("prepro_dir", "vocab_size", "d_model", "d_ff")}
    # pad_multiple 64: one batch shape (the windows leave out the steps of a new shape)
    tiny.update(num_blocks=1, num_heads=2, tokens_per_batch=600, pad_multiple=64)
    tiny.update(precision="float32")
    result = throughput.run_paired(dict(cfg, preset="demo", hparams=tiny, warmup=2, steps=9))
    assert len(result["windows"]) == 3
    assert all(on > 0 and off > 0 for on, off in result["windows"])
    rows = throughput.paired_rows(
        dict(cfg=cfg, windows=[[97.5, 100.0], [98.0, 100.0], [96.0, 100.0]])
    )
    throughput.print_ablation(rows)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "-> within (its cost 2.5% against the bar of 3%)" in last, last


def test_a_row_per_position_family_against_the_sinusoid_row():
    cfgs = throughput.configurations("multi30k", ["small"], quick=True)
    rows = {c["name"]: c for c in cfgs}
    for kind in ("learned", "shaw", "t5", "xl", "alibi", "alibi_dir", "rotary"):
        cfg = rows[f"ours {kind} float32"]
        assert cfg["hparams"]["position"] == kind and cfg["hparams"]["precision"] == "float32"
    # the rows keras-hub's mirrors: the sinusoid and post-norm, whatever the preset says
    assert rows["ours float32"]["hparams"]["position"] == "sinusoid"
    assert rows["ours mixed_bfloat16"]["hparams"]["norm"] == "post"
    results = [
        dict(cfg=rows["ours float32"], tok_s=1000.0),
        dict(cfg=rows["ours shaw float32"], tok_s=800.0),
        dict(cfg=rows["ours xl float32"], tok_s=600.0),
    ]
    assert throughput.family_ratios(results) == [("shaw", 800.0, 0.8), ("xl", 600.0, 0.6)]


@pytest.mark.slow
def test_the_keras_hub_side_smooths_its_labels_and_ties_its_output():
    """The keras-hub reference trains as ours does: its compiled loss (what model.fit
    minimises) is label smoothing 0.1 over the real target tokens (PAD left out), as the
    formula in float64 gives it, not the plain cross-entropy; and one token embedding,
    whose matrix is the output projection (no output kernel of its own)."""
    pytest.importorskip("keras_hub")
    import keras

    keras.utils.set_random_seed(0)
    sizes = dict(d_model=16, d_ff=32, num_blocks=1, num_heads=2, maxlen1=10)
    hp = argparse.Namespace(**sizes, dropout_rate=0.1, label_smoothing=0.1)
    model = throughput.keras_hub_compiled(hp, 50)
    table = model.get_layer("token_and_position_embedding").token_embedding.embeddings
    table.assign(np.random.default_rng(0).normal(0, 1, table.shape))  # peaked logits
    src = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], np.int32)
    tgt = np.array([[1, 5, 6, 0], [1, 7, 0, 0]], np.int32)
    logits = model((src, tgt))  # dropout off, as in evaluate
    assert getattr(logits, "_keras_mask", None) is None  # PAD is left out by the weights
    z = logits.numpy().astype(np.float64)
    # labels the model favours (as after training): smoothing then changes the loss
    labels = np.where(tgt != 0, z[..., 1:].argmax(-1) + 1, 0).astype(np.int32)
    got = model.evaluate(throughput.keras_hub_dataset([(src, tgt, labels)], 50), verbose=0)
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    nll = lse - np.take_along_axis(z, labels[..., None], -1)[..., 0]
    real = labels != 0
    smoothed = ((0.9 * nll + 0.1 * (lse - z.mean(-1))) * real).sum() / real.sum()
    assert got == pytest.approx(smoothed, abs=1e-4)
    assert abs(got - (nll * real).sum() / real.sum()) > 1e-2  # not the plain loss
    everywhere = (0.9 * nll + 0.1 * (lse - z.mean(-1))).mean()
    assert abs(got - everywhere) > 1e-2  # not PAD included
    paths = [w.path for w in model.trainable_weights]
    assert [p for p in paths if p.endswith("token_embedding/embeddings")] == [
        "token_and_position_embedding/token_embedding/embeddings"
    ]
    assert tuple(logits.shape) == (2, 4, 50)
    kernels = [w for w in model.trainable_weights if w.shape[-1] == 50]  # (d, V) or (V,)
    assert kernels == []  # no output kernel nor bias: the logits come from the embedding


@pytest.mark.slow
def test_the_keras_hub_side_trains_briefly_on_a_users_batches(demo_prepro):
    """run_keras_hub end to end on the demo corpus (no matmul probes): model.fit runs
    every batch, shuffled batches of 64 pairs padded to their longest."""
    pytest.importorskip("keras_hub")
    values = dataclasses.asdict(demo_prepro)
    cfg = dict(preset="demo", hparams=values, warmup=1, steps=3, probe=False)
    out = throughput.run_keras_hub(cfg)
    assert out["steps"] == 4 and np.isfinite(out["loss"]) and out["tok_s"] > 0
    assert 3.0 < out["loss"] < 8.0  # about ln(vocabulary) at the start
    assert out["shapes"] >= 2 and 0 < out["tgt_padding"] < 1
    assert len(out["of_fp32_windows"]) == 3


def test_the_table_ends_with_both_ratios_to_keras_hub(capsys):
    """Ours against keras-hub on the same padded batches and with each one's batching,
    each labelled with how the batches differ."""
    rows = [
        {"cfg": {"name": "ours float32", "hparams": {"tokens_per_batch": 2048}}, "tok_s": 3000.0},
        {"cfg": {"name": throughput.SAME_BATCHES}, "tok_s": 1500.0},
        {"cfg": {"name": "keras-hub fit float32"}, "tok_s": 1000.0, "tgt_padding": 0.35},
    ]
    rows[0]["tgt_padding"] = rows[1]["tgt_padding"] = 0.03
    throughput.print_two_ratios(rows)
    out = capsys.readouterr().out.splitlines()
    mine = "ours: length-bucketed, <= 2048 tokens a batch, pad 3.0%"
    assert out[0] == (
        f"ours float32 / keras-hub fit float32, the same padded batches ({mine}; the ops' "
        "speed): 2.00x"
    )
    assert out[1] == (
        f"ours float32 / keras-hub fit float32, each with its own batching ({mine}; "
        "keras-hub: 64 shuffled pairs a batch, padded to the longest, pad 35.0%; what a user "
        "gets): 3.00x"
    )
    cfgs = throughput.configurations("multi30k", ["small"], quick=True)
    same = [c for c in cfgs if c["name"] == throughput.SAME_BATCHES]
    assert len(same) == 1 and same[0]["our_batches"] and same[0]["side"] == "keras-hub"
    # the mirrored model drops attention weights at keras-hub's rate (the preset: 0.2)
    assert {c["hparams"]["attention_dropout"] for c in cfgs} == {0.1}


def test_xla_pairs_interleave_and_print_each_precisions_ratio():
    """--xla_pairs: ours without and with XLA in turn (off on, on off) per precision, the
    XLA side as its table row (pad_multiple 8); the ratios per pair and their median,
    a pair with a failed side left out."""
    cfgs = throughput.xla_configurations("multi30k", 2, True, ["float32", "mixed_bfloat16"])
    assert [(c["hparams"]["precision"][:5], c["hparams"]["jit_compile"]) for c in cfgs] == [
        ("float", False), ("float", True), ("float", True), ("float", False),
        ("mixed", False), ("mixed", True), ("mixed", True), ("mixed", False),
    ]  # fmt: skip
    assert [c["hparams"]["pad_multiple"] for c in cfgs[:2]] == [1, 8]
    assert cfgs[2]["name"] == "ours float32 XLA #2" and cfgs[2]["steps"] == 9
    speed = [100.0, 110.0, 130.0, 100.0, 200.0, 300.0, 250.0]  # the last "off" failed
    rows = [dict(cfg=c, tok_s=v, steady_tok_s=v * 2) for c, v in zip(cfgs, speed)]
    lines = throughput.xla_ratio_lines(rows)
    assert lines[1:] == [
        "float32             1     100       110   1.10   1.10",
        "float32             2     100       130   1.30   1.30",
        "float32           med                     1.20",
        "mixed_bfloat16      1     200       300   1.50   1.50",
        "mixed_bfloat16    med                     1.50",
    ]


def test_the_table_prints_xla_against_no_xla_per_precision(capsys):
    rows = [
        {"cfg": {"name": "ours float32"}, "tok_s": 1000.0},
        {"cfg": {"name": "ours float32 XLA"}, "tok_s": 1250.0},
        {"cfg": {"name": "ours mixed_bfloat16 XLA"}, "tok_s": 900.0},  # no pair: no line
    ]
    throughput.print_xla_ratios(rows)
    assert capsys.readouterr().out == "ours float32: XLA / no XLA: 1.25x\n\n"


def test_configs_name_rows_in_any_case_and_children_read_the_prepro_dir_given():
    hp = argparse.Namespace(prepro_dir="/data/p", precision="mixed_bfloat16")
    opts = dict(_preset="multi30k", _set=set(), ablate="", paired=False, xla_pairs=0)
    opts.update(quick=True, sizes="small", baseline_tree="", configs="OURS float32 xla")
    [cfg] = throughput.chosen_configurations(hp, opts)
    assert cfg["name"] == "ours float32 XLA" and cfg["hparams"]["jit_compile"] is True
    assert cfg["hparams"]["prepro_dir"] == "/data/p"
    # --xla_pairs with --precision given: that precision only
    opts.update(xla_pairs=1, configs="", _set={"precision"})
    cfgs = throughput.chosen_configurations(hp, opts)
    assert [c["name"] for c in cfgs] == ["ours mixed_bfloat16 #1", "ours mixed_bfloat16 XLA #1"]


def test_the_size_table_names_every_row_in_its_column(capsys):
    cfgs = {c["name"]: c for c in throughput.configurations("multi30k", ["small"], quick=True)}
    numbers = dict(steady_tok_s=0.0, matmul_flop_s=5e10, peak_fp32=100.0, of_fp32=0.5)
    numbers.update(peak=100.0, of_own=0.5, tgt_padding=0.1, traces=None, shapes=9, rss_mb=900.0)
    rows = [
        dict(numbers, cfg=cfgs["ours float32"], tok_s=2000.0, params=10**6, traces=1),
        dict(numbers, cfg=cfgs["keras-hub fit float32"], tok_s=500.0, params=10**6),
        dict(numbers, cfg=cfgs[throughput.SAME_BATCHES], tok_s=1000.0, params=10**6),
    ]
    throughput.print_size_table("multi30k", "small", rows)
    out = capsys.readouterr().out.splitlines()
    assert [line[37:46] for line in out[2:5]] == ["    2,000", "      500", "    1,000"]
    assert [line.split()[-11] for line in out[2:5]] == ["4.00", "1.00", "2.00"]
    assert out[6].endswith("the ops' speed): 2.00x") and out[7].endswith("a user gets): 4.00x")


def test_a_stage_logs_its_command_and_output_and_a_failure_names_the_log(tmp_path):
    log = str(tmp_path / "stage.log")
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('step 1')\nsys.exit(int(sys.argv[1]))\n")
    common.run_logged("bench", [sys.executable, str(script), "0"], log, str(tmp_path))
    with pytest.raises(SystemExit, match=r"^bench: train.py failed \(exit 3\); see .*stage.log$"):
        common.run_logged("bench", [sys.executable, str(script), "3"], log, str(tmp_path))
    lines = open(log, encoding="utf-8").read().splitlines()
    assert lines[0].startswith("$ ") and lines[0].endswith("train.py 0")
    assert lines[1] == "step 1" and lines[2].endswith("train.py 3") and lines[3] == "step 1"


# --- bench/length_generalisation.py: its commands, its resume and its table -----------


def _fake_stages(prepro_dir=""):
    calls = []

    def fake_run(command, log):  # stands for train.py / eval.py: records, writes the JSON
        calls.append(command)
        if command[1].endswith("train.py"):  # the run's hparams.json names its prepro folder
            logdir = command[command.index("--logdir") + 1]
            os.makedirs(logdir, exist_ok=True)
            with open(os.path.join(logdir, "hparams.json"), "w") as f:
                json.dump({"prepro_dir": prepro_dir}, f)
        if command[1].endswith("eval.py"):
            logdir = command[command.index("--logdir") + 1]
            results = command[command.index("--results_dir") + 1]
            position = os.path.basename(logdir)
            os.makedirs(results, exist_ok=True)
            step = 100 + len(calls)
            data = {
                "sacrebleu": 30.0 + len(position),
                "decoding": {"checkpoint": os.path.join(logdir, "best", f"ckpt-{step}")},
                "length_buckets": [
                    {"bucket": "<=16", "sentences": 700, "sacrebleu": 35.5, "ci95": [34.0, 37.25]},
                    {"bucket": "17-24", "sentences": 250, "sacrebleu": 25.0, "ci95": [23.0, 27.0]},
                    {"bucket": ">=25", "sentences": 0, "sacrebleu": None, "ci95": None},
                ],
            }
            with open(os.path.join(results, f"{position}_ckpt-{step}.json"), "w") as f:
                json.dump(data, f)

    return calls, fake_run


@pytest.mark.slow
def test_length_bench_train_command_keeps_short_pairs_and_trained_relative_settings():
    import train
    from transformer_tf2.config import cli

    opts = argparse.Namespace(
        preset="multi30k", data_dir="d", steps=2000, minutes=0.0, max_tokens=16, out="/o",
        train_args=["--seed", "7"],
    )  # fmt: skip
    command = lengths.train_command("t5", opts)
    hp, _ = cli.parse_args(command[2:], script=train.SCRIPT)  # train.py accepts every option
    assert (hp.position, hp.max_steps, hp.max_minutes, hp.seed) == ("t5", 2000, 0.0, 7)
    assert (hp.maxlen1, hp.maxlen2) == (17, 17)  # </S> counted: pairs of <= 16 tokens
    assert hp.max_relative_position == 15 and hp.t5_buckets == 16 and hp.t5_max_distance == 16
    assert hp.logdir == "/o/t5" and hp.data_dir == "d"
    # the families' commands differ in --position alone
    other = lengths.train_command("sinusoid", opts)
    diff = [(a, b) for a, b in zip(command, other) if a != b]
    assert diff == [
        ("t5", "sinusoid"),
        ("/o/t5", "/o/sinusoid"),
        ("/o/eval_t5", "/o/eval_sinusoid"),
    ]
    opts.steps, opts.minutes = 0, 20.0  # or a wall-clock budget
    hp, _ = cli.parse_args(lengths.train_command("t5", opts)[2:], script=train.SCRIPT)
    assert (hp.max_steps, hp.max_minutes) == (0, 20.0)


def test_length_bench_scores_dev_then_test_on_the_last_checkpoint(tmp_path, monkeypatch):
    prepro = tmp_path / "prepro"
    prepro.mkdir()
    for split, lines in (("dev", ["d1", "d2"]), ("test", ["t1", "t2", "t3"])):
        (prepro / f"{split}.src").write_text("".join(f"{x} de\n" for x in lines))
        (prepro / f"{split}.tgt").write_text("".join(f"{x} en\n" for x in lines))
    calls, fake_run = _fake_stages(str(prepro))
    monkeypatch.setattr(lengths, "run", fake_run)
    out = tmp_path / "lengths"
    lengths.main(["--positions", "xl", "--out", str(out)])
    train_cmd, eval_cmd = calls
    assert train_cmd[train_cmd.index("--max_steps") + 1] == "2000"  # the default budget
    assert eval_cmd[eval_cmd.index("--ckpt") + 1] == "last"
    src = eval_cmd[eval_cmd.index("--test_src") + 1]
    ref = eval_cmd[eval_cmd.index("--test_ref") + 1]
    assert open(src).read() == "d1 de\nd2 de\nt1 de\nt2 de\nt3 de\n"
    assert open(ref).read() == "d1 en\nd2 en\nt1 en\nt2 en\nt3 en\n"
    # the test split alone: no files named
    calls.clear()
    lengths.main(["--positions", "xl", "--out", str(tmp_path / "t"), "--score", "test"])
    assert "--test_src" not in calls[1] and "--ckpt" in calls[1]
    # another budget in the same folder would not compare: refused
    with pytest.raises(SystemExit, match=r"holds another plan \(its budget differ\)"):
        lengths.main(["--positions", "xl", "--out", str(out), "--steps", "500"])
    with pytest.raises(SystemExit, match=r"\(its train_args differ\)"):  # another train.py option
        lengths.main(["--positions", "xl", "--out", str(out), "--precision", "float32"])
    with pytest.raises(SystemExit):
        lengths.main(["--positions", "xl", "--out", str(out), "--steps", "5", "--minutes", "1"])


def test_length_bench_runs_each_family_once_and_prints_the_table(tmp_path, monkeypatch, capsys):
    calls, fake_run = _fake_stages()
    monkeypatch.setattr(lengths, "run", fake_run)
    out = str(tmp_path / "lengths")
    lengths.main(["--positions", "shaw,t5", "--out", out, "--minutes", "1", "--score", "test"])
    assert [os.path.basename(c[1]) for c in calls] == ["train.py", "eval.py"] * 2
    table = capsys.readouterr().out.strip().splitlines()[-4:]
    assert (
        table[0] == "| position | source <=16 tokens | source 17-24 tokens | source >=25 tokens"
        " | all | step |"
    )
    assert (
        table[2] == "| shaw | 35.50 [34.00, 37.25] (700) | 25.00 [23.00, 27.00] (250) | – (0)"
        " | 34.00 | 102 |"
    )
    assert table[3].startswith("| t5 |") and table[3].endswith("| 32.00 | 104 |")
    # a second start finds both JSONs and trains nothing; a new family is the only run
    calls.clear()
    lengths.main(
        ["--positions", "shaw,t5,alibi", "--out", out, "--minutes", "1", "--score", "test"]
    )
    assert [c[c.index("--position") + 1] for c in calls if "--position" in c] == ["alibi"]
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("| alibi |")


def test_length_bench_refuses_an_unknown_position(tmp_path):
    with pytest.raises(SystemExit):
        lengths.main(["--positions", "shaw,relative", "--out", str(tmp_path)])


# ---------------------------------------------------------------------------------------
# bench/search.py: successive halving on dev
# ---------------------------------------------------------------------------------------
def test_search_draws_distinct_settings_that_train_py_accepts():
    import train
    from transformer_tf2.config import cli, hparams

    base = hparams.preset("multi30k")
    drawn = search.draw(base, 30, seed=3)
    assert len({json.dumps(s, sort_keys=True) for s in drawn}) == 30
    assert drawn == search.draw(base, 30, seed=3)  # seeded
    for settings in drawn:
        axes = [a for a in search.SPACE if set(search.current(base, a)) <= set(settings)]
        assert 1 <= len(axes) <= 3, settings
        for axis in axes:  # each changed axis is away from the preset
            mine = {k: settings[k] for k in search.current(base, axis)}
            assert mine != search.current(base, axis), (axis, settings)
    opts = argparse.Namespace(
        preset="multi30k", data_dir="d", unit="steps", out="/o", train_args=["--seed", "7"]
    )
    command = search.train_command(opts, {"vocab_size": 4000, "norm": "pre"}, "c3_r1", 500)
    hp, _ = cli.parse_args(command[2:], script=train.SCRIPT)
    assert (hp.vocab_size, hp.norm, hp.max_steps, hp.seed) == (4000, "pre", 500, 7)
    assert (hp.prepro_dir, hp.logdir, hp.evaldir) == (
        "/o/prepro_v4000",
        "/o/c3_r1",
        "/o/eval/c3_r1",
    )


def _fake_train(calls, bleu_of, status_of=lambda command: 0):
    """Stands for prepro.py / train.py: records the command; a train.py run writes the
    best.json and checkpoint files a finished run leaves, its dev BLEU bleu_of(command)."""

    def fake_run(command):
        calls.append(command)
        status = status_of(command)
        if command[1].endswith("train.py") and status == 0:
            logdir = command[command.index("--logdir") + 1]
            os.makedirs(logdir, exist_ok=True)
            with open(os.path.join(logdir, "best.json"), "w") as f:
                json.dump({"checkpoint": "best/ckpt-7", "dev_bleu": bleu_of(command)}, f)
            steps = int(float(command[command.index("--max_steps") + 1]))
            with open(os.path.join(logdir, "checkpoint"), "w") as f:
                f.write(f'model_checkpoint_path: "ckpt-{steps}"\nall_model_checkpoint_paths: "x"\n')
        elif command[1].endswith("prepro.py"):
            folder = command[command.index("--prepro_dir") + 1]
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, "hparams.json"), "w").close()
        return status, "train: error: the last line" if status else ""

    return fake_run


def test_search_halves_by_dev_bleu_resumes_and_prints_the_table(tmp_path, monkeypatch, capsys):
    space = tmp_path / "space.jsonl"
    lines = [{"norm": "pre"}, {"dropout_rate": 0.3}, {"vocab_size": 4000}, {"lr": 0.01}]
    space.write_text("".join(json.dumps(s) + "\n" for s in lines))
    bleu = {"--norm": 30.0, "--dropout_rate": 33.0, "--vocab_size": 31.0}  # c0: 29, c4 fails

    def bleu_of(command):
        found = [b for flag, b in bleu.items() if flag in command]
        budget = float(command[command.index("--max_steps") + 1])
        return (found[0] if found else 29.0) + budget / 100

    calls = []
    monkeypatch.setattr(search, "run", _fake_train(calls, bleu_of, lambda c: int("--lr" in c)))
    out = str(tmp_path / "search")
    argv = ["--space", str(space), "--rungs", "100,200", "--unit", "steps", "--out", out]
    search.main(argv)
    trained = [c[c.index("--logdir") + 1] for c in calls if c[1].endswith("train.py")]
    names = [os.path.basename(p) for p in trained]
    assert sorted(names[:5]) == ["c0_r0", "c1_r0", "c2_r0", "c3_r0", "c4_r0"]
    assert sorted(names[5:]) == ["c1_r1", "c2_r1", "c3_r1"]  # ceil(0.5 * 5), by dev BLEU
    assert sum(c[1].endswith("prepro.py") for c in calls) == 1  # vocab_size 4000, once
    table = capsys.readouterr().out.strip().splitlines()[-7:]
    assert table[0] == "| config | settings | dev BLEU, 100 steps | dev BLEU, 200 steps | step |"
    assert table[2] == "| c2 | dropout_rate=0.3 | 34.00 | 35.00 | 200 |"
    assert table[3] == "| c3 | vocab_size=4000 | 32.00 | 33.00 | 200 |"
    assert table[4] == "| c1 | norm=pre | 31.00 | 32.00 | 200 |"
    assert table[5] == "| c0 | (preset) | 30.00 |  | 100 |"
    assert table[6] == "| c4 | lr=0.01 | failed |  | 0 |"
    state = json.loads(open(os.path.join(out, "search.json")).read())
    assert state["runs"]["c4_r0"]["error"] == "train: error: the last line"
    # the same command again trains nothing; other rungs for this folder are refused
    calls.clear()
    search.main(argv)
    assert calls == []
    with pytest.raises(SystemExit, match=r"search.json holds another plan \(its rungs differ\)"):
        search.main(argv[:3] + ["100,300"] + argv[4:])


def test_a_signal_stops_the_search_where_the_same_command_resumes(tmp_path, monkeypatch):
    calls = []
    signal_on = {"c0_r0"}

    def status_of(command):
        logdir = command[command.index("--logdir") + 1] if "--logdir" in command else ""
        return 130 if os.path.basename(logdir) in signal_on else 0

    monkeypatch.setattr(search, "run", _fake_train(calls, lambda c: 20.0, status_of))
    argv = ["--configs", "3", "--rungs", "50", "--unit", "steps", "--out", str(tmp_path)]
    with pytest.raises(SystemExit, match="stopped by a signal; run the same command again"):
        search.main(argv)
    finished = json.loads((tmp_path / "search.json").read_text())["runs"]
    signal_on.clear()
    calls.clear()
    search.main(argv)
    again = [os.path.basename(c[c.index("--logdir") + 1]) for c in calls if "--logdir" in c]
    assert "c0_r0" in again and not set(again) & set(finished)


# ---------------------------------------------------------------------------------------
# bench/ab.py: two setups at an equal budget, interleaved
# ---------------------------------------------------------------------------------------
def test_ab_commands_run_each_arm_with_its_tree_settings_and_seed():
    import train
    from transformer_tf2.config import cli

    opts = argparse.Namespace(
        preset="multi30k", data_dir="d", old_tree="/t/old", old_args="--norm post",
        new_args="--norm pre --lr 0.003", minutes=30.0, steps=0, beam=4, out="/o",
    )  # fmt: skip
    old, new = ab.train_command(opts, "old", 1), ab.train_command(opts, "new", 2)
    assert old[1] == "/t/old/train.py" and new[1] == os.path.join(ab.ROOT, "train.py")
    hp, _ = cli.parse_args(new[2:], script=train.SCRIPT)  # train.py accepts every option
    assert (hp.norm, hp.lr, hp.seed, hp.max_minutes) == ("pre", 0.003, 2, 30.0)
    assert (hp.logdir, hp.prepro_dir) == ("/o/new_s2", "/o/new/prepro")
    hp, _ = cli.parse_args(old[2:], script=train.SCRIPT)
    assert (hp.norm, hp.seed, hp.logdir, hp.prepro_dir) == ("post", 1, "/o/old_s1", "/o/old/prepro")
    beam = ab.eval_command(opts, "old", 1, beam=True)
    assert beam[1] == "/t/old/eval.py" and beam[-2:] == ["--beam_size", "4"]
    assert beam[beam.index("--results_dir") + 1] == "/o/beam"


def _fake_ab(calls, fail_on=""):
    def fake_run(command, log, cwd):  # stands for prepro.py / train.py / eval.py
        calls.append((os.path.basename(command[1]), cwd, command))
        if fail_on and fail_on in command:
            raise SystemExit("ab: train.py failed (exit 143)")
        if command[1].endswith("prepro.py"):
            folder = command[command.index("--prepro_dir") + 1]
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, "hparams.json"), "w").write("{}")
            return
        logdir = command[command.index("--logdir") + 1]
        run = os.path.basename(logdir)
        arm, seed = run.split("_s")
        bonus = (2.0 if arm == "new" else 0.0) + int(seed)
        if command[1].endswith("train.py"):
            os.makedirs(logdir, exist_ok=True)
            json.dump({"dev_bleu": 30.0 + bonus}, open(os.path.join(logdir, "best.json"), "w"))
        else:
            results = command[command.index("--results_dir") + 1]
            os.makedirs(results, exist_ok=True)
            beam = "--beam_size" in command
            data = {
                "sacrebleu": 35.0 + bonus + (0.5 if beam else 0.0),
                "runaways": 3,
                "decoding": {"checkpoint": os.path.join(logdir, "best", "ckpt-900")},
            }
            json.dump(data, open(os.path.join(results, f"{run}_ckpt-900.json"), "w"))

    return fake_run


def test_ab_interleaves_old_and_new_resumes_and_prints_the_means(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(ab, "run", _fake_ab(calls, fail_on=str(tmp_path / "old_s2")))
    old_tree = tmp_path / "old_tree"
    old_tree.mkdir()
    (old_tree / "train.py").write_text("")
    argv = ["--old_tree", str(old_tree), "--new_args", "--norm pre", "--out", str(tmp_path)]
    with pytest.raises(SystemExit):  # the third run is cut off
        ab.main(argv)
    trains = [c for name, _, c in calls if name == "train.py"]
    assert [os.path.basename(c[c.index("--logdir") + 1]) for c in trains] == [
        "old_s1", "new_s1", "old_s2",
    ]  # fmt: skip
    assert [name for name, _, _ in calls].count("prepro.py") == 2  # once per arm
    assert all(cwd == str(old_tree) for name, cwd, c in calls if "old_s1" in " ".join(c))
    # the same command again goes on from the cut run; finished ones are left alone
    calls.clear()
    monkeypatch.setattr(ab, "run", _fake_ab(calls))
    ab.main(argv)
    runs = [os.path.basename(c[c.index("--logdir") + 1]) for name, _, c in calls]
    assert runs == ["old_s2"] * 3 + ["new_s2"] * 3  # train, greedy, beam
    table = capsys.readouterr().out.strip().splitlines()[-9:]
    assert table[2] == "| old, seed 1 | 31.00 | 36.00 | 36.50 | 3 | ckpt-900 |"
    assert table[5] == "| new, seed 2 | 34.00 | 39.00 | 39.50 | 3 | ckpt-900 |"
    assert table[6] == "| old, mean | 31.50 | 36.50 | 37.00 | | |"
    assert table[7] == "| new, mean | 33.50 | 38.50 | 39.00 | | |"
    assert capsys.readouterr().out == ""
    calls.clear()
    ab.main(argv)
    assert calls == []
    assert (
        capsys.readouterr().out.strip().splitlines()[-1]
        == "| new − old | +2.00 | +2.00 | +2.00 | | |"
    )
    with pytest.raises(SystemExit, match=r"^ab: .*ab.json holds another plan \(its minutes"):
        ab.main(argv + ["--minutes", "10"])


def test_ab_runs_one_arm_alone_and_the_other_later_beside_it(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(ab, "run", _fake_ab(calls))
    argv = ["--new_args", "--norm pre", "--out", str(tmp_path), "--seeds", "1,2"]
    ab.main(argv + ["--arms", "new"])
    trains = [c for name, _, c in calls if name == "train.py"]
    assert [os.path.basename(c[c.index("--logdir") + 1]) for c in trains] == ["new_s1", "new_s2"]
    table = capsys.readouterr().out.strip().splitlines()[-3:]
    assert table == [
        "| new, seed 1 | 33.00 | 38.00 | 38.50 | 3 | ckpt-900 |",
        "| new, seed 2 | 34.00 | 39.00 | 39.50 | 3 | ckpt-900 |",
        "| new, mean | 33.50 | 38.50 | 39.00 | | |",
    ]
    calls.clear()
    ab.main(argv)  # the same plan: the old arm joins, the new runs are left alone
    runs = {os.path.basename(c[c.index("--logdir") + 1]) for n, _, c in calls if n != "prepro.py"}
    assert runs == {"old_s1", "old_s2"}
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "| new − old | +2.00 | +2.00 | +2.00 | | |"
    )
    with pytest.raises(SystemExit):
        ab.main(argv + ["--arms", "newer"])


def test_the_preset_size_times_the_presets_own_model_and_the_tree_in_any_precision():
    cfgs = throughput.configurations(
        "multi30k", ["preset"], quick=True, tree="/tmp/old", tree_precision="mixed_bfloat16"
    )
    rows = {c["name"]: c for c in cfgs}
    preset = throughput.hparams.preset("multi30k")
    ours = rows["ours mixed_bfloat16"]["hparams"]
    for key in ("position", "norm", "num_heads", "d_model", "d_ff", "num_blocks"):
        assert ours[key] == getattr(preset, key)
    tree = rows["baseline tree mixed_bfloat16"]
    assert tree["tree"] == "/tmp/old" and tree["hparams"]["precision"] == "mixed_bfloat16"
    assert tree["hparams"]["position"] == preset.position
    assert not any(c["side"] == "keras-hub" for c in cfgs)  # it mirrors the paper's model only


def test_profile_wall_split_shares_each_stretch_by_what_runs():
    import profile_step

    events = [
        (0, 10, "_MklMatMul", "a"),
        (5, 15, "Mul", "b"),
        (20, 30, "AddV2", "c"),
        (20, 25, "Sub", "d"),
        (40, 42, "Sub", "e"),
    ]
    state, alone = profile_step.wall_split(events)
    assert state == {"matmul alone": 5, "matmul + other": 5, "other alone": 17, "idle": 15}
    assert alone == {"Mul": 5, "AddV2": 7.5, "Sub": 4.5}
    by_type = {"_MklMatMul": 10, "Mul": 10, "AddV2": 10, "Sub": 7}
    assert profile_step.op_time_by_type(events) == by_type
    assert profile_step.op_time_by_type(
        [(0, 3, "Mul", "encoder_2/ln/mul_12"), (5, 6, "Mul", "encoder_1/ln/mul_3")], "Mul"
    ) == {"encoder_N/ln/mul_N": 4}


def test_profile_reads_the_ops_of_a_real_trace(tmp_path):
    """A tf.profiler trace of a matmul and an add: both ops, with their types and names,
    and none of the executor's wrapper events."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    import profile_step

    step = tf.function(lambda a: tf.matmul(a, a, name="product") + 1.0, autograph=False)
    a = tf.ones((64, 64))
    step(a)
    tf.profiler.experimental.start(str(tmp_path))
    for _ in range(3):
        step(a).numpy()
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    (path,) = tmp_path.glob("**/*.xplane.pb")
    space.ParseFromString(path.read_bytes())
    events = profile_step.op_events(space)
    kinds = {kind for _, _, kind, _ in events}
    assert any("MatMul" in k for k in kinds) and "AddV2" in kinds, kinds
    assert not kinds & set(profile_step.NOT_OPS)
    assert all(end >= start for start, end, _, _ in events)
    assert any(name == "product" for _, _, kind, name in events if "MatMul" in kind)
    state, _ = profile_step.wall_split(events)
    assert state["matmul alone"] > 0


# --- bench/common.py: the import path, the child protocol, medians, the plan guard ------

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def is_script(name: str) -> bool:
    """A bench script runs as ``python bench/NAME.py``; the other modules (common.py,
    load_clients.py, serve_references.py) are the scripts' shared parts."""
    with open(os.path.join(BENCH, name), encoding="utf-8") as f:
        return 'if __name__ == "__main__":' in f.read()


SCRIPTS = sorted(n[:-3] for n in os.listdir(BENCH) if n.endswith(".py") and is_script(n))


def test_the_bench_scripts_are_told_from_their_shared_modules():
    assert {"serve_load", "decode", "startup"} <= set(SCRIPTS)
    assert not {"common", "load_clients", "serve_references"} & set(SCRIPTS)


def documented_commands(name: str) -> list[list[str]]:
    """The option lists of every ``python bench/NAME.py ...`` command in the script's
    docstring (continued lines joined; the optional ``[...]`` parts kept, their
    ``a|b`` alternatives read as a)."""
    text = open(os.path.join(BENCH, name + ".py"), encoding="utf-8").read()
    doc = text.split('"""')[1].replace("\\\\\n", " ").replace("\\\n", " ")
    out = []
    for line in doc.splitlines():
        if f"python bench/{name}.py" in line:
            rest = line.split(f"python bench/{name}.py", 1)[1].split("#")[0]
            rest = rest.replace("[", " ").replace("]", " ")
            args = [a.split("|")[0] for a in shlex.split(rest)]
            out.append(args)
    return out


def test_every_bench_script_parser_builds_without_tensorflow_and_reads_its_documented_commands():
    """Each bench script's parser() builds in a process that never imports TensorFlow, and
    accepts every option of every command its docstring shows."""
    commands = {name: documented_commands(name) for name in SCRIPTS}
    assert all(commands.values()), [n for n, c in commands.items() if not c]
    code = (
        "import json, sys\n"
        "sys.path.insert(0, 'bench')\n"
        "import importlib\n"
        "out = []\n"
        "for name, commands in json.loads(sys.argv[1]).items():\n"
        "    known = importlib.import_module(name).parser()._option_string_actions\n"
        "    flags = [a.split('=')[0] for argv in commands for a in argv if a[:2] == '--']\n"
        "    out += [f'{name}:{x}' for x in flags if x not in known]\n"
        "print(out, 'tensorflow' in sys.modules)\n"
    )
    root = os.path.dirname(BENCH)
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(commands)], cwd=root, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # no documented option is unknown to its script, and no TensorFlow was imported
    assert proc.stdout.strip() == "[] False"


def test_no_bench_script_keeps_its_own_import_path_or_median():
    for name in SCRIPTS:
        text = open(os.path.join(BENCH, name + ".py"), encoding="utf-8").read()
        assert "sys.path.insert" not in text.replace("sys.path.insert(0, 'bench')", ""), name
        for private in ("np.median(", "statistics.median(", 'startswith("RESULT '):
            assert private not in text, f"{name}: {private}"


def test_a_child_answers_on_its_result_line_and_a_failure_is_one_line(capsys):
    code = "import common; print('noise'); common.emit({'x': [1, 2]}); print('after')"
    assert common.run_child([sys.executable, "-c", code], "bench", cwd=BENCH) == {"x": [1, 2]}
    fail = "import sys; sys.stderr.write('boom'); sys.exit(3)"
    assert common.run_child([sys.executable, "-c", fail], "bench", check=False) is None
    assert capsys.readouterr().out == "bench: a child failed (exit 3): boom\n"
    with pytest.raises(SystemExit, match=r"^bench: a child failed \(exit 3\): boom$"):
        common.run_child([sys.executable, "-c", fail], "bench")


def test_pairs_interleave_and_the_median_is_the_middle():
    assert [common.interleaved(k, "on", "off") for k in range(3)] == [
        ("on", "off"),
        ("off", "on"),
        ("on", "off"),
    ]
    assert common.median([3.0, 1.0, 10.0]) == 3.0 and common.median([1, 2, 3, 4]) == 2.5


def test_the_plan_guard_keeps_the_first_plan_and_names_what_differs(tmp_path):
    path = str(tmp_path / "out" / "plan.json")
    held = common.check_plan("bench", path, {"a": 1, "b": [2]}, fresh={"runs": {}})
    assert held == {"a": 1, "b": [2], "runs": {}} and json.load(open(path)) == held
    held["runs"]["r1"] = 5  # a resumable benchmark records its runs beside the plan
    open(path, "w").write(json.dumps(held))
    assert common.check_plan("bench", path, {"a": 1, "b": [2]})["runs"] == {"r1": 5}
    with pytest.raises(SystemExit, match=r"plan.json holds another plan \(its b differ\)"):
        common.check_plan("bench", path, {"a": 1, "b": [3]})


def test_another_tree_is_imported_in_place_of_this_one(tmp_path, monkeypatch):
    (tmp_path / "transformer_tf2" / "config").mkdir(parents=True)
    for folder in ("transformer_tf2", "transformer_tf2/config"):
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "transformer_tf2" / "config" / "hparams.py").write_text("WHERE = 'other'\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [m for m in sys.modules if m.startswith("transformer_tf2")]:
        monkeypatch.setitem(sys.modules, name, sys.modules[name])
    common.use_tree(str(tmp_path))
    from transformer_tf2.config import hparams as other

    assert other.WHERE == "other"
    assert other is not hparams


@pytest.mark.slow
def test_first_losses_of_a_document_memory_run_repeat_bit_for_bit(demo_prepro, tmp_path):
    """bench/first_losses.py --set: a document-memory run of the tiny demo gives the same
    losses twice (the check that a change moved code alone), and another label smoothing
    other losses, which --compare tells apart in its exit status."""
    default = hparams.Hparams()
    changed = {k: v for k, v in dataclasses.asdict(demo_prepro).items() if v != getattr(default, k)}
    memory = {**changed, "position": "xl", "memory_sentences": 1, "dropout_rate": 0.1}
    script = os.path.join(common.ROOT, "bench", "first_losses.py")

    def losses(name, values):
        out = tmp_path / f"{name}.json"
        sets = [a for k, v in values.items() for a in ("--set", f"{k}={v}")]
        subprocess.run(
            [sys.executable, script, "--steps", "3", "--out", str(out), *sets],
            check=True,
            capture_output=True,
        )
        return str(out)

    a, b = losses("a", memory), losses("b", memory)
    other = losses("c", {**memory, "label_smoothing": 0.3})
    compare = [sys.executable, script, "--compare"]
    same = subprocess.run([*compare, a, b], capture_output=True, text=True)
    assert same.returncode == 0 and "3 and 3 losses; identical: True" in same.stdout
    assert subprocess.run([*compare, a, other], capture_output=True).returncode == 1


def test_the_hp_route_merges_repeats_and_counts_each_return():
    import hp_route

    got = hp_route.route(["cli", "train", "train", "data_load", "train", "model", "data_load"])
    assert got["route"] == ["cli", "train", "data_load", "train", "model", "data_load"]
    assert got["modules"] == ["cli", "data_load", "model", "train"]
    assert got["returns"] == 2 and got["back_to"] == {"train": 1, "data_load": 1}


# --- bench/decode.py: the table against CTranslate2 -----------------------------------


def test_ctranslate2_outputs_are_cut_at_our_budget_and_the_anchor_ratios(capsys):
    import types

    import decode

    words = {w: i for i, w in enumerate(["<PAD>", "<UNK>", "<S>", "</S>", "a", "b"])}
    tok = types.SimpleNamespace(kind="word", src_vocab=words, tgt_vocab=words)
    assert decode.ours_ids(tok, ["a", "b"], 5) == [4, 5, 3]  # stopped at </S> before 5
    assert decode.ours_ids(tok, ["a", "b", "a", "b"], 3) == [4, 5, 4]  # cut at the budget
    outs = [[4, 3], [5, 3]]
    rows = []
    for engine, layouts in (("ours", ("one batch at a time", "2 at once")), ("CTranslate2", ())):
        for beam in (1, 4):
            names = layouts or ("float32, one batch at a time", "float32, 2 at once", "int8, 2")
            for k, layout in enumerate(names):
                seconds = {"ours": (2.0, 1.0), "CTranslate2": (4.0, 0.5, 0.25)}[engine][k]
                rows.append(dict(name=f"{engine} b{beam}, {layout}", beam=beam, seconds=seconds))
    for r in rows:
        r["outs"] = outs if r["name"].startswith("ours") else [[4, 3], [4, 3]]
    line = "the cat sat on the mat"
    decode.print_anchor(rows, {1: outs, 4: outs}, lambda o: [line] * len(o), [line] * 2, 2)
    out = capsys.readouterr().out.splitlines()
    assert out[2].split()[-3:] == ["1.0", "100.00", "2"]  # ours: 2 sentences in 2 s
    assert out[6].split()[-1] == "1"  # CTranslate2's second output differs from ours
    # best layouts: ours 1 s against CTranslate2's float32 0.5 s (int8 left out): 0.50x;
    # one batch at a time each: 2 s against 4 s: 2.00x
    assert out[-3].endswith("best layout: 0.50x; both one batch at a time on every core: 2.00x")


@pytest.mark.slow
@pytest.mark.parametrize("switch", ["native_decode", "beam_stop", "pin_output"])
def test_the_ablated_switch_takes_turns_with_the_decoder_that_has_it(switch, quick_run, capsys):
    """``--ablate native_decode``: one worker decodes with the switch on and with it off,
    pass by pass (each decoder built with its own fast_ops.Kernels), and answers both
    rows, which decode the same; so does ``--ablate beam_stop``, the beam that searches
    until all its k hypotheses are final, and ``--ablate pin_output``, the decoder that
    transposes the output matrix at each call."""
    import decode

    hp, _ = quick_run
    cfg = dict(logdir=hp.logdir, sents=5, batch=2, repeats=2, beam=2, streams=1, intra=0)
    decode.layout_worker(dict(cfg, inter=0, ablate=switch))
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith(common.RESULT)]
    got = json.loads(line[-1][len(common.RESULT) :])
    assert sorted(got) == ["", switch]
    assert got[""]["outs"] == got[switch]["outs"] and len(got[""]["outs"]) == 5
    assert all(r["seconds"] > 0 for r in got.values())


@pytest.mark.slow
def test_profile_times_each_part_of_a_greedy_and_a_beam_step(quick_run):
    """``--profile``: each part of one greedy step and of one beam-4 step, run alone on a
    trained run's cache filled to 3 positions, in milliseconds."""
    import tensorflow as tf

    import profile_decode
    from transformer_tf2.data import data_load
    from transformer_tf2.models import checkpoints

    hp, _ = quick_run
    _, tok, model, _ = checkpoints.load_run(hp.logdir, {}, who="test")
    sources, _ = data_load.read_raw(hp, "test")
    src = data_load.pad_batch(
        [np.asarray(s + [data_load.EOS_ID]) for s in tok.encode_src(sources[:3])]
    )
    for parts, first in (
        (profile_decode.profile_step(model, tf.constant(src), 3, repeats=2), "whole step"),
        (profile_decode.profile_beam(model, tf.constant(src), 3, repeats=2), "whole step"),
    ):
        names = [name for name, _ in parts]
        assert names[0].startswith(first) and len(names) >= 5
        assert all(ms > 0 for _, ms in parts)


def test_the_anchor_prints_each_ablated_pair_and_leaves_it_out_of_the_best(capsys):
    import decode

    outs = [[4, 3]]
    rows = [
        dict(name="ours greedy, float32, one batch at a time", seconds=1.0),
        dict(name="ours greedy, float32, one batch at a time, native_decode off", seconds=0.5),
        dict(name="CTranslate2 greedy, float32, one batch at a time", seconds=2.0),
    ]
    rows = [dict(r, beam=1, outs=outs) for r in rows]
    texts = lambda o: ["a b"] * len(o)  # noqa: E731
    decode.print_anchor(rows, {1: outs}, texts, ["a b"], 1, (), "native_decode")
    out = capsys.readouterr().out.splitlines()
    assert "greedy, native_decode on / off, one batch at a time: 0.50x" in out
    # the best of ours is the row with the switch on (1 s), not the faster one without it
    assert out[-2].endswith("best layout: 2.00x; both one batch at a time on every core: 2.00x")


@pytest.mark.parametrize(
    "options, error",
    [
        (["--ctranslate2", "--skip_eval"], "compares eval.py's timing: drop --skip_eval"),
        (["--length_penalty", "0.6"], "the beam's against CTranslate2's: add --ctranslate2"),
    ],
)
def test_startup_refuses_what_it_cannot_compare(options, error):
    """--ctranslate2 compares eval.py's timing line: with --skip_eval it is refused at
    once; --length_penalty is the beam's against CTranslate2's: alone, refused too."""
    proc = subprocess.run(
        [sys.executable, "bench/startup.py", "--logdir", "none", *options],
        cwd=os.path.dirname(BENCH),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].endswith(error)


@pytest.mark.slow
def test_startup_times_each_part_of_the_first_translation_and_ctranslate2s(quick_run):
    """bench/startup.py --ctranslate2 on a trained run, one repeat: the first line of
    translate.py, the parts of its wait (imports, restore, trace, decode), eval.py end to
    end and its own timing line (greedy and beam 4), CTranslate2's seconds on the same
    test sentences in a fresh process, and the trace times with and without autograph,
    each a positive number of seconds; then the ratios of eval.py to CTranslate2. Both
    beams at the length penalty asked for (--length_penalty: the title says which)."""
    pytest.importorskip("ctranslate2")
    hp, _ = quick_run
    proc = subprocess.run(
        [sys.executable, "bench/startup.py", "--logdir", hp.logdir, "--repeats", "1"]
        + ["--ctranslate2", "--length_penalty", "0.25"],
        cwd=os.path.dirname(BENCH),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("; beam 4 at length penalty 0.25"), lines[0]
    rows = {}
    for line in lines[2:-2]:  # the title and the column labels first, the ratios last
        name, _, value = line.rstrip().rpartition(" ")
        rows[name.strip()] = float(value)
    parts, on_off, searches = (
        ("imports", "restore", "trace", "decode"),
        ("on", "off"),
        ("greedy", "beam 4"),
    )
    assert set(rows) == {
        "translate.py, 1 sentence, to the first line",
        *(f"of which {part} (in-process)" for part in parts),
        "eval.py on the test set, end to end",
        *(f"its own timing line, {name}" for name in searches),
        *(f"CTranslate2, {name}, fresh process" for name in searches),
        *(f"trace: {loop}, autograph {on}" for loop in searches for on in on_off),
    }, proc.stdout
    assert min(rows.values()) > 0, proc.stdout
    ratios = dict(line.removesuffix("x the time").split(": ") for line in lines[-2:])
    ratios = {name: float(value) for name, value in ratios.items()}
    for name in searches:
        ours, theirs = (
            rows[f"its own timing line, {name}"],
            rows[f"CTranslate2, {name}, fresh process"],
        )
        ratio = ratios[f"eval.py / CTranslate2, {name}"]
        # the rows are rounded to 0.01 s, the ratio (of the unrounded medians) to 0.01
        low, high = (ours - 0.005) / (theirs + 0.005), (ours + 0.005) / (theirs - 0.005)
        assert low - 0.005 <= ratio <= high + 0.005


# --- bench/serve_load.py: serve.py under load --------------------------------------------


def test_serve_load_percentiles_and_lists():
    import load_clients
    import serve_load

    assert load_clients.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert load_clients.percentile([float(x) for x in range(1, 101)], 99) == 99.0
    assert serve_load.ints("1, 8,64") == [1, 8, 64] and serve_load.floats("0,2.5") == [0.0, 2.5]
    cmd = serve_load.parser().parse_args(["--logdir", "x", "--serve_args", "--decode_streams 2"])
    assert serve_load.settings_of([0.0, 5.0], ";--x 1") == [
        (0.0, ""),
        (5.0, ""),
        (0.0, "--x 1"),
        (5.0, "--x 1"),
    ]
    assert serve_load.serve_command(cmd, "tensorflow", 4, (2.0, cmd.serve_args), "") == [
        *("--logdir", "x", "--beam_size", "4", "--wait_ms", "2", "--max_batch", "64"),
        *("--decode_streams", "2"),
    ]


@pytest.mark.slow
def test_serve_load_runs_the_server_and_both_references_on_a_tiny_run(quick_run, tmp_path):
    """bench/serve_load.py at toy size: a fresh serve.py under Debian's wrk at 1 and at 4
    connections for 2 s each (greedy), then the open loop at 0.75 of the 4-connection
    throughput; then eval.py's timing line and one sentence alone in-process give the
    ratios: a row per pass with positive figures and no 503, and each target's line with
    PASS or FAIL. (.ci/run installs wrk; where it is missing the bench installs it as
    root, or says in one line that it uses httpx.)"""
    for module in ("fastapi", "uvicorn", "httpx"):
        pytest.importorskip(module)
    import load_clients

    if load_clients.find_wrk(install=False) is None:
        pytest.skip("Debian's wrk is not installed (apt-get install wrk; .ci/run installs it)")
    hp, _ = quick_run
    src = tmp_path / "src.de"
    src.write_text("".join(f"ein mann {'und ein hund ' * (k % 3)}läuft .\n" for k in range(15)))
    proc = subprocess.run(
        [sys.executable, "bench/serve_load.py", "--logdir", hp.logdir, "--src", str(src)]
        + ["--sents", "12", "--concurrency", "1,4", "--beams", "1", "--repeats", "1"]
        + ["--single", "4", "--warmup", "4", "--seconds", "2", "--open_loop", "0.75"],
        cwd=os.path.dirname(BENCH),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("serve.py under load: ") and "12 sentences of" in lines[0]
    assert lines[1].startswith("CPU: ")
    assert lines[2].startswith("closed loop: wrk, one thread; open loop: asyncio")
    assert lines[3].split() == [
        *("engine", "beam", "wait_ms", "clients", "sent/s", "p50", "ms", "p99", "ms"),
        *("503s", "batch", "busy", "client", "cpu"),
    ]
    rows = [line.split() for line in lines[4:7]]
    assert [r[:4] for r in rows[:2]] == [
        ["tensorflow", "1", "5", "1"],
        ["tensorflow", "1", "5", "4"],
    ]
    assert rows[2][:5] == ["tensorflow", "1", "5", "open", "0.75"]
    rows[2][3:5] = ["open 0.75"]
    for r in rows:
        assert len(r) == 11 and float(r[4]) > 0 and 0 < float(r[5]) <= float(r[6])
        assert r[7] == "0" and float(r[8]) >= 1 and 0 <= float(r[10]) < 1  # wrk's CPU share
    assert float(rows[0][8]) == 1.0  # one connection: each batch is its one sentence
    assert lines[7].startswith("tensorflow greedy: batched (eval.py) ")
    assert re.fullmatch(r"  wait 5 ms, 4 clients: .* = [\d.]+x batched .*: (PASS|FAIL)", lines[8])
    assert re.fullmatch(r"  wait 5 ms, 1 client: p50 .* = [\d.]+x alone .*: (PASS|FAIL)", lines[9])
    assert re.fullmatch(
        r"  wait 5 ms, open loop at 0.75 of capacity: p99 .* = [\d.]+x one batch's decoding "
        r"\(.*\), 0 503s: (PASS|FAIL)",
        lines[10],
    )
    assert len(lines) == 11, proc.stdout


def test_the_decoding_profile_counts_the_ops_of_a_graph_and_its_functions():
    """bench/profile_decode.py's op count: the nodes of a step's graph and of the
    functions it calls; the computing ones leave out constants, identities, arguments,
    weight reads and the calls themselves."""
    import tensorflow as tf

    import profile_decode

    w = tf.Variable(tf.ones((3, 3)))

    @tf.function(autograph=False)
    def inner(x):
        return tf.nn.relu(tf.matmul(x, w)) + 1.0

    @tf.function(autograph=False)
    def step(x):
        return tf.reduce_sum(inner(x) * 2.0)

    graph = step.get_concrete_function(tf.TensorSpec((1, 3))).graph.as_graph_def()
    every, computing = profile_decode.graph_ops(graph)
    ops = [n.op for n in graph.node] + [n.op for f in graph.library.function for n in f.node_def]
    assert every == len(ops)
    # MatMul, Relu, AddV2 inside; Mul, Sum outside
    assert computing == 5, sorted(ops)


@pytest.mark.slow
def test_the_decoding_profile_runs_on_a_trained_run_beside_ctranslate2(
    quick_run, capsys, monkeypatch
):
    """``python bench/profile_decode.py`` on a trained run, one sentence at a time: the
    tokens it counts are those our greedy decoder writes (</S> included), each step runs
    its ops, the encoder's start takes a share of a sentence's decoding, and CTranslate2's
    rows give a time per token for both weights and both searches."""
    pytest.importorskip("ctranslate2")
    import tensorflow as tf

    import profile_decode
    from transformer_tf2.data import data_load
    from transformer_tf2.decoding import greedy_search
    from transformer_tf2.models import checkpoints

    hp, _ = quick_run
    argv = ["profile_decode.py", "--logdir", hp.logdir, "--prepro_dir", hp.prepro_dir]
    argv += ["--data_dir", hp.data_dir, "--sents", "2", "--beams", "1,2", "--repeats", "3"]
    monkeypatch.setattr("sys.argv", argv)
    profile_decode.main()
    out = capsys.readouterr().out.splitlines()
    _, tok, model, _ = checkpoints.load_run(hp.logdir, {}, who="test")
    sources, _ = data_load.read_raw(hp, "test")
    greedy = greedy_search.greedy_decoder(model)
    extra = tf.constant(hp.max_len_extra, tf.int32)
    tokens = 0
    for _, b in data_load.eval_batches(tok.encode_src(sources[:2]), 1, 1 << 30):
        tokens += int((greedy(tf.constant(b), extra).numpy() != data_load.PAD_ID).sum())
    (line,) = [x for x in out if x.startswith("greedy:")]
    assert f" ms per token ({tokens} tokens); the step alone " in line, out
    every, computing = [int(x) for x in re.findall(r"(\d+) ops \((\d+) computing\)", line)[0]]
    assert every > computing > 20, line
    share = int(re.findall(r"dispatch (\d+)% of the step", line)[0])
    assert 0 < share <= 100, line
    assert sum(x.startswith("beam 2:") for x in out) == 1
    (start,) = [x for x in out if x.startswith("encoder and the cache's start: ")]
    ms, share = re.findall(r": ([\d.]+) ms per sentence, (\d+)% of a sentence's", start)[0]
    assert float(ms) > 0 and 0 < int(share) <= 100, start
    ct2 = [x for x in out if x.startswith("CTranslate2 ")]
    assert len(ct2) == 4 and all(" ms per token (" in x for x in ct2), out
