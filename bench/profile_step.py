"""Where the train step's time goes: a tf.profiler trace of the compiled step, summed.

    python prepro.py --preset multi30k --data_dir data/multi30k
    python bench/profile_step.py --preset multi30k [--size small|preset]
        [--precision float32|mixed_bfloat16] [--steps 15] [--ablate dense2d,...]
        [--top 25] [--shapes] [--op Mul]

Trains the size's model (train_throughput.SIZES, or the preset's own model) on the
first batches of the preset's plan, warms the step up on the same batches (every batch
shape traced), then traces ``--steps`` steps and prints, per step:
* the wall time and the CPU time per wall second (2.0: both cores of a 2-core machine
  busy all along);
* the wall split by what the executor threads run: a matmul alone, a matmul beside
  another op, other ops alone, nothing. Only the "other ops alone" share is wall time
  that a faster elementwise op can win back outright; the time beside a matmul is shared
  with it;
* op time by op type (summed over the threads, so two ops side by side both count), and
  each type's part of the "other ops alone" wall.
``--op TYPE``: the ops of that type by name (which layer's Mul costs what).
``--shapes``: the GFLOP/s of the step's matmul shapes (M real target tokens, d_model,
d_ff, V, forward and backward orientations) one at a time, against the 2048^3 product
of train_throughput.py's peak probe (its best of 3): the speed a matmul of the step can
reach.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import resource
import tempfile
import time

import numpy as np

import common

import train_throughput as throughput
from transformer_tf2.config import cli

ROOT = common.ROOT

MATMUL = "MatMul"  # _MklMatMul, MatMul, BatchMatMulV2, _MklBatchMatMulV2, _FusedMatMul ...
# executor lines of the host plane; each op of the step is one event on one of them,
# inside the executor's own "Process" events (not ops)
EXECUTOR_LINE = "tf_Compute"
NOT_OPS = ("Process", "Run")


def op_events(xspace) -> list[tuple[int, int, str, str]]:
    """(start ps, end ps, op type, op name) of every op the executor threads ran, from a
    tf.profiler XSpace. Event names are "op name:op type"; the executor's wrappers
    (NOT_OPS, the step function's "__inference..." events) are not ops."""
    events = []
    for plane in xspace.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith(EXECUTOR_LINE):
                continue
            base = line.timestamp_ns * 1000
            for e in line.events:
                name = names.get(e.metadata_id, "")
                kind = name.rsplit(":", 1)[-1]
                if ":" in name and kind not in NOT_OPS and not name.startswith("__"):
                    start = base + e.offset_ps
                    events.append((start, start + e.duration_ps, kind, name.rsplit(":", 1)[0]))
    return events


def wall_split(events) -> tuple[dict[str, float], dict[str, float]]:
    """Sweep the events' intervals: (wall ps by state, "other alone" wall ps by op type).
    States: "matmul alone", "matmul + other", "other alone", "idle" (no op running), over
    the span from the first start to the last end. A stretch where several other ops run
    together is shared evenly between their types."""
    edges = []
    for start, end, kind, *_ in events:
        edges += [(start, 1, kind), (end, -1, kind)]
    edges.sort(key=lambda x: (x[0], x[1]))  # at a tie, ends before starts
    state = dict.fromkeys(("matmul alone", "matmul + other", "other alone", "idle"), 0.0)
    alone: dict[str, float] = collections.defaultdict(float)
    running: collections.Counter = collections.Counter()
    last = edges[0][0] if edges else 0
    for t, step, kind in edges:
        dt = t - last
        matmuls = sum(c for k, c in running.items() if MATMUL in k)
        others = [k for k, c in running.items() if c > 0 and MATMUL not in k]
        if matmuls:
            state["matmul + other" if others else "matmul alone"] += dt
        elif others:
            state["other alone"] += dt
            for k in others:
                alone[k] += dt / len(others)
        else:
            state["idle"] += dt
        running[kind] += step
        last = t
    return state, dict(alone)


def op_time_by_type(events, kind: str = "") -> dict[str, float]:
    """Summed duration (ps) per op type; with ``kind``, per name of the ops of that type,
    the layer numbers in it replaced by N (encoder_2/... -> encoder_N/...)."""
    total: dict[str, float] = collections.defaultdict(float)
    for start, end, op_type, name in events:
        if not kind:
            total[op_type] += end - start
        elif op_type == kind:
            total[re.sub(r"_\d+\b", "_N", name)] += end - start
    return dict(total)


def step_and_batches(preset: str, size: str, overrides: dict, count: int, off=()):
    """(trainer, batches, hparams): a new trainer of the size's model, the fast_ops
    switches in ``off`` turned off, and the first ``count`` batches of the preset's plan."""
    import keras

    import train
    from transformer_tf2.config import hparams
    from transformer_tf2.data import data_load

    model = throughput.size_model(preset, size)
    hp = hparams.apply(
        hparams.preset(preset), dict(model, dropout_rate=0.1, label_smoothing=0.1, **overrides)
    )
    tok = data_load.load_tokenizer(hp)
    strategy, precision = throughput.project_setup_devices()(hp)
    keras.utils.set_random_seed(hp.seed)
    from transformer_tf2.kernels import fast_ops

    trainer = train.Trainer(hp, tok, strategy, precision, fast_ops.Kernels.resolve(off))
    return trainer, throughput.batches_for(hp, data_load.TrainData(hp), count), hp


def profile(trainer, batches) -> tuple[list, float, float]:
    """(op events, wall seconds, CPU seconds) of one traced pass over ``batches``, after
    an untraced pass over the same batches (every shape compiled)."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    for batch in batches:
        trainer.train_batch(*batch)
    with tempfile.TemporaryDirectory() as logdir:
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        tf.profiler.experimental.start(logdir)
        t0 = time.perf_counter()
        for batch in batches:
            trainer.train_batch(*batch)  # numbers: waits for the step
        wall = time.perf_counter() - t0
        tf.profiler.experimental.stop()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        space = xplane_pb2.XSpace()
        with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    return op_events(space), wall, cpu


def matmul_shapes(tokens: int, d: int, d_ff: int, vocab: int, layers: int) -> list[tuple]:
    """(label, M, K, N, transpose_a, transpose_b, count per step) of the step's matmuls:
    each projection forward, its input gradient and its weight gradient, with M = tokens
    for all (cross-attention's W^K, W^V run on the source tokens, about as many), and the
    counts of the paper's layers: 4 d x d projections per encoder layer and 8 per decoder
    layer, one FFN each, one output projection. Attention's batched Q K^T and weights x V
    are left out."""
    out = []
    shapes = (
        ("d x d", d, d, 12 * layers),
        ("d x d_ff", d, d_ff, 2 * layers),
        ("d_ff x d", d_ff, d, 2 * layers),
    )
    for name, k, n, count in shapes:
        out += [
            (f"{name} forward", tokens, k, n, False, False, count),
            (f"{name} input grad", tokens, n, k, False, True, count),
            (f"{name} weight grad", k, tokens, n, True, False, count),
        ]
    out += [
        ("logits x W^T", tokens, d, vocab, False, True, 1),
        ("dlogits x W", tokens, vocab, d, False, False, 1),
        ("dlogits^T x h", vocab, tokens, d, True, False, 1),
    ]
    return out


def time_matmul(m, k, n, transpose_a, transpose_b, dtype="float32", repeats=9) -> float:
    """Median GFLOP/s of one product of the shape (operands already in place)."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal((k, m) if transpose_a else (m, k)), dtype)
    b = tf.cast(tf.random.normal((n, k) if transpose_b else (k, n)), dtype)

    def first_row_sum(a, b):  # reads back one row, not the whole product
        c = tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
        return tf.reduce_sum(tf.cast(c[:1], "float32"))

    product = tf.function(first_row_sum, autograph=False)
    product(a, b).numpy()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        product(a, b).numpy()
        times.append(time.perf_counter() - t0)
    return 2 * m * k * n / common.median(times) / 1e9


def print_profile(events, wall, cpu, steps, top):
    ps_per_ms = 1e9 * steps
    state, alone = wall_split(events)
    span = sum(state.values())
    print(f"wall {1000 * wall / steps:.1f} ms/step; CPU time {cpu / wall:.2f} s per wall second")
    print("wall by what runs (the executor threads' ops):")
    for name, ps in state.items():
        print(f"  {name:16} {ps / ps_per_ms:7.1f} ms/step {100 * ps / span:5.1f} %")
    op_time = op_time_by_type(events)
    total = sum(op_time.values())
    print(f"op time by type ({total / ps_per_ms:.1f} ms/step over the threads):")
    print(f"  {'op type':34} {'op time':>9} {'share':>6} {'alone':>8}")
    for kind, ps in sorted(op_time.items(), key=lambda x: -x[1])[:top]:
        print(
            f"  {kind:34} {ps / ps_per_ms:6.2f} ms {100 * ps / total:5.1f} % "
            f"{alone.get(kind, 0.0) / ps_per_ms:5.2f} ms"
        )


def print_op_names(events, kind, steps, top):
    """The ops of type ``kind`` by name, the most op time first."""
    by_name = op_time_by_type(events, kind)
    print(f"ops of type {kind} ({len(by_name)} names, numbers as N), op time per step:")
    for name, ps in sorted(by_name.items(), key=lambda x: -x[1])[:top]:
        print(f"  {ps / 1e9 / steps:6.2f} ms  {name}")


OPTIONS = {"size": "small", "steps": 15, "ablate": "", "top": 25, "shapes": False, "op": ""}


def parser(preset: str = "demo"):
    """The command line's parser (``--help``), built without TensorFlow."""
    return common.hparams_parser(OPTIONS, preset)


def main() -> None:
    hp, opts = cli.parse_args(extra=OPTIONS)
    import tensorflow as tf

    off = [x.strip() for x in opts["ablate"].split(",") if x.strip()]
    precision = hp.precision if "precision" in opts["_set"] else "float32"
    trainer, batches, hp = step_and_batches(
        opts["_preset"], opts["size"], dict(precision=precision), opts["steps"], off
    )
    events, wall, cpu = profile(trainer, batches)
    print(
        f"TensorFlow {tf.__version__}; {os.cpu_count()} CPUs; {opts['size']} model "
        f"(d_model {hp.d_model}, {hp.num_heads} heads, {hp.position}, {hp.norm}-norm), "
        f"{precision}, {opts['steps']} traced steps"
    )
    print_profile(events, wall, cpu, opts["steps"], opts["top"])
    if opts["op"]:
        print_op_names(events, opts["op"], opts["steps"], opts["top"])
    if opts["shapes"]:
        tokens = int(common.median([np.count_nonzero(lab) for _, _, lab in batches]))
        vocab = trainer.model.tgt_embedding.vocab_size
        own = "bfloat16" if precision == "mixed_bfloat16" else "float32"
        peak = throughput.matmul_peak(own, sizes=(2048,))  # the benchmark's own probe
        print(f"matmuls of the step one at a time ({own}; M = {tokens} real target tokens):")
        print(f"  {'2048^3 (the peak probe, best)':28} {peak:6.0f} GFLOP/s")
        need = flops = 0.0
        for label, m, k, n, ta, tb, count in matmul_shapes(
            tokens, hp.d_model, hp.d_ff, vocab, hp.num_blocks
        ):
            rate = time_matmul(m, k, n, ta, tb, own)
            print(
                f"  {label:28} {rate:6.0f} GFLOP/s {100 * rate / peak:4.0f} % "
                f"({m}x{k}x{n}, {count} per step)"
            )
            flops += count * 2 * m * k * n / 1e9
            need += count * 2 * m * k * n / 1e9 / rate
        print(
            f"these products of one step ({flops:.1f} GFLOP), each at its speed alone: "
            f"{1000 * need:.0f} ms, {100 * need / (wall / opts['steps']):.0f} % of the step"
        )


if __name__ == "__main__":
    main()
