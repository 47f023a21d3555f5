"""Training throughput: this project's train step against a keras-hub Transformer of the
same size, and against the machine's measured matmul peak.

    pip install -e ".[bench]"                           # keras-hub, for the reference rows
    python prepro.py --preset multi30k --data_dir ../shared/data/multi30k
    python bench/train_throughput.py --preset multi30k [--sizes small,base] [--quick]

One script run. The parent process measures the float32 and bfloat16 matmul peak with
TensorFlow (2048 x 2048 x 2048, median of repeats), then runs every configuration in a
fresh child process, one after the other (so a dtype policy or XLA setting never leaks
and each peak RSS is its own), and prints one table with the ratios.

Both sides train on the same preprocessed data (the preset's BPE ids), the same model
size (d_model, d_ff, heads, layers, vocabulary) and label smoothing 0.1 with dropout 0.1:
* ours: train.Trainer's compiled step on the token-budget, length-bucketed batch plan
  (tokens_per_batch, pad_multiple), with XLA off/on and float32/mixed_bfloat16;
* keras-hub: keras_hub.layers.TokenAndPositionEmbedding + TransformerEncoder/Decoder +
  Dense, model.compile(Adam) + model.fit over shuffled batches of 64 sentence pairs
  padded to the batch's longest sentence (what a keras-hub user writes).
Throughput counts real target tokens only (labels that are not PAD). GFLOP/s are on
real tokens: 6 * params * tokens (params of our model, embeddings counted once: they are
the output projection) and an explicit matmul count (forward x 3) from the real source
and target lengths of each batch, attention included. Each number is the median of
three timed windows after the warm-up batches.
"""
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

import hparams as H

SIZES = {
    "small": dict(d_model=256, d_ff=1024, num_blocks=3, num_heads=4, tokens_per_batch=2048),
    "base": dict(d_model=512, d_ff=2048, num_blocks=6, num_heads=8, tokens_per_batch=4096),
}
WARMUP, WINDOWS = 6, 3


# ---------------------------------------------------------------------------------------
# FLOP counts
# ---------------------------------------------------------------------------------------
def matmul_flops(src_lens, tgt_lens, d, d_ff, n, vocab) -> float:
    """Training FLOPs (forward x 3) of the matmuls for real tokens only: per sentence pair
    of S source and T target positions (</S> and <S> included)."""
    S, T = np.asarray(src_lens, float), np.asarray(tgt_lens, float)
    enc = n * (2 * S * (4 * d * d + 2 * d * d_ff) + 4 * S * S * d)
    dec = n * (2 * T * (4 * d * d + 2 * d * d_ff)      # self-attention and FFN
               + 4 * T * T * d                          # Q K^T and weights x V
               + 2 * T * 2 * d * d + 2 * S * 2 * d * d  # cross: W^Q, W^O; W^K, W^V
               + 4 * T * S * d)
    out = 2 * T * d * vocab
    return float(3 * np.sum(enc + dec + out))


def matmul_peak(dtype: str, n: int = 2048, repeats: int = 7) -> float:
    """GFLOP/s of an n x n x n matmul in TensorFlow (median of repeats of 5 matmuls)."""
    import tensorflow as tf
    a = tf.random.normal((n, n), dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)

    @tf.function
    def five(a, b):
        x = a
        for _ in range(5):
            x = tf.matmul(x, b) * 0.01
        return tf.reduce_sum(tf.cast(x, tf.float32))

    five(a, b).numpy()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        five(a, b).numpy()
        times.append(time.perf_counter() - t0)
    return 5 * 2 * n ** 3 / np.median(times) / 1e9


# ---------------------------------------------------------------------------------------
# child processes: one configuration each
# ---------------------------------------------------------------------------------------
def windows(times, tokens, flops):
    """Median over WINDOWS equal windows of (tokens/s, matmul FLOP/s)."""
    idx = np.array_split(np.arange(len(times)), WINDOWS)
    tok_s = [sum(tokens[i] for i in w) / sum(times[i] for i in w) for w in idx]
    flop_s = [sum(flops[i] for i in w) / sum(times[i] for i in w) for w in idx]
    return float(np.median(tok_s)), float(np.median(flop_s))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def batches_for(hp, data, count):
    """The first ``count`` batches of epoch 0 of the project's plan, as numpy arrays."""
    import data_load
    plan = data.batches(0)[:count]
    return [data_load.build_batch(data.corpus, idx, hp.pad_multiple) for idx in plan]


def run_ours(cfg: dict) -> dict:
    import data_load
    import train as T
    hp = H.apply(H.preset(cfg["preset"]), cfg["hparams"])
    tok = data_load.load_tokenizer(hp)
    strategy, precision = T.setup_devices(hp)
    import keras
    keras.utils.set_random_seed(hp.seed)
    data = data_load.TrainData(hp)
    trainer = T.Trainer(hp, tok, strategy, precision)
    batches = batches_for(hp, data, cfg["warmup"] + cfg["steps"])
    times, tokens, flops, shapes = [], [], [], set()
    vocab = trainer.model.tgt_embedding.vocab_size
    for i, (src, dec, lab) in enumerate(batches):
        t0 = time.perf_counter()
        stats, _ = trainer.train_batch(src, dec, lab)   # numpy: waits for the step
        dt = time.perf_counter() - t0
        shapes.add((src.shape, dec.shape))
        if i >= cfg["warmup"]:
            times.append(dt)
            tokens.append(float(stats[2]))
            flops.append(matmul_flops((src != 0).sum(1), (lab != 0).sum(1), hp.d_model,
                                      hp.d_ff, hp.num_blocks, vocab))
    tok_s, flop_s = windows(times, tokens, flops)
    traces = trainer._step.experimental_get_tracing_count()
    if hasattr(trainer._compiled, "experimental_get_tracing_count"):
        traces += trainer._compiled.experimental_get_tracing_count()
    real = sum(int((lab != 0).sum()) for _, _, lab in batches)
    allpos = sum(lab.size for _, _, lab in batches)
    return {"tok_s": tok_s, "matmul_flop_s": flop_s,
            "params": trainer.model.count_params(), "traces": traces,
            "shapes": len(shapes), "steps": len(batches), "rss_mb": peak_rss_mb(),
            "tgt_padding": 1 - real / allpos, "loss": float(stats[0] / stats[2])}


def keras_hub_model(vocab, d, d_ff, n, h, max_len, dropout):
    """The encoder-decoder of the keras-hub translation example, at our size."""
    import keras
    import keras_hub
    src = keras.Input((None,), dtype="int32", name="src")
    tgt = keras.Input((None,), dtype="int32", name="tgt")
    x = keras_hub.layers.TokenAndPositionEmbedding(vocab, max_len, d, mask_zero=True)(src)
    for _ in range(n):
        x = keras_hub.layers.TransformerEncoder(d_ff, h, dropout=dropout)(x)
    y = keras_hub.layers.TokenAndPositionEmbedding(vocab, max_len, d, mask_zero=True)(tgt)
    for _ in range(n):
        y = keras_hub.layers.TransformerDecoder(d_ff, h, dropout=dropout)(y, x)
    logits = keras.layers.Dense(vocab)(y)
    return keras.Model([src, tgt], logits)


def run_keras_hub(cfg: dict) -> dict:
    import keras
    import tensorflow as tf
    import data_load
    hp = H.apply(H.preset(cfg["preset"]), cfg["hparams"])
    tok = data_load.load_tokenizer(hp)
    keras.utils.set_random_seed(hp.seed)
    data = data_load.TrainData(hp)
    rng = np.random.default_rng(hp.seed)
    order = rng.permutation(data.keep)
    count = cfg["warmup"] + cfg["steps"]
    batches = [data_load.build_batch(data.corpus, order[i * 64:(i + 1) * 64])
               for i in range(count)]
    vocab = tok.tgt_vocab_size
    model = keras_hub_model(vocab, hp.d_model, hp.d_ff, hp.num_blocks, hp.num_heads,
                            hp.maxlen1 + 2, hp.dropout_rate)
    model.compile(keras.optimizers.Adam(3e-4, beta_2=0.98, epsilon=1e-9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                             ignore_class=0))
    spec = tf.TensorSpec([None, None], tf.int32)

    def gen():
        for src, dec, lab in batches:
            yield (src, dec), lab

    ds = tf.data.Dataset.from_generator(gen, output_signature=((spec, spec), spec))
    ends = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if not ends:
                ends.append(time.perf_counter())

        def on_train_batch_end(self, batch, logs=None):
            float(logs["loss"])  # wait for the step
            ends.append(time.perf_counter())

    hist = model.fit(ds.prefetch(2), epochs=1, verbose=0, callbacks=[Clock()])
    step_times = np.diff(ends)
    times, tokens, flops = [], [], []
    for i, (src, dec, lab) in enumerate(batches):
        if i >= cfg["warmup"]:
            times.append(step_times[i])
            tokens.append(float((lab != 0).sum()))
            flops.append(matmul_flops((src != 0).sum(1), (lab != 0).sum(1), hp.d_model,
                                      hp.d_ff, hp.num_blocks, vocab))
    tok_s, flop_s = windows(times, tokens, flops)
    real = sum(int((lab != 0).sum()) for _, _, lab in batches)
    allpos = sum(lab.size for _, _, lab in batches)
    return {"tok_s": tok_s, "matmul_flop_s": flop_s, "params": model.count_params(),
            "traces": None, "shapes": len({(b[0].shape, b[1].shape) for b in batches}),
            "steps": len(batches), "rss_mb": peak_rss_mb(), "tgt_padding": 1 - real / allpos,
            "loss": float(hist.history["loss"][-1]),
            "jit_compile": bool(model.jit_compile)}


def child(cfg_json: str) -> None:
    cfg = json.loads(cfg_json)
    out = run_keras_hub(cfg) if cfg["side"] == "keras-hub" else run_ours(cfg)
    print("RESULT " + json.dumps(out))


# ---------------------------------------------------------------------------------------
# parent: peaks, configurations, table
# ---------------------------------------------------------------------------------------
def configurations(preset: str, sizes: list[str], quick: bool) -> list[dict]:
    out = []
    for size in sizes:
        model = SIZES[size]
        steps = {"small": 45, "base": 15}[size] if not quick else 9
        common = dict(preset=preset, size=size, warmup=WARMUP if not quick else 3,
                      steps=steps)
        hp = dict(model, dropout_rate=0.1, label_smoothing=0.1, pad_multiple=8)
        variants = [("float32", False), ("float32", True), ("mixed_bfloat16", False),
                    ("mixed_bfloat16", True)]
        if size == "base" and not quick:
            variants = [("float32", False), ("mixed_bfloat16", False)]
        for precision, xla in variants:
            out.append(dict(common, side="ours", name=f"ours {precision}"
                            f"{' XLA' if xla else ''}",
                            hparams=dict(hp, precision=precision, jit_compile=xla)))
        kh = dict(hp, tokens_per_batch=model["tokens_per_batch"])
        out.append(dict(common, side="keras-hub", name="keras-hub fit float32", hparams=kh))
    return out


def main() -> None:
    hp, opts = H.parse_args(extra={"sizes": "small,base", "quick": False, "worker": ""})
    if opts["worker"]:
        child(opts["worker"])
        return
    preset = opts["_preset"]
    import tensorflow as tf
    print(f"TensorFlow {tf.__version__}; {os.cpu_count()} CPUs; preset {preset} "
          f"(prepro_dir {hp.prepro_dir})")
    peak = {"float32": matmul_peak("float32"), "mixed_bfloat16": matmul_peak("bfloat16")}
    print(f"matmul peak (2048^3, TensorFlow): float32 {peak['float32']:.0f} GFLOP/s, "
          f"bfloat16 {peak['mixed_bfloat16']:.0f} GFLOP/s")
    rows = []
    for cfg in configurations(preset, opts["sizes"].split(","), opts["quick"]):
        t0 = time.time()
        proc = subprocess.run([sys.executable, os.path.abspath(__file__),
                               "--worker", json.dumps(cfg)], cwd=ROOT, capture_output=True,
                              text=True)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode or not lines:
            print(f"{cfg['name']} ({cfg['size']}) failed:\n{proc.stderr[-2000:]}")
            continue
        res = json.loads(lines[-1][7:])
        res.update(cfg=cfg, wall=time.time() - t0)
        rows.append(res)
        print(f"  done: {cfg['size']} {cfg['name']} in {res['wall']:.0f}s", flush=True)
    print()
    for size in dict.fromkeys(r["cfg"]["size"] for r in rows):
        group = [r for r in rows if r["cfg"]["size"] == size]
        ref = next((r for r in group if r["cfg"]["side"] == "keras-hub"), None)
        ours_params = next((r["params"] for r in group if r["cfg"]["side"] == "ours"), 0)
        m = SIZES[size]
        print(f"## {size}: d_model {m['d_model']}, d_ff {m['d_ff']}, {m['num_blocks']}+"
              f"{m['num_blocks']} layers, {m['num_heads']} heads; our params "
              f"{ours_params:,}")
        print(f"{'configuration':28} {'real tgt tok/s':>14} {'x keras-hub':>11} "
              f"{'6PT GFLOP/s':>11} {'matmul GFLOP/s':>14} {'of peak':>8} {'pad':>6} "
              f"{'traces':>6} {'shapes':>6} {'peak RSS':>9}")
        for r in group:
            precision = r["cfg"]["hparams"].get("precision", "float32")
            p = peak["mixed_bfloat16" if precision == "mixed_bfloat16" else "float32"]
            six = 6 * ours_params * r["tok_s"] / 1e9
            mm = r["matmul_flop_s"] / 1e9
            ratio = r["tok_s"] / ref["tok_s"] if ref else float("nan")
            traces = "-" if r["traces"] is None else str(r["traces"])
            name = r["cfg"]["name"]
            if r["cfg"]["side"] == "keras-hub":
                name += " (XLA)" if r.get("jit_compile") else ""
            print(f"{name:28} {r['tok_s']:14,.0f} {ratio:11.2f} {six:11.1f} {mm:14.1f} "
                  f"{mm / p:8.1%} {r['tgt_padding']:6.1%} {traces:>6} {r['shapes']:6d} "
                  f"{r['rss_mb']:7.0f}MB")
        print()
    print("of peak: matmul GFLOP/s on real tokens / the matmul peak of the same precision; "
          "pad: padded fraction of target positions; traces: tf.function traces of the "
          "train step over all steps; shapes: distinct batch shapes (XLA compiles one "
          "program per shape)")


if __name__ == "__main__":
    H.run_main(main)
