"""Attention figures: for one sentence and the model's own greedy translation, labelled
heatmaps of the encoder self-, decoder self- and cross-attention (paper section 3.2), one
panel per head, and for a Universal Transformer with ACT the ponder time per token. Drawn
with matplotlib's Agg backend (no display needed); TensorBoard gets them as images
(summaries.attention) and translate.py ``--attention`` as a PNG file.
"""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import tensorflow as tf

from transformer_tf2.data import data_load
from transformer_tf2.decoding import greedy_search


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported at the first figure: translate.py
    imports this module, and a translation without ``--attention`` draws nothing (the
    import is 0.35 s of its start-up)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# map name -> (query axis, key axis): the token sequences that label each map's rows and
# columns, as attributes of Attention
AXES = {
    "encoder_self": ("source", "source"),
    "decoder_self": ("translation", "decoder_input"),
    "decoder_cross": ("translation", "source"),
}


@dataclasses.dataclass
class Attention:
    """The attention of one sentence. ``maps[name][layer]`` is (h, T_query, T_key).

    ``source``: the source tokens with </S> (T1); ``translation``: the greedy output tokens
    up to its </S> (T2); ``decoder_input``: <S> and the output shifted right (T2), the
    tokens the decoder read at each position.
    """

    source: list[str]
    translation: list[str]
    decoder_input: list[str]
    text: str  # the detokenized translation
    maps: dict[str, list[np.ndarray]]
    # a Universal Transformer with ACT: the steps used per token, {"source": (T1,),
    # "translation": (T2,)}; empty for other models
    ponder: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def labels(self, name: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of map ``name``."""
        rows, cols = AXES[name]
        return getattr(self, rows), getattr(self, cols)


def attention(model, tok, sentence: str, max_len_extra: int, greedy=None) -> Attention:
    """Translate ``sentence`` greedily, then run the model once over its own output
    (teacher-forced on it) and collect every layer's attention weights. ``greedy`` is a
    compiled decoder of :func:`greedy_search.greedy_decoder` to reuse (one is built if None)."""
    limit = greedy_search.source_limit(model)
    src_ids = tok.encode_src([sentence])[0][: limit - 1] + [data_load.EOS_ID]
    src = tf.constant([src_ids], tf.int32)
    greedy = greedy or greedy_search.greedy_decoder(model)
    out = greedy(src, tf.constant(max_len_extra, tf.int32)).numpy()[0]
    out = [int(t) for t in out if t != data_load.PAD_ID]
    tgt_in = [data_load.BOS_ID] + out[:-1]  # one decoder position per output token
    extras = {}
    memory, mask, enc_w = model.encode(src, return_attention=True, extras=extras)
    tgt = tf.constant([tgt_in], tf.int32)
    _, dec_w = model.decode(tgt, memory, mask, return_attention=True, extras=extras)
    ponder = {}
    for stack, side in (("encoder", "source"), ("decoder", "translation")):
        steps = model.variant.per_token(model, stack, extras)
        if steps is not None:
            ponder[side] = steps.numpy()[0]
    maps = {
        "encoder_self": [w.numpy()[0] for w in enc_w],
        "decoder_self": [w[0].numpy()[0] for w in dec_w],
        "decoder_cross": [w[1].numpy()[0] for w in dec_w],
    }
    return Attention(
        source=tok.src_tokens(src_ids),
        translation=tok.tgt_tokens(out),
        decoder_input=tok.tgt_tokens(tgt_in),
        text=tok.decode_tgt(out),
        maps=maps,
        ponder=ponder,
    )


def ponder_figure(att: Attention):
    """Bars of the steps each token used (Universal Transformer with ACT): the source
    tokens above, the translation tokens below. Returns the matplotlib Figure."""
    fig, axes = pyplot().subplots(2, 1, figsize=(max(4.0, 0.3 * len(att.source) + 1.5), 5), dpi=80)
    for ax, side in zip(axes, ("source", "translation")):
        tokens, steps = getattr(att, side), att.ponder[side]
        ax.bar(range(len(tokens)), steps, color="tab:blue")
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
        ax.set_ylabel("steps")
        ax.set_title(f"ponder time per {side} token", fontsize=9)
    fig.tight_layout()
    return fig


def figure(weights: np.ndarray, rows: list[str], cols: list[str], title: str):
    """A grid of heatmaps, one per head: ``weights`` (h, len(rows), len(cols)), query tokens
    down the y axis, key tokens across the x axis. Returns the matplotlib Figure."""
    heads = weights.shape[0]
    ncols = math.ceil(math.sqrt(heads))
    nrows = math.ceil(heads / ncols)
    cell = 0.28
    width = max(3.0, cell * len(cols) + 1.2)
    height = max(2.5, cell * len(rows) + 1.2)
    fig, axes = pyplot().subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows), dpi=80, squeeze=False
    )
    for i, ax in enumerate(axes.flat):
        if i >= heads:
            ax.axis("off")
            continue
        ax.imshow(weights[i], cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=7)
        ax.set_yticks(range(len(rows)), rows, fontsize=7)
        ax.set_title(f"head {i + 1}", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def png(fig) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    pyplot().close(fig)
    return buffer.getvalue()


def figures(att: Attention, layers: str = "last") -> dict[str, object]:
    """{tag: Figure} for each map of the last layer (``layers='last'``) or of every layer
    (``'all'``; tags ``layer<k>/<name>``), and ``ponder`` when the model has ACT."""
    out = {"ponder": ponder_figure(att)} if att.ponder else {}
    for name, per_layer in att.maps.items():
        picked = (
            [(len(per_layer), per_layer[-1])]
            if layers == "last"
            else list(enumerate(per_layer, start=1))
        )
        for k, weights in picked:
            tag = name if layers == "last" else f"layer{k}/{name}"
            rows, cols = att.labels(name)
            title = f"{name.replace('_', ' ')} attention, layer {k}"
            out[tag] = figure(weights, rows, cols, title)
    return out
