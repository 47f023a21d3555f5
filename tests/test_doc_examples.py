"""The guides' commands run as written, at toy size: the bash blocks of
docs/your_own_data.md, docs/decoding.md and docs/sharing.md, line by line, in a temporary
work folder that links the checkout's scripts and package (as a checkout looks), on
corpora the tests write and on the session's tiny trained run. Each line is the page's,
with only the sizes cut (a tiny model and vocabulary, a few steps) and, where the page
names a run of its own, that run's folder given in its place. Each test checks what its
page says the commands do: your own files are read (not the demo corpus written in their
place), each decoding variant prints what it promises, an exported model translates a
whole file, a shared run translates elsewhere from the files sharing.md lists."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT

# the sizes cut, and no attention figures (matplotlib at every dev evaluation: seconds of
# each train.py that no test here reads)
TINY = (
    "--vocab_size 200 --d_model 16 --d_ff 32 --num_blocks 1 --num_heads 2 "
    "--attention_layers none "
    "--dev_bleu_sents 8 --max_len 10 --precision float32 --average 1"
)
# the sentences the decoding examples read (each file one sentence a line)
GERMAN = ["Die Frau liest ein Buch.", "Der Hund schläft.", "Ein Mann sieht die Katze."]


def page_blocks(page: str) -> list[list[str]]:
    """The fenced bash blocks of docs/<page>, each as its logical lines (a line ending in
    a backslash joined with the next, a multi-line quoted string kept whole), comments
    and blank lines left out."""
    with open(os.path.join(ROOT, "docs", page), encoding="utf-8") as f:
        text = f.read()
    blocks = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S):
        lines, pending = [], ""
        for line in block.replace("\\\n", " ").splitlines():
            pending = f"{pending}\n{line}" if pending else line
            if pending.count('"') % 2 == 0:  # not inside a quoted string
                if pending.strip() and not pending.lstrip().startswith("#"):
                    lines.append(pending)
                pending = ""
        blocks.append(lines)
    return blocks


def checkout(folder) -> None:
    """Link the scripts and the package into ``folder``, as a checkout holds them."""
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(ROOT):
        if name.endswith(".py") or name in ("transformer_tf2", "demo"):
            os.symlink(os.path.join(ROOT, name), os.path.join(folder, name))


def sh(line: str, cwd) -> subprocess.CompletedProcess:
    """Run one shell line of a page in ``cwd``; a failure shows the line and its stderr."""
    run = subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"{line}\n{run.stderr[-3000:]}"
    return run


def lines_of(path) -> list[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def write_lines(path, lines: list[str]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def short(line: str) -> str:
    """At most 10 decoded tokens per sentence for each eval.py and translate.py of a line
    (an untrained model's outputs run to their length limit)."""
    return re.sub(r"python (eval|translate)\.py", r"python \1.py --max_len 10", line)


def at_toy_size(line: str) -> str:
    """A page's line with the sizes cut: a tiny model and vocabulary, 3 training steps, 10
    decoded tokens; everything else as written."""
    if re.match(r"python (prepro|train)\.py", line):
        line += " " + TINY
        if line.startswith("python train.py"):
            line += " --max_steps 3"
    return short(line)


@pytest.mark.slow
def test_your_own_data_reads_your_files_and_fine_tunes_on_them(demo_prepro, quick_run, tmp_path):
    """docs/your_own_data.md: prepro.py reads the parallel corpus the page lays out (a
    training file gzipped, dev and test plain) and not the demo corpus (which it would
    generate into the folder without --corpus parallel); train, eval and translate run on
    it with nothing but the logdir; the fine-tuning block encodes other files with the
    parent's vocabulary, again read from the folder given. Then docs/sharing.md on the run
    just trained (its prepro folder named by a relative path, as a user's is): the files
    its tar line packs are enough for translate.py and Translator.from_run in another
    folder."""
    flow, finetune = page_blocks("your_own_data.md")
    assert (
        len(flow) == 4 and "--corpus parallel" in finetune[0] and "--corpus parallel" in finetune[1]
    )
    assert all("--prepro_dir" not in line for line in flow[2:] + finetune[2:])  # eval, translate
    work = tmp_path / "work"
    checkout(work)
    with open(os.path.join(demo_prepro.prepro_dir, "train.src"), encoding="utf-8") as f:
        src = f.read().splitlines()
    with open(os.path.join(demo_prepro.prepro_dir, "train.tgt"), encoding="utf-8") as f:
        tgt = f.read().splitlines()
    train = [f"{s} ({i})" for i, s in enumerate(src[:200])], tgt[:200]
    write_lines(work / "data/fr-en/train.fr.gz", train[0])
    write_lines(work / "data/fr-en/train.en.gz", train[1])
    for stem, rows in (("dev", slice(200, 230)), ("test", slice(230, 260))):
        write_lines(work / f"data/fr-en/{stem}.fr", src[rows])
        write_lines(work / f"data/fr-en/{stem}.en", tgt[rows])
    for line in flow:
        run = sh(at_toy_size(line), work)
    assert len(run.stdout.splitlines()) == 1  # translate.py: one line for the echoed one
    # prepro read the files given: its training text is theirs, line for line
    assert lines_of(work / "prepro/fr-en/train.src") == train[0]
    assert lines_of(work / "prepro/fr-en/train.tgt") == train[1]
    written = {f"{stem}.{lang}" for stem in ("dev", "test") for lang in ("fr", "en")}
    written |= {"train.fr.gz", "train.en.gz"}
    assert set(os.listdir(work / "data/fr-en")) == written  # no demo corpus written there
    assert any(n.startswith("fr-en_") and n.endswith(".json") for n in os.listdir(work / "results"))

    # fine-tuning: the page's parent, log/multi30k, is a copy of the session's de-en run
    mine = [f"{s} [mine]" for s in src[260:300]], tgt[260:300]
    for stem in ("train", "val", "test_2016_flickr"):
        write_lines(work / f"data/mine/{stem}.de", mine[0])
        write_lines(work / f"data/mine/{stem}.en", mine[1])
    shutil.copytree(quick_run[0].logdir, work / "log/multi30k")
    for line in finetune:
        line = line.replace("--max_minutes 3", "--max_steps 2")
        if line.startswith("python train.py"):  # the model is the parent's: no sizes to cut
            line += " --dev_bleu_sents 8 --precision float32 --average 1"
        sh(short(line), work)
    assert lines_of(work / "prepro/mine/train.src") == mine[0]
    assert not (work / "data/mine/demo.json").exists()
    with open(os.path.join(demo_prepro.prepro_dir, "bpe.model"), "rb") as f:
        assert (work / "prepro/mine/bpe.model").read_bytes() == f.read()  # the parent's
    assert any(n.startswith("mine_") for n in os.listdir(work / "results"))

    # sharing.md: the run and three files of its prepro folder, unpacked elsewhere
    share = page_blocks("sharing.md")
    (pack,) = [line for line in share[0] if line.startswith("tar czf")]
    sh(pack.replace("demo", "fr-en"), work)
    there = tmp_path / "receiver"
    checkout(there)
    shutil.move(str(work / "fr-en_run.tgz"), there / "fr-en_run.tgz")
    unpack, translate, _serve = share[1]
    sh(unpack.replace("demo", "fr-en"), there)
    assert sorted(os.listdir(there / "prepro/fr-en")) == ["bpe.model", "hparams.json", "stamp.json"]
    out = sh(short(translate.replace("log/demo", "log/fr-en")), there)
    assert len(out.stdout.splitlines()) == 1
    with open(os.path.join(ROOT, "docs", "sharing.md"), encoding="utf-8") as f:
        (python,) = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    script = python.replace("log/demo", "log/fr-en").replace(
        'from_run("log/fr-en")', 'from_run("log/fr-en", max_len=10)'
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=there, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(run.stdout.splitlines()) == 1


def decoding_work(tmp_path, quick_run, demo_prepro):
    """A work folder for docs/decoding.md: the session's tiny run as every run the page
    names (log/demo; log/demo_shaw, the page's exportable family: the tiny run's sinusoid
    is one too; the ensemble's two seeds, as two copies), and its input files."""
    work = tmp_path / "work"
    checkout(work)
    for name in ("demo", "demo_shaw", "multi30k_seed1", "multi30k_seed2"):
        shutil.copytree(quick_run[0].logdir, work / "log" / name)
        with open(work / "log" / name / "hparams.json", encoding="utf-8") as f:
            saved = json.load(f)
        saved["results_dir"] = "results"  # a run of the work folder's, as the page's are
        with open(work / "log" / name / "hparams.json", "w", encoding="utf-8") as f:
            json.dump(saved, f)
    english = ["The woman reads a book.", "The dog sleeps.", "A man sees the cat."]
    for name, lines in (
        ("talk.de", GERMAN),
        ("mono.de", GERMAN),
        ("sentences.de", GERMAN),
        ("sentences.en", english),
        ("starts.en", ["The woman", "", "A man"]),
    ):
        write_lines(work / name, lines)
    return work


@pytest.mark.slow
def test_decoding_examples_print_what_they_promise(quick_run, demo_prepro, tmp_path):
    """docs/decoding.md's eval.py and translate.py lines on the tiny run: greedy and beam
    scoring, one line per input, n-best lists of rank, score and text, the attention
    figure, sampling (N lines per input with --n_best N), ensembles, forced prefixes,
    scores with their tokens and word alignments."""
    work = decoding_work(tmp_path, quick_run, demo_prepro)
    blocks = page_blocks("decoding.md")
    (scoring, basics, sampling, ensembles, prefixes, scores, alignments) = blocks[:7]
    for line in scoring:
        sh(short(line), work)
    assert any(n.startswith("demo_") and n.endswith(".json") for n in os.listdir(work / "results"))
    echo, nbest, attention = basics[:3]
    assert len(sh(short(echo), work).stdout.splitlines()) == 1
    sh(short(nbest), work)
    ranked = lines_of(work / "talk.en")
    assert len(ranked) == 2 * len(GERMAN)
    assert [r.split("\t")[0] for r in ranked] == ["1", "2"] * len(GERMAN)
    sh(short(attention), work)
    assert (work / "attn.png").stat().st_size > 0
    back, samples, scored = sampling
    sh(short(back), work)
    assert len(lines_of(work / "back.en")) == len(GERMAN)
    assert len(sh(short(samples), work).stdout.splitlines()) == 3 * len(GERMAN)
    sh(short(scored), work)
    for line in ensembles:
        out = sh(short(line), work)
    assert len(out.stdout.splitlines()) == len(GERMAN)
    (prefixed,) = prefixes
    out = sh(short(prefixed), work).stdout.splitlines()
    assert out[0].startswith("The woman") and out[2].startswith("A man")
    (scoring_line,) = scores
    out = sh(short(scoring_line), work).stdout.splitlines()
    assert len(out) == len(GERMAN) and all(len(row.split("\t")) == 3 for row in out)
    float(out[0].split("\t")[0])
    (aligned,) = alignments
    out = sh(short(aligned), work).stdout.splitlines()
    assert len(out) == len(GERMAN) and all("\t" in row for row in out)


@pytest.mark.slow
def test_exported_models_translate_as_the_page_says(quick_run, demo_prepro, tmp_path):
    """docs/decoding.md's exports: the SavedModel loads with TensorFlow and
    tensorflow-text alone and translates; the CTranslate2 export translates one sentence,
    and the snippet of "A whole file with CTranslate2" writes one line per input line."""
    pytest.importorskip("tensorflow_text")
    pytest.importorskip("ctranslate2")
    work = decoding_work(tmp_path, quick_run, demo_prepro)
    blocks = page_blocks("decoding.md")
    export, load = blocks[1][3:]
    sh(export, work)
    assert sh(load, work).stdout.strip()
    train, export_ct2, one = blocks[7]
    assert train.startswith("python train.py --position shaw")  # the tiny run stands in
    sh(export_ct2, work)
    assert (work / "exported/demo_ct2/model.bin").exists()
    assert len(sh(one, work).stdout.splitlines()) == 1
    (whole,) = blocks[8]
    sh(whole, work)
    assert len(lines_of(work / "talk.en")) == len(GERMAN)
