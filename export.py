"""Export a trained model as a SavedModel that translates raw German strings, or as a
CTranslate2 model directory.

    python export.py --logdir log/demo --export_dir exported/demo
    python export.py --logdir log/demo --format ctranslate2 [--quantization int8]

The serving signature ``serving_default`` maps ``sentences`` (a batch of raw strings)
to ``translations`` (strings). A model with document context (``memory_sentences``,
``target_memory_sentences``) also gets ``translate_document``: ``sentences`` are one
document's, in order, and each is translated with the encoder states of the ones before
it and the decoder states of their translations, as translate.py translates a document
(serving_default translates each sentence alone).

Everything runs inside the graph: tokenization (tensorflow-text's SentencepieceTokenizer
for BPE; the legacy regex cleaning, whitespace split and a lookup table for word
vocabularies), greedy decoding (or beam search with --beam_size) in one tf.while_loop,
and detokenization. Load it in any process with
``import tensorflow_text`` (which registers the tokenizer ops) and
``tf.saved_model.load(DIR)``; the project's code is not needed.

A graph cannot raise the project's error, so every input string gets a translation, the
one translate.py gives that line (tests/test_fuzz.py checks it on hostile input), and an
empty batch gets an empty batch, in every signature: an empty or whitespace-only string
gives ''; a string longer than the model takes is cut
to its first tokens; control characters, NUL, CR, a byte-order mark, any script, emoji
and combining characters go through the tokenizer's normalization (BPE) or the legacy
cleaning (word vocabulary); XML is text like any other; and bytes that are not UTF-8,
which translate.py refuses with the line number, become U+FFFD first. (The word
vocabulary's cleaning runs in RE2, which does not know the few Latin letters added in
Unicode 16: they are removed where Python keeps them.)
"""

# ruff: noqa: E402  (the script answers --help before TensorFlow is imported: cli.start)
from __future__ import annotations

from transformer_tf2.config import cli, hparams

SCRIPT = cli.Script(
    "export",
    __doc__,
    fields=cli.EXPORT_FIELDS,
    reads_run=True,
    options={
        "ckpt": ("", "checkpoint: a path, last or best (default: the run's default model)"),
        "export_dir": ("", "where to write the model (default: exported/<run>[_ct2])"),
        "format": ("savedmodel", "savedmodel | ctranslate2 (ctranslate.py)"),
        "quantization": (
            "none",
            "ctranslate2's weight type: none (float32) | int8 | int8_float32 | int8_float16 "
            "| int16 | float16 | bfloat16",
        ),
    },
    note=cli.DECODING_NOTE,
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import importlib.util
import os
import types

import tensorflow as tf

from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.decoding import beam_search, document_decoding, greedy_search
from transformer_tf2.export import ctranslate
from transformer_tf2.models import checkpoints
from transformer_tf2.utils import files

# data_load.clean in RE2, whose \s is [\t\n\f\r ] alone; then the other characters at
# which Python's str.split() splits, made spaces for tf.strings.split
LEGACY_CLEAN_RE2 = r"[^\s\v\x{85}\p{Z}\p{Latin}']"
SPACES_RE2 = r"[\v\x{85}\p{Z}]"


def add_vocabulary(module: tf.Module, tok, hp: hparams.Hparams) -> None:
    """The in-graph vocabulary as attributes of ``module`` (so that they are saved): for
    BPE, tensorflow-text's SentencepieceTokenizer of the run's model (``sp``); for a word
    vocabulary, the source word -> id table (``src_table``) and the target words by id
    (``tgt_words``)."""
    if tok.kind == "bpe":
        # tensorflow-text (the [export] extra) is needed for BPE models only
        import tensorflow_text as tft

        with open(os.path.join(hp.prepro_dir, "bpe.model"), "rb") as f:
            module.sp = tft.SentencepieceTokenizer(model=f.read())
        return
    src_words = tf.constant(list(tok.src_vocab))
    ids = tf.range(tf.size(src_words), dtype=tf.int32)
    module.src_table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(src_words, ids), data_load.UNK_ID
    )
    module.tgt_words = tf.Variable(tf.constant(tok.tgt_words), trainable=False)


class ServingModule(tf.Module):
    """What the SavedModel holds: the model's variables, the in-graph vocabulary
    (:func:`add_vocabulary`) and the signatures: ``translate`` (serving_default: each
    sentence alone) and, for a model with document context, ``translate_document``. They
    run translate.py's search loops (greedy_search, beam_search); a document is translated
    by :func:`document_decoding.document_loop`, the in-graph form of the Translator's
    document lanes (a SavedModel holds no Python to drive them)."""

    def __init__(self, model, tok, hp: hparams.Hparams):
        super().__init__()
        # the variables alone are tracked: a Keras model inside a tf.Module makes Keras
        # trace its call with float inputs when it is saved. The model, the tokenizer and
        # the settings stay out of the saved objects (a namespace is not tracked).
        self.weights = [w.value for w in model.weights]
        self.run = types.SimpleNamespace(
            model=model, tok=tok, hp=hp, limit=greedy_search.source_limit(model)
        )
        add_vocabulary(self, tok, hp)
        if model.reads_documents:  # a document signature for a model with memory
            self.translate_document = tf.function(
                self._document, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False
            )

    def encode(self, sentences):
        """Strings (N,) -> ragged source ids (N, None), without </S>."""
        if self.run.tok.kind == "bpe":
            return self.sp.tokenize(sentences)
        cleaned = tf.strings.regex_replace(sentences, LEGACY_CLEAN_RE2, "")
        words = tf.strings.split(tf.strings.regex_replace(cleaned, SPACES_RE2, " "))
        return tf.ragged.map_flat_values(self.src_table.lookup, words)

    def decode(self, ids):
        """(N, L) ids, PAD after </S> -> strings (N,), as Tokenizer.decode_tgt reads
        them: <PAD>, <S> and </S> left out, ids past the vocabulary read as <UNK>."""
        specials = tf.constant([data_load.PAD_ID, data_load.BOS_ID, data_load.EOS_ID])
        keep = tf.reduce_all(tf.not_equal(ids[..., None], specials), axis=-1)
        ids = tf.where(ids < self.run.tok.tgt_vocab_size, ids, data_load.UNK_ID)
        ragged = tf.ragged.boolean_mask(ids, keep)
        if self.run.tok.kind == "bpe":
            return self.sp.detokenize(ragged)
        words = tf.gather(self.tgt_words, ragged)
        return tf.strings.reduce_join(words, axis=1, separator=" ")

    def sources(self, sentences):
        """Raw strings (N,) -> (source ids (N, T) with </S>, PAD after; empty (N,))."""
        # bytes that are not UTF-8 become U+FFFD (translate.py refuses them instead)
        sentences = tf.strings.unicode_transcode(
            sentences, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        ids = tf.cast(self.encode(tf.strings.strip(sentences)), tf.int32)
        ids = ids[:, : self.run.limit - 1]
        empty = tf.equal(ids.row_lengths(), 0)
        eos = tf.RaggedTensor.from_tensor(tf.fill([ids.nrows(), 1], data_load.EOS_ID))
        return tf.concat([ids, eos], axis=1).to_tensor(data_load.PAD_ID), empty

    def best(self, src, encoded=None, context=None):
        """The best translation's ids (N, L) of src (N, T), greedy or beam search;
        ``encoded`` and ``context`` as greedy_search.greedy_loop takes them."""
        model, hp = self.run.model, self.run.hp
        extra = tf.constant(hp.max_len_extra, tf.int32)
        if hp.beam_size > 1:
            k, alpha = hp.beam_size, hp.length_penalty
            ids = beam_search.beam_loop(model, src, extra, k, alpha, hp.max_len, encoded, context)
            return ids[0][:, 0]
        return greedy_search.greedy_loop(model, src, extra, hp.max_len, encoded, context)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def translate(self, sentences):
        """Strings (N,) -> {"translations": strings (N,)}, each sentence alone."""
        # the search loops need a row: an empty batch decodes one empty sentence,
        # whose translation is dropped, and gives an empty batch
        n = tf.size(sentences)
        src, empty = self.sources(tf.concat([sentences, [""]], 0)[: tf.maximum(n, 1)])
        text = self.decode(self.best(src))
        return {"translations": tf.where(empty, tf.constant(""), text)[:n]}

    def _document(self, sentences):
        """The sentences (N,) of one document, in order, each translated with the
        encoder states of the memory_sentences (M) before it and the decoder states of
        the target_memory_sentences translations before it, as translate.py reads a
        document (:func:`document_decoding.document_loop`)."""
        src, empty = self.sources(sentences)
        out = document_decoding.document_loop(self.run.model, src, self.best, self.decode)
        return {"translations": tf.where(empty, tf.constant(""), out)}


def export(logdir: str, export_dir: str, overrides: dict, ckpt: str = "") -> str:
    """Write the SavedModel (via a temp folder, renamed when complete)."""
    hp, tok, model, path = checkpoints.load_run(logdir, overrides, ckpt, "export")
    if tok.kind == "bpe" and importlib.util.find_spec("tensorflow_text") is None:
        raise UserError("exporting a BPE model needs tensorflow-text: pip install tensorflow-text")
    if os.path.exists(export_dir) and not os.path.isdir(export_dir):
        raise UserError(f"{export_dir} exists and is not a folder; choose another --export_dir")
    module = ServingModule(model, tok, hp)
    signatures = {"serving_default": module.translate}
    said = "signature serving_default: sentences -> translations"
    if model.reads_documents:
        signatures["translate_document"] = module.translate_document
        said += "; translate_document: the sentences of one document -> translations"
    with files.atomic_path(export_dir) as tmp:
        tf.saved_model.save(module, tmp, signatures=signatures)
    print(f"export: {path} -> {export_dir} ({said})")
    return export_dir


def export_ctranslate2(logdir: str, out: str, overrides: dict, ckpt: str, quantization: str):
    """Write the CTranslate2 model directory (ctranslate.py), the sentencepiece model
    beside it."""
    hp, tok, model, path = checkpoints.load_run(logdir, overrides, ckpt, "export")
    if os.path.exists(out) and not os.path.isdir(out):
        raise UserError(f"{out} exists and is not a folder; choose another --export_dir")
    ctranslate.convert(model, tok, out, quantization, hp.prepro_dir)
    print(
        f"export: {path} -> {out} (CTranslate2, weights {quantization}; translate with "
        "ctranslate2.Translator and the source pieces, </S> added by the model)"
    )
    return out


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    overrides = {k: getattr(hp, k) for k in opts["_set"]}
    if opts["format"] not in ("savedmodel", "ctranslate2"):
        raise UserError(f"--format takes savedmodel or ctranslate2, not {opts['format']!r}")
    if opts["quantization"] != "none" and opts["format"] != "ctranslate2":
        raise UserError("--quantization applies to --format ctranslate2 only")
    run = os.path.basename(os.path.normpath(hp.logdir))
    if opts["format"] == "ctranslate2":
        out = opts["export_dir"] or os.path.join("exported", run + "_ct2")
        export_ctranslate2(hp.logdir, out, overrides, opts["ckpt"], opts["quantization"])
        return
    export(hp.logdir, opts["export_dir"] or os.path.join("exported", run), overrides, opts["ckpt"])


if __name__ == "__main__":
    cli.run_main(main)
