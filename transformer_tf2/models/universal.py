"""The Universal Transformer (Dehghani et al. 2018, arXiv 1807.03819) with Adaptive
Computation Time (Graves 2016): ``model_type=universal``.

Each stack is one block (modules.EncoderLayer / DecoderLayer) whose weights are shared
across depth, applied recurrently for up to ``ut_max_steps`` steps (paper section 2.1).
Before every step the coordinate embedding P^t is added: the position embedding of the
model's position scheme plus the sinusoidal embedding of the step t = 1, 2, ... (the
paper's equation for P^t). The transition function is the position-wise FFN.

ACT (section 2.2), per position, with the halting arithmetic in float32: a halting unit
p = sigmoid(w . (state + P^t) + b) gives a probability at every step; a position halts at
the first step where the running sum would pass 1 - ``act_epsilon``, or at
``ut_max_steps``, and that step gets the remainder R = 1 - (the probabilities so far).
The output is the sum over steps of update weight x block output, the weights of each
position summing to exactly 1. A halted position's state is copied unchanged to the later
steps, where the other positions still attend to it. The ponder cost N + R (steps used
plus remainder), averaged over the real tokens of each stack and weighted by
``act_loss_weight``, is added to the training loss. ``act=False`` gives the fixed-depth
recurrence ("UT without ACT"); ``ut_max_steps=1`` one layer.

Every step runs for every position (a batch cannot stop early for some positions only);
ACT decides the weights and which states are frozen, not the compute. Incremental
decoding keeps the self-attention keys/values of every depth step, so a new target
position at depth t attends to the depth-t states of the earlier positions (frozen ones
included), exactly as in the full pass.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers import modules, positions
from transformer_tf2.models import variants

cast = fast_ops.cast


def act_step(p, halting, remainders, n_updates, last: bool, threshold: float):
    """One ACT step for every position (float32 tensors of one shape, e.g. (N, T)).

    p: this step's halting probabilities; halting: the sum of the probabilities of the
    steps taken so far (a position whose sum reached 1 has halted); remainders, n_updates:
    R and N so far. ``last`` forces every running position to halt now.
    Returns (update weights of this step, was_running (1 for a position that still runs at
    this step), halting, remainders, n_updates), all updated.
    """
    running = tf.cast(halting < 1.0, tf.float32)
    if last:
        new_halted = running
    else:
        new_halted = tf.cast(halting + p * running > threshold, tf.float32) * running
    still = running - new_halted  # running after this step
    halting = halting + p * still
    remainders = remainders + new_halted * (1.0 - halting)
    halting = halting + new_halted * (1.0 - halting)  # a halted position sums to exactly 1
    n_updates = n_updates + running
    weights = p * still + new_halted * remainders
    return weights, running, halting, remainders, n_updates


def depth_encoding(step: int, d_model: int, dtype):
    """The sinusoidal embedding of depth step ``step`` (1-based): (1, 1, d_model)."""
    return positions.sinusoid_encoding(tf.constant([step]), d_model, dtype)[None]


class _Recurrent(keras.layers.Layer):
    """What the encoder and decoder stacks share: the block, the halting unit, the
    coordinate embedding and the ACT loop over depth. ``position`` is the model's
    PositionalEncoding layer (shared, added at every step); the other keywords are the
    block's (modules.EncoderLayer / DecoderLayer)."""

    # what a Keras layer's own config holds; every other keyword goes to the block
    LAYER_KEYS = ("name", "dtype", "trainable", "autocast")

    def __init__(
        self,
        max_steps: int = 6,
        act: bool = True,
        act_epsilon: float = 0.01,
        position=None,
        **kwargs,
    ):
        super().__init__(**{k: kwargs.pop(k) for k in self.LAYER_KEYS if k in kwargs})
        self.args = kwargs  # d_model, num_heads, d_ff, dropout_rate, norm, ... (modules._Block)
        self.max_steps, self.act, self.act_epsilon = max_steps, act, act_epsilon
        self.position = position
        self.block = self.make_block(name="block")
        if act:  # bias 1.0: p = 0.73 at first, so that an untrained model halts early
            self.halting = keras.layers.Dense(
                1,
                activation="sigmoid",
                bias_initializer=keras.initializers.Constant(1.0),
                dtype="float32",
                name="halting",
            )

    def make_block(self, name: str):
        raise NotImplementedError

    def build_recurrence(self, input_shape):
        """The halting unit and three statistics of the last training batch for
        TensorBoard (non-trainable scalars): the mean and the max steps used, and the mean
        ponder cost N + R."""
        if self.act:
            self.halting.build(input_shape)
        for name in ("ponder_mean", "ponder_max", "ponder_cost"):
            weight = self.add_weight(
                name=name,
                shape=(),
                initializer="zeros",
                trainable=False,
                aggregation="only_first_replica",
            )
            setattr(self, name, weight)

    def coordinates(self, x, step: int, offset=0):
        """x + P^t: the position embedding (when the model's scheme adds one) and the
        embedding of depth step ``step``; x (N, T, d_model) at positions offset, ...."""
        if self.position is not None:
            x = self.position(x, offset=offset)
        return x + depth_encoding(step, self.args["d_model"], x.dtype)

    def halting_probability(self, x):
        """(N, T, d_model) -> (N, T) float32."""
        return self.halting(cast(x, tf.float32))[..., 0]

    def ponder_loop(self, x, apply, offset=0):
        """The ACT loop over depth. x: (N, T, d_model) at positions offset, ...;
        apply(state_with_coordinates, t) -> the block's output at step t.
        Returns (output (N, T, d_model), steps used (N, T), remainders (N, T)); without
        ACT the state after ``max_steps`` applications, max_steps and 0."""
        shape = tf.shape(x)[:2]
        halting = remainders = n_updates = tf.zeros(shape, tf.float32)
        state, output = x, tf.zeros_like(x, tf.float32)
        threshold = 1.0 - self.act_epsilon
        for t in range(1, self.max_steps + 1):
            inputs = self.coordinates(state, t, offset)
            new = apply(inputs, t)
            if not self.act:
                state = new
                continue
            p = self.halting_probability(inputs)
            weights, running, halting, remainders, n_updates = act_step(
                p, halting, remainders, n_updates, t == self.max_steps, threshold
            )
            output += weights[..., None] * cast(new, tf.float32)
            # a halted position keeps its state: the later steps (and the other positions'
            # attention) see it unchanged
            state = tf.where(running[..., None] > 0, new, state)
        if not self.act:
            return state, tf.fill(shape, float(self.max_steps)), tf.zeros(shape, tf.float32)
        return cast(output, x.dtype), n_updates, remainders

    def recur(self, x, real, apply, training=False):
        """:meth:`ponder_loop` over a whole sequence (real: (N, T) float32, 1 for a real
        token). Returns (output, report): with ACT the report is this pass's
        {"ponder_cost": N + R averaged over the real tokens (), "ponder_steps": N (N, T)}
        (in training its statistics are also kept for TensorBoard); without ACT, None."""
        out, n_updates, remainders = self.ponder_loop(x, apply)
        if not self.act:
            return out, None
        tokens = tf.maximum(tf.reduce_sum(real), 1.0)
        cost = tf.reduce_sum((n_updates + remainders) * real) / tokens
        if training:
            self.ponder_mean.assign(tf.reduce_sum(n_updates * real) / tokens)
            self.ponder_max.assign(tf.reduce_max(n_updates * real))
            self.ponder_cost.assign(cost)
        return out, {"ponder_cost": cost, "ponder_steps": n_updates}

    @staticmethod
    def outputs(out, weights, report, return_attention):
        """What call returns: out [, weights [, report]] (the report, with ACT, for
        model.run_layer)."""
        if not return_attention:
            return out
        return (out, weights) if report is None else (out, weights, report)

    def get_config(self):
        return {
            **super().get_config(),
            **self.args,
            "max_steps": self.max_steps,
            "act": self.act,
            "act_epsilon": self.act_epsilon,
        }


@keras.saving.register_keras_serializable(package="transformer")
class UniversalEncoder(_Recurrent):
    """The encoder stack: one shared modules.EncoderLayer applied recurrently with ACT.

    call: x (N, T1, d_model) embeddings (no position added), mask (N, 1, 1, T1) ->
    (N, T1, d_model) [, the last step's self-attention weights (N, h, T1, T1)]; the
    optional ``query_mask`` goes to the block (modules.EncoderLayer).
    """

    def make_block(self, name):
        return modules.EncoderLayer(**self.args, name=name)

    def build(self, input_shape):
        self.block.build(input_shape)
        self.build_recurrence(input_shape)

    def call(self, x, mask, training=False, return_attention=False, query_mask=None):
        found = {}

        def apply(h, t):
            out, found["w"] = self.block(
                h, mask, training=training, return_attention=True, query_mask=query_mask
            )
            return out

        real = tf.cast(mask[:, 0, 0, :], tf.float32)
        out, report = self.recur(x, real, apply, training)
        return self.outputs(out, found["w"], report, return_attention)


@keras.saving.register_keras_serializable(package="transformer")
class UniversalDecoder(_Recurrent):
    """The decoder stack: one shared modules.DecoderLayer (masked self-attention,
    attention to the final encoder output, FFN) applied recurrently with ACT, halting per
    target position.

    call: x (N, T2, d_model), memory (N, T1, d_model), self_mask (1, 1, T2, T2),
    memory_mask (N, 1, 1, T1) -> (N, T2, d_model) [, the last step's (self, cross)
    weights]. :meth:`step` decodes one position with a cache of every depth's keys/values.
    """

    def make_block(self, name):
        return modules.DecoderLayer(**self.args, name=name)

    def build(self, input_shape, memory_shape=None):
        self.block.build(input_shape, memory_shape)
        self.build_recurrence(input_shape)

    def call(
        self,
        x,
        memory,
        self_mask,
        memory_mask,
        training=False,
        return_attention=False,
        query_mask=None,
    ):
        found = {}

        def apply(h, t):
            out, found["w"] = self.block(
                h,
                memory,
                self_mask,
                memory_mask,
                training=training,
                return_attention=True,
                query_mask=query_mask,
            )
            return out

        # PAD positions are the all-zero rows: TokenEmbedding zeroes them and the model
        # adds no position before the stack
        real = tf.cast(tf.reduce_any(tf.not_equal(x, 0), axis=-1), tf.float32)
        out, report = self.recur(x, real, apply, training)
        return self.outputs(out, found["w"], report, return_attention)

    def init_cache(self, memory) -> dict:
        """Per depth step the self-attention keys/values of the positions decoded so far
        (N, h, 0, d_k) at first, the cross-attention keys/values of the memory (computed
        once: the block is shared), and the steps used per decoded position (N, 0) at
        first; each step appends one position."""
        block = self.block.init_cache(memory)
        n = tf.shape(memory)[0]
        return {
            "k": [block["k"]] * self.max_steps,
            "v": [block["v"]] * self.max_steps,
            "cross_k": block["cross_k"],
            "cross_v": block["cross_v"],
            "ponder": tf.zeros((n, 0), tf.float32),
        }

    def step(self, x, cache, step, memory_mask, query_mask=None):
        """One decoding position through every depth step. x: (N, 1, d_model) at
        position ``step``; returns (N, 1, d_model) and the cache with this position's
        keys/values appended at every depth."""
        keys, values = list(cache["k"]), list(cache["v"])

        def apply(inputs, t):
            depth = {"k": keys[t - 1], "v": values[t - 1]}
            depth.update(cross_k=cache["cross_k"], cross_v=cache["cross_v"])
            new, depth = self.block.step(inputs, depth, step, memory_mask, query_mask)
            keys[t - 1], values[t - 1] = depth["k"], depth["v"]
            return new

        out, used, _ = self.ponder_loop(cast(x, self.compute_dtype), apply, offset=step)
        ponder = tf.concat([cache["ponder"], used], axis=1)
        return out, dict(cache, k=keys, v=values, ponder=ponder)


class Training(variants.Training):
    """``model_type=universal`` in training: the ACT ponder cost in the loss and its
    figures in TensorBoard."""

    def extra_loss(self, model, extras: dict):
        """act_loss_weight x (the encoder's + the decoder's mean ponder cost N + R in the
        pass that reported ``extras``)."""
        if not model.config.act:
            return tf.constant(0.0, tf.float32)
        costs = [
            extras[stack.name]["ponder_cost"] for stack in model.variant.stacks(model).values()
        ]
        return model.config.act_loss_weight * tf.add_n(costs)

    def summaries(self, model, step: int, schedules: dict) -> None:
        """ponder/<stack>_mean and _max: the steps used per real token in the last
        training batch; train/act_loss: its ACT term of the loss."""
        if not model.config.act:
            return
        cost = 0.0
        for name, stack in model.variant.stacks(model).items():
            # numpy(): the first replica's copy with several (float() of a mirrored
            # variable fails)
            tf.summary.scalar(f"ponder/{name}_mean", float(stack.ponder_mean.numpy()))
            tf.summary.scalar(f"ponder/{name}_max", float(stack.ponder_max.numpy()))
            cost += float(stack.ponder_cost.numpy())
        tf.summary.scalar("train/act_loss", model.config.act_loss_weight * cost)


class Variant(variants.Variant):
    """``model_type=universal``: one recurrent encoder and one recurrent decoder stack
    (``num_blocks`` is not used; ``ut_max_steps`` is the depth), positions added at every
    step by the stacks, and the ACT ponder cost in the loss."""

    name = "universal"
    training = Training()
    positions_in_layers = True
    document_memory = False  # its recurrent stack has no per-layer memory yet
    STACKS = ("encoder_0", "decoder_0")

    def num_layers(self, num_blocks: int) -> int:
        return 1

    def layer_args(self, config) -> dict:
        return {
            "max_steps": config.ut_max_steps,
            "act": config.act,
            "act_epsilon": config.act_epsilon,
        }

    def encoder_layer(self, **args):
        return UniversalEncoder(**args)

    def decoder_layer(self, **args):
        return UniversalDecoder(**args)

    def stacks(self, model) -> dict:
        return {"encoder": model.encoder_layers[0], "decoder": model.decoder_layers[0]}

    def per_token(self, model, stack: str, extras: dict):
        """The ACT steps each token of ``stack`` used in the pass that reported
        ``extras`` (N, T); None without ACT."""
        layer = self.stacks(model)[stack]
        return extras[layer.name]["ponder_steps"] if layer.act else None

    def specs_lines(self, model) -> list[str]:
        c = model.config
        return [
            f"universal: one shared block per stack, up to {c.ut_max_steps} steps, "
            f"ACT {'on (epsilon ' + str(c.act_epsilon) + ')' if c.act else 'off'}; "
            "the parameter count does not depend on the number of steps"
        ]
