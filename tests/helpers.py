"""Plain helpers shared by the test files (the fixtures are in conftest.py)."""

import io
import json
import os
import socket
import subprocess
import sys
import tarfile

import keras
import numpy as np
import tensorflow as tf

import translate
from transformer_tf2 import api
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import beam_search, greedy_search
from transformer_tf2.models.model import Transformer
from transformer_tf2.utils import devices

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    """A port of 127.0.0.1 that no process listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny(tmp, **kw):
    """Hparams of a tiny run on a 300-pair demo corpus inside the folder tmp."""
    values = dict(
        corpus="demo",
        demo_size=300,
        data_dir=f"{tmp}/data",
        prepro_dir=f"{tmp}/prepro",
        logdir=f"{tmp}/log",
        evaldir=f"{tmp}/eval",
        results_dir=f"{tmp}/results",
        vocab_size=200,
        # the paper's positions and dropout (5.4), which the tests were written against
        # (the defaults are the demo's: xl, no dropout)
        position="sinusoid",
        dropout_rate=0.1,
        d_model=32,
        d_ff=64,
        num_blocks=1,
        num_heads=2,
        tokens_per_batch=600,
        num_epochs=3,
        dev_bleu_sents=8,
        warmup_steps=20,
        lr_schedule="kyubyong",
        lr=0.003,
        eval_batch_size=64,
        max_len_extra=10,
        precision="float32",  # auto would train in bfloat16 on a CPU that has it
        average=0,
        # the attention figures (matplotlib, about a second per dev evaluation) are
        # drawn only by the runs of the tests that read them
        attention_layers="none",
    )
    values.update(kw)
    return hparams.apply(hparams.Hparams(), values)


def tiny_model(src_vocab=23, tgt_vocab=23, seed=0, **kw):
    """A small built Transformer with random weights (dropout is off at inference)."""
    keras.utils.set_random_seed(seed)
    args = dict(
        d_model=32,
        d_ff=64,
        num_blocks=2,
        num_heads=4,
        share_embeddings=src_vocab == tgt_vocab,
        # the paper's positions and dropout, as in tiny() (the defaults are the demo's)
        position="sinusoid",
        dropout_rate=0.1,
    )
    args.update(kw)
    model = Transformer(src_vocab, tgt_vocab, **args)
    model.build_all()
    return model


# small relative-position settings, so that short test sentences pass the clipping distance
SMALL = dict(max_relative_position=2, t5_buckets=8, t5_max_distance=6)


def relative_model(kind, seed=0, **kw):
    """tiny_model with ``kind`` positions, the stacks' shared weights (zero at first: t5's
    table, xl's u and v) made random so that their terms count."""
    m = tiny_model(position=kind, seed=seed, **SMALL, **kw)
    rng = np.random.default_rng(seed)
    for w in m.src_relative.weights + m.tgt_relative.weights:
        w.assign(rng.normal(size=w.shape).astype(np.float32))
    return m


def rand_ids(rng, shape, vocab, low=4):
    """Random real tokens (no PAD/BOS/EOS/UNK)."""
    return rng.integers(low, vocab, size=shape).astype(np.int32)


def analytic_count(
    src_vocab,
    tgt_vocab,
    d,
    d_ff,
    n,
    share=True,
    position="sinusoid",
    max_position=1024,
    norm="post",
):
    """The parameter count of the paper's Transformer, by hand."""
    ln = 2 * d  # gamma and beta
    ffn = d * d_ff + d_ff + d_ff * d + d  # two Dense layers with biases
    enc_layer = 4 * d * d + ffn + 2 * ln  # W^Q, W^K, W^V, W^O; no biases
    dec_layer = 8 * d * d + ffn + 3 * ln  # self + cross attention

    def rows(v):  # rounded up to a multiple of 8
        return -(-v // 8) * 8

    emb = rows(tgt_vocab) * d if share else (rows(src_vocab) + rows(tgt_vocab)) * d
    pos = 2 * max_position * d if position == "learned" else 0  # src and tgt tables
    final = 2 * ln if norm == "pre" else 0
    return emb + pos + n * (enc_layer + dec_layer) + final


def check_cached_equals_full(model, src, tgt):
    """decode_step with the cache gives the logits of the full teacher-forced pass."""
    full = model((src, tgt)).numpy()
    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask)
    for t in range(tgt.shape[1]):
        logits, cache = model.decode_step(tf.constant(tgt[:, t]), cache)
        assert logits.shape == full[:, t].shape and logits.dtype == tf.float32
        np.testing.assert_allclose(logits.numpy(), full[:, t], atol=1e-5, err_msg=f"position {t}")
    assert int(cache["step"]) == tgt.shape[1]


def results_hypotheses(path: str) -> list[str]:
    """The "- got: " lines of an eval.py results file (eval.write_results), in order."""
    with open(path, encoding="utf-8") as f:
        return [line[len("- got: ") :].rstrip("\n") for line in f if line.startswith("- got: ")]


def run_json_script(code: str, *args: str) -> dict:
    """Run ``python -c code args`` from the repository root (a fresh process, e.g. for
    logical devices); the JSON object its last stdout line prints."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_greedy_and_beam(model, src, extra: int = 4, k: int = 3):
    """On the cache: greedy decoding equals the naive full-pass decoder (to each row's
    first </S>), and every hypothesis of a k-beam, re-scored token by token by the full
    teacher-forced pass, has the beam's score (sum of log-probabilities over the length
    penalty of its length). (Beam search with k = 1 is greedy: test_decoding, on the
    loop that every layer's cache shares.)"""
    src, extra_t = tf.constant(src), tf.constant(extra, tf.int32)
    greedy = greedy_search.greedy_decoder(model)(src, extra_t).numpy()
    naive = greedy_search.naive_greedy(model, src, greedy.shape[1])
    eos = data_load.EOS_ID
    for row, ref in zip(greedy, naive):
        n = next((i + 1 for i, t in enumerate(row) if t == eos), len(row))
        np.testing.assert_array_equal(row[:n], ref[:n])
    ids, scores = (x.numpy() for x in beam_search.beam_decoder(model, k, n_best=k)(src, extra_t))
    check_beam_scores(model, src, ids, scores, (src.numpy() != 0).sum(1) + extra)


def check_beam_scores(model, src, ids, scores, limits, context=None, target_context=None):
    """Every hypothesis ids[i][j] of every sentence i of src (N, T1), re-scored token by
    token by the full teacher-forced pass (with ``context`` (N, K, T_c), if given, and
    ``target_context`` (N, K_t, T_t), as training reads them), has the beam's score
    scores[i][j]: the sum of log-probabilities over the length penalty of its length (cut
    at limits[i] tokens)."""
    eos = data_load.EOS_ID
    # every hypothesis of every sentence in one teacher-forced pass: row (i, j) is
    # hypothesis j of sentence i after BOS, PADs after its </S> (the causal mask keeps
    # them out of the positions scored)
    hyps, rows, want = [], [], []
    for i in range(src.shape[0]):
        for hyp_ids, score in zip(ids[i], scores[i]):
            hyp = list(hyp_ids[: min(len(hyp_ids), limits[i])])
            hyps.append(hyp[: hyp.index(eos) + 1] if eos in hyp else hyp)
            rows.append(i)
            want.append(score)
    dec = np.zeros((len(hyps), max(map(len, hyps))), np.int32)
    for r, hyp in enumerate(hyps):
        dec[r, : len(hyp)] = [data_load.BOS_ID] + hyp[:-1]
    inputs = (tf.gather(src, rows), tf.constant(dec))
    if context is not None:
        inputs += (tf.gather(context, rows),)
    if target_context is not None:
        inputs += (tf.gather(target_context, rows),)
    logp = tf.nn.log_softmax(model(inputs)).numpy()
    for r, (hyp, score) in enumerate(zip(hyps, want)):
        total = logp[r, np.arange(len(hyp)), hyp].sum()
        penalty = ((5.0 + len(hyp)) / 6.0) ** 0.6
        np.testing.assert_allclose(score, total / penalty, atol=1e-4, err_msg=str(hyp))


def step_ops(trainer, batch) -> set[str]:
    """The op types of the trainer's compiled step on ``batch``, its inner functions'
    (XLA's, the replicas') included."""
    args = devices.deal_rows(trainer.strategy, *batch)
    graph_def = trainer._step.get_concrete_function(*args, tf.constant(0.0)).graph.as_graph_def()
    return {node.op for node in graph_nodes(graph_def)}


def graph_nodes(graph_def) -> list:
    """Every node of a traced graph: its own and its functions' (loop bodies, branches)."""
    return [*graph_def.node, *(node for f in graph_def.library.function for node in f.node_def)]


def tgz_bytes(members) -> bytes:
    """A gzipped tarball of (name, bytes) members (mode 0644), as the IWSLT releases are."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def translate_lines(model, tok, hp, lines, **options) -> list[str]:
    """translate.py's output lines for ``lines``, decoded by ``model`` with the settings
    ``hp`` through the Python API (a new api.Translator)."""
    return translate.translate_lines(api.Translator(hp, tok, model), lines, **options)
