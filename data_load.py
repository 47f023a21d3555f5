"""Vocabularies, encoding and tf.data batching: the seed's data_load.py, whose code lives in
``transformer_tf2/data/data_load.py``. Each name below is that module's own object, so
``import data_load`` and ``from transformer_tf2.data import data_load`` give the same
function; patch the package's.

- :func:`load_tokenizer`: the run's vocabulary (joint BPE, or the TF1 code's two word
  vocabularies) as a :class:`Tokenizer`: text to ids (``encode_src``, the source with
  </S>) and back (``decode_tgt``).
- :class:`TrainData`: the training pairs as length-bucketed batches under a token budget
  (``tokens_per_batch``: rows x padded length), each padded to its own longest sequence,
  seeded and deterministic; ``dataset(epoch)`` is the epoch's tf.data pipeline.
- :func:`eval_batches`: the sentences to decode, in batches of similar length.

prepro.py writes what these read (the vocabulary and the encoded pairs); the corpora
themselves are read by transformer_tf2/data/download.py and prepro.py.
"""

from transformer_tf2.data.data_load import (  # noqa: F401
    BOS_ID,
    EOS_ID,
    PAD_ID,
    Tokenizer,
    TrainData,
    clean,
    eval_batches,
    load_tokenizer,
)
