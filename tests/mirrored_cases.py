"""Training steps under MirroredStrategy on 2 logical CPU devices, in a fresh process (the
logical devices must be set before TensorFlow starts), for test_train_eval and
test_weighted: one process and one strategy for all the cases (two strategies in one
process mix up their collectives). conftest's ``mirrored`` fixture runs :func:`main` from
the repository root with the hparams as a JSON argument; the last line of stdout is a
JSON object {case: result}."""

import json
import sys

import keras
import numpy as np
import tensorflow as tf

from helpers import step_ops
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.kernels import native
from transformer_tf2.models import variants
from transformer_tf2.training.trainer import Trainer

CASES = ("plain", "extra", "universal", "clip", "accum", "weighted_overflow")
CLIP_NORM = 0.1  # below the tiny model's gradient norms at its first steps: every step clips


def compare(strategy, hp, variant):
    """A single-device step and a mirrored step on the same batch, from the same weights:
    their (loss, ..., tokens), the largest weight difference after them and, per variant,
    what happened on a poisoned (NaN) step or to the halting units."""
    if variant == "universal":  # the ponder cost: each replica's loss reads its own pass
        hp = hparams.apply(hp, {"model_type": "universal", "ut_max_steps": 3, "act": True})
    if variant in ("clip", "accum"):
        hp = hparams.apply(
            hp, {"clip_norm": CLIP_NORM, "accum_steps": 2 if variant == "accum" else 1}
        )
    if variant == "accum":  # and the moving average of the weights (ema.py) beside them
        hp = hparams.apply(hp, {"ema_decay": 0.9})
    tok = data_load.load_tokenizer(hp)
    data = data_load.TrainData(hp)
    batch = data_load.build_batch(data.corpus, data.batches(0)[0])
    single = Trainer(hp, tok, tf.distribute.get_strategy(), "float32")
    mirrored = Trainer(hp, tok, strategy, "float32")
    for a, b in zip(single.model.weights, mirrored.model.weights):
        b.assign(a)
    if mirrored.ema:  # the shadows start from the weights now shared
        mirrored.ema.reset()
    poison = tf.Variable(0.0)
    if variant == "extra":  # an extra loss term that depends on the weights

        class L2(variants.Training):
            def extra_loss(self, model, extras):
                return 0.5 * tf.reduce_sum(tf.square(model.tgt_embedding.embeddings))

        single.hooks = mirrored.hooks = L2()
    elif variant == "plain":  # once poison is set, a NaN in the gradients of replica 1 alone

        class NaNInReplica1(variants.Training):
            def extra_loss(self, model, extras):
                ctx = tf.distribute.get_replica_context()
                one = tf.logical_and(tf.equal(ctx.replica_id_in_sync_group, 1), poison > 0)
                embeddings = model.tgt_embedding.embeddings
                return tf.where(one, np.nan, 0.0) * tf.reduce_sum(embeddings)

        mirrored.hooks = NaNInReplica1()
    halting0 = [w.numpy() for w in single.model.weights if "halting" in w.path]
    if variant == "accum":  # batches 0 and 1 make the first update, 2 and 3 the second
        norms = []
        for i in range(4):
            batch = data_load.build_batch(data.corpus, data.batches(0)[i])
            (s1, _), (s2, _) = single.train_batch(*batch), mirrored.train_batch(*batch)
            norms += [s1.grad_norm, s2.grad_norm] if i % 2 else []
    else:
        s1, s2 = single.train_step(*batch), mirrored.train_step(*batch)
        norms = [s1.grad_norm, s2.grad_norm]
    if variant == "clip":  # a second step: Adam's first update is blind to a gradient's scale
        batch = data_load.build_batch(data.corpus, data.batches(0)[1])
        s1, s2 = single.train_step(*batch), mirrored.train_step(*batch)
        norms += [s1.grad_norm, s2.grad_norm]
    diff = max(
        float(np.abs(a.numpy() - b.numpy()).max())
        for a, b in zip(single.model.trainable_weights, mirrored.model.trainable_weights)
    )
    nan = {}
    if variant == "accum":  # the shadows: the same on both sides, and not the weights
        pairs = zip(single.ema.shadows, mirrored.ema.shadows, single.model.trainable_weights)
        nan = {
            "ema_diff": max(float(np.abs(a.numpy() - b.numpy()).max()) for a, b, _ in pairs),
            "ema_lag": max(
                float(np.abs(a.numpy() - w.numpy()).max())
                for a, w in zip(single.ema.shadows, single.model.trainable_weights)
            ),
        }
    if variant == "plain":

        def copies():
            return [c.numpy() for w in mirrored.model.weights for c in w.value.values]

        before = copies()
        poison.assign(1.0)
        s3 = mirrored.train_step(*batch)
        nan = {
            "skipped": s3.skipped,
            "step": mirrored.step,
            "copies": len(before),
            "unchanged": all((a == b).all() for a, b in zip(before, copies())),
            # the replicas trace on threads of their own, under the run's kernels
            "native_ln": step_ops(mirrored, batch) >= {"NativeLayerNorm", "NativeLayerNormGrad"},
            "library": native.ops() is not None,
        }
    if variant == "universal":  # the halting units are trained through the ponder cost
        pairs = [
            (w, v)
            for w, v in zip(mirrored.model.weights, single.model.weights)
            if "halting" in w.path
        ]
        copies = [(w.value.values, v) for w, v in pairs]
        nan = {
            "halting_moved": max(
                float(np.abs(v.numpy() - v0).max()) for (_, v), v0 in zip(pairs, halting0)
            ),
            "halting_diff": max(
                float(np.abs(c[0].numpy() - d.numpy()).max()) for c, _ in copies for d in c[1:]
            ),
            "halting_single": max(
                float(np.abs(d.numpy() - v.numpy()).max()) for c, v in copies for d in c
            ),
        }
    return {
        "single": list(s1[:4]),
        "mirrored": list(s2[:4]),
        "diff": diff,
        "replicas": mirrored.replicas,
        "grad_norms": norms,  # [single, mirrored] of each step
        "nan": nan,
    }


def weighted_overflow(strategy, hp):
    """A Weighted Transformer in mixed_float16 on 2 replicas: after one real step, an
    overflowing gradient step and then a finite one, applied by hand; the state after
    each: [step, the kappa/alpha optimizer's iterations, kappa of encoder_0, the sums of
    its slots]."""
    hp = hparams.apply(hp, {"model_type": "weighted", "num_heads": 4})
    keras.mixed_precision.set_global_policy("mixed_float16")
    tok = data_load.load_tokenizer(hp)
    data = data_load.TrainData(hp)
    t = Trainer(hp, tok, strategy, "mixed_float16")
    t.train_step(*data_load.build_batch(data.corpus, data.batches(0)[0]))
    scale = float(t.optimizer.dynamic_scale.numpy())
    branch = t.group_optimizers["branch"]

    def state():
        kappa = t.model.variant.branch_weights(t.model)["encoder_0/kappa"]
        slots = [float(np.abs(v.numpy()).sum()) for v in branch.variables]
        return [t.step, int(branch.iterations.numpy()), kappa.tolist(), slots]

    def step(bad):
        grads = [tf.fill(v.shape, 1e-3 * scale) for v in t.model.trainable_variables]
        if bad:
            grads[0] = grads[0] * float("inf")
        return t.apply_gradients(grads, tf.constant(1.0))[0]

    out = [state()]
    for bad in (True, False):
        tf.function(lambda: t.strategy.run(step, args=(bad,)))()
        out.append(state())
    keras.mixed_precision.set_global_policy("float32")
    return {"replicas": t.replicas, "states": out}


def main():
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    hp = hparams.apply(hparams.Hparams(), json.loads(sys.argv[1]))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out = {case: compare(strategy, hp, case) for case in CASES[:-1]}
    out["weighted_overflow"] = weighted_overflow(strategy, hp)
    print(json.dumps(out))
