"""Read the corpus, build the vocabulary and pre-encode every split.

    python prepro.py                                   # demo corpus (generated if absent)
    python prepro.py --preset multi30k --data_dir data/multi30k
    python prepro.py --preset iwslt2016 --download     # fetch the WIT3 release, then preprocess
    python prepro.py --preset iwslt2016 --archive ~/Downloads/2016-01.tgz   # fetched by hand

Readers (section "Training Data" of the paper uses WMT; we follow Kyubyong and use IWSLT 2016):
  * IWSLT 2016 TED layout: ``train.tags.de-en.{de,en}`` (metadata lines start with ``<`` and
    are dropped; ``<talkid>`` names the talk of the lines after it) and
    ``IWSLT16.TED.tst201X.de-en.{de,en}.xml`` (only ``<seg>`` text kept, each in the talk of
    its ``<doc docid=...>``);
  * plain parallel text, one sentence per line, optionally gzipped (Multi30k): no
    documents, each line is one.

Writes into ``prepro_dir``: ``{train,dev,test}.{src,tgt}`` (raw sentences, UTF-8),
the vocabulary (``bpe.model`` for a joint sentencepiece BPE, or ``vocab.<lang>.tsv`` with
``token<TAB>count`` lines for the legacy word level, <PAD>=0 <UNK>=1 <S>=2 </S>=3),
``{train,dev,test}.npz`` (token ids, encoded once, and ``doc``, the index of each pair's
document in order) and ``hparams.json``.
"""

# ruff: noqa: E402  (the script answers --help before TensorFlow is imported: cli.start)
from __future__ import annotations

from transformer_tf2.config import cli, hparams

SCRIPT = cli.Script(
    "prepro",
    __doc__,
    fields=("data", "vocabulary", "seed"),
    options={
        "download": (False, "fetch the IWSLT 2016 archive into data_dir first"),
        "archive": (
            "",
            "read IWSLT 2016 from a file you fetched: the WIT3 release 2016-01.tgz, its "
            "texts/de/en/de-en.tgz, or their extracted folder (tarballs go into data_dir)",
        ),
        "force": (False, "rebuild even if prepro_dir is up to date"),
        "vocab_from": (
            "",
            "encode the corpus with the vocabulary of this trained run's logdir (or of this "
            "prepro_dir), for fine-tuning it: train.py --init_from",
        ),
    },
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import collections
import io
import json
import os
import shutil
import time
import xml.etree.ElementTree as ET

import numpy as np
import sentencepiece as spm

from demo import corpus as demo_corpus
from demo import documents as demo_documents
from transformer_tf2.config import parents
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load, download
from transformer_tf2.utils import files

SPLITS = ("train", "dev", "test")


# ---------------------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------------------
def read_iwslt_train(path: str) -> tuple[list[str], list[str]]:
    """(text lines, talk id of each) of ``train.tags.de-en.*``: lines starting with '<'
    are talk metadata, and its ``<talkid>N</talkid>`` line starts talk N. A text line
    before any talk id is a document of its own (``line<k>``)."""
    texts, docs, talk = [], [], None
    for line in files.read_lines(path):
        if line.startswith("<"):
            if line.startswith("<talkid>") and line.endswith("</talkid>"):
                talk = line[len("<talkid>") : -len("</talkid>")].strip()
            continue
        texts.append(line)
        docs.append(talk if talk is not None else f"line{len(texts)}")
    return texts, docs


def read_iwslt_xml(path: str) -> tuple[list[str], list[str]]:
    """(``<seg>`` texts, document id of each) of an IWSLT ``.xml`` file in document
    order: entities and CDATA unescaped, the text inside nested tags kept, whitespace runs
    made one space. A segment's document is the ``docid`` of its ``<doc>`` (else the
    ``<talkid>`` inside it); a segment outside any ``<doc>`` is a document of its own."""
    text = files.read_text(path)
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        line, col = e.position
        raise UserError(
            f"{path}:{line}:{col}: malformed XML ({str(e).split(':')[0]}); "
            f"check that every <seg> is closed by </seg>"
        ) from None
    doc_of = {}
    for k, doc in enumerate(root.iter("doc")):
        name = doc.get("docid") or (doc.findtext("talkid") or "").strip() or f"doc{k + 1}"
        for seg in doc.iter("seg"):
            doc_of.setdefault(seg, name)
    texts, docs = [], []
    for seg in root.iter("seg"):
        texts.append(" ".join("".join(seg.itertext()).split()))
        docs.append(doc_of.get(seg, f"seg{len(texts)}"))
    return texts, docs


def document_index(docs: list[str]) -> np.ndarray:
    """Document ids (one per sentence, in order) -> (n,) int32 index of the document,
    counting from 0 and growing by one at every change of id: each run of sentences
    with one id is one document."""
    if not docs:
        return np.zeros(0, np.int32)
    changes = np.fromiter((a != b for a, b in zip(docs[1:], docs[:-1])), bool, len(docs) - 1)
    return np.concatenate([[0], np.cumsum(changes)]).astype(np.int32)


def _parallel_path(hp: hparams.Hparams, stem: str, lang: str) -> str:
    base = os.path.join(hp.data_dir, f"{stem}.{lang}")
    return base + ".gz" if not os.path.exists(base) and os.path.exists(base + ".gz") else base


def corpus_files(hp: hparams.Hparams) -> dict[str, tuple[str, str]]:
    """split -> (source path, target path) for the configured corpus."""
    s, t = hp.src_lang, hp.tgt_lang
    if hp.corpus == "parallel":
        stems = dict(train=hp.train_stem, dev=hp.dev_stem, test=hp.test_stem)
        return {k: (_parallel_path(hp, v, s), _parallel_path(hp, v, t)) for k, v in stems.items()}
    pair, d = f"{s}-{t}", hp.data_dir
    paths = {
        "train": (
            os.path.join(d, f"train.tags.{pair}.{s}"),
            os.path.join(d, f"train.tags.{pair}.{t}"),
        )
    }
    for split, name in (("dev", hp.iwslt_dev), ("test", hp.iwslt_test)):
        paths[split] = tuple(
            os.path.join(d, f"IWSLT16.TED.{name}.{pair}.{lang}.xml") for lang in (s, t)
        )
    return paths


def read_split(hp: hparams.Hparams, split: str) -> tuple[list[str], list[str], list[str]]:
    """Aligned (source, target, document id) of one split's sentences; a count mismatch,
    or a pair whose two sides name different talks, is an error. Plain parallel text has
    no documents: each line is one (its line number)."""
    src_path, tgt_path = corpus_files(hp)[split]
    if hp.corpus == "parallel":
        src, tgt = files.read_lines(src_path), files.read_lines(tgt_path)
        docs = [str(k) for k in range(1, len(src) + 1)]
        tgt_docs = docs[: len(tgt)]
    else:
        reader = read_iwslt_train if split == "train" else read_iwslt_xml
        (src, docs), (tgt, tgt_docs) = reader(src_path), reader(tgt_path)
    if len(src) != len(tgt):
        raise UserError(
            f"{src_path} has {len(src)} sentences but {tgt_path} has {len(tgt)}; "
            f"the two sides must be aligned line by line"
        )
    for k, (a, b) in enumerate(zip(docs, tgt_docs)):
        if a != b:
            raise UserError(
                f"sentence {k + 1} is in talk {a!r} in {src_path} but in talk {b!r} in "
                f"{tgt_path}; the two sides must hold the same talks in the same order"
            )
    if split == "train":  # drop pairs with an empty side (IWSLT has a few)
        keep = [k for k, (a, b) in enumerate(zip(src, tgt)) if a and b]
        src, tgt, docs = ([x[k] for k in keep] for x in (src, tgt, docs))
    if not src:
        raise UserError(f"{src_path} holds no sentence pairs (after dropping empty lines)")
    return src, tgt, docs


# ---------------------------------------------------------------------------------------
# Vocabularies
# ---------------------------------------------------------------------------------------
def build_word_vocab(sentences: list[str], min_cnt: int) -> list[tuple[str, int]]:
    """Legacy word vocabulary: the four reserved tokens, then words by falling count.

    Words are what :func:`data_load.clean` leaves (``[^\\s\\p{Latin}']`` removed), split on
    whitespace; words seen fewer than ``min_cnt`` times are left out (they become <UNK>).
    """
    counts = collections.Counter(w for line in sentences for w in data_load.clean(line).split())
    words = [(w, c) for w, c in counts.most_common() if c >= min_cnt]
    return [(tok, 1_000_000_000) for tok in data_load.RESERVED] + words


def write_word_vocab(path: str, vocab: list[tuple[str, int]]) -> None:
    files.atomic_write(path, "".join(f"{w}\t{c}\n" for w, c in vocab))


def train_bpe(sentences: list[str], prefix: str, vocab_size: int, seed: int) -> None:
    """Train a joint BPE sentencepiece model with the reserved ids of the word vocabulary."""
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type="bpe",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            character_coverage=1.0,
            pad_id=data_load.PAD_ID,
            unk_id=data_load.UNK_ID,
            bos_id=data_load.BOS_ID,
            eos_id=data_load.EOS_ID,
            pad_piece=data_load.RESERVED[0],
            unk_piece=data_load.RESERVED[1],
            bos_piece=data_load.RESERVED[2],
            eos_piece=data_load.RESERVED[3],
            input_sentence_size=400_000,
            shuffle_input_sentence=True,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
        )
    except RuntimeError as e:
        # too few pieces for the corpus's distinct characters, or (a hard limit) too many
        more = "Increase vocab_size" in str(e)
        raise UserError(
            f"sentencepiece could not build a {vocab_size}-piece BPE model "
            f"({e}); try a {'larger' if more else 'smaller'} --vocab_size"
        ) from None
    files.atomic_write(prefix + ".model", model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    files.atomic_write(
        prefix + ".vocab",
        "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size())),
    )


# ---------------------------------------------------------------------------------------
# The pipeline
# ---------------------------------------------------------------------------------------
def _stamp(hp: hparams.Hparams) -> dict:
    """What the outputs depend on: the data hparams and the input files' sizes and times."""
    inputs = {}
    for src, tgt in corpus_files(hp).values():
        for p in (src, tgt):
            st = os.stat(p)
            inputs[os.path.abspath(p)] = [st.st_size, int(st.st_mtime)]
    keys = hparams.DATA_KEYS + (
        "data_dir",
        "train_stem",
        "dev_stem",
        "test_stem",
        "iwslt_dev",
        "iwslt_test",
        "seed",
    )
    return {"hparams": {k: getattr(hp, k) for k in keys}, "inputs": inputs}


def outputs(hp: hparams.Hparams) -> list[str]:
    d = hp.prepro_dir
    text = [os.path.join(d, f"{s}.{side}") for s in SPLITS for side in ("src", "tgt")]
    return data_load.vocab_files(hp) + text + [os.path.join(d, f"{s}.npz") for s in SPLITS]


def _complete(hp: hparams.Hparams) -> bool:
    return all(os.path.exists(p) for pair in corpus_files(hp).values() for p in pair)


def locate_iwslt(hp: hparams.Hparams, archive: str = "") -> hparams.Hparams:
    """hp with ``data_dir`` set to the folder that holds the IWSLT files.

    The source is ``archive`` (``--archive``) if given, else ``data_dir`` itself; either
    may be the WIT3 release tarball (2016-01.tgz), the pair's tarball (de-en.tgz) or a
    folder holding one of them or their extracted files (see
    :func:`download.iwslt_folders` and :func:`download.find_iwslt_archive`). A folder
    with all the files becomes ``data_dir``; a tarball is unpacked into ``data_dir`` (into
    ``<pair>/`` beside it when ``data_dir`` is the tarball), unless the files are there.
    """
    pair = f"{hp.src_lang}-{hp.tgt_lang}"
    source, dest = archive or hp.data_dir, hp.data_dir
    if archive and not os.path.exists(archive):
        raise UserError(
            f"--archive {archive} not found; pass the path of {download.IWSLT_RELEASE}.tgz, "
            f"of {pair}.tgz or of a folder holding train.tags.{pair}.{hp.src_lang}"
        )
    if not archive:
        if os.path.isfile(hp.data_dir):
            dest = os.path.join(os.path.dirname(hp.data_dir), pair)
        elif not os.path.isdir(hp.data_dir) or _complete(hp):
            return hp
    for folder in download.iwslt_folders(source, pair):
        found = hparams.apply(hp, {"data_dir": folder})
        if _complete(found):
            if folder != hp.data_dir:
                print(f"prepro: reading the IWSLT files in {folder}")
            return found
    tarball = download.find_iwslt_archive(source, pair)
    if tarball is None:
        if archive:
            train = os.path.basename(corpus_files(hp)["train"][0])
            raise UserError(
                f"{archive} holds neither the IWSLT files ({train}, ...) nor a tarball of them "
                f"({pair}.tgz, {download.IWSLT_RELEASE}.tgz); get the release from "
                f"{download.IWSLT_PAGE}"
            )
        return hp
    hp = hparams.apply(hp, {"data_dir": dest})
    if not _complete(hp):
        print(f"prepro: unpacking {tarball} into {dest}")
        try:
            download.extract_iwslt(tarball, dest, pair)
        except download.DownloadError as e:
            raise UserError(str(e)) from None
    return hp


def ensure_corpus(
    hp: hparams.Hparams, fetch: bool, archive: str = "", preset: str = "iwslt2016"
) -> hparams.Hparams:
    """Make the raw corpus present: generate the demo corpus, find or unpack the IWSLT
    files (:func:`locate_iwslt`), or download if asked. Returns hp with the ``data_dir``
    that holds the files; ``preset`` names the preset in the advice of a failed download."""
    if archive and hp.corpus != "iwslt2016":
        raise UserError(
            f"--archive reads the IWSLT 2016 release, but the corpus is {hp.corpus}; "
            f"use it with --preset iwslt2016"
        )
    if hp.corpus == "demo":
        _ensure_demo(hp)
        return hp
    if hp.corpus == "iwslt2016":
        hp = locate_iwslt(hp, archive)
    missing = [p for pair in corpus_files(hp).values() for p in pair if not os.path.exists(p)]
    if not missing:
        return hp
    if fetch:
        kind = "iwslt2016" if hp.corpus == "iwslt2016" else "multi30k"
        if hparams.preset(preset).corpus != "iwslt2016":
            preset = "iwslt2016"
        rerun = f"python prepro.py --preset {preset} --archive PATH/{download.IWSLT_RELEASE}.tgz"
        try:
            download.download_corpus(kind, hp.data_dir, rerun=rerun)
        except download.DownloadError as e:
            raise UserError(str(e)) from None
        missing = [p for p in missing if not os.path.exists(p)]
        if not missing:
            return hp
    more = ", --archive FILE (IWSLT 2016)" if hp.corpus == "iwslt2016" else ""
    raise UserError(
        f"{missing[0]} not found: pass --data_dir DIR holding the corpus{more}, or add "
        f"--download to fetch it"
    )


def _ensure_demo(hp: hparams.Hparams) -> None:
    """Generate the demo corpus unless it is there with the same settings."""
    missing = [p for pair in corpus_files(hp).values() for p in pair if not os.path.exists(p)]
    marker = os.path.join(hp.data_dir, "demo.json")
    settings = {"seed": hp.seed, "demo_size": hp.demo_size}
    episodes = None
    if hp.demo_documents:  # the document mode (the default corpus is unchanged)
        settings["documents"] = hp.demo_documents
        episodes = demo_documents.Episodes(hp.demo_documents, hp.seed)
    wanted = json.dumps(settings)
    current = open(marker, encoding="utf-8").read() if os.path.exists(marker) else ""
    if missing or current != wanted:
        print(f"prepro: generating the demo corpus in {hp.data_dir}")
        demo_corpus.write_demo_corpus(
            hp.data_dir, seed=hp.seed, n_train=hp.demo_size, episodes=episodes
        )
        files.atomic_write(marker, wanted)


def parent_vocabulary(
    hp: hparams.Hparams, source: str, explicit: set = frozenset()
) -> tuple[hparams.Hparams, list[str], str]:
    """``--vocab_from``: (hp with the vocabulary settings of ``source``, its vocabulary
    files, their fingerprint). ``source`` is a trained run's logdir (its vocabulary is the
    one in the prepro_dir it names, whose fingerprint must match the one the run
    recorded) or a prepro_dir. A command-line vocabulary setting (``explicit``) that
    differs, or ``prepro_dir`` being the source's own, is one UserError line."""
    parent = parents.read_parent(source, "vocab_from")
    here = hparams.apply(parent, {"prepro_dir": source})
    if all(os.path.isfile(p) for p in data_load.vocab_files(here)):
        parent = here  # a prepro_dir
    hp = parents.taken_from(hp, parent, parents.VOCAB_KEYS, explicit, f"the vocabulary of {source}")
    paths, fingerprint = data_load.vocab_files(parent), data_load.vocab_fingerprint(parent)
    recorded = os.path.join(source, "vocab.sha256")
    if parent is not here and os.path.isfile(recorded):
        with open(recorded, encoding="utf-8") as f:
            if f.read().strip() != fingerprint:
                raise UserError(
                    f"--vocab_from {source}: the vocabulary in {parent.prepro_dir} is not the "
                    f"one the run was trained on (prepro.py was rerun there); restore it, or "
                    f"pass the prepro_dir that holds the run's vocabulary"
                )
    if os.path.abspath(hp.prepro_dir) == os.path.abspath(parent.prepro_dir):
        raise UserError(
            f"--vocab_from {source}: --prepro_dir {hp.prepro_dir} is where that vocabulary "
            f"lives; pass another --prepro_dir for the new corpus"
        )
    return hp, paths, fingerprint


def copy_vocabulary(paths: list[str], prepro_dir: str) -> None:
    """The parent's vocabulary files (and sentencepiece's readable .vocab), into
    ``prepro_dir`` under their own names."""
    extra = [p[: -len(".model")] + ".vocab" for p in paths if p.endswith(".model")]
    for path in paths + [p for p in extra if os.path.isfile(p)]:
        with files.atomic_path(os.path.join(prepro_dir, os.path.basename(path))) as tmp:
            shutil.copyfile(path, tmp)


def preprocess(
    hp: hparams.Hparams,
    fetch: bool = False,
    force: bool = False,
    archive: str = "",
    preset: str = "iwslt2016",
    vocab_from: str = "",
    explicit: set = frozenset(),
) -> hparams.Hparams:
    """Run the whole preprocessing step; returns the hparams it saved (``data_dir`` is
    where the corpus was found, see :func:`ensure_corpus`). ``vocab_from``: encode with
    that run's (or prepro_dir's) vocabulary instead of building one
    (:func:`parent_vocabulary`; ``explicit``: the settings given on the command line)."""
    t0 = time.time()
    vocabulary = None
    if vocab_from:
        hp, *vocabulary = parent_vocabulary(hp, vocab_from, explicit)
    hp = ensure_corpus(hp, fetch, archive, preset)
    stamp = _stamp(hp)
    if vocabulary:
        stamp["vocab_from"] = vocabulary[1]  # the fingerprint of the vocabulary taken
    stamp_path = os.path.join(hp.prepro_dir, "stamp.json")
    if not force and all(os.path.exists(p) for p in outputs(hp)) and os.path.exists(stamp_path):
        with open(stamp_path, encoding="utf-8") as f:
            if json.load(f) == stamp:
                print(f"prepro: {hp.prepro_dir} is up to date")
                hparams.save(hp, os.path.join(hp.prepro_dir, "hparams.json"))
                return hp
    if os.path.exists(stamp_path):  # outputs are about to change: never "up to date" midway
        os.remove(stamp_path)
    os.makedirs(hp.prepro_dir, exist_ok=True)
    data = {split: read_split(hp, split) for split in SPLITS}
    doc_index = {split: document_index(docs) for split, (_, _, docs) in data.items()}
    for split, (src, tgt, _) in data.items():
        count = int(doc_index[split][-1]) + 1
        print(f"prepro: {split}: {len(src):,} sentence pairs in {count:,} documents")
        files.atomic_write(os.path.join(hp.prepro_dir, f"{split}.src"), "\n".join(src) + "\n")
        files.atomic_write(os.path.join(hp.prepro_dir, f"{split}.tgt"), "\n".join(tgt) + "\n")

    train_src, train_tgt, _ = data["train"]
    if vocabulary:
        copy_vocabulary(vocabulary[0], hp.prepro_dir)
        print(f"prepro: the vocabulary of {vocab_from}, not one of this corpus")
    elif hp.vocab_type == "bpe":
        train_bpe(train_src + train_tgt, os.path.join(hp.prepro_dir, "bpe"), hp.vocab_size, hp.seed)
    else:
        for lang, sents in ((hp.src_lang, train_src), (hp.tgt_lang, train_tgt)):
            vocab = build_word_vocab(sents, hp.min_cnt)
            write_word_vocab(os.path.join(hp.prepro_dir, f"vocab.{lang}.tsv"), vocab)
    hparams.save(hp, os.path.join(hp.prepro_dir, "hparams.json"))

    tok = data_load.Tokenizer(hp)
    for split, (src, tgt, _) in data.items():
        arrays = dict(data_load.encode_pairs(tok, src, tgt), doc=doc_index[split])
        data_load.save_npz(os.path.join(hp.prepro_dir, f"{split}.npz"), arrays)
    print(
        f"prepro: vocabulary {tok.src_vocab_size:,} (source) / {tok.tgt_vocab_size:,} "
        f"(target) types, written to {hp.prepro_dir} in {time.time() - t0:.1f}s"
    )
    files.atomic_write(stamp_path, json.dumps(stamp, indent=1, sort_keys=True))
    return hp


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    preprocess(
        hp,
        fetch=opts["download"],
        force=opts["force"],
        archive=opts["archive"],
        preset=opts["_preset"],
        vocab_from=opts["vocab_from"],
        explicit=opts["_set"],
    )


if __name__ == "__main__":
    cli.run_main(main)
