"""Document context: the earlier sentences of a document that a sentence reads
(Transformer-XL's segment-level recurrence, Dai et al. 2019, 3.2, with a sentence as the
segment). The encoder's memory keeps the inputs of each encoder layer for the M sentences
before (:func:`sentence_states`); the decoder's memory the inputs of each decoder layer
for the M_t target sentences before (:func:`target_states`). :func:`document_windows`
computes them in order for a batch, :func:`context_of` lays them side by side for the
layers. The Transformer reads them through one hook: the ``context`` argument of
``encode`` and ``decode`` (None for a sentence model, which passes through unchanged).
"""

from __future__ import annotations

import tensorflow as tf

from transformer_tf2.data.context import context_depths, context_needs  # noqa: F401
from transformer_tf2.layers import attention

# the layers' keyword arguments for the earlier sentences: the encoder's and the decoder's
ENCODER_MEMORY = ("memory", "memory_mask")
DECODER_MEMORY = ("earlier", "earlier_mask")


def layer_context(context, i: int, names=ENCODER_MEMORY) -> dict:
    """Layer i's keyword arguments (``names``) for the earlier sentences of ``context``
    ({} without: a sentence model's layers are called as they are)."""
    return {} if context is None else dict(zip(names, context[i]))


def sentences_of(context) -> list:
    """Earlier sentences as a list of (N, T) tensors, from a list or one (N, K, T) tensor."""
    return list(context) if isinstance(context, (list, tuple)) else tf.unstack(context, axis=1)


def check_memory(model) -> None:
    """ValueError where the model's variant has no document memory."""
    if not model.variant.document_memory:
        raise ValueError(f"model_type={model.model_type} has no document memory")


def sentence_states(model, src, context=None, layers: int | None = None):
    """What a later sentence's context keeps of the sentences src (N, T): the inputs of
    the first ``layers`` encoder layers (all by default), under stop-gradient and
    without dropout (Dai et al. 2019, 3.2: the memory is not trained through),
    computed under their own ``context``. Returns (per layer (N, T, d_model), key
    mask (N, 1, 1, T))."""
    check_memory(model)
    layers = model.num_blocks if layers is None else layers
    mask, query_mask = model.masks(src)
    x = model.embed(src, model.src_embedding, model.src_position, model.src_dropout, False)
    states = [tf.stop_gradient(x)]
    for i, layer in enumerate(model.encoder_layers[: layers - 1]):
        x = layer(x, mask, query_mask=query_mask, **layer_context(context, i))
        states.append(tf.stop_gradient(x))
    return states, mask


def target_states(model, tgt_in, encoded, context=None, layers: int | None = None):
    """The decoder's counterpart of :func:`sentence_states` for the target sentences
    tgt_in (N, T2) (<S> and the tokens, teacher-forced: the reference in training, the
    model's own translation in decoding), each under its source's ``encoded`` (output,
    mask) and its own ``context`` of earlier target sentences: the inputs of the first
    ``layers`` decoder layers under stop-gradient, without dropout, and the key mask
    (N, 1, 1, T2)."""
    check_memory(model)
    layers = model.num_blocks if layers is None else layers
    x = model.embed(tgt_in, model.tgt_embedding, model.tgt_position, model.tgt_dropout, False)
    causal, query_mask = attention.causal_mask(tf.shape(tgt_in)[1]), model.masks(tgt_in)[1]
    states = [tf.stop_gradient(x)]
    for i, layer in enumerate(model.decoder_layers[: layers - 1]):
        x = layer(
            x,
            *encoded[:1],
            causal,
            encoded[1],
            query_mask=query_mask,
            **layer_context(context, i, DECODER_MEMORY),
        )
        states.append(tf.stop_gradient(x))
    return states, attention.padding_mask(tgt_in)


def context_of(window):
    """The context of the next sentence from ``window``, the :func:`sentence_states` (or
    :func:`target_states`) of its earlier sentences (oldest first): per layer, their
    states side by side, the real tokens of each row moved to the right end in order
    (left padding), so the last token of the previous sentence sits at position -1
    whatever the padding: per layer (states (N, T_m, d_model), mask (N, 1, 1, T_m)),
    for the layers every sentence of the window has; None for an empty window."""
    if not window:
        return None
    mask = tf.concat([m for _, m in window], axis=-1)  # (N, 1, 1, T_m)
    # a stable sort of the mask puts each row's padding first, its tokens after in order
    order = tf.argsort(tf.cast(mask[:, 0, 0], tf.int32), axis=1, stable=True)
    left = tf.gather(mask, order, axis=3, batch_dims=1)
    layers = zip(*[states for states, _ in window])
    return [
        (tf.gather(tf.concat(list(states), axis=1), order, axis=1, batch_dims=1), left)
        for states in layers
    ]


def encode_in_context(model, src, context_ids, sentences: int, training=False, **kwargs):
    """src (N, T1) encoded with each encoder layer attending also to that layer's inputs
    for the last ``sentences`` (M) sentences before it in its document, as
    Transformer-XL's recurrence (Dai et al. 2019, 3.2) with a sentence as the segment
    (the encoder's memory alone: :meth:`Transformer.forward` reads the decoder's too).

    ``context_ids``: the earlier sentences, oldest first, each (N, T_c) ids, or one
    (N, K, T_c) tensor of K of them (a training batch's); a row whose document has
    fewer earlier sentences has all-PAD ones first (they add no key). Each
    is encoded in order, under the context of the M before it, so that with the
    num_blocks * M sentences before src the states equal those of decoding a whole
    document in order (its first sentence without context). A sentence j before src
    needs only the inputs of its first L - ceil(j / M) + 1 layers (L = num_blocks; the
    earlier a sentence, the fewer layers still see it): the context costs
    M * L * (L - 1) / 2 layer passes, under half of encoding its L * M sentences
    whole; sentences before those count for nothing.
    Returns what :meth:`Transformer.encode` returns (``kwargs`` go to it)."""
    window, _ = document_windows(model, context_ids, None, sentences, 0)
    return model.encode(src, training=training, context=context_of(window), **kwargs)


def document_windows(
    model, context_ids, context_tgt=None, memory: int | None = None, target: int | None = None
) -> tuple[list, list]:
    """The windows a sentence reads: the :func:`sentence_states` of its last ``memory``
    (M; the model's by default) earlier sentences and the :func:`target_states` of the
    last ``target`` (M_t) earlier target sentences, each computed in order under the
    context of the ones before it, each giving what context_needs asks of it
    (the encoder output of a sentence whose decoder states are needed, its source's
    context with it). ``context_ids``: as in :func:`encode_in_context`;
    ``context_tgt``: the decoder inputs (<S> and the tokens) of the last of them, each
    (N, T_t) or one (N, K_t, T_t); needed when ``target`` > 0."""
    memory = model.memory_sentences if memory is None else memory
    target = model.target_memory_sentences if target is None else target
    enc_need, dec_need = context_needs(model.num_blocks, memory, target)
    if not enc_need or context_ids is None:
        return [], []
    check_memory(model)
    sources = sentences_of(context_ids)[-len(enc_need) :]
    targets = sentences_of(context_tgt) if target else []
    wanted = min(len(sources), sum(1 for d in dec_need if d))
    if len(targets) < wanted:
        raise ValueError(
            f"the decoder's memory reads the targets of the last {wanted} earlier "
            f"sentences; context_tgt holds {len(targets)}"
        )
    enc_window, dec_window = [], []
    for k, ids in enumerate(sources):
        back = len(sources) - k  # sentences between this one and src, plus one
        e, d = enc_need[back - 1], dec_need[back - 1]
        context = context_of(enc_window) if e >= 2 else None
        states = encoded = None
        if e > model.num_blocks:  # its output too, for its decoder states
            inputs = []
            output, mask = model.encode(ids, context=context, layer_inputs=inputs)
            states, encoded = (inputs, mask), (tf.stop_gradient(output), mask)
        elif e:
            states = sentence_states(model, ids, context, e)
        if memory:
            enc_window = (enc_window + [states])[-memory:]
        if target:
            tgt_states = None
            if d:
                tgt_context = context_of(dec_window) if d >= 2 else None
                tgt_states = target_states(model, targets[-back], encoded, tgt_context, d)
            dec_window = (dec_window + [tgt_states])[-target:]
    return enc_window, dec_window
