"""Length generalisation of the position encodings: train one model per ``position`` value
on short pairs only, for the same number of steps, one after the other, then score each
in buckets of source length, with bootstrap intervals.

    python prepro.py --preset multi30k --data_dir data/multi30k
    python bench/length_generalisation.py --preset multi30k --data_dir data/multi30k
        [--steps 2000 | --minutes 20] [--score dev+test | test]
        [--positions sinusoid,learned,shaw,t5,xl,rotary,alibi,alibi_dir]
        [--max_tokens 16] [--edges 16,24] [--out runs/lengths] [train.py options ...]

For every position value, in the order given and never two at once:

    python train.py --preset P --data_dir D --position F --max_steps S
        --maxlen1 N+1 --maxlen2 N+1 --max_relative_position N-1
        --t5_buckets N --t5_max_distance N --logdir OUT/F --evaldir OUT/eval_F
    python eval.py --preset P --logdir OUT/F --ckpt last --results_dir OUT/results
        --length_buckets 16,24 [--test_src OUT/dev+test.src --test_ref OUT/dev+test.tgt]

``maxlen1`` and ``maxlen2`` count ``</S>``, so N + 1 keeps the training pairs of at most N
tokens on both sides. The relative settings keep every learned relative parameter
trained on such pairs: Shaw's clipping distance (N - 1) and T5's buckets reach no
farther than the longest training distance. The settings are passed to every family
(the absolute ones ignore them), so the eight commands differ in ``--position`` alone.
Any other option (``--seed 7``, ``--d_model 128``, ...) goes to train.py unchanged.

The budget is an equal number of updates (``--steps``, the default): a wall-clock budget
(``--minutes``) on a shared machine gives the families unequal steps. Each family is
scored on its last checkpoint, the one at exactly that step. Sources of 25 tokens or more
are rare (50 of Multi30k's 1,000 test sentences), so by default (``--score dev+test``)
the scored set is the dev split followed by the test split (the run's prepro folder's
cleaned ``dev`` and ``test`` files, written once to ``OUT/dev+test.src`` and ``.tgt``),
which about doubles every bucket. Training reads dev only for the dev BLEU of its
progress lines; the last checkpoint is not chosen by it.

A family whose eval JSON exists is not run again, and train.py resumes a run that was
cut off (a budget counts over all starts), so an interrupted benchmark goes on where it
stopped; ``OUT/bench.json`` records the budget, the scored set and the train.py options,
and other ones for the same OUT are refused. The end prints one table: sacreBLEU of each
source-length bucket (source BPE tokens, ``</S>`` not counted) with its sentence count and
95 % bootstrap interval, the whole scored set's sacreBLEU, and the training steps.
"""

import argparse
import json
import os
import sys
import time

import common

from transformer_tf2.utils import files  # no TensorFlow: the benchmark itself stays light

ROOT = common.ROOT

POSITIONS = ("sinusoid", "learned", "shaw", "t5", "xl", "rotary", "alibi", "alibi_dir")


def train_command(position: str, opts: argparse.Namespace) -> list[str]:
    """train.py's command line for one position family (module docstring)."""
    n = opts.max_tokens
    return [
        sys.executable,
        os.path.join(ROOT, "train.py"),
        "--preset", opts.preset,
        *(["--data_dir", opts.data_dir] if opts.data_dir else []),
        "--position", position,
        *budget_args(opts),
        "--maxlen1", str(n + 1),
        "--maxlen2", str(n + 1),
        "--max_relative_position", str(n - 1),
        "--t5_buckets", str(n),
        "--t5_max_distance", str(n),
        "--logdir", os.path.join(opts.out, position),
        "--evaldir", os.path.join(opts.out, f"eval_{position}"),
        *opts.train_args,
    ]  # fmt: skip


def budget_args(opts: argparse.Namespace) -> list[str]:
    """train.py's budget: ``--max_steps`` (equal updates), or ``--max_minutes``."""
    if opts.minutes:
        return ["--max_minutes", f"{opts.minutes:g}"]
    return ["--max_steps", str(opts.steps)]


def eval_command(position: str, opts: argparse.Namespace) -> list[str]:
    """eval.py's command line: greedy, the run's last checkpoint, bucketed by length, on
    the test split or on OUT/dev+test (the model and its data come from the run's own
    hparams.json)."""
    scored = []
    if opts.score == "dev+test":
        src, tgt = score_paths(opts)
        scored = ["--test_src", src, "--test_ref", tgt]
    return [
        sys.executable,
        os.path.join(ROOT, "eval.py"),
        "--preset", opts.preset,
        "--logdir", os.path.join(opts.out, position),
        "--ckpt", "last",
        "--results_dir", os.path.join(opts.out, "results"),
        "--length_buckets", opts.edges,
        *scored,
    ]  # fmt: skip


def score_paths(opts: argparse.Namespace) -> tuple[str, str]:
    """OUT/dev+test.src and .tgt."""
    stem = os.path.join(opts.out, "dev+test")
    return stem + ".src", stem + ".tgt"


def write_score_set(position: str, opts: argparse.Namespace) -> None:
    """Writes OUT/dev+test.src/.tgt once: the dev split's cleaned lines, then the test
    split's, from the prepro folder of the family's run (its hparams.json)."""
    src, tgt = score_paths(opts)
    if os.path.exists(src) and os.path.exists(tgt):
        return
    with open(os.path.join(opts.out, position, "hparams.json"), encoding="utf-8") as f:
        prepro_dir = json.load(f)["prepro_dir"]
    prepro_dir = os.path.join(ROOT, prepro_dir)  # train.py ran in ROOT; an absolute path stays
    for out, side in ((src, "src"), (tgt, "tgt")):
        text = ""
        for split in ("dev", "test"):
            path = os.path.join(prepro_dir, f"{split}.{side}")
            with open(path, encoding="utf-8", newline="") as f:  # a stray \r is no line end
                text += f.read()
        files.atomic_write(out, text)


def check_plan(opts: argparse.Namespace) -> None:
    """OUT/bench.json holds the budget, the scored set and the options passed on to train.py;
    an OUT of other ones is refused (its figures would not compare)."""
    plan = {
        "budget": budget_args(opts),
        "score": opts.score,
        "max_tokens": opts.max_tokens,
        "train_args": opts.train_args,
    }
    common.check_plan("length_generalisation", os.path.join(opts.out, "bench.json"), plan)


def results_json(position: str, opts: argparse.Namespace) -> dict | None:
    """The eval JSON of a family's run, loaded (eval.py names it
    ``<position>_<checkpoint>.json`` and records the checkpoint it decoded), or None before
    the run is evaluated."""
    folder = os.path.join(opts.out, "results")
    logdir = os.path.join(opts.out, position)
    if not os.path.isdir(folder):
        return None
    for name in sorted(os.listdir(folder)):
        if not (name.startswith(position + "_") and name.endswith(".json")):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            data = json.load(f)
        checkpoint = data.get("decoding", {}).get("checkpoint", "")
        if os.path.commonpath([os.path.abspath(checkpoint), logdir]) == logdir:
            return data
    return None


def step_of(data: dict) -> str:
    """The training step of the decoded checkpoint (``.../ckpt-1240`` -> ``1240``)."""
    tail = os.path.basename(data.get("decoding", {}).get("checkpoint", ""))
    return tail.rsplit("-", 1)[-1] if "-" in tail else ""


def _cell(bucket: dict) -> str:
    if bucket["sacrebleu"] is None:
        return "– (0)"
    lo, hi = bucket["ci95"]
    return f"{bucket['sacrebleu']:.2f} [{lo:.2f}, {hi:.2f}] ({bucket['sentences']})"


def table(rows: list[tuple[str, dict]]) -> str:
    """A markdown table from (position, eval JSON) pairs: one row per family, one column
    per length bucket ("BLEU [95 % interval] (sentences)"), then the whole scored set's
    sacreBLEU and the checkpoint's step."""
    names = [b["bucket"] for b in rows[0][1]["length_buckets"]]
    head = ["position", *(f"source {n} tokens" for n in names), "all", "step"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for position, data in rows:
        cells = [_cell(b) for b in data["length_buckets"]]
        lines.append(
            "| " + " | ".join([position, *cells, f"{data['sacrebleu']:.2f}", step_of(data)]) + " |"
        )
    return "\n".join(lines)


def run(command: list[str], log: str) -> None:
    """One stage in this checkout, its output appended to ``log``."""
    common.run_logged("length_generalisation", command, log, ROOT)


def parser() -> argparse.ArgumentParser:
    """The options; any other is passed on to train.py."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="multi30k")
    ap.add_argument("--data_dir", default="")
    ap.add_argument("--steps", type=int, default=0, help="training steps per family (2000)")
    ap.add_argument("--minutes", type=float, default=0.0, help="or wall time per family")
    ap.add_argument("--score", choices=("dev+test", "test"), default="dev+test")
    ap.add_argument("--positions", default=",".join(POSITIONS))
    ap.add_argument("--max_tokens", type=int, default=16, help="longest training pair, tokens")
    ap.add_argument("--edges", default="16,24", help="eval.py --length_buckets")
    ap.add_argument("--out", default=os.path.join("runs", "lengths"))
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    opts, rest = ap.parse_known_args(argv)
    opts.train_args = rest
    positions = [p for p in opts.positions.split(",") if p]
    unknown = sorted(set(positions) - set(POSITIONS))
    if unknown:
        ap.error(f"unknown position {', '.join(unknown)}; choose from {', '.join(POSITIONS)}")
    if opts.max_tokens < 2:
        ap.error("--max_tokens must be at least 2")
    if opts.steps and opts.minutes:
        ap.error("--steps and --minutes are two budgets; give one")
    if opts.steps < 0 or opts.minutes < 0:
        ap.error("--steps and --minutes must be positive")
    opts.steps = opts.steps or (0 if opts.minutes else 2000)
    budget = " ".join(budget_args(opts)[1:]) + (" min" if opts.minutes else " steps")
    opts.out = os.path.abspath(opts.out)
    os.makedirs(opts.out, exist_ok=True)
    check_plan(opts)
    rows = []
    for position in positions:
        data = results_json(position, opts)
        if data is None:
            log = os.path.join(opts.out, f"{position}.log")
            t0 = time.time()
            print(f"length_generalisation: {position}: training ({budget}) ...")
            run(train_command(position, opts), log)
            if opts.score == "dev+test":
                write_score_set(position, opts)
            run(eval_command(position, opts), log)
            print(f"length_generalisation: {position}: done in {(time.time() - t0) / 60:.1f} min")
            data = results_json(position, opts)
            if data is None:
                sys.exit(f"length_generalisation: {position}: no eval JSON in {opts.out}/results")
        rows.append((position, data))
    print(table(rows))


if __name__ == "__main__":
    main()
