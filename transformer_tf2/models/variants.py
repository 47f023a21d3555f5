"""The model-variant hook: :class:`Variant`, what a ``model_type`` changes in the model, and
:class:`Training`, what it changes in training (``Variant.training``); these bases are the
paper's Transformer (weighted.py and universal.py subclass both; model.VARIANTS lists them).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from transformer_tf2.layers import modules


class Training:
    """What a ``model_type`` changes in training: the hooks the Trainer calls
    (``trainer.hooks``, the model variant's ``training``); this base adds nothing. A variant
    module subclasses it beside its :class:`Variant` and overrides what it needs:
    * :meth:`extra_loss`: terms added to the training loss;
    * :meth:`optimizer_groups`: variables trained by an optimizer of their own;
    * :meth:`summaries`: TensorBoard summaries written with the training scalars.
    """

    def extra_loss(self, model, extras: dict):
        """A scalar float32 added once to the mean training loss of each update (with
        several replicas or accumulated batches, the trainer splits it among them).
        ``extras``: what the model's layers reported in this forward pass, {layer name:
        {name: tensor}} (Transformer.encode / decode), so that each replica's loss reads
        its own pass."""
        return tf.constant(0.0, tf.float32)

    def optimizer_groups(self, model, hp) -> dict:
        """{group name: (variables, optimization.TransformerSchedule)}; the main optimizer
        trains the rest. A group's optimizer is checkpointed as ``<name>_optimizer``."""
        return {}

    def summaries(self, model, step: int, schedules: dict) -> None:
        """Write TensorBoard summaries (inside the caller's writer context)."""


class Variant:
    """What a ``model_type`` changes, at one hook; this base is the paper's Transformer.

    A variant module (weighted.py, ...) subclasses it, is listed in model.VARIANTS and
    in hparams.CHOICES["model_type"], and overrides what it needs:
    * layer construction: :meth:`encoder_layer`, :meth:`decoder_layer` (a layer class
      also owns its decoding cache: ``init_cache`` and ``step``, every entry with the
      batch on axis 0), how many (:meth:`num_layers`), their extra arguments
      (:meth:`layer_args`) and whether they add the positions themselves
      (``positions_in_layers``), and whether they attend to earlier sentences
      (``document_memory``);
    * ``training``: its :class:`Training` hooks (the loss terms, optimizer groups and
      summaries it adds to training);
    * :meth:`specs_lines`: lines added to the run's ``specs`` file;
    * :meth:`per_token`: a value per token that the attention figures draw as bars.
    """

    name = "transformer"
    # True: the layers add the position embedding themselves (they get the model's
    # embeddings.PositionalEncoding as ``position``) and the model's embedding adds none
    positions_in_layers = False
    # True: each encoder layer takes ``memory`` / ``memory_mask``, the states of earlier
    # sentences (document context, recurrence.encode_in_context)
    document_memory = True
    # what the variant changes in training (the Trainer's ``hooks``)
    training = Training()

    def num_layers(self, num_blocks: int) -> int:
        """How many encoder (and decoder) layers the model builds."""
        return num_blocks

    def layer_args(self, config) -> dict:
        """Arguments of the variant's layers taken from the model's ``config``
        (hparams.ModelConfig)."""
        return {}

    def encoder_layer(self, **args) -> keras.layers.Layer:
        return modules.EncoderLayer(**args)

    def decoder_layer(self, **args) -> keras.layers.Layer:
        return modules.DecoderLayer(**args)

    def specs_lines(self, model) -> list[str]:
        return []

    def per_token(self, model, stack: str, extras: dict):
        """A value per token of ``stack`` ("encoder" | "decoder") in the forward pass
        whose layer reports are ``extras`` (as in Training.extra_loss), (N, T), that the
        attention figures draw as bars (the Universal Transformer's ACT steps), or None."""
        return None
