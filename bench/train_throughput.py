"""Training throughput: this project's train step against a keras-hub Transformer of the
same size, and against the machine's measured matmul peak.

    pip install -e ".[bench]"                           # keras-hub, for the reference rows
    python prepro.py --preset multi30k --data_dir data/multi30k
    python bench/train_throughput.py --preset multi30k [--sizes small,base] [--quick]
        [--configs "ours float32,ours weighted float32"]      # a subset of the rows
        [--configs "ours float32,ours shaw float32,ours t5 float32,ours xl float32,..."]
        [--baseline_tree PATH]        # one more row: the project's code at PATH (float32)
    python bench/train_throughput.py --preset multi30k --sizes preset --baseline_tree PATH \
        --precision mixed_bfloat16 --configs "ours mixed_bfloat16,baseline tree mixed_bfloat16"
    python bench/train_throughput.py --preset multi30k --ablate dense2d,xent_grad [--pairs 3]
    python bench/train_throughput.py --preset multi30k --ablate f32_logits \
        --precision mixed_bfloat16 [--paired [--paired_norm pre]]
    python bench/train_throughput.py --preset multi30k --xla_pairs 2 [--precision float32]
    python bench/train_throughput.py --preset multi30k --ablate ema --paired --paired_size preset
    python bench/train_throughput.py --preset multi30k --sizes small \
        --configs "ours float32,ours float32 xla,keras-hub fit float32"

``--ablate`` measures each rewrite of fast_ops.py against the standard op: for every
name, ``--pairs`` interleaved on/off pairs of the small configuration (float32, or the
``--precision`` given) (on off, off on, on off, ...: a drift of the machine's speed
during the run does not favour one side), each child with only that switch changed,
and prints each pair's ratio and the median gain. A switch of fast_ops.PRECISION buys
accuracy, not speed: its verdict is whether its cost stays within the bar.
``--paired`` runs both sides of a switch in one child instead, two trainers stepping
in turn over the same batches (``--paired_steps`` timed steps each, in three windows: the
pairs), which a drifting machine disturbs far less than children one after the other
(``--paired_norm pre``: the small model with pre-norm sublayers, for the rewrites that
only pre-norm models run; ``--paired_size preset``: the preset's own model and settings);
``--ablate a+b`` turns the switches a and b on and off together. ``--ablate ema`` is no
rewrite: its two sides are a trainer with the moving average of the weights
(``--ema_decay``, ema.py) and one without, and its verdict whether the cost stays under
3% of a step.
``--xla_pairs N`` measures XLA (``--jit_compile true``, pad_multiple 8) against none for
our small rows in float32 and mixed_bfloat16 (or the ``--precision`` given): N
interleaved pairs of children each, and prints each pair's ratio and the median; the
table prints "XLA / no XLA" too where it has both rows of a precision. ``--configs``
names rows in any case. ``--baseline_tree`` runs another checkout of the project (for example
``git worktree add /tmp/old HEAD~5``) in the same run, so that a change of code is compared
with its predecessor on the same machine at the same time; in float32, or in the
``--precision`` given. ``--sizes preset`` times the preset's own model (its position
family, norm and head count, which the small and base sizes set to the paper's, the model
keras-hub's row mirrors) and has no keras-hub row.

One script run. Every configuration runs in a fresh child process, one after the other
(so a dtype policy or XLA setting never leaks and each peak RSS is its own). The speed of
this shared machine drifts by tens of percent within minutes, so each child probes the
machine's matmul peak with TensorFlow (best of single 2048^3 and 4096^3 matmuls, float32
and its own precision) before, between and after its three timed windows, and compares
every window with the better of the two probes around it. The parent prints one table
with the ratios.

Both sides train on the same preprocessed data (the preset's BPE ids) and the same model
size (d_model, d_ff, heads, layers, vocabulary), post-norm, with dropout 0.1 on each
sublayer's output and on the attention weights, label smoothing 0.1 (epsilon / V on every
token of the vocabulary, as in 5.4) averaged over the real target tokens (PAD left out),
and the output projection tied to the one token embedding that both languages share
(logits = hidden @ E^T: no bias, no scale on the logits):
* ours: train.Trainer's compiled step (its label-smoothed cross-entropy, optimization.Adam)
  on the token-budget, length-bucketed batch plan (tokens_per_batch, pad_multiple), with
  XLA off/on and float32/mixed_bfloat16, and one float32 row per position family
  (``position`` learned, shaw, t5, xl, alibi, rotary; their tokens/s also as a fraction
  of the sinusoid row's, which each should keep at 0.75 or more; the FLOP columns count
  the paper's matmuls only, not the relative terms);
* keras-hub: keras_hub.layers.TokenAndPositionEmbedding (mask_zero) +
  TransformerEncoder/Decoder, the logits from the embedding's ReversibleEmbedding with
  ``reverse=True``; model.compile(Keras' Adam, keras.losses.CategoricalCrossentropy(
  from_logits=True, label_smoothing=0.1, reduction="mean_with_sample_weight")) over
  one-hot labels with sample weight 0 at PAD (Keras' sparse cross-entropy has no label
  smoothing; the one-hot loss measured faster here than a sparse label-smoothed one
  written with keras.ops) + model.fit, float32 (Keras turns XLA off on a CPU).
  Two rows: "keras-hub fit float32" on shuffled batches of 64 sentence pairs padded to
  the batch's longest sentence (what a keras-hub user writes), and "(our batches)" on our
  own padded batches. The table ends with ours against each: on the same batches, the
  speed of the ops; each with its own batching, what a user gets.
Where the two sides still differ: keras-hub learns its positions and does not scale its
embeddings (ours: the sinusoid of 3.5 and sqrt(d_model), 3.4), has no dropout on the
embedding sums (ours: 0.1, 5.4), computes the logits at every target position, PAD
included (ours: at the real ones only; with XLA at every one, PAD weighted 0), and uses
LayerNorm epsilon 1e-5 (ours: 1e-6).
Throughput counts real target tokens only (labels that are not PAD). GFLOP/s are on
real tokens: 6 * params * tokens (params of our model, embeddings counted once: they are
the output projection) and an explicit matmul count (forward x 3) from the real source
and target lengths of each batch, attention included. Each number is the median of
three timed windows after the warm-up batches.
"""

import json
import os
import resource
import sys
import time

import numpy as np

import common

from transformer_tf2.config import cli, hparams

ROOT = common.ROOT

# the model keras-hub's row mirrors: the paper's sinusoid and post-norm, whatever the preset,
# and dropout 0.1 on the attention weights (keras-hub's dropout drops them too)
MIRRORED = dict(position="sinusoid", norm="post", attention_dropout=0.1)
SIZES = {
    "small": dict(
        d_model=256, d_ff=1024, num_blocks=3, num_heads=4, tokens_per_batch=2048, **MIRRORED
    ),
    "base": dict(
        d_model=512, d_ff=2048, num_blocks=6, num_heads=8, tokens_per_batch=4096, **MIRRORED
    ),
}
WARMUP, WINDOWS = 6, 3
# --ablate ema --paired: a trainer with --ema_decay EMA_DECAY against one without; its
# cost per step should stay under EMA_COST_BAR
EMA_DECAY, EMA_COST_BAR = 0.9999, 0.03
# the position families after the sinusoid ("ours float32"): one float32 row each
FAMILIES = tuple(k for k in hparams.CHOICES["position"] if k != "sinusoid")
FAMILY_BAR = 0.75  # each family's tokens/s should reach this fraction of the sinusoid's


# ---------------------------------------------------------------------------------------
# FLOP counts
# ---------------------------------------------------------------------------------------
def matmul_flops(src_lens, tgt_lens, d, d_ff, n, vocab) -> float:
    """Training FLOPs (forward x 3) of the matmuls for real tokens only: per sentence pair
    of S source and T target positions (</S> and <S> included)."""
    S, T = np.asarray(src_lens, float), np.asarray(tgt_lens, float)
    enc = n * (2 * S * (4 * d * d + 2 * d * d_ff) + 4 * S * S * d)
    dec = n * (
        2 * T * (4 * d * d + 2 * d * d_ff)  # self-attention and FFN
        + 4 * T * T * d  # Q K^T and weights x V
        + 2 * T * 2 * d * d
        + 2 * S * 2 * d * d  # cross: W^Q, W^O; W^K, W^V
        + 4 * T * S * d
    )
    out = 2 * T * d * vocab
    return float(3 * np.sum(enc + dec + out))


def matmul_peak(dtype: str, sizes=(2048, 4096), repeats: int = 3) -> float:
    """The machine's matmul peak as TensorFlow reaches it: the best GFLOP/s of single
    n x n x n matmuls over the sizes and repeats."""
    import tensorflow as tf

    best = 0.0
    for n in sizes:
        a = tf.cast(tf.random.normal((n, n)), dtype)
        b = tf.cast(tf.random.normal((n, n)), dtype)
        mm = tf.function(lambda a, b: tf.reduce_sum(tf.cast(tf.matmul(a, b)[:1], tf.float32)))
        mm(a, b).numpy()
        for _ in range(repeats):
            t0 = time.perf_counter()
            mm(a, b).numpy()
            best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return best


class Peaks:
    """Matmul peaks probed between the timed windows of a child (before the first, between
    each two, after the last): the shared machine's speed drifts by tens of percent within
    minutes, so each window is compared with the better of the two probes around it."""

    def __init__(self, precision: str):
        self.own = "bfloat16" if precision == "mixed_bfloat16" else "float32"
        self.fp32, self.own_peaks, self.train_rss_mb = [], [], 0.0

    def probe(self, enabled: bool = True):
        """Probe the peaks. The probe's own 4096^2 matrices must not count as training
        memory: the peak RSS so far is kept first and the kernel's peak is reset after.
        Not ``enabled`` (an ablation, which compares tokens/s only): record no peak."""
        self.train_rss_mb = max(self.train_rss_mb, peak_rss_mb())
        if not enabled:
            self.fp32.append(float("nan"))
            self.own_peaks.append(float("nan"))
            return
        self.fp32.append(matmul_peak("float32"))
        self.own_peaks.append(self.fp32[-1] if self.own == "float32" else matmul_peak(self.own))
        reset_peak_rss()


def window_bounds(count: int) -> list[int]:
    """Start of each of the WINDOWS windows over ``count`` timed steps, and the end."""
    idx = np.array_split(np.arange(count), WINDOWS)
    return [int(w[0]) for w in idx] + [count]


def per_step(batches, warmup: int, step_times, hp, vocab: int):
    """(times, real target tokens, matmul FLOPs, first time its shape was seen) of each
    timed step, i.e. of the batches after the ``warmup`` ones."""
    times, tokens, flops, first, shapes = [], [], [], [], set()
    for i, (src, dec, lab) in enumerate(batches):
        new = (src.shape, dec.shape) not in shapes
        shapes.add((src.shape, dec.shape))
        if i >= warmup:
            times.append(step_times[i])
            first.append(new)
            tokens.append(float((lab != 0).sum()))
            flops.append(
                matmul_flops(
                    (src != 0).sum(1), (lab != 0).sum(1), hp.d_model, hp.d_ff, hp.num_blocks, vocab
                )
            )
    return times, tokens, flops, first


def timed_result(times, tokens, flops, first_seen, batches, peaks: Peaks) -> dict:
    """What every child reports: throughput and matmul FLOP/s (medians over the windows),
    each window's FLOP/s as a fraction of the better probe around it (median), the tokens/s
    of the steps whose batch shape had been seen before (no tracing or XLA compile),
    padding and peak RSS."""
    bounds = window_bounds(len(times))
    tok_s, flop_s, of_fp32, of_own = [], [], [], []
    for k in range(WINDOWS):
        w = range(bounds[k], bounds[k + 1])
        dt = sum(times[i] for i in w)
        tok_s.append(sum(tokens[i] for i in w) / dt)
        flop_s.append(sum(flops[i] for i in w) / dt)
        of_fp32.append(flop_s[-1] / 1e9 / max(peaks.fp32[k], peaks.fp32[k + 1]))
        of_own.append(flop_s[-1] / 1e9 / max(peaks.own_peaks[k], peaks.own_peaks[k + 1]))
    seen = [i for i in range(len(times)) if not first_seen[i]]
    steady = sum(tokens[i] for i in seen) / sum(times[i] for i in seen) if seen else 0.0
    real = sum(int((lab != 0).sum()) for _, _, lab in batches)
    allpos = sum(lab.size for _, _, lab in batches)
    return {
        "tok_s": common.median(tok_s),
        "matmul_flop_s": common.median(flop_s),
        "of_fp32": common.median(of_fp32),
        "of_own": common.median(of_own),
        "of_fp32_windows": of_fp32,
        "steady_tok_s": float(steady),
        "tgt_padding": 1 - real / allpos,
        "steps": len(batches),
        "shapes": len({(b[0].shape, b[1].shape) for b in batches}),
        "rss_mb": peaks.train_rss_mb,
        "peak": max(peaks.own_peaks),
        "peak_fp32": max(peaks.fp32),
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB: VmHWM (which reset_peak_rss can
    reset) where Linux has it, else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_rss() -> None:
    """Reset VmHWM to the current resident memory (Linux >= 4.0); a no-op elsewhere,
    where the probes' memory then counts too."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def batches_for(hp, data, count):
    """The first ``count`` batches of epoch 0 of the project's plan, as numpy arrays."""
    from transformer_tf2.data import data_load

    plan = data.batches(0)[:count]
    corpus = data.epoch_corpus(0)[0]
    return [data_load.build_batch(corpus, idx, hp.pad_multiple) for idx in plan]


def project_setup_devices():
    """The project's setup_devices, in this tree (devices.py) or an older one (train.py)."""
    try:
        from transformer_tf2.utils import devices

        return devices.setup_devices
    except ImportError:
        import train

        return train.setup_devices


def run_ours(cfg: dict) -> dict:
    """This project's train step; ``cfg['tree']``: the project's code at another path,
    ``cfg['ablate']``: fast_ops switches to turn off."""
    if cfg.get("tree"):
        common.use_tree(cfg["tree"])
    import keras

    import train
    from transformer_tf2.config import hparams
    from transformer_tf2.data import data_load
    from transformer_tf2.kernels import fast_ops

    # (none without --ablate: a --baseline_tree from before fast_ops.Kernels takes none)
    kernels = [fast_ops.Kernels.resolve(cfg["ablate"])] if cfg.get("ablate") else []
    setup_devices = project_setup_devices()
    hp = hparams.apply(hparams.preset(cfg["preset"]), cfg["hparams"])
    tok = data_load.load_tokenizer(hp)
    strategy, precision = setup_devices(hp)
    keras.utils.set_random_seed(hp.seed)
    data = data_load.TrainData(hp)
    trainer = train.Trainer(hp, tok, strategy, precision, *kernels)
    batches = batches_for(hp, data, cfg["warmup"] + cfg["steps"])
    step_times = []
    peaks = Peaks(precision)
    probe_at = {cfg["warmup"] + b for b in window_bounds(cfg["steps"])}
    probe = cfg.get("probe", True)
    for i, (src, dec, lab) in enumerate(batches):
        if i in probe_at:
            peaks.probe(probe)
        t0 = time.perf_counter()
        stats, _ = trainer.train_batch(src, dec, lab)  # numbers: waits for the step
        step_times.append(time.perf_counter() - t0)
    peaks.probe(probe)
    times, tokens, flops, first = per_step(
        batches, cfg["warmup"], step_times, hp, trainer.model.tgt_embedding.vocab_size
    )
    traces = trainer._step.experimental_get_tracing_count()
    if hasattr(trainer._compiled, "experimental_get_tracing_count"):
        traces += trainer._compiled.experimental_get_tracing_count()
    return {
        **timed_result(times, tokens, flops, first, batches, peaks),
        "params": trainer.model.count_params(),
        "traces": traces,
        "loss": float(stats[0] / stats[2]),
    }


def keras_hub_model(vocab, d, d_ff, n, h, max_len, dropout):
    """The encoder-decoder of the keras-hub translation example, at our size and tied as
    ours is (3.4): one token embedding for both languages (a joint vocabulary), whose
    matrix is also the output projection (its ReversibleEmbedding called with
    ``reverse=True``: logits = hidden @ E^T, no bias, no scale, no Keras mask).
    Inputs src (N, S) and tgt (N, T) int32 ids, PAD 0 -> logits (N, T, vocab)."""
    import keras
    import keras_hub

    src = keras.Input((None,), dtype="int32", name="src")
    tgt = keras.Input((None,), dtype="int32", name="tgt")
    embedding = keras_hub.layers.TokenAndPositionEmbedding(vocab, max_len, d, mask_zero=True)
    x = embedding(src)
    for _ in range(n):
        x = keras_hub.layers.TransformerEncoder(d_ff, h, dropout=dropout)(x)
    y = embedding(tgt)
    for _ in range(n):
        y = keras_hub.layers.TransformerDecoder(d_ff, h, dropout=dropout)(y, x)
    logits = embedding.token_embedding(y, reverse=True)
    return keras.Model([src, tgt], logits)


def keras_hub_compiled(hp, vocab: int):
    """:func:`keras_hub_model` at ``hp``'s size, compiled as a Keras user does: Adam with
    the paper's betas (5.3) and Keras' label-smoothed cross-entropy (5.4: epsilon
    ``hp.label_smoothing`` spread uniformly over the vocabulary, as ours), averaged over
    the real target tokens (the PAD positions weigh 0: :func:`keras_hub_dataset`).
    Keras' sparse cross-entropy has no label smoothing, hence one-hot labels."""
    import keras

    model = keras_hub_model(
        vocab, hp.d_model, hp.d_ff, hp.num_blocks, hp.num_heads, hp.maxlen1 + 2, hp.dropout_rate
    )
    loss = keras.losses.CategoricalCrossentropy(
        from_logits=True,
        label_smoothing=hp.label_smoothing,
        reduction="mean_with_sample_weight",  # sum over the real tokens / their count
    )
    model.compile(keras.optimizers.Adam(3e-4, beta_2=0.98, epsilon=1e-9), loss)
    return model


def keras_hub_dataset(batches, vocab: int):
    """tf.data.Dataset of ((source, decoder input), one-hot labels (N, T, vocab), sample
    weights (N, T): 1 at the real target tokens, 0 at PAD) for model.fit, from the
    (source, decoder input, labels) numpy batches."""
    import tensorflow as tf

    spec = tf.TensorSpec([None, None], tf.int32)

    def gen():
        for src, dec, lab in batches:
            yield (src, dec), lab

    def labelled(inputs, lab):
        return inputs, tf.one_hot(lab, vocab), tf.cast(tf.not_equal(lab, 0), tf.float32)

    ds = tf.data.Dataset.from_generator(gen, output_signature=((spec, spec), spec))
    return ds.map(labelled).prefetch(2)


def user_batches(data, count: int, size: int = 64, seed: int = 0):
    """What a keras-hub user writes: ``count`` batches of ``size`` shuffled sentence pairs
    each padded to its longest sentence (source, decoder input, labels numpy arrays)."""
    from transformer_tf2.data import data_load

    order = np.random.default_rng(seed).permutation(data.keep)
    return [
        data_load.build_batch(data.corpus, order[i * size : (i + 1) * size]) for i in range(count)
    ]


def run_keras_hub(cfg: dict) -> dict:
    """keras-hub's row: model.fit of :func:`keras_hub_compiled` over our padded batches
    (``cfg['our_batches']``) or a keras-hub user's (:func:`user_batches`), each step timed
    from the end of the one before (data and callbacks included)."""
    import keras

    from transformer_tf2.data import data_load

    hp = hparams.apply(hparams.preset(cfg["preset"]), cfg["hparams"])
    tok = data_load.load_tokenizer(hp)
    keras.utils.set_random_seed(hp.seed)
    data = data_load.TrainData(hp)
    count = cfg["warmup"] + cfg["steps"]
    if cfg.get("our_batches"):  # the same padded batches as ours: per-op speed
        batches = batches_for(hp, data, count)
    else:
        batches = user_batches(data, count, seed=hp.seed)
    vocab = tok.tgt_vocab_size
    model = keras_hub_compiled(hp, vocab)
    step_times, last = [], []
    peaks = Peaks("float32")
    probe_after = {cfg["warmup"] + b - 1 for b in window_bounds(cfg["steps"])}
    probe = cfg.get("probe", True)

    class Clock(keras.callbacks.Callback):
        """Each step's time from the end of the one before (data, callbacks and all);
        a peak probe at a window boundary restarts the clock."""

        def on_train_batch_begin(self, batch, logs=None):
            if not last:
                last.append(time.perf_counter())

        def on_train_batch_end(self, batch, logs=None):
            float(logs["loss"])  # wait for the step
            now = time.perf_counter()
            step_times.append(now - last[-1])
            last.append(now)
            if batch in probe_after:
                peaks.probe(probe)
                last.append(time.perf_counter())

    hist = model.fit(keras_hub_dataset(batches, vocab), epochs=1, verbose=0, callbacks=[Clock()])
    times, tokens, flops, first = per_step(batches, cfg["warmup"], step_times, hp, vocab)
    return {
        **timed_result(times, tokens, flops, first, batches, peaks),
        "params": model.count_params(),
        "traces": None,
        "loss": float(hist.history["loss"][-1]),
        "jit_compile": bool(model.jit_compile),
    }


def run_paired(cfg: dict) -> dict:
    """``--paired``: two trainers of one configuration in one process, the fast_ops switch
    ``cfg['rewrite']`` on in one and off in the other, taking turns over the same batches
    (on off, off on, ...), so that a drift of the machine's speed hits both sides alike.
    Per window of the timed steps (steps whose batch shape is new, i.e. traced, left
    out): the real target tokens/s of each side."""
    import keras

    import train
    from transformer_tf2.config import hparams
    from transformer_tf2.data import data_load
    from transformer_tf2.kernels import fast_ops

    hp = hparams.apply(hparams.preset(cfg["preset"]), cfg["hparams"])
    tok = data_load.load_tokenizer(hp)
    strategy, precision = project_setup_devices()(hp)
    data = data_load.TrainData(hp)
    trainers, switches = {}, [n for n in cfg["rewrite"].split("+") if n in fast_ops.SWITCHES]
    for on in (True, False):
        keras.utils.set_random_seed(hp.seed)
        side = hp
        if "ema" in cfg["rewrite"].split("+"):  # not a rewrite: the moving average's cost
            side = hparams.apply(hp, {"ema_decay": EMA_DECAY if on else 0.0})
        kernels = fast_ops.Kernels.resolve(() if on else switches)  # a+b: both off
        trainers[on] = train.Trainer(side, tok, strategy, precision, kernels)
    batches = batches_for(hp, data, cfg["warmup"] + cfg["steps"])
    step_times = {True: [], False: []}
    for i, batch in enumerate(batches):
        for on in (True, False) if i % 2 == 0 else (False, True):
            t0 = time.perf_counter()
            trainers[on].train_batch(*batch)  # numbers: waits for the step
            step_times[on].append(time.perf_counter() - t0)
    vocab = trainers[True].model.tgt_embedding.vocab_size
    sides = {
        on: per_step(batches, cfg["warmup"], step_times[on], hp, vocab) for on in (True, False)
    }
    bounds = window_bounds(cfg["steps"])
    windows = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        speed = []
        for on in (True, False):
            times, tokens, _, first = sides[on]
            kept = [j for j in range(a, b) if not first[j]]
            speed.append(sum(tokens[j] for j in kept) / sum(times[j] for j in kept))
        windows.append(speed)
    return {"windows": windows}


def child(cfg_json: str) -> None:
    cfg = json.loads(cfg_json)
    if cfg["side"] == "paired":
        out = run_paired(cfg)
    else:
        out = run_keras_hub(cfg) if cfg["side"] == "keras-hub" else run_ours(cfg)
    common.emit(out)


# ---------------------------------------------------------------------------------------
# parent: peaks, configurations, table
# ---------------------------------------------------------------------------------------
def ablation_configurations(
    preset: str, names: list[str], pairs: int, precision: str = "float32"
) -> list[dict]:
    """For each rewrite: ``pairs`` interleaved (on, off) runs of the small row."""
    model = SIZES["small"]
    hp = dict(model, dropout_rate=0.1, label_smoothing=0.1, precision=precision)
    common = dict(
        preset=preset, size="small", warmup=WARMUP, steps=30, side="ours", probe=False, hparams=hp
    )
    out = []
    for name in names:
        for k in range(pairs):
            pair = [
                dict(common, name=f"{name} on #{k + 1}", ablate=[], rewrite=name),
                dict(common, name=f"{name} off #{k + 1}", ablate=[name], rewrite=name),
            ]
            out += pair if k % 2 == 0 else pair[::-1]  # on off, off on, ...: drift cancels
    return out


def paired_configurations(
    preset: str,
    names: list[str],
    steps: int,
    precision: str = "float32",
    norm: str = "post",
    size: str = "small",
) -> list[dict]:
    """``--paired``: one child per rewrite, both sides in it (:func:`run_paired`), on the
    small model with ``norm`` (``--paired_norm pre``: the rewrites of pre-norm models), or
    with ``size`` "preset" (``--paired_size preset``) on the preset's own model and
    settings."""
    hp = dict(SIZES["small"], dropout_rate=0.1, label_smoothing=0.1, precision=precision)
    hp["norm"] = norm
    if size == "preset":
        hp = dict(size_model(preset, size), precision=precision)
    return [
        dict(
            preset=preset,
            size=size,
            warmup=WARMUP,
            steps=steps,
            side="paired",
            probe=False,
            hparams=hp,
            name=f"{name} paired",
            rewrite=name,
        )
        for name in names
    ]


def paired_rows(result: dict) -> list[dict]:
    """A paired child's windows as the on/off rows that :func:`print_ablation` reads."""
    name, rows = result["cfg"]["rewrite"], []
    for on, off in result["windows"]:
        rows.append(dict(cfg=dict(rewrite=name, ablate=[]), tok_s=on))
        rows.append(dict(cfg=dict(rewrite=name, ablate=[name]), tok_s=off))
    return rows


def keep_rewrite(gains: list[float], bar: float = 0.05) -> bool:
    """A rewrite stays if its median gain (on / off - 1) is at least ``bar`` and every
    pair favours it."""
    return bool(gains) and common.median(gains) >= bar and min(gains) > 0


def print_ablation(rows: list[dict]) -> None:
    """Per rewrite: each pair's tokens/s on and off, its gain, and the median gain."""
    from transformer_tf2.kernels import fast_ops

    print(f"{'rewrite':18} {'pair':>4} {'on tok/s':>9} {'off tok/s':>9} {'gain':>7}")
    for name in dict.fromkeys(r["cfg"]["rewrite"] for r in rows):
        on = [r["tok_s"] for r in rows if r["cfg"]["rewrite"] == name and not r["cfg"]["ablate"]]
        off = [r["tok_s"] for r in rows if r["cfg"]["rewrite"] == name and r["cfg"]["ablate"]]
        gains = [a / b - 1 for a, b in zip(on, off)]
        for k, (a, b, g) in enumerate(zip(on, off, gains)):
            print(f"{name:18} {k + 1:4d} {a:9,.0f} {b:9,.0f} {g:+7.1%}")
        median = common.median(gains)
        if name == "ema":  # the moving average of the weights: a cost, not a rewrite
            verdict = "within" if median >= -EMA_COST_BAR else "over"
            rule = f"its cost {max(-median, 0):.1%} against the bar of {EMA_COST_BAR:.0%}"
        elif all(part in fast_ops.PRECISION for part in name.split("+")):
            bar = fast_ops.PRECISION_COST_BAR
            verdict = "within" if median >= -bar else "over"
            rule = f"its cost {max(-median, 0):.1%} against the bar of {bar:.0%}"
        else:
            verdict = "keep" if keep_rewrite(gains) else "remove"
            rule = "kept if the median gain is >= 5% and every pair favours it"
        print(f"{name:18} {'med':>4} {'':9} {'':9} {median:+7.1%}  -> {verdict} ({rule})")


def family_ratios(group: list[dict]) -> list[tuple[str, float, float]]:
    """(family, tokens/s, ratio to the sinusoid row 'ours float32') of each position
    family row of one size's results."""
    base = next((r for r in group if r["cfg"]["name"] == "ours float32"), None)
    return [
        (r["cfg"]["family"], r["tok_s"], r["tok_s"] / base["tok_s"] if base else float("nan"))
        for r in group
        if r["cfg"].get("family")
    ]


def print_families(group: list[dict]) -> None:
    rows = family_ratios(group)
    if not rows:
        return
    print(f"{'position':10} {'tgt tok/s':>9} {'x sinusoid':>10}")
    for kind, tok_s, ratio in rows:
        verdict = "" if ratio >= FAMILY_BAR else f"  below {FAMILY_BAR}"
        print(f"{kind:10} {tok_s:9,.0f} {ratio:10.2f}{verdict}")
    print()


def size_model(preset: str, size: str) -> dict:
    """The model settings of a size: SIZES, or "preset": the preset's own model."""
    if size != "preset":
        return SIZES[size]
    values = hparams.preset(preset)
    return {k: getattr(values, k) for k in SIZES["small"]}  # the settings a size sets


def configurations(
    preset: str, sizes: list[str], quick: bool, tree: str = "", tree_precision: str = "float32"
) -> list[dict]:
    out = []
    for size in sizes:
        model = size_model(preset, size)
        steps = {"small": 45, "base": 15, "preset": 45}[size] if not quick else 9
        common = dict(preset=preset, size=size, warmup=WARMUP if not quick else 3, steps=steps)
        hp = dict(model, dropout_rate=0.1, label_smoothing=0.1)
        variants = [
            ("float32", False),
            ("float32", True),
            ("mixed_bfloat16", False),
            ("mixed_bfloat16", True),
        ]
        if size == "base" and not quick:
            variants = [("float32", False), ("mixed_bfloat16", False)]
        for precision, xla in variants:
            out.append(
                dict(
                    common,
                    side="ours",
                    name=f"ours {precision}{' XLA' if xla else ''}",
                    hparams=dict(
                        hp,
                        precision=precision,
                        jit_compile=xla,
                        # XLA: static shapes, one per width of 8
                        pad_multiple=8 if xla else 1,
                    ),
                )
            )
        out.append(
            dict(
                common,
                side="ours",
                name="ours weighted float32",
                hparams=dict(hp, precision="float32", model_type="weighted"),
            )
        )
        for kind in FAMILIES:
            out.append(
                dict(
                    common,
                    side="ours",
                    name=f"ours {kind} float32",
                    family=kind,
                    hparams=dict(hp, precision="float32", position=kind),
                )
            )
        if tree:
            out.append(
                dict(
                    common,
                    side="ours",
                    name=f"baseline tree {tree_precision}",
                    tree=tree,
                    hparams=dict(hp, precision=tree_precision),
                )
            )
        if size == "preset":  # keras-hub's row mirrors the paper's model only
            continue
        kh = dict(hp, tokens_per_batch=model["tokens_per_batch"], precision="float32")
        out.append(dict(common, side="keras-hub", name="keras-hub fit float32", hparams=kh))
        out.append(dict(common, side="keras-hub", name=SAME_BATCHES, hparams=kh, our_batches=True))
    return out


SAME_BATCHES = "keras-hub fit float32 (our batches)"


def print_two_ratios(group: list[dict]) -> None:
    """Ours (float32, no XLA) against keras-hub's model.fit: on the same padded batches
    (ours; the speed of the ops alone) and each with its own batching (ours: the
    length-bucketed token budget; keras-hub: :func:`user_batches`; what a user gets),
    with each side's padded share of the target positions."""
    by_name = {r["cfg"]["name"]: r for r in group}
    ours = by_name.get("ours float32")
    if ours is None:
        return
    budget = ours["cfg"].get("hparams", {}).get("tokens_per_batch", 0)
    mine = f"ours: length-bucketed, <= {budget} tokens a batch, pad {ours['tgt_padding']:.1%}"
    for name, what in (
        (SAME_BATCHES, "the same padded batches ({mine}; the ops' speed)"),
        (
            "keras-hub fit float32",
            "each with its own batching ({mine}; keras-hub: 64 shuffled pairs a batch, "
            "padded to the longest, pad {theirs:.1%}; what a user gets)",
        ),
    ):
        if name in by_name:
            ref = by_name[name]
            ratio = ours["tok_s"] / ref["tok_s"]
            label = what.format(mine=mine, theirs=ref["tgt_padding"])
            print(f"ours float32 / keras-hub fit float32, {label}: {ratio:.2f}x")
    print()


def xla_configurations(preset: str, pairs: int, quick: bool, precisions: list[str]) -> list[dict]:
    """``--xla_pairs``: per precision, ``pairs`` interleaved (no XLA, XLA) runs of the
    small rows "ours <precision>" and "ours <precision> XLA" (off on, on off, ...: a drift
    of the machine's speed does not favour one side)."""
    rows = {c["name"]: c for c in configurations(preset, ["small"], quick)}
    out = []
    for precision in precisions:
        off, on = rows[f"ours {precision}"], rows[f"ours {precision} XLA"]
        for k in range(pairs):
            pair = [
                dict(cfg, name=f"{cfg['name']} #{k + 1}", xla_pair=[precision, k])
                for cfg in (off, on)
            ]
            out += pair if k % 2 == 0 else pair[::-1]
    return out


def xla_ratio_lines(rows: list[dict]) -> list[str]:
    """For the rows of :func:`xla_configurations`: per precision and pair, tokens/s
    without and with XLA and their ratio (also of the steady tokens/s: the steps whose
    batch shape was traced and compiled before), then the median ratio. A pair with a
    failed side is left out."""
    sides = {}
    for r in rows:
        precision, k = r["cfg"]["xla_pair"]
        sides.setdefault(precision, {}).setdefault(k, {})[r["cfg"]["hparams"]["jit_compile"]] = r
    lines = [f"{'ours':16} {'pair':>4} {'tok/s':>7} {'XLA tok/s':>9} {'XLA/no':>6} {'steady':>6}"]
    for precision, pairs in sides.items():
        ratios = []
        for k, pair in sorted(pairs.items()):
            if len(pair) < 2:
                continue
            off, on = pair[False], pair[True]
            ratios.append(on["tok_s"] / off["tok_s"])
            steady = on["steady_tok_s"] / off["steady_tok_s"] if off["steady_tok_s"] else 0.0
            lines.append(
                f"{precision:16} {k + 1:4d} {off['tok_s']:7,.0f} {on['tok_s']:9,.0f} "
                f"{ratios[-1]:6.2f} {steady:6.2f}"
            )
        if ratios:
            lines.append(f"{precision:16} {'med':>4} {'':7} {'':9} {common.median(ratios):6.2f}")
    return lines


def print_xla_ratios(group: list[dict]) -> None:
    """Ours with XLA against ours without, per precision, where the table has both rows."""
    by_name, shown = {r["cfg"]["name"]: r for r in group}, False
    for precision in hparams.CHOICES["precision"]:
        off, on = by_name.get(f"ours {precision}"), by_name.get(f"ours {precision} XLA")
        if off and on:
            print(f"ours {precision}: XLA / no XLA: {on['tok_s'] / off['tok_s']:.2f}x")
            shown = True
    if shown:
        print()


LEGEND = (
    "tgt tok/s: real (non-PAD) target tokens per second, median of 3 windows; steady: "
    "over the steps whose batch shape was seen before (no trace, no XLA compile); "
    "ratio: to keras-hub (or to the first row); 6PT: 6 x params x tokens/s; mm: "
    "matmul FLOPs of the real tokens per second; fp32 pk / own pk: the best float32 / "
    "own-precision matmul GFLOP/s probed in the same child process before, between "
    "and after its timed windows; of fp32 / of own: median over the windows of the "
    "window's mm GFLOP/s over the better of the two probes around it; pad: padded "
    "fraction of target positions; traces: tf.function traces of the train step; "
    "shapes: distinct batch shapes (XLA compiles one program per shape); RSS: peak "
    "resident memory of the child process while it trains (the peak probes' "
    "matrices excluded)"
)
NAME_WIDTH = 36  # "keras-hub fit float32 (our batches)" and more


def chosen_configurations(hp, opts: dict) -> list[dict]:
    """The children to run: the ablation pairs (``--ablate``, ``--paired``), the XLA pairs
    (``--xla_pairs``) or the table's rows (``--sizes``), those named in ``--configs`` (in
    any case) only, each reading ``hp``'s prepro_dir."""
    preset = opts["_preset"]
    ablate = [x.strip() for x in opts["ablate"].split(",") if x.strip()]
    precision = hp.precision if "precision" in opts["_set"] else "float32"
    if ablate and opts["paired"]:
        configs = paired_configurations(
            preset,
            ablate,
            opts["paired_steps"],
            precision,
            opts["paired_norm"],
            opts["paired_size"],
        )
    elif ablate:
        configs = ablation_configurations(preset, ablate, opts["pairs"], precision)
    elif opts["xla_pairs"]:
        chosen = [precision] if "precision" in opts["_set"] else ["float32", "mixed_bfloat16"]
        configs = xla_configurations(preset, opts["xla_pairs"], opts["quick"], chosen)
    else:
        configs = configurations(
            preset, opts["sizes"].split(","), opts["quick"], opts["baseline_tree"], precision
        )
    wanted = [x.strip().lower() for x in opts["configs"].split(",") if x.strip()]
    return [
        dict(cfg, hparams=dict(cfg["hparams"], prepro_dir=hp.prepro_dir))
        for cfg in configs
        if not wanted or cfg["name"].lower() in wanted
    ]


def run_children(configs: list[dict]) -> list[dict]:
    """Each configuration in a fresh child process, one after the other: their results
    (a paired child's as its on/off rows), with ``cfg`` and ``wall``; a failed child
    prints its stderr's tail and gives no row."""
    rows = []
    for cfg in configs:
        t0 = time.time()
        command = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg)]
        res = common.run_child(command, f"{cfg['name']} ({cfg['size']})", check=False)
        if res is None:
            continue
        res.update(cfg=cfg, wall=time.time() - t0)
        if cfg["side"] == "paired":
            rows += paired_rows(res)
            print(f"  done: {cfg['name']} in {res['wall']:.0f}s", flush=True)
            continue
        rows.append(res)
        print(
            f"  done: {cfg['size']} {cfg['name']} in {res['wall']:.0f}s: {res['tok_s']:,.0f} tok/s",
            flush=True,
        )
    return rows


def print_size_table(preset: str, size: str, group: list[dict]) -> None:
    """One size's rows, then its ratios: ours to keras-hub, XLA to none, the families."""
    ref = next((r for r in group if r["cfg"]["side"] == "keras-hub"), None)
    ours_params = next((r["params"] for r in group if r["cfg"]["side"] == "ours"), 0)
    base_row = group[0] if ref is None else None  # no keras-hub row: ratios to the first
    m = size_model(preset, size)
    print(
        f"## {size}: d_model {m['d_model']}, d_ff {m['d_ff']}, {m['num_blocks']}+"
        f"{m['num_blocks']} layers, {m['num_heads']} heads, {m['position']}, "
        f"{m['norm']}-norm; our params {ours_params:,}"
    )
    print(
        f"{'configuration':{NAME_WIDTH}} {'tgt tok/s':>9} {'steady':>7} {'ratio':>6} "
        f"{'6PT GF/s':>8} {'mm GF/s':>8} {'fp32 pk':>8} {'of fp32':>7} {'own pk':>7} "
        f"{'of own':>6} {'pad':>6} {'traces':>6} {'shapes':>6} {'RSS':>7}"
    )
    for r in group:
        six = 6 * ours_params * r["tok_s"] / 1e9
        mm = r["matmul_flop_s"] / 1e9
        ratio = r["tok_s"] / ref["tok_s"] if ref else float("nan")
        if ref is None and base_row and r is not base_row:
            ratio = r["tok_s"] / base_row["tok_s"]
        traces = "-" if r["traces"] is None else str(r["traces"])
        name = r["cfg"]["name"]
        if r["cfg"]["side"] == "keras-hub":
            name += " (XLA)" if r.get("jit_compile") else ""
        steady = f"{r['steady_tok_s']:7,.0f}" if r["steady_tok_s"] else "      -"
        print(
            f"{name:{NAME_WIDTH}} {r['tok_s']:9,.0f} {steady} {ratio:6.2f} "
            f"{six:8.1f} {mm:8.1f} {r['peak_fp32']:8.0f} {r['of_fp32']:7.1%} "
            f"{r['peak']:7.0f} {r['of_own']:6.1%} {r['tgt_padding']:6.1%} "
            f"{traces:>6} {r['shapes']:6d} {r['rss_mb']:5.0f}MB"
        )
    print()
    print_two_ratios(group)
    print_xla_ratios(group)
    print_families(group)


# the script's own options (with their defaults); the hyperparameters follow them
OPTIONS = {
    "sizes": "small,base",
    "quick": False,
    "worker": "",
    "configs": "",
    "baseline_tree": "",
    "ablate": "",
    "pairs": 3,
    "paired": False,
    "paired_steps": 90,
    "paired_norm": "post",
    "paired_size": "small",
    "xla_pairs": 0,
}


def parser(preset: str = "demo"):
    """The command line's parser (``--help``), built without TensorFlow."""
    return common.hparams_parser(OPTIONS, preset)


def main() -> None:
    hp, opts = cli.parse_args(extra=OPTIONS)
    if opts["worker"]:
        child(opts["worker"])
        return
    preset = opts["_preset"]
    import tensorflow as tf

    print(
        f"TensorFlow {tf.__version__}; {os.cpu_count()} CPUs; preset {preset} "
        f"(prepro_dir {hp.prepro_dir})"
    )
    print(
        f"matmul peak (TensorFlow, best of 2048^3 and 4096^3) before the runs: float32 "
        f"{matmul_peak('float32'):.0f} GFLOP/s, bfloat16 {matmul_peak('bfloat16'):.0f}"
    )
    rows = run_children(chosen_configurations(hp, opts))
    print()
    if any(x.strip() for x in opts["ablate"].split(",")):
        print_ablation(rows)
    elif opts["xla_pairs"]:
        print("\n".join(xla_ratio_lines(rows)))
    else:
        for size in dict.fromkeys(r["cfg"]["size"] for r in rows):
            print_size_table(preset, size, [r for r in rows if r["cfg"]["size"] == size])
        print(LEGEND)


if __name__ == "__main__":
    cli.run_main(main)
