"""oneDNN on and off: training and decoding speed with TF_ENABLE_ONEDNN_OPTS at 0 and at 1.

    python bench/onednn.py --preset multi30k [--pairs 3] [--precisions float32,mixed_bfloat16]

TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, when it is imported, so every measurement is
a child process with the variable set. The pairs interleave (0 1, 1 0, 0 1, ...), so that
a drift of the shared machine's speed favours neither side. Per pair and value:
* training: the small row of bench/train_throughput.py (its worker: the preset's data,
  d_model 256, 3+3 layers; the median of three timed windows of real target tokens/s),
  once per precision;
* decoding: the cached greedy loop over the first --sents test sentences of the preset's
  trained run (its latest checkpoint), batches of 64, sentences/s of a second pass.
First it prints what TensorFlow chooses by itself on this machine (the variable unset).
The projects' scripts set the variable to 1 where the user has not set it (cli.py).
"""

import json
import os
import sys

import common

from transformer_tf2.config import cli

ROOT = common.ROOT

VARIABLE = "TF_ENABLE_ONEDNN_OPTS"

# TensorFlow's own answer: is oneDNN on in this process?
CHOSEN = r"""
import json
from tensorflow.python.util import _pywrap_util_port
print("RESULT " + json.dumps({"onednn": bool(_pywrap_util_port.IsMklEnabled())}))
"""

DECODE = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
from transformer_tf2.data import data_load
from transformer_tf2.decoding import greedy_search
from transformer_tf2.models import checkpoints
from tensorflow.python.util import _pywrap_util_port
hp, tok, model, _ = checkpoints.load_run(sys.argv[1], {}, who="bench")
model.pin_output()  # the output matrix transposed once, as translator.Translator does
src_txt, _ = data_load.read_raw(hp, "test")
ids = tok.encode_src(src_txt[: int(sys.argv[2])])
batches = [b for _, b in data_load.eval_batches(ids, 64, 1 << 30)]
greedy = greedy_search.greedy_decoder(model)
extra = tf.constant(hp.max_len_extra, tf.int32)
for b in batches:  # the first pass traces each shape
    greedy(tf.constant(b), extra).numpy()
t0 = time.perf_counter()
for b in batches:
    greedy(tf.constant(b), extra).numpy()
print("RESULT " + json.dumps({"sents_s": len(ids) / (time.perf_counter() - t0),
                  "onednn": bool(_pywrap_util_port.IsMklEnabled())}))
"""


def run_json(args: list[str], value: str | None) -> dict:
    """A child's result, run with TF_ENABLE_ONEDNN_OPTS set to ``value`` (None: unset)."""
    env = dict(os.environ)
    env.pop(VARIABLE, None)
    if value is not None:
        env[VARIABLE] = value
    return common.run_child(args, f"bench ({VARIABLE}={value})", env=env)


def train_config(preset: str, precision: str) -> dict:
    import train_throughput as tt

    hp = dict(tt.SIZES["small"], dropout_rate=0.1, label_smoothing=0.1, precision=precision)
    return dict(
        preset=preset,
        size="small",
        warmup=tt.WARMUP,
        steps=30,
        side="ours",
        probe=False,
        hparams=hp,
        name=f"ours {precision}",
        ablate=[],
    )


OPTIONS = {"pairs": 3, "precisions": "float32,mixed_bfloat16", "sents": 300}


def parser(preset: str = "demo"):
    """The command line's parser (``--help``), built without TensorFlow."""
    return common.hparams_parser(OPTIONS, preset)


def main() -> None:
    hp, opts = cli.parse_args(extra=OPTIONS)
    preset = opts["_preset"]
    chosen = run_json([sys.executable, "-c", CHOSEN], None)["onednn"]
    print(f"{VARIABLE} unset: TensorFlow turns oneDNN {'on' if chosen else 'off'} on this CPU")
    precisions = [p.strip() for p in opts["precisions"].split(",") if p.strip()]
    throughput = os.path.join(ROOT, "bench", "train_throughput.py")
    rows: dict[tuple[str, str], list[float]] = {}
    for k in range(opts["pairs"]):
        for value in common.interleaved(k, "0", "1"):
            for precision in precisions:
                cfg = json.dumps(train_config(preset, precision))
                res = run_json([sys.executable, throughput, "--worker", cfg], value)
                rows.setdefault((f"training {precision}, tgt tok/s", value), []).append(
                    res["tok_s"]
                )
            res = run_json([sys.executable, "-c", DECODE, hp.logdir, str(opts["sents"])], value)
            rows.setdefault(("greedy decoding, sentences/s", value), []).append(res["sents_s"])
            print(f"  pair {k + 1}, {VARIABLE}={value}: done (oneDNN on: {res['onednn']})")
    print(f"\nmedian of {opts['pairs']} interleaved pairs; ratio: 1 over 0")
    print(f"{'':34}{'=0':>10}{'=1':>10}{'ratio':>8}   per pair")
    for name in dict.fromkeys(n for n, _ in rows):
        off, on = rows[(name, "0")], rows[(name, "1")]
        pairs = " ".join(f"{a / b:.3f}" for a, b in zip(on, off))
        med = common.median(a / b for a, b in zip(on, off))
        print(
            f"{name:34}{common.median(off):>10,.1f}{common.median(on):>10,.1f}{med:>8.3f}   {pairs}"
        )


if __name__ == "__main__":
    cli.run_main(main)
