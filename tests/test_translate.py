"""translate.py: stdin, empty and overlong lines, n-best, the attention plot; sampling,
ensembles, prefixes, scores and alignments end to end."""

import json
import os
import subprocess
import sys

import pytest

import translate
from helpers import ROOT, translate_lines
from transformer_tf2.config import hparams
from transformer_tf2.models import checkpoints


@pytest.mark.slow
def test_translate_lines_empty_and_overlong(quick_run, capsys):
    """Empty lines stay empty; an overlong line is truncated with a warning, no crash."""
    hp, _ = quick_run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    long_line = " ".join(["Der Hund schläft."] * 400)
    lines = ["Die Frau liest ein Buch.", "", long_line, ""]
    out = translate_lines(model, tok, hp, lines)
    assert len(out) == 4 and out[1] == "" and out[3] == ""
    assert "line 3" in capsys.readouterr().err
    # the same sentence alone gives the same translation (batching does not leak)
    assert translate_lines(model, tok, hp, lines[:1]) == out[:1]
    nbest = translate_lines(model, tok, hparams.apply(hp, {"beam_size": 3}), lines[:2], n_best=3)
    assert len(nbest) == 6 and nbest[0].startswith("1\t") and nbest[2].startswith("3\t")


@pytest.mark.slow
def test_plot_attention(quick_run, tmp_path):
    """The attention plot of one sentence is a PNG; the translation it returns is the
    greedy one of translate_lines."""
    hp, _ = quick_run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    png = tmp_path / "attn.png"
    sentence = "Die Frau liest ein Buch."
    text = translate.plot_attention(model, tok, sentence, str(png), hp.max_len_extra)
    assert [text] == translate_lines(model, tok, hp, [sentence])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attn.png"]


@pytest.mark.slow
def test_translate_cli_stdin(run):
    hp, _, _ = run
    proc = subprocess.run(
        [sys.executable, "translate.py", "--logdir", hp.logdir],
        input="Die Frau liest ein Buch.\n\nDer Hund schläft.\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""
    hp2, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    expected = translate_lines(
        model, tok, hp2, ["Die Frau liest ein Buch.", "", "Der Hund schläft."]
    )
    assert lines[:3] == expected


@pytest.mark.slow
def test_attention_png(run, tmp_path):
    hp, _, _ = run
    png = tmp_path / "attn.png"
    proc = subprocess.run(
        [sys.executable, "translate.py", "--logdir", hp.logdir, "--attention", str(png)],
        input="Die Frau liest ein Buch.\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000


def translate_main(monkeypatch, capsys, *args) -> list[str]:
    """translate.py's main with these options: its stdout lines."""
    monkeypatch.setattr("sys.argv", ["translate.py", *map(str, args)])
    translate.main()
    return capsys.readouterr().out.split("\n")[:-1]


@pytest.mark.slow
def test_the_decoding_options_end_to_end(quick_run, tmp_path, monkeypatch, capsys):
    """Sampling, ensembles, prefixes, scores and alignments through translate.py's and
    eval.py's own command lines, on a trained tiny run and a copy of it."""
    import re
    import shutil

    import eval as eval_script

    hp, _ = quick_run
    copy = str(tmp_path / "copy")
    shutil.copytree(hp.logdir, copy)
    src = tmp_path / "in.de"
    src.write_text("Die Frau liest ein Buch.\n\nDer Hund schläft.\n", encoding="utf-8")
    run = ("--logdir", hp.logdir, "--input", src)
    # sampling: 3 samples per line, the same for the same seed
    samples = translate_main(monkeypatch, capsys, *run, "--sampling_topk", 5, "--n_best", 3)
    assert len(samples) == 9 and samples[3:6] == ["1\t\t", "2\t\t", "3\t\t"]
    for line in samples[:3] + samples[6:]:
        rank, score, _ = line.split("\t")
        assert rank in "123" and float(score) < 0
    again = translate_main(monkeypatch, capsys, *run, "--sampling_topk", 5, "--n_best", 3)
    assert again == samples
    other = translate_main(
        monkeypatch, capsys, *run, "--sampling_topk", 0, "--n_best", 3, "--seed", 9
    )
    assert other != samples
    # an ensemble of the run and its copy translates as the run
    beam = translate_main(monkeypatch, capsys, *run, "--beam_size", 2)
    both = ("--ensemble", f"{hp.logdir},{copy}", "--input", src)
    assert translate_main(monkeypatch, capsys, *both, "--beam_size", 2) == beam
    assert len(translate_main(monkeypatch, capsys, *both, "--sampling_topk", 0)) == 3
    # a prefix per line starts each translation
    prefixes = tmp_path / "prefix.en"
    prefixes.write_text("A man\n\nThe\n", encoding="utf-8")
    forced = translate_main(monkeypatch, capsys, *run, "--prefix", prefixes, "--beam_size", 2)
    assert forced[0].startswith("A man") and forced[1] == "" and forced[2].startswith("The")
    # scores of given translations, and their tokens'
    given = tmp_path / "given.en"
    given.write_text("The woman reads a book.\n\nThe dog sleeps.\n", encoding="utf-8")
    scored = translate_main(monkeypatch, capsys, *run, "--score", given, "--score_tokens")
    assert [line.split("\t")[1] for line in scored] == [
        "The woman reads a book.",
        "",
        "The dog sleeps.",
    ]
    for line in scored:
        total, _, tokens = line.split("\t")
        parts = [float(t.rsplit("=", 1)[1]) for t in tokens.split(" ")]
        assert tokens.split(" ")[-1].startswith("</S>=")
        assert abs(sum(parts) - float(total)) < 1e-3 * len(parts)
    # alignments after a tab
    aligned = translate_main(monkeypatch, capsys, *run, "--alignments")
    assert aligned[1] == ""
    for line in aligned[::2]:
        text, links = line.split("\t")
        assert text and re.fullmatch(r"(\d+-\d+)( \d+-\d+)*", links)
    # eval.py: sampling and an ensemble, named in the results
    out = eval_script.evaluate(
        hp.logdir,
        {"sampling_topk": 5},
        test_src=str(src),
        test_ref=str(given),
        show=0,
        runs=[hp.logdir, copy],
    )
    name = os.path.basename(out["results"])
    # the runs, the search, then the source decoded (eval.source_tag)
    tag = eval_script.source_tag(str(src), [line.rstrip("\n") for line in open(src)])
    assert "+copy_" in name and name.endswith("_sample5_p1_t1_" + tag)
    with open(out["results"] + ".json", encoding="utf-8") as f:
        assert json.load(f)["decoding"]["search"] == "sampling"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--n_best", "3"], "--n_best 3 needs --beam_size of at least 3 .or sampling"),
        (["--score_tokens"], "--score_tokens goes with --score FILE"),
        (["--score", "x", "--prefix", "y"], "--score scores given translations: drop --prefix"),
        (["--alignments", "--beam_size", "2", "--n_best", "2"], "--alignments aligns the best"),
        (["--ensemble", "a,,b"], "--ensemble takes distinct run folders"),
        (["--ensemble", "a,b", "--logdir", "c"], "--ensemble names every run: drop --logdir"),
        (["--sampling_topk", "3", "--beam_size", "2"], "samples one token at a time"),
    ],
)
def test_decoding_options_that_do_not_go_together_are_one_line(args, words, monkeypatch):
    monkeypatch.setattr("sys.argv", ["translate.py", *args])
    with pytest.raises(hparams.UserError, match=words):
        translate.main()


def test_prefix_and_score_files_need_a_line_per_input_line(quick_run, tmp_path, monkeypatch):
    hp, _ = quick_run
    src, short = tmp_path / "in.de", tmp_path / "short.en"
    src.write_text("Ein Hund.\nEine Katze.\n", encoding="utf-8")
    short.write_text("A dog.\n", encoding="utf-8")
    for option in ("--prefix", "--score"):
        argv = ["translate.py", "--logdir", hp.logdir, "--input", str(src), option, str(short)]
        monkeypatch.setattr("sys.argv", argv)
        with pytest.raises(
            hparams.UserError, match=f"^{option} .* has 1 lines but the input has 2"
        ):
            translate.main()


@pytest.mark.slow
def test_bad_input_files_are_one_line_before_tensorflow_loads(tmp_path):
    """--input missing, a folder, or not UTF-8 (also --prefix, --score, and eval.py's
    --test_src): one line, exit status 2, and TensorFlow never imported (-X importtime
    lists every module a process imports)."""
    latin1 = tmp_path / "latin1.de"
    latin1.write_bytes("Ein Hund.\nDer Bär schläft.\n".encode("latin-1"))
    missing = tmp_path / "missing.de"
    for script, option, path, words in (
        ("translate.py", "--input", missing, f"{missing} not found"),
        ("translate.py", "--input", tmp_path, f"{tmp_path} is a folder, not a file"),
        ("translate.py", "--input", latin1, f"{latin1}:2: not valid UTF-8 (byte 0xe4)"),
        ("translate.py", "--score", latin1, f"{latin1}:2: not valid UTF-8"),
        ("eval.py", "--test_src", tmp_path, f"{tmp_path} is a folder"),
    ):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", script, "--logdir", "nowhere", option, path],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 2 and len(errors) == 1 and words in errors[0], proc.stderr
        assert "tensorflow" not in proc.stderr.replace(errors[0], "")
