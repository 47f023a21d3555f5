"""The in-process references of bench/serve_load.py, each in a fresh process: what the
server's own decoder does on the same sentences without HTTP, in its best layout.

* TensorFlow: eval.py's own timing line on the sentences (``python eval.py --logdir RUN
  --test_src FILE --test_ref FILE [--beam_size 4]``: batches of eval_batch_size sorted by
  length, one stream per core), and one sentence decoded alone through the Python API
  (``Translator.from_run(RUN, beam_size=B).translate([s])``);
* CTranslate2: the server's CTranslate2 engine (ctranslate2_engine.py) with one replica
  of one thread per core, given the same sorted batches one per replica at once
  (CTranslate2's best layout on a CPU: docs/results.md), and one sentence alone.

``--diagnose`` adds the server's layout without HTTP: the sentences in chunks of
``--max_batch`` in their order (the batches a full server makes).
"""

import os
import re
import subprocess
import sys

import common

ROOT = common.ROOT
# eval.py's own timing line: "eval: N sentences in S s (R/s)"
TIMING = re.compile(r"^eval: (\d+) sentences in [\d.]+s \(([\d.]+)/s\)", re.M)

# A fresh process: one sentence alone through the Python API, and (layout "server") the
# server's thread layout and batches without HTTP.
TF_CHILD = r"""
import json, sys, time
run, beam, path, single, layout, max_batch = sys.argv[1:7]
if layout == "server":  # serve.py's set-up: one thread per stream, before TensorFlow runs
    from transformer_tf2.config import hparams
    from transformer_tf2.decoding import translator
    translator.decoding_process(hparams.load(run + "/hparams.json"), None)
from transformer_tf2.api import Translator
t = Translator.from_run(run, beam_size=int(beam))
with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")[:-1]
for s in lines[:3]:
    t.translate([s])
ms = []
for s in lines[: int(single)]:
    t0 = time.perf_counter()
    t.translate([s])
    ms.append(1000 * (time.perf_counter() - t0))
out = {"ms": ms}
if layout == "server":
    size = int(max_batch)
    t0 = time.perf_counter()
    for start in range(0, len(lines), size):
        t.translate(lines[start : start + size])
    out["chunks_rate"] = len(lines) / (time.perf_counter() - t0)
print("RESULT " + json.dumps(out))
"""

# A fresh process: the server's CTranslate2 engine in CTranslate2's best layout (a replica
# of one thread per core: inter_threads = the cores, intra_threads 1), given the sentences
# in batches of eval_batch_size sorted by length (as eval.py batches), one batch per
# replica at once; and one sentence decoded alone by the same engine.
CT2_CHILD = r"""
import json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
from transformer_tf2.config import hparams
from transformer_tf2.serving.ctranslate2_engine import CTranslate2Engine
model, run, beam, path, single, max_batch = sys.argv[1:7]
cores = len(os.sched_getaffinity(0))
hp = hparams.apply(hparams.load(run + "/hparams.json"), {"logdir": run})
engine = CTranslate2Engine(model, hp, {"beam_size": int(beam)}, workers=cores)
with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")[:-1]
for s in lines[:3]:
    engine.translate([s])
ms = []
for s in lines[: int(single)]:
    t0 = time.perf_counter()
    engine.translate([s])
    ms.append(1000 * (time.perf_counter() - t0))
size = engine.hp.eval_batch_size
lengths = [len(ids) for ids in engine.tok.encode_src(lines)]
order = sorted(range(len(lines)), key=lengths.__getitem__)
batches = [[lines[i] for i in order[k : k + size]] for k in range(0, len(order), size)]
t0 = time.perf_counter()
with ThreadPoolExecutor(cores) as pool:
    list(pool.map(engine.translate, batches[::-1]))  # the largest first
out = {"ms": ms, "rate": len(lines) / (time.perf_counter() - t0)}
if int(max_batch):  # --diagnose: the batches a full server makes, in their order
    size = int(max_batch)
    chunks = [lines[k : k + size] for k in range(0, len(lines), size)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(cores) as pool:
        list(pool.map(engine.translate, chunks))
    out["chunks_rate"] = len(lines) / (time.perf_counter() - t0)
print("RESULT " + json.dumps(out))
"""


def env() -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


def eval_rate(args, beam: int, src: str, ref: str, results: str) -> float:
    """eval.py's own sentences/s on the sentences of ``src`` (references ``ref``)."""
    command = [sys.executable, "eval.py", "--logdir", args.logdir, "--test_src", src]
    command += ["--test_ref", ref, "--results_dir", results, "--beam_size", str(beam)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env())
    timing = TIMING.search(proc.stdout)
    if proc.returncode != 0 or not timing:
        sys.exit(f"bench: eval.py failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return float(timing.group(2))


def reference(args, engine: str, beam: int, src: str, ref: str, tmp: str, model: str) -> dict:
    """The batched sentences/s and the one-sentence-alone latencies of ``engine``."""
    if engine == "ctranslate2":
        child = [sys.executable, "-c", CT2_CHILD, model, args.logdir, str(beam), src]
        child += [str(args.single), str(args.max_batch if args.diagnose else 0)]
        got = common.run_child(child, "bench (CTranslate2)", ROOT, env())
        out = dict(rate=got["rate"], single=common.median(got["ms"]))
        if args.diagnose:
            out.update(layout_chunks=got["chunks_rate"])
        return out
    rate = eval_rate(args, beam, src, ref, os.path.join(tmp, "results"))
    child = [sys.executable, "-c", TF_CHILD, args.logdir, str(beam), src, str(args.single)]
    got = common.run_child(child + ["api", "0"], "bench (alone)", ROOT, env())
    out = dict(rate=rate, single=common.median(got["ms"]))
    if args.diagnose:
        got = common.run_child(
            child + ["server", str(args.max_batch)], "bench (server layout)", ROOT, env()
        )
        out.update(layout_single=common.median(got["ms"]), layout_chunks=got["chunks_rate"])
    return out


def export_ctranslate2(logdir: str, folder: str) -> None:
    command = [sys.executable, "export.py", "--logdir", logdir, "--format", "ctranslate2"]
    proc = subprocess.run(
        command + ["--export_dir", folder], cwd=ROOT, capture_output=True, text=True, env=env()
    )
    if proc.returncode != 0:
        sys.exit(f"bench: export.py --format ctranslate2 failed: {proc.stderr[-2000:]}")
