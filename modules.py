"""The building blocks of the Transformer ("Attention Is All You Need", Vaswani et al.
2017), by section of the paper: the seed's modules.py, whose code lives in the package
``transformer_tf2.layers`` (one file a concept). Each name below is that file's own
object, so ``import modules`` and ``from transformer_tf2.layers import ...`` give the
same layer; patch or subclass the package's.

Shapes: N batch, T1 source length, T2 target length, h heads, d_k = d_model / h.

- 3.1 encoder and decoder stacks, residual connections and LayerNorm
  (transformer_tf2/layers/modules.py): :class:`EncoderLayer`, :class:`DecoderLayer`,
  :class:`Residual`, :func:`layer_norm`.
- 3.2 attention (transformer_tf2/layers/attention.py): the masks,
  :func:`scaled_dot_product_attention` (3.2.1) and :class:`MultiHeadAttention` (3.2.2),
  with its decoding step over a key/value cache.
- 3.3 position-wise feed-forward networks: :class:`FeedForward`.
- 3.4 embeddings and softmax (transformer_tf2/layers/embeddings.py):
  :class:`TokenEmbedding`, :class:`OutputProjection`.
- 3.5 positional encoding: :class:`PositionalEncoding` (sinusoid or learned); every other
  family is a class of transformer_tf2/layers/positions.py.
- 5.3 the learning rate, 5.4 label smoothing (transformer_tf2/layers/optimization.py):
  :class:`TransformerSchedule`, :func:`smoothed_cross_entropy`, :class:`Adam`.

The whole model is transformer_tf2/models/model.py's ``Transformer``.
"""

from transformer_tf2.layers.attention import (  # noqa: F401
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from transformer_tf2.layers.embeddings import (  # noqa: F401
    OutputProjection,
    PositionalEncoding,
    TokenEmbedding,
)
from transformer_tf2.layers.modules import (  # noqa: F401
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    Residual,
    layer_norm,
)
from transformer_tf2.layers.optimization import (  # noqa: F401
    Adam,
    TransformerSchedule,
    smoothed_cross_entropy,
)
