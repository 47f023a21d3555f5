"""Time to first translation: what a user waits for before the first line of output.

    python bench/startup.py --logdir log/multi30k [--tree /tmp/old] [--repeats 3]
        [--ctranslate2 [--length_penalty ALPHA]]

Rows, each the median of ``--repeats`` runs, this checkout and (``--tree``) another
checkout interleaved (old, new, old, new, ...), both on this checkout's run folder:
* translate.py, one sentence on stdin, from a cold start (a new Python process) to its
  first line on stdout;
* eval.py on the run's test set, end to end (start-up, restore, decoding, BLEU, results);
* the parts of translate.py's wait, in a fresh process per repeat: importing the
  modules, restoring the checkpoint, tracing the greedy loop, decoding one sentence;
* the trace time of the greedy and the beam-4 loops with and without autograph (the
  decoders trace without it);
* with ``--ctranslate2`` (the run's model must convert: ctranslate.py), the wait for
  the test set against CTranslate2 in a fresh process each: eval.py's own timing line
  (the translation after the model is loaded; it prints the scoring's seconds apart),
  greedy and ``--beam_size 4``, and CTranslate2's ``translate_batch`` on the same raw
  sentences, sentencepiece included and the model's load excluded as on our side
  (``export.py --format ctranslate2``; one batch of eval_batch_size sentences per core
  at once: inter_threads = the cores, 1 intra-op thread each; the run's length penalty,
  in CTranslate2's own formula |Y|^alpha where ours is GNMT's; its length budget the
  longest source's plus max_len_extra, ours each sentence's own), then the ratios of
  the two. ``--length_penalty ALPHA`` gives both beams that penalty instead of the
  run's (a beam's stop differs: ours once no live hypothesis can beat the best
  finished one, T2T's exact rule, which a larger penalty makes later; CTranslate2's
  once beam_size hypotheses have finished).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import common

ROOT = common.ROOT
SENTENCE = "Ein Mann mit einem orangefarbenen Hut starrt auf etwas."
BEAM = 4  # the beam row of --ctranslate2

# Run inside a fresh process from a checkout's root: the parts of translate.py's wait.
PARTS = r"""
import json, sys, time
t0 = time.perf_counter()
try:
    from transformer_tf2.config import hparams
    from transformer_tf2.data import data_load
    from transformer_tf2.decoding import greedy_search, translator
    from transformer_tf2.models import checkpoints
except ImportError:  # a checkout from before the package (--tree)
    import checkpoints, data_load, greedy_search, hparams, translator
import tensorflow as tf
t1 = time.perf_counter()
if hasattr(translator, "decoding_process"):  # translate.py's set-up (a checkout that has it)
    translator.decoding_process(hparams.load(sys.argv[1] + "/hparams.json"), 1)
hp, tok, model, _ = checkpoints.load_run(sys.argv[1], {}, who="bench")
t2 = time.perf_counter()
if hasattr(model, "pin_output"):  # as translator.Translator does (a checkout that has it)
    model.pin_output()
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
from transformer_tf2.decoding import beam_search
from transformer_tf2.models import checkpoints
from transformer_tf2.decoding import greedy_search
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


# Run in a fresh process: CTranslate2 on the raw test sentences, as a user of it would.
CTRANSLATE2 = r"""
import json, os, sys, time
import ctranslate2, sentencepiece
model_dir, sources, beam, alpha, extra, batch = sys.argv[1:7]
t0 = time.perf_counter()
cores = os.cpu_count() or 1
translator = ctranslate2.Translator(model_dir, device="cpu", inter_threads=cores, intra_threads=1)
sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(model_dir, "bpe.model"))
t1 = time.perf_counter()
with open(sources, encoding="utf-8") as f:
    lines = f.read().split("\n")[:-1]
pieces = sp.encode(lines, out_type=str)
results = translator.translate_batch(
    pieces,
    max_batch_size=int(batch),
    beam_size=int(beam),
    length_penalty=float(alpha) if int(beam) > 1 else 0.0,
    max_decoding_length=max(map(len, pieces)) + 1 + int(extra),
)
hyps = sp.decode([r.hypotheses[0] for r in results])
t2 = time.perf_counter()
assert len(hyps) == len(lines)
print("RESULT " + json.dumps({"load": t1 - t0, "translate": t2 - t1}))
"""

# eval.py's own timing line: "eval: N sentences in S s (R/s)"
TIMING = re.compile(r"^eval: (\d+) sentences in [\d.]+s \(([\d.]+)/s\)", re.M)


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


def script(tree: str, *args: str) -> str:
    """The stdout of a project script run in ``tree`` (``args``: the script and its
    options); a failure ends the benchmark in one line with the tail of its stderr."""
    proc = subprocess.run(
        [sys.executable, *args], cwd=tree, capture_output=True, text=True, env=env()
    )
    if proc.returncode != 0:
        sys.exit(f"bench: {args[0]} in {tree} failed: {proc.stderr[-2000:]}")
    return proc.stdout


def eval_end_to_end(tree: str, logdir: str, results: str, *args: str) -> tuple[float, float]:
    """(seconds from starting eval.py to its end, the seconds of its own timing line)."""
    t0 = time.perf_counter()
    out = script(tree, "eval.py", "--logdir", logdir, "--results_dir", results, *args)
    seconds = time.perf_counter() - t0
    timing = TIMING.search(out)
    if not timing:
        sys.exit(f"bench: eval.py in {tree} printed no timing line: {out[-2000:]}")
    return seconds, int(timing.group(1)) / float(timing.group(2))


def ctranslate2_model(logdir: str) -> tuple[str, dict]:
    """This checkout's CTranslate2 conversion of the run (export.py --format ctranslate2)
    in a temporary folder, and the run's settings (its hparams.json)."""
    folder = os.path.join(tempfile.mkdtemp(prefix="bench_startup_"), "ct2")
    script(ROOT, "export.py", "--logdir", logdir, "--format", "ctranslate2", "--export_dir", folder)
    with open(os.path.join(logdir, "hparams.json")) as f:
        return folder, json.load(f)


def ctranslate2_seconds(folder: str, settings: dict, beam: int) -> float:
    """CTranslate2's seconds for the run's test sentences in a fresh process (load
    excluded), at the length penalty of ``settings``."""
    prepro_dir = os.path.join(ROOT, settings["prepro_dir"])  # a run's folders are relative
    sources = os.path.join(prepro_dir, "test.src")
    args = [str(beam), str(settings["length_penalty"]), str(settings["max_len_extra"])]
    args.append(str(settings["eval_batch_size"]))
    child = [sys.executable, "-c", CTRANSLATE2, folder, sources, *args]
    return common.run_child(child, "bench (CTranslate2)", ROOT, env())["translate"]


def json_run(tree: str, code: str, *args: str) -> dict:
    return common.run_child([sys.executable, "-c", code, *args], f"bench ({tree})", tree, env())


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logdir", required=True, help="a trained run (its latest checkpoint)")
    ap.add_argument("--tree", default="", help="another checkout to compare (run first)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip_eval", action="store_true", help="no eval.py rows")
    ap.add_argument(
        "--ctranslate2",
        action="store_true",
        help=f"eval.py's timing line, greedy and beam {BEAM}, against CTranslate2's",
    )
    ap.add_argument(
        "--length_penalty",
        type=float,
        default=None,
        help=f"with --ctranslate2: beam {BEAM}'s length penalty on both sides (default: the run's)",
    )
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    if args.ctranslate2 and args.skip_eval:
        ap.error("--ctranslate2 compares eval.py's timing: drop --skip_eval")
    if args.length_penalty is not None and not args.ctranslate2:
        ap.error("--length_penalty is the beam's against CTranslate2's: add --ctranslate2")
    logdir = os.path.abspath(args.logdir)
    folder, settings = ctranslate2_model(logdir) if args.ctranslate2 else ("", {})
    if args.length_penalty is not None:
        settings["length_penalty"] = args.length_penalty
    try:
        measure(args, logdir, folder, settings)
    finally:
        if folder:
            shutil.rmtree(os.path.dirname(folder), ignore_errors=True)


def measure(args, logdir: str, folder: str, settings: dict) -> None:
    """Every row, then the table (and the ratios to CTranslate2)."""
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
            results = os.path.join("/tmp", f"bench_startup_{os.getpid()}_{r}")
            if not args.skip_eval:
                seconds, own = eval_end_to_end(tree, logdir, results)
                rows.setdefault(("eval.py on the test set, end to end", label), []).append(seconds)
                rows.setdefault(("  its own timing line, greedy", label), []).append(own)
            if args.ctranslate2:
                beam = [
                    "--beam_size",
                    str(BEAM),
                    "--length_penalty",
                    str(settings["length_penalty"]),
                ]
                own = eval_end_to_end(tree, logdir, results, *beam)[1]
                rows.setdefault((f"  its own timing line, beam {BEAM}", label), []).append(own)
        for beam in (1, BEAM) if args.ctranslate2 else ():
            name = "greedy" if beam == 1 else f"beam {beam}"
            rows.setdefault((f"CTranslate2, {name}, fresh process", "this checkout"), []).append(
                ctranslate2_seconds(folder, settings, beam)
            )
    for label, tree in trees.items():
        for name, times in json_run(tree, TRACE, logdir, str(args.repeats)).items():
            rows[(f"trace: {name}", label)] = times
    width = max(len(name) for name, _ in rows) + 2
    alpha = f"; beam {BEAM} at length penalty {settings['length_penalty']:g}" if settings else ""
    print(f"median seconds of {args.repeats} runs; {logdir}{alpha}")
    labels = list(trees)
    print(f"{'':<{width}}" + "".join(f"{label:>16}" for label in labels))
    names = list(dict.fromkeys(name for name, _ in rows))
    for name in names:
        cells = [rows.get((name, label)) for label in labels]
        text = "".join(f"{common.median(c):>16.2f}" if c else f"{'':>16}" for c in cells)
        print(f"{name:<{width}}{text}")
    if args.ctranslate2:
        for name in ("greedy", f"beam {BEAM}"):
            ours = common.median(rows[(f"  its own timing line, {name}", "this checkout")])
            theirs = common.median(rows[(f"CTranslate2, {name}, fresh process", "this checkout")])
            print(f"eval.py / CTranslate2, {name}: {ours / theirs:.2f}x the time")


if __name__ == "__main__":
    main()
