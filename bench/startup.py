"""Time to first translation: what a user waits for before the first line of output.

    python bench/startup.py --logdir log/multi30k [--tree /tmp/old] [--repeats 3]

Rows, each the median of ``--repeats`` runs, this checkout and (``--tree``) another
checkout interleaved (old, new, old, new, ...), both on this checkout's run folder:
* translate.py, one sentence on stdin, from a cold start (a new Python process) to its
  first line on stdout;
* eval.py on the run's test set, end to end (start-up, restore, decoding, BLEU, results);
* the parts of translate.py's wait, in a fresh process per repeat: importing the
  modules, restoring the checkpoint, tracing the greedy loop, decoding one sentence;
* the trace time of the greedy and the beam-4 loops with and without autograph (the
  decoders trace without it).
"""

import argparse
import os
import subprocess
import sys
import time

import common

ROOT = common.ROOT
SENTENCE = "Ein Mann mit einem orangefarbenen Hut starrt auf etwas."

# Run inside a fresh process from a checkout's root: the parts of translate.py's wait.
PARTS = r"""
import json, sys, time
t0 = time.perf_counter()
import checkpoints, data_load, greedy_search, tensorflow as tf
t1 = time.perf_counter()
hp, tok, model, _ = checkpoints.load_run(sys.argv[1], {}, who="bench")
t2 = time.perf_counter()
greedy = greedy_search.greedy_decoder(model)
src = tf.constant([tok.encode_src([sys.argv[2]])[0] + [data_load.EOS_ID]], tf.int32)
extra = tf.constant(hp.max_len_extra, tf.int32)
greedy.get_concrete_function(src, extra)
t3 = time.perf_counter()
greedy(src, extra).numpy()
t4 = time.perf_counter()
parts = {"imports": t1 - t0, "restore": t2 - t1, "trace": t3 - t2, "decode": t4 - t3}
print("RESULT " + json.dumps(parts))
"""

# The trace time of the decoding loops, autograph on and off, interleaved in one process.
TRACE = r"""
import json, sys, time
import tensorflow as tf
import beam_search
import checkpoints
import greedy_search
hp, tok, model, _ = checkpoints.load_run(sys.argv[1], {}, who="bench")
spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
loops = {
    "greedy": lambda s, e: greedy_search.greedy_loop(model, s, e),
    "beam 4": lambda s, e: beam_search.beam_loop(model, s, e, 4, 0.6),
}
times = {}
for _ in range(int(sys.argv[2])):
    for name, loop in loops.items():
        for autograph in (True, False):
            fn = tf.function(loop, input_signature=spec, autograph=autograph)
            t0 = time.perf_counter()
            fn.get_concrete_function()
            times.setdefault(f"{name}, autograph {'on' if autograph else 'off'}", []).append(
                time.perf_counter() - t0
            )
print("RESULT " + json.dumps(times))
"""


def env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


def first_line(tree: str, logdir: str) -> float:
    """Seconds from starting translate.py to its first line on stdout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "translate.py", "--logdir", logdir],
        cwd=tree,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env(),
    )
    proc.stdin.write(SENTENCE + "\n")
    proc.stdin.close()
    line = proc.stdout.readline()
    seconds = time.perf_counter() - t0
    proc.wait()
    if proc.returncode != 0 or not line.strip():
        sys.exit(f"bench: translate.py in {tree} failed (status {proc.returncode})")
    return seconds


def eval_end_to_end(tree: str, logdir: str, results: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "eval.py", "--logdir", logdir, "--results_dir", results],
        cwd=tree,
        capture_output=True,
        text=True,
        env=env(),
    )
    if proc.returncode != 0:
        sys.exit(f"bench: eval.py in {tree} failed: {proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def json_run(tree: str, code: str, *args: str) -> dict:
    return common.run_child([sys.executable, "-c", code, *args], f"bench ({tree})", tree, env())


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logdir", required=True, help="a trained run (its latest checkpoint)")
    ap.add_argument("--tree", default="", help="another checkout to compare (run first)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip_eval", action="store_true", help="no eval.py rows")
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    logdir = os.path.abspath(args.logdir)
    trees = {"this checkout": ROOT}
    if args.tree:
        trees = {"--tree": os.path.abspath(args.tree), **trees}
    rows: dict[tuple[str, str], list[float]] = {}
    for r in range(args.repeats):
        for label, tree in trees.items():
            rows.setdefault(("translate.py, 1 sentence, to the first line", label), []).append(
                first_line(tree, logdir)
            )
            for part, seconds in json_run(tree, PARTS, logdir, SENTENCE).items():
                rows.setdefault((f"  of which {part} (in-process)", label), []).append(seconds)
            if not args.skip_eval:
                results = os.path.join("/tmp", f"bench_startup_{os.getpid()}_{r}")
                rows.setdefault(("eval.py on the test set, end to end", label), []).append(
                    eval_end_to_end(tree, logdir, results)
                )
    for label, tree in trees.items():
        for name, times in json_run(tree, TRACE, logdir, str(args.repeats)).items():
            rows[(f"trace: {name}", label)] = times
    width = max(len(name) for name, _ in rows) + 2
    print(f"median seconds of {args.repeats} runs; {logdir}")
    labels = list(trees)
    print(f"{'':<{width}}" + "".join(f"{label:>16}" for label in labels))
    names = list(dict.fromkeys(name for name, _ in rows))
    for name in names:
        cells = [rows.get((name, label)) for label in labels]
        text = "".join(f"{common.median(c):>16.2f}" if c else f"{'':>16}" for c in cells)
        print(f"{name:<{width}}{text}")


if __name__ == "__main__":
    main()
