"""Length generalisation of the position encodings: train one model per ``position`` value
on short pairs only, for the same wall-clock budget, one after the other, then score each
on the test set in buckets of source length, with bootstrap intervals.

    python prepro.py --preset multi30k --data_dir ../shared/data/multi30k
    python bench/length_generalisation.py --preset multi30k --data_dir ../shared/data/multi30k
        [--minutes 20] [--positions sinusoid,learned,shaw,t5,xl,rotary,alibi,alibi_dir]
        [--max_tokens 16] [--edges 16,24] [--out runs/lengths] [train.py options ...]

For every position value, in the order given and never two at once:

    python train.py --preset P --data_dir D --position F --max_minutes M
        --maxlen1 N+1 --maxlen2 N+1 --max_relative_position N-1
        --t5_buckets N --t5_max_distance N --logdir OUT/F --evaldir OUT/eval_F
    python eval.py --preset P --logdir OUT/F --results_dir OUT/results
        --length_buckets 16,24

``maxlen1`` and ``maxlen2`` count ``</S>``, so N + 1 keeps the training pairs of at most N
tokens on both sides. The relative settings keep every learned relative parameter
trained on such pairs: Shaw's clipping distance (N - 1) and T5's buckets reach no
farther than the longest training distance. The settings are passed to every family
(the absolute ones ignore them), so the eight commands differ in ``--position`` alone.
Any other option (``--seed 7``, ``--d_model 128``, ...) goes to train.py unchanged.

A family whose eval JSON exists is not run again, and train.py resumes a run that was
cut off (its ``max_minutes`` is the total over all starts), so an interrupted benchmark
goes on where it stopped. The end prints one table: sacreBLEU of each source-length
bucket (source BPE tokens, ``</S>`` not counted) with its sentence count and 95 %
bootstrap interval, the whole test set's sacreBLEU, and the training steps.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
        "--max_minutes", str(opts.minutes),
        "--maxlen1", str(n + 1),
        "--maxlen2", str(n + 1),
        "--max_relative_position", str(n - 1),
        "--t5_buckets", str(n),
        "--t5_max_distance", str(n),
        "--logdir", os.path.join(opts.out, position),
        "--evaldir", os.path.join(opts.out, f"eval_{position}"),
        *opts.train_args,
    ]  # fmt: skip


def eval_command(position: str, opts: argparse.Namespace) -> list[str]:
    """eval.py's command line: greedy, the run's default model, bucketed by length (the
    data come from the run's own hparams.json)."""
    return [
        sys.executable,
        os.path.join(ROOT, "eval.py"),
        "--preset", opts.preset,
        "--logdir", os.path.join(opts.out, position),
        "--results_dir", os.path.join(opts.out, "results"),
        "--length_buckets", opts.edges,
    ]  # fmt: skip


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
    per length bucket ("BLEU [95 % interval] (sentences)"), then the whole test set's
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
    """Runs one stage with its output in ``log``; a failure stops the benchmark, naming the
    stage and its log (the same command again resumes)."""
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(command) + "\n")
        f.flush()
        code = subprocess.call(command, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if code:
        sys.exit(f"length_generalisation: {' '.join(command[1:3])} failed (exit {code}); see {log}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="multi30k")
    ap.add_argument("--data_dir", default="")
    ap.add_argument("--minutes", type=float, default=20.0, help="training wall time per family")
    ap.add_argument("--positions", default=",".join(POSITIONS))
    ap.add_argument("--max_tokens", type=int, default=16, help="longest training pair, tokens")
    ap.add_argument("--edges", default="16,24", help="eval.py --length_buckets")
    ap.add_argument("--out", default=os.path.join("runs", "lengths"))
    opts, rest = ap.parse_known_args(argv)
    opts.train_args = rest
    positions = [p for p in opts.positions.split(",") if p]
    unknown = sorted(set(positions) - set(POSITIONS))
    if unknown:
        ap.error(f"unknown position {', '.join(unknown)}; choose from {', '.join(POSITIONS)}")
    if opts.max_tokens < 2:
        ap.error("--max_tokens must be at least 2")
    opts.out = os.path.abspath(opts.out)
    os.makedirs(opts.out, exist_ok=True)
    rows = []
    for position in positions:
        data = results_json(position, opts)
        if data is None:
            log = os.path.join(opts.out, f"{position}.log")
            t0 = time.time()
            print(f"length_generalisation: {position}: training ({opts.minutes:g} min) ...")
            run(train_command(position, opts), log)
            run(eval_command(position, opts), log)
            print(f"length_generalisation: {position}: done in {(time.time() - t0) / 60:.1f} min")
            data = results_json(position, opts)
            if data is None:
                sys.exit(f"length_generalisation: {position}: no eval JSON in {opts.out}/results")
        rows.append((position, data))
    print(table(rows))


if __name__ == "__main__":
    main()
