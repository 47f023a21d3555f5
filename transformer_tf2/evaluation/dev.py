"""The dev set of a training run and the Translator that decodes it: what dev BLEU is
computed from after each epoch (dev_evaluation.py) and at the run's end."""

from __future__ import annotations

import keras

from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding.translator import Translator
from transformer_tf2.models.model import Transformer


class Dev:
    """The dev set of a run: the encoded corpus (dev loss, all of it) and the raw
    sentences decoded for dev BLEU (a fixed subset: the first ``dev_bleu_sents``).

    ``max_len``: one length limit for the whole subset, its longest reference (in target
    tokens) + 10, so that an untrained model's runaway outputs stop there rather than at
    each source's length + max_len_extra."""

    def __init__(self, hp: hparams.Hparams, tok=None):
        self.corpus = data_load.load_corpus(hp, "dev")
        src, ref = data_load.read_raw(hp, "dev")
        n = len(src) if hp.dev_bleu_sents <= 0 else min(hp.dev_bleu_sents, len(src))
        self.src, self.ref = src[:n], ref[:n]
        self.docs = self.corpus.docs[:n]  # a memory model reads them in document order
        self.max_len = 0
        if tok is not None and self.ref:
            self.max_len = max(len(ids) for ids in tok.encode_tgt(self.ref)) + 10

    def translator(self, model, tok, hp: hparams.Hparams) -> Translator:
        """The run's decoding settings under the subset's length limit
        (:class:`DevTranslator`)."""
        limit = min(hp.max_len, self.max_len) if hp.max_len else self.max_len
        return DevTranslator(model, tok, hparams.apply(hp, {"max_len": limit}))


class DevTranslator(Translator):
    """The dev evaluation's Translator: it decodes in float32, as eval.py does unless
    asked (checkpoints.load_run). Under mixed precision that is a float32 copy of the
    model (``self.model``), built once (train.py: outside the strategy's scope), into which the
    model's weights (``self.source``'s, as they are: the moving average's inside
    Trainer.scored_weights) are copied before each translation.

    So dev BLEU scores what eval.py will decode. Decoding in bfloat16 on a CPU also paid
    for oneDNN's kernels, made for each new product shape and made again at every dev
    evaluation once the train step's shapes had pushed them out of its cache: the
    document-memory demo spent 28 % of its training time on dev evaluation (``python
    train.py --demo_documents 0.5 --data_dir data/doc --prepro_dir prepro/doc --position
    xl --memory_sentences 1 --num_epochs 12`` on a CPU with AVX512-BF16,
    docs/performance.md)."""

    def __init__(self, model, tok, hp: hparams.Hparams):
        self.source = model
        if model.compute_dtype != "float32":
            policy = keras.mixed_precision.global_policy()
            keras.mixed_precision.set_global_policy("float32")
            try:
                model = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
            finally:
                keras.mixed_precision.set_global_policy(policy)
        super().__init__(model, tok, hp)

    def before_decoding(self) -> None:
        """The source model's weights, as they are now, into the float32 copy, and the
        output matrix transposed from them (model.Transformer.pin_output): every decoding
        entry point (translate, score, align) runs this first."""
        if self.model is not self.source:
            for copy, weight in zip(self.model.weights, self.source.weights, strict=True):
                copy.assign(weight)
        self.model.pin_output()
