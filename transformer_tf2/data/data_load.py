"""Token ids, text cleaning, vocabularies, encoding and the tf.data pipeline (text files
are read by files.read_lines).

Encoding follows the updated Kyubyong code: the source gets </S>; the target becomes
``<S> y </S>``, from which the decoder input ``<S> y`` and the labels ``y </S>`` are the
shifted halves. Training batches are length-bucketed under a token budget, padded only to
their own longest sequence (rounded up to ``pad_multiple``), seeded and deterministic.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass

import numpy as np
import regex
import sentencepiece as spm
import tensorflow as tf

from transformer_tf2.config import hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import context
from transformer_tf2.utils import files

RESERVED = ("<PAD>", "<UNK>", "<S>", "</S>")  # ids 0..3 in every vocabulary
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

_LEGACY_CLEAN = regex.compile(r"[^\s\p{Latin}']")


def clean(line: str) -> str:
    """The legacy word-level cleaning: keep Latin letters, apostrophes and whitespace."""
    return _LEGACY_CLEAN.sub("", line)


class Tokenizer:
    """Maps sentences to ids and back, for a joint BPE model or two word vocabularies."""

    def __init__(self, hp: hparams.Hparams):
        d = hp.prepro_dir
        self.kind = hp.vocab_type
        if self.kind == "bpe":
            path = os.path.join(d, "bpe.model")
            _require(path, hp)
            self.sp = spm.SentencePieceProcessor(model_file=path)
            self.src_vocab_size = self.tgt_vocab_size = self.sp.get_piece_size()
        else:
            self.src_vocab = _read_vocab(os.path.join(d, f"vocab.{hp.src_lang}.tsv"), hp)
            self.tgt_vocab = _read_vocab(os.path.join(d, f"vocab.{hp.tgt_lang}.tsv"), hp)
            self.tgt_words = list(self.tgt_vocab)
            self.src_vocab_size, self.tgt_vocab_size = len(self.src_vocab), len(self.tgt_vocab)

    def _encode(
        self, lines: list[str], vocab: dict[str, int] | None, dropout: float = 0.0
    ) -> list[list[int]]:
        if self.kind == "bpe" and dropout:
            # BPE-dropout: sentencepiece skips each merge with probability ``dropout``
            # (``alpha`` of a BPE model). One thread: the draws then follow
            # spm.set_random_generator_seed alone, so a resumed epoch gets the same ids
            return self.sp.encode(
                list(lines), enable_sampling=True, alpha=dropout, nbest_size=-1, num_threads=1
            )
        if self.kind == "bpe":
            return self.sp.encode(list(lines))
        return [[vocab.get(w, UNK_ID) for w in clean(line).split()] for line in lines]

    def encode_src(self, lines: list[str], dropout: float = 0.0) -> list[list[int]]:
        """Token ids of source sentences, without </S>; ``dropout`` > 0: a BPE-dropout
        segmentation (BPE only)."""
        return self._encode(lines, None if self.kind == "bpe" else self.src_vocab, dropout)

    def encode_tgt(self, lines: list[str], dropout: float = 0.0) -> list[list[int]]:
        return self._encode(lines, None if self.kind == "bpe" else self.tgt_vocab, dropout)

    def decode_tgt(self, ids) -> str:
        """Detokenized target text; stops at </S>, skips <PAD>/<S>, out-of-range ids -> <UNK>."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i in (PAD_ID, BOS_ID):
                continue
            out.append(i if i < self.tgt_vocab_size else UNK_ID)
        if self.kind == "bpe":
            return self.sp.decode(out)
        return " ".join(self.tgt_words[i] for i in out)

    def tgt_tokens(self, ids) -> list[str]:
        """Target pieces (for attention plots)."""
        if self.kind == "bpe":
            return [self.sp.id_to_piece(int(i)) for i in ids]
        return [self.tgt_words[int(i)] for i in ids]

    def src_tokens(self, ids) -> list[str]:
        if self.kind == "bpe":
            return [self.sp.id_to_piece(int(i)) for i in ids]
        words = list(self.src_vocab)
        return [words[int(i)] for i in ids]


def _require(path: str, hp: hparams.Hparams) -> None:
    if not os.path.exists(path):
        raise UserError(
            f"{path} not found: run `python prepro.py` with the same --preset "
            f"and --prepro_dir first"
        )


def _read_vocab(path: str, hp: hparams.Hparams) -> dict[str, int]:
    _require(path, hp)
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2 or not parts[1].isdigit():
                raise UserError(f"{path}:{n}: expected 'token<TAB>count'; rerun prepro.py")
            vocab.setdefault(parts[0], len(vocab))
    if list(vocab)[:4] != list(RESERVED):
        raise UserError(
            f"{path}: the first four tokens must be {' '.join(RESERVED)}; rerun prepro.py"
        )
    return vocab


def load_tokenizer(hp: hparams.Hparams) -> Tokenizer:
    """The tokenizer of ``hp.prepro_dir``, after checking it was built for these hparams."""
    saved_path = os.path.join(hp.prepro_dir, "hparams.json")
    saved = hparams.load(saved_path)
    hparams.check_same(
        saved,
        hp,
        hparams.DATA_KEYS,
        f"the vocabulary in {hp.prepro_dir}",
        "rerun prepro.py with these settings or pass the matching --preset/--prepro_dir",
    )
    tok = Tokenizer(hp)
    if not os.path.exists(os.path.join(hp.prepro_dir, "stamp.json")):
        raise UserError(
            f"{hp.prepro_dir} is incomplete (preprocessing was interrupted); rerun prepro.py"
        )
    return tok


def vocab_files(hp: hparams.Hparams) -> list[str]:
    if hp.vocab_type == "bpe":
        return [os.path.join(hp.prepro_dir, "bpe.model")]
    return [os.path.join(hp.prepro_dir, f"vocab.{lang}.tsv") for lang in (hp.src_lang, hp.tgt_lang)]


def vocab_fingerprint(hp: hparams.Hparams) -> str:
    """sha256 of the vocabulary files: ties a checkpoint to the ids it was trained on."""
    digest = hashlib.sha256()
    for path in vocab_files(hp):
        _require(path, hp)
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def write_vocab_fingerprint(hp: hparams.Hparams) -> None:
    path = os.path.join(hp.logdir, "vocab.sha256")
    if not os.path.exists(path):
        files.atomic_write(path, vocab_fingerprint(hp) + "\n")


def check_vocab_fingerprint(hp: hparams.Hparams) -> None:
    """A checkpoint trained on another vocabulary than ``hp.prepro_dir``'s is an error."""
    path = os.path.join(hp.logdir, "vocab.sha256")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            saved = f.read().strip()
        if saved != vocab_fingerprint(hp):
            raise UserError(
                f"the checkpoint in {hp.logdir} was trained on another vocabulary "
                f"than the one in {hp.prepro_dir} (prepro.py was rerun with other "
                f"data or settings); use the original {hp.prepro_dir} or retrain"
            )


# ---------------------------------------------------------------------------------------
# Encoded corpora: flat id arrays with offsets, written once by prepro.py
# ---------------------------------------------------------------------------------------
def _flatten(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    flat = np.fromiter((i for s in seqs for i in s), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


def encode_pairs(
    tok: Tokenizer, src: list[str], tgt: list[str], dropout: float = 0.0
) -> dict[str, np.ndarray]:
    """Token ids of aligned sentences as flat arrays + offsets (specials not included);
    ``dropout`` > 0: a BPE-dropout segmentation, the draws seeded by the caller."""
    s_ids, s_off = _flatten(tok.encode_src(src, dropout))
    t_ids, t_off = _flatten(tok.encode_tgt(tgt, dropout))
    return dict(src_ids=s_ids, src_off=s_off, tgt_ids=t_ids, tgt_off=t_off)


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    with files.atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


@dataclass
class Corpus:
    """An encoded split. ``src(i)``/``tgt(i)`` are the raw ids of pair i (no specials);
    ``doc`` (n,) the index of pair i's document (talk), non-decreasing; None for a
    prepro_dir written before documents were kept (:attr:`docs` then makes every pair
    its own document)."""

    src_ids: np.ndarray
    src_off: np.ndarray
    tgt_ids: np.ndarray
    tgt_off: np.ndarray
    doc: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.src_off) - 1

    def src(self, i: int) -> np.ndarray:
        return self.src_ids[self.src_off[i] : self.src_off[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self.tgt_ids[self.tgt_off[i] : self.tgt_off[i + 1]]

    @property
    def src_lens(self) -> np.ndarray:
        """Encoder input lengths, </S> included."""
        return np.diff(self.src_off) + 1

    @property
    def tgt_lens(self) -> np.ndarray:
        """Decoder input (= label) lengths: one special token added."""
        return np.diff(self.tgt_off) + 1

    @property
    def docs(self) -> np.ndarray:
        """(n,) int32 document index of each pair (each pair its own without ``doc``)."""
        return self.doc if self.doc is not None else np.arange(len(self), dtype=np.int32)

    def documents(self) -> int:
        """The number of documents."""
        return int(self.docs[-1]) + 1 if len(self) else 0


def load_corpus(hp: hparams.Hparams, split: str) -> Corpus:
    path = os.path.join(hp.prepro_dir, f"{split}.npz")
    _require(path, hp)
    with np.load(path) as z:
        arrays = {k: z[k] for k in ("src_ids", "src_off", "tgt_ids", "tgt_off")}
        return Corpus(**arrays, doc=z["doc"] if "doc" in z.files else None)


def read_raw(hp: hparams.Hparams, split: str) -> tuple[list[str], list[str]]:
    """The raw (source, reference) sentences of a split, as prepro.py wrote them."""
    out = []
    for side in ("src", "tgt"):
        path = os.path.join(hp.prepro_dir, f"{split}.{side}")
        _require(path, hp)
        with open(path, encoding="utf-8", newline="") as f:  # a stray \r is not a line end
            out.append(f.read().split("\n")[:-1])
    return out[0], out[1]


def fits(corpus: Corpus, hp: hparams.Hparams) -> np.ndarray:
    """Indices of the pairs within maxlen1/maxlen2."""
    return np.flatnonzero((corpus.src_lens <= hp.maxlen1) & (corpus.tgt_lens <= hp.maxlen2))


def keep_by_length(corpus: Corpus, hp: hparams.Hparams, split: str = "train") -> np.ndarray:
    """Indices of pairs within maxlen1/maxlen2; logs how many were dropped."""
    idx = fits(corpus, hp)
    dropped = len(corpus) - len(idx)
    if dropped:
        print(
            f"data: dropped {dropped:,} of {len(corpus):,} {split} pairs longer than "
            f"maxlen1={hp.maxlen1} / maxlen2={hp.maxlen2}"
        )
    if not len(idx):
        raise UserError(
            f"no {split} pair in {hp.prepro_dir} fits maxlen1={hp.maxlen1} and "
            f"maxlen2={hp.maxlen2}; raise them"
        )
    return idx


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def make_batches(
    src_lens: np.ndarray, tgt_lens: np.ndarray, hp: hparams.Hparams, epoch: int
) -> list[np.ndarray]:
    """Group pair indices into batches of similar length; the order is seeded by epoch.

    Pairs are shuffled, then stably sorted by (target, source) length, cut greedily into
    batches whose ``rows * padded_length`` stays within ``tokens_per_batch`` (or into
    ``batch_size`` rows), and the batches are shuffled. A pair longer than the budget on
    its own gets a batch of its own.
    """
    rng = np.random.default_rng([hp.seed, epoch])
    order = rng.permutation(len(src_lens))
    order = order[np.lexsort((src_lens[order], tgt_lens[order]))]
    m = hp.pad_multiple
    batches, start, width = [], 0, 0
    for pos, i in enumerate(order):
        w = max(width, round_up(int(max(src_lens[i], tgt_lens[i])), m))
        rows = pos - start + 1
        full = rows > hp.batch_size if hp.batch_size > 0 else rows * w > hp.tokens_per_batch
        if full and rows > 1:
            batches.append(order[start:pos])
            start, w = pos, round_up(int(max(src_lens[i], tgt_lens[i])), m)
        width = w
    batches.append(order[start:])
    perm = rng.permutation(len(batches))
    return [batches[j] for j in perm]


def pad_batch(
    seqs: list[np.ndarray], multiple: int = 1, width: int = 0, rows: int = 0
) -> np.ndarray:
    """Right-pad with PAD to the longest (rounded up to ``multiple``), or to ``width``;
    ``rows`` > len(seqs) appends all-PAD rows."""
    width = width or round_up(max(len(s) for s in seqs), multiple)
    out = np.zeros((max(rows, len(seqs)), width), dtype=np.int32)
    for r, s in enumerate(seqs):
        out[r, : len(s)] = s
    return out


def build_batch(
    corpus: Corpus,
    idx: np.ndarray,
    multiple: int = 1,
    budget: int = 0,
    depth: int = 0,
    max_len: int = 0,
    target_depth: int = 0,
    target_max_len: int = 0,
) -> tuple[np.ndarray, ...]:
    """(source [N, T1], decoder input [N, T2], labels [N, T2]) for the pairs in idx; with
    ``depth`` > 0 also their context [N, depth, T_c], the depth sentences before each in
    its document, each cut to its last ``max_len`` tokens (:func:`context_batch`); with
    ``target_depth`` > 0 also the decoder inputs of the last target_depth of them
    [N, target_depth, T_t], each cut to its first ``target_max_len`` tokens.

    budget > 0 gives static shapes for XLA: source and target both padded to the batch's
    width W (the longer side, rounded up to ``multiple``) and all-PAD rows appended up
    to budget // W rows, so that there is one shape per width, at most
    max(maxlen1, maxlen2) / multiple shapes in all (the context: max_len wide).
    """
    eos, bos = np.array([EOS_ID], np.int32), np.array([BOS_ID], np.int32)
    srcs = [np.concatenate([corpus.src(i), eos]) for i in idx]
    decs = [np.concatenate([bos, corpus.tgt(i)]) for i in idx]
    labs = [np.concatenate([corpus.tgt(i), eos]) for i in idx]
    width = rows = 0
    if budget:
        width = round_up(max(len(s) for s in srcs + decs), multiple)
        rows = budget // width
    batch = tuple(pad_batch(x, multiple, width, rows) for x in (srcs, decs, labs))
    if not depth:
        return batch
    c_width = round_up(max_len, multiple) if budget else 0
    batch += (context_batch(corpus, idx, depth, max_len, c_width, rows),)
    if target_depth:
        t_width = round_up(target_max_len, multiple) if budget else 0
        batch += (context_batch(corpus, idx, target_depth, target_max_len, t_width, rows, True),)
    return batch


def context_batch(
    corpus: Corpus,
    idx: np.ndarray,
    depth: int,
    max_len: int = 0,
    width: int = 0,
    rows: int = 0,
    target: bool = False,
) -> np.ndarray:
    """The ``depth`` source sentences before each pair of idx (N,) in its own document,
    oldest first, as the encoder reads them (</S> at the end): (N, depth, T_c) int32,
    right-padded with PAD (to ``width``, if given); all PAD where the document has fewer
    sentences before the pair (the start of a document: no context). The corpus holds
    every pair, so a pair left out of training for its length still counts as context.
    ``max_len`` > 0 keeps the last max_len tokens of a longer sentence (the ones nearest
    the pair). ``rows`` > N appends all-PAD rows (as :func:`build_batch`).
    ``target``: their target sentences instead, as the decoder reads them (<S> first,
    no </S>: the positions its translation is fed at), ``max_len`` > 0 keeping the first
    max_len tokens (the positions count from <S>)."""
    out_rows = max(rows, len(idx))
    if not depth:
        return np.zeros((out_rows, 0, max(width, 1)), np.int32)
    eos, bos, docs = np.array([EOS_ID], np.int32), np.array([BOS_ID], np.int32), corpus.docs
    sents = []
    for i in idx:
        for j in range(depth, 0, -1):  # the sentence j before the pair, oldest first
            before = int(i) - j
            if before < 0 or docs[before] != docs[i]:
                sents.append(np.zeros(0, np.int32))
            elif target:
                ids = np.concatenate([bos, corpus.tgt(before)])
                sents.append(ids[:max_len] if max_len else ids)
            else:
                ids = np.concatenate([corpus.src(before), eos])
                sents.append(ids[-max_len:] if max_len else ids)
    width = width or max([1] + [len(x) for x in sents])
    flat = pad_batch(sents or [np.zeros(0, np.int32)], width=width, rows=out_rows * depth)
    return flat.reshape(out_rows, depth, width)


def context_depths(hp: hparams.Hparams) -> tuple[int, int]:
    """How many earlier sentences a training pair carries, and of how many of the last
    of them the targets too: what the encoder's memory (num_blocks x memory_sentences)
    and the decoder's (num_blocks x target_memory_sentences, each with its source's
    encoder context) depend on (context.context_needs, model.Transformer.forward)."""
    return context.context_depths(hp.num_blocks, hp.memory_sentences, hp.target_memory_sentences)


def batch_spec(hp: hparams.Hparams) -> list:
    """The tensors of a training batch (:func:`build_batch`): source, decoder input and
    labels (N, T) int32; with document memory the context (N, K, T_c), and with a
    decoder memory the context's targets (N, K_t, T_t) (:func:`context_depths`)."""
    depth, target_depth = context_depths(hp)
    spec = [tf.TensorSpec([None, None], tf.int32)] * 3
    spec += [tf.TensorSpec([None, depth, None], tf.int32)] * bool(depth)
    return spec + [tf.TensorSpec([None, target_depth, None], tf.int32)] * bool(target_depth)


def padding_fraction(
    batches: list[np.ndarray], corpus: Corpus, multiple: int = 1
) -> tuple[float, float]:
    """Fractions of padded (source, target) positions over the given batches."""
    s_real = t_real = s_all = t_all = 0
    sl, tl = corpus.src_lens, corpus.tgt_lens
    for b in batches:
        s_real += int(sl[b].sum())
        t_real += int(tl[b].sum())
        s_all += len(b) * round_up(int(sl[b].max()), multiple)
        t_all += len(b) * round_up(int(tl[b].max()), multiple)
    return 1 - s_real / s_all, 1 - t_real / t_all


# Batches built ahead of the training step, in tf.data's own thread. One Python generator
# feeds the pipeline, so a small fixed buffer is all it needs. tf.data's autotuning is off:
# with it on, about one epoch in four ran on until a wake-up of its model thread (which
# sleeps 10 ms, 20 ms, 40 ms, ... from the iterator's start), so that an epoch of 23 s
# took 41 s; with it off, none of 18 did (the demo's batches, a sleeping consumer).
PREFETCH = 4
FIXED_PIPELINE = tf.data.Options()
FIXED_PIPELINE.autotune.enabled = False


class TrainData:
    """The training split, filtered by length, with per-epoch batch plans; with
    ``bpe_dropout``, each epoch's own segmentation of it (:meth:`epoch_corpus`)."""

    def __init__(self, hp: hparams.Hparams, replicas: int = 1):
        """``replicas`` > 1: global batches of replicas x tokens_per_batch (or
        replicas x batch_size rows), so that each replica gets about one budget."""
        self.hp = hp
        self.plan_hp = dataclasses.replace(
            hp, tokens_per_batch=hp.tokens_per_batch * replicas, batch_size=hp.batch_size * replicas
        )
        self.corpus = load_corpus(hp, "train")
        self.keep = keep_by_length(self.corpus, hp)
        self._epoch = None  # (epoch, corpus, keep) of the last BPE-dropout segmentation
        if hp.bpe_dropout:
            self._resegment_setup()
        docs = self.corpus.documents()
        depth, target_depth = context_depths(hp)
        setting = (
            f"memory_sentences={hp.memory_sentences}"
            if hp.memory_sentences
            else f"target_memory_sentences={hp.target_memory_sentences}"
        )
        if depth and docs == len(self.corpus):
            print(
                f"data: {setting}, but the training pairs in "
                f"{hp.prepro_dir} have no documents (plain parallel text, or a prepro_dir "
                "from before documents were kept): every pair is its own, the memory stays "
                "empty"
            )
        elif depth:
            targets = f" and the targets of the last {target_depth}" if target_depth else ""
            print(
                f"data: {len(self.corpus):,} training pairs in {docs:,} documents; each pair "
                f"carries the {depth} sentence{'s' * (depth > 1)} before it{targets} "
                f"(context.context_needs)"
            )

    def _resegment_setup(self) -> None:
        """Read the raw training text that :meth:`epoch_corpus` segments, and say what
        BPE-dropout does to the number of tokens."""
        hp = self.hp
        self._tok = Tokenizer(hp)
        self._raw = read_raw(hp, "train")
        if len(self._raw[0]) != len(self.corpus):
            raise UserError(
                f"{hp.prepro_dir}/train.src has {len(self._raw[0]):,} lines but train.npz "
                f"{len(self.corpus):,} pairs: rerun prepro.py with --force"
            )
        corpus, keep = self.epoch_corpus(0)
        before = len(self.corpus.src_ids) + len(self.corpus.tgt_ids)
        after = len(corpus.src_ids) + len(corpus.tgt_ids)
        longer = len(corpus) - len(keep)
        over = (
            f"; {longer:,} of its pairs exceed maxlen1/maxlen2 and are left out" if longer else ""
        )
        print(
            f"data: bpe_dropout={hp.bpe_dropout:g}: each epoch segments the training pairs "
            f"anew; epoch 1 has {after:,} source and target tokens against {before:,} in "
            f"prepro.py's segmentation ({after / max(before, 1) - 1:+.1%}){over}"
        )

    def epoch_corpus(self, epoch: int) -> tuple[Corpus, np.ndarray]:
        """The pairs ``epoch`` trains on and the indices of those within maxlen1/maxlen2.

        prepro.py's ids; with ``bpe_dropout`` (Provilkov et al. 2020) the epoch's own
        segmentation of the raw text, each BPE merge skipped with that probability. The
        draws are seeded by (seed, epoch): an epoch gets the same ids in every worker
        and on every resume, so its batch plan and the position within it hold.
        """
        hp = self.hp
        if not hp.bpe_dropout:
            return self.corpus, self.keep
        if self._epoch is None or self._epoch[0] != epoch:
            spm.set_random_generator_seed(
                int(np.random.SeedSequence([hp.seed, epoch]).generate_state(1)[0])
            )
            arrays = encode_pairs(self._tok, *self._raw, hp.bpe_dropout)
            corpus = Corpus(**arrays, doc=self.corpus.doc)
            keep = fits(corpus, hp)
            if not len(keep):
                raise UserError(
                    f"no training pair of epoch {epoch + 1} fits maxlen1={hp.maxlen1} and "
                    f"maxlen2={hp.maxlen2} with bpe_dropout={hp.bpe_dropout:g}; raise them"
                )
            self._epoch = (epoch, corpus, keep)
        return self._epoch[1], self._epoch[2]

    def batches(self, epoch: int) -> list[np.ndarray]:
        corpus, keep = self.epoch_corpus(epoch)
        plan = make_batches(corpus.src_lens[keep], corpus.tgt_lens[keep], self.plan_hp, epoch)
        return [keep[b] for b in plan]

    def dataset(self, epoch: int, skip: int = 0, plan: list | None = None):
        """A tf.data.Dataset of (src, dec_in, labels) int32 batches for one epoch, plus
        their context (:func:`build_batch`) for a model with ``memory_sentences``.

        ``skip`` leaves out the first batches (those already trained on before a resume);
        ``plan`` is the epoch's :meth:`batches`, if the caller has it already.
        """
        plan = (self.batches(epoch) if plan is None else plan)[skip:]
        corpus, m = self.epoch_corpus(epoch)[0], self.hp.pad_multiple
        # XLA compiles one program per shape: give it few (see build_batch)
        budget = (
            self.plan_hp.tokens_per_batch if self.hp.jit_compile and self.hp.batch_size == 0 else 0
        )

        (depth, target_depth), hp = context_depths(self.hp), self.hp

        def gen():
            for idx in plan:
                yield build_batch(
                    corpus, idx, m, budget, depth, hp.maxlen1, target_depth, hp.maxlen2
                )

        specs = tuple(batch_spec(hp))
        ds = tf.data.Dataset.from_generator(gen, output_signature=specs)
        return ds.prefetch(PREFETCH).with_options(FIXED_PIPELINE)


def eval_batches(
    src_ids: list[np.ndarray], batch_size: int, max_src_len: int, multiple: int = 1, width: int = 0
):
    """Yield (original indices, padded source [N, T1]) in batches of similar length.

    Sources are sorted by length so that batches carry little padding; callers restore
    the original order with the returned indices. Sources longer than ``max_src_len``
    (</S> included) are truncated. Each batch is padded to its longest source rounded up
    to ``multiple``, and to at least ``width``.
    """
    eos = np.array([EOS_ID], np.int32)
    seqs = [np.concatenate([np.asarray(s[: max_src_len - 1], np.int32), eos]) for s in src_ids]
    order = np.argsort([len(s) for s in seqs], kind="stable")
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = [seqs[i] for i in idx]
        yield idx, pad_batch(batch, width=max(width, round_up(max(map(len, batch)), multiple)))
