"""Translate a test set with a trained model and score it.

    python eval.py                                 # demo: the default model, test split
    python eval.py --preset multi30k --ckpt log/multi30k/best/ckpt-9000
    python eval.py --logdir log/demo --test_src my.de --test_ref my.en

Loads the run's own hparams from ``<logdir>/hparams.json``, decodes autoregressively
(greedy, batched, each sentence stopping at </S>) and writes ``results/<model_name>``
in the legacy format: ``- source:``, ``- expected:``, ``- got:`` blocks, then
``Bleu Score = X``, plus ``results/<model_name>.json`` with every figure. The results of
a ``--test_src`` file are named after it as well (``<model_name>_my-<digest>``: the
file's name and the first 8 hex digits of a digest of its lines), so that they never
replace the test set's or another file's. The figures:

* ``Bleu Score`` (legacy): nltk ``corpus_bleu`` (4-gram, uniform weights, no smoothing)
  x 100 over whitespace tokens of the legacy-cleaned text (``[^\\s\\p{Latin}']`` removed),
  counting only pairs where both reference and hypothesis have more than 3 tokens - the
  TF1 eval.py's formula, here over the whole test set;
* ``sacreBLEU``: the standard figure, cased, detokenized text, tokenizer 13a, with its
  signature;
* ``sacreBLEU, lowercased``: the same on lowercased text (``sacrebleu -lc``, signature
  ``case:lc``), the figure most published Multi30k results give;
* ``BLEU (tokenize=none)``: cased raw text split on whitespace, which equals
  multi-bleu.perl on untokenized text, the figure of the 2019 Kyubyong README;
* ``chrF``: sacreBLEU's chrF2.

A model with ``memory_sentences`` reads each document in order (prepro's talks; in
``--test_src``, a blank line ends a document) with the encoder states of its earlier
sentences reused (docs/document_context.md).

With ``--length_buckets 16,24`` it adds sacreBLEU by source length: buckets of at most 16,
17-24 and at least 25 source tokens (the model's tokens, </S> not counted), each with its
sentence count and a 95% bootstrap interval (1000 resamplings of the bucket's sentences,
fixed seed), in the results file and as ``length_buckets`` in the JSON.

With ``--legacy_protocol true`` (set by ``--preset iwslt2016_legacy``) every figure is
computed on the TF1 eval.py's subset, decoded its way, and ``Bleu Score`` is computed as
it was: only pairs whose source and reference fit maxlen1 / maxlen2 with </S> counted, in
file order, cut to whole batches of ``batch_size`` (it dropped the last partial batch);
sources and references cleaned as above; greedy decoding of maxlen2 tokens from sources
padded to maxlen1; hypotheses are the literal target words before </S> (``<UNK>``
stays), scored as they are against the cleaned word sequences of the references. The
results file is ``results/<model_name>_legacy``.
"""

# ruff: noqa: E402  (the script answers --help before TensorFlow is imported: cli.start)
from __future__ import annotations

from transformer_tf2.config import cli, hparams

SCRIPT = cli.Script(
    "eval",
    __doc__,
    fields=cli.DECODING_FIELDS,
    reads_run=True,
    options={
        "ckpt": ("", "checkpoint: a path, last or best (default: the run's default model)"),
        "test_src": ("", "a source file to translate instead of the test split"),
        "test_ref": ("", "its reference translations, line by line"),
        "length_buckets": ("", "e.g. 16,24: sacreBLEU per source length (<=16, 17-24, >=25)"),
        "contrastive": ("", "a contrastive set (JSON lines): accuracy of forced-decoding scores"),
        "ensemble": ("", "LOGDIR,LOGDIR,...: decode with these runs as one (instead of --logdir)"),
    },
    note=cli.DECODING_NOTE,
    text_inputs=("test_src", "test_ref"),
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import hashlib
import json
import math
import os
import re
import time

import numpy as np
import tensorflow as tf

from transformer_tf2.api import Translator
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.decoding import document_decoding, scoring, translator
from transformer_tf2.evaluation import metrics
from transformer_tf2.layers import recurrence
from transformer_tf2.utils import files

CONTRASTIVE_KEYS = ("context", "source", "reference", "contrastive")


def write_results(path: str, sources, refs, hyps, figures: dict, settings: dict) -> None:
    """The legacy results file plus a JSON summary beside it."""
    blocks = [
        f"- source: {s}\n- expected: {r}\n- got: {h}\n" for s, r, h in zip(sources, refs, hyps)
    ]
    tail = (
        f"Bleu Score = {figures['legacy_bleu']}\n"
        f"sacreBLEU = {figures['sacrebleu']:.2f} ({figures['sacrebleu_signature']})\n"
        f"sacreBLEU, lowercased = {figures['sacrebleu_lc']:.2f} "
        f"({figures['sacrebleu_lc_signature']})\n"
        f"BLEU (tokenize=none, as multi-bleu.perl on raw text) = "
        f"{figures['bleu_tokenize_none']:.2f}\n"
        f"chrF = {figures['chrf']:.2f} ({figures['chrf_signature']})\n"
        f"runaway outputs (length limit reached without </S>) = {figures['runaways']} of "
        f"{len(hyps)}\n"
        + "".join(line + "\n" for line in bucket_lines(figures.get("length_buckets", [])))
        + f"decoding: {json.dumps(settings, sort_keys=True)}\n"
    )
    files.atomic_write(path, "\n".join(blocks) + "\n" + tail)
    files.atomic_write(
        path + ".json",
        json.dumps({**figures, "decoding": settings, "sentences": len(hyps)}, indent=2) + "\n",
    )


def parse_edges(text: str) -> tuple[int, ...]:
    """'16,24' -> (16, 24): ascending positive source lengths, the bucket edges."""
    try:
        edges = tuple(int(x) for x in text.split(","))
    except ValueError:
        edges = ()
    if not edges or min(edges) < 1 or list(edges) != sorted(set(edges)):
        raise UserError(
            f"--length_buckets expects ascending positive token counts such as 16,24; got {text!r}"
        )
    return edges


def bucket_lines(buckets: list[dict]) -> list[str]:
    """One line per source-length bucket: count, sacreBLEU and its 95% interval."""
    lines = []
    for b in buckets:
        score = "-" if b["sacrebleu"] is None else f"{b['sacrebleu']:.2f}"
        ci = "" if b["ci95"] is None else f" [95% CI {b['ci95'][0]:.2f}, {b['ci95'][1]:.2f}]"
        lines.append(
            f"sacreBLEU, source {b['bucket']} tokens ({b['sentences']} sentences) = {score}{ci}"
        )
    return lines


def legacy_protocol(hp, tok, model, sources, refs, settings: dict):
    """The TF1 eval.py's subset, decoding and scoring (see the module docstring): the
    cleaned sources and references of the scored pairs, their hypotheses and figures.
    Adds the protocol and its counts to ``settings``."""
    keep, within = metrics.legacy_subset(tok, sources, refs, hp)
    if not keep:
        raise UserError(
            f"--legacy_protocol: {within} of {len(sources)} test pairs fit maxlen1="
            f"{hp.maxlen1} / maxlen2={hp.maxlen2}, not one whole batch of {hp.batch_size}"
        )
    print(
        f"eval: legacy protocol: {within} of {len(sources)} test pairs within maxlen; "
        f"{len(keep)} scored (whole batches of {hp.batch_size})"
    )
    settings.update(
        protocol="legacy (TF1 eval.py)",
        max_len=hp.maxlen2,
        max_len_extra=hp.maxlen2,
        test_pairs=len(sources),
        within_maxlen=within,
        scored=len(keep),
        batch_size=hp.batch_size,
    )
    sources = [data_load.clean(sources[i]).strip() for i in keep]
    refs = [data_load.clean(refs[i]).strip() for i in keep]
    hyps, runaway = translator.legacy_translate(model, tok, hp, sources)
    figures = metrics.scores(hyps, refs)
    figures["legacy_bleu"] = metrics.legacy_bleu(hyps, refs, clean_hyps=False)
    return sources, refs, hyps, runaway, figures


def decoding_record(hp, logdirs: list[str], paths: list[str]) -> tuple[str, dict]:
    """The results' name (each run's folder and checkpoint, then the search) and the
    decoding settings the results file records."""
    name = "+".join(
        f"{os.path.basename(os.path.normpath(d))}_{os.path.basename(p)}"
        for d, p in zip(logdirs, paths)
    )
    settings = {
        "search": "greedy" if hp.beam_size <= 1 else "beam",
        "beam_size": hp.beam_size,
        "max_len_extra": hp.max_len_extra,
        "max_len": hp.max_len,
        "checkpoint": paths[0] if len(paths) == 1 else paths,
    }
    if hp.sampling_topk != 1:
        name += f"_sample{hp.sampling_topk}_p{hp.sampling_topp:g}_t{hp.sampling_temperature:g}"
        settings["search"] = "sampling"
        for key in ("sampling_topk", "sampling_topp", "sampling_temperature", "seed"):
            settings[key] = getattr(hp, key)
    return name, settings


def source_tag(path: str, sources: list[str]) -> str:
    """What a ``--test_src`` result's name adds to the run's: the file's name without its
    extension, and the first 8 hex digits of the SHA-256 of its lines, so that two sources
    of the same name (dev.de of two corpora) keep results of their own."""
    stem = os.path.splitext(os.path.basename(os.path.normpath(path)))[0]
    stem = re.sub(r"[^\w.-]+", "-", stem).strip("-.") or "src"
    digest = hashlib.sha256("\n".join(sources).encode("utf-8")).hexdigest()[:8]
    return f"{stem}-{digest}"


def evaluate(
    logdir: str,
    overrides: dict,
    ckpt: str = "",
    test_src: str = "",
    test_ref: str = "",
    show: int = 5,
    length_buckets: str = "",
    runs: list[str] | None = None,
) -> dict:
    """Translate the test set (or ``test_src``) with the run in ``logdir`` (or the
    ensemble of ``runs``), write the results and print the figures."""
    edges = parse_edges(length_buckets) if length_buckets else ()
    engine = Translator.from_settings(runs or [logdir], overrides, ckpt, "eval")
    hp, tok, model, paths = engine.hparams, engine.tok, engine.model, engine.checkpoints
    if bool(test_src) != bool(test_ref):
        raise UserError("--test_src and --test_ref go together")
    if test_src:
        sources, refs = files.read_lines(test_src), files.read_lines(test_ref)
        if len(sources) != len(refs):
            raise UserError(
                f"{test_src} has {len(sources)} lines but {test_ref} has "
                f"{len(refs)}; they must be aligned"
            )
        docs = document_decoding.documents_of_lines(sources)  # blank lines end documents
    else:
        sources, refs = data_load.read_raw(hp, "test")
        docs = data_load.load_corpus(hp, "test").docs if model.reads_documents else None
    if not sources:
        raise UserError(f"the test set is empty ({test_src or hp.prepro_dir + '/test.src'})")
    name, settings = decoding_record(hp, runs or [logdir], paths)
    if test_src:  # another source's results never take the test set's name
        name += "_" + source_tag(test_src, sources)
        settings["source"] = test_src
    files.check_writable(hp.results_dir, "nothing was decoded yet")  # before decoding
    t0 = time.time()
    if hp.legacy_protocol:
        sources, refs, hyps, runaway, figures = legacy_protocol(
            hp, tok, model, sources, refs, settings
        )
        name += "_legacy"
        seconds = time.time() - t0  # its scores are computed along the way
    else:
        results = engine.translate_batch(sources, docs=docs)
        hyps = [r[0].text if r else "" for r in results]
        runaway = [i for i, r in enumerate(results) if r and r[0].runaway]
        seconds = time.time() - t0  # the translation alone, as a decoder's users time it
        figures = metrics.scores(hyps, refs)
    figures["runaways"] = len(runaway)
    figures["runaway_lines"] = [i + 1 for i in runaway]
    scoring = time.time() - t0 - seconds
    if edges:
        lengths = [len(ids) for ids in tok.encode_src(sources)]
        figures["length_buckets"] = metrics.bleu_by_length(hyps, refs, lengths, edges)
    if hp.beam_size > 1:
        name += f"_beam{hp.beam_size}"
        settings["length_penalty"] = hp.length_penalty
    out = os.path.join(hp.results_dir, name)
    write_results(out, sources, refs, hyps, figures, settings)
    for s, r, h in list(zip(sources, refs, hyps))[:show]:
        print(f"- source: {s}\n- expected: {r}\n- got: {h}\n")
    print(
        f"eval: {len(hyps)} sentences in {seconds:.1f}s ({len(hyps) / seconds:.1f}/s); "
        f"scored in {scoring:.1f}s"
    )
    print(f"Bleu Score = {figures['legacy_bleu']:.2f} (legacy nltk)")
    print(f"sacreBLEU = {figures['sacrebleu']:.2f} ({figures['sacrebleu_signature']})")
    print(f"sacreBLEU, lowercased = {figures['sacrebleu_lc']:.2f} (case:lc)")
    print(f"BLEU (tokenize=none) = {figures['bleu_tokenize_none']:.2f}")
    print(f"chrF = {figures['chrf']:.2f}")
    lines = ", ".join(map(str, figures["runaway_lines"][:10]))
    print(
        f"runaway outputs (length limit reached without </S>): {figures['runaways']} of "
        f"{len(hyps)}"
        + (f" (lines {lines}{', ...' if figures['runaways'] > 10 else ''})" if lines else "")
    )
    for line in bucket_lines(figures.get("length_buckets", [])):
        print(line)
    print(f"eval: results written to {out}")
    return {**figures, "results": out, "seconds": seconds}


# ---------------------------------------------------------------------------------------
# A contrastive set (docs/document_context.md)
# ---------------------------------------------------------------------------------------
def read_contrastive(path: str) -> list[dict]:
    """The items of a contrastive file: one JSON object per line with "context" (the
    sentences before the source, oldest first; may be empty), "source", "reference" (the
    right translation) and "contrastive" (a wrong one, as a rule the reference with one
    word changed); optional "target_context" (the context's translations, read by a
    decoder memory; without it, the model's own translations are); other keys (e.g.
    "pronoun", a class to report apart) are kept."""
    items = []
    for n, line in enumerate(files.read_lines(path), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as e:
            raise UserError(f"{path}, line {n}: not a JSON object ({e})") from None
        if not isinstance(item, dict) or any(k not in item for k in CONTRASTIVE_KEYS):
            raise UserError(f"{path}, line {n}: needs the keys {', '.join(CONTRASTIVE_KEYS)}")
        if not isinstance(item["context"], list):
            raise UserError(f'{path}, line {n}: "context" must be a list of sentences')
        items.append(item)
    if not items:
        raise UserError(f"{path} holds no contrastive item")
    return items


def forced_scores(
    model, tok, items: list[dict], candidates: list[list[str]], batch_size: int, targets=None
):
    """Summed log-probabilities (C, N) float of each of the C candidate lists' targets
    (</S> included) given its item's source and, for a model with document memory, its
    context as training reads it (model.Transformer.forward): the sentences before it
    and, for a decoder memory, their translations (``targets``: per item, one per
    context sentence). Each batch of sources is encoded once for all the candidates."""
    depth, target_depth = model.context_depths
    if target_depth and targets is None:
        raise ValueError("a decoder memory reads the context's translations: give targets")
    eos, bos = np.array([data_load.EOS_ID], np.int32), np.array([data_load.BOS_ID], np.int32)
    src = [np.concatenate([ids, eos]) for ids in tok.encode_src([it["source"] for it in items])]

    def earlier(sentences: list[list[str]], n: int, encode, wrap) -> list:
        """Per item its last n sentences, encoded and wrapped, all-PAD ones first."""
        if not n:
            return [None] * len(items)
        out, flat = [], encode([s for sents in sentences for s in sents[-n:]])
        for sents in sentences:
            k = len(sents[-n:])
            out.append([np.zeros(0, np.int32)] * (n - k) + [wrap(ids) for ids in flat[:k]])
            flat = flat[k:]
        return out

    contexts = earlier(
        [it["context"] for it in items], depth, tok.encode_src, lambda x: np.r_[x, eos]
    )
    target_contexts = earlier(targets or [], target_depth, tok.encode_tgt, lambda x: np.r_[bos, x])
    tgts = [tok.encode_tgt(targets) for targets in candidates]
    out = np.zeros((len(candidates), len(items)))
    for start in range(0, len(items), batch_size):
        rows = range(start, min(start + batch_size, len(items)))
        batch = tf.constant(data_load.pad_batch([src[i] for i in rows]))
        window = [None, None]
        for w, (c, n) in enumerate(((contexts, depth), (target_contexts, target_depth))):
            if n:
                flat = [s for i in rows for s in c[i]]
                flat = data_load.pad_batch(flat, width=max(1, *map(len, flat)))
                window[w] = tf.constant(flat.reshape(len(rows), n, -1))
        enc_window, dec_window = recurrence.document_windows(model, *window)
        memory, mask = model.encode(batch, context=recurrence.context_of(enc_window))
        dec_context = recurrence.context_of(dec_window)
        for c, tgt in enumerate(tgts):
            dec, labels = scoring.teacher_forced([tgt[i] for i in rows])
            hidden = model.decode(tf.constant(dec), memory, mask, context=dec_context)
            logp = scoring.label_log_probs(model.logits(hidden), tf.constant(labels))
            out[c, start : start + len(rows)] = logp.numpy().sum(1)
    return out


def wilson(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion correct / n."""
    p, d = correct / n, 1 + z * z / n
    centre, half = (
        (p + z * z / (2 * n)) / d,
        z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d,
    )
    return centre - half, centre + half


def contrastive(logdir: str, overrides: dict, path: str, ckpt: str = "") -> dict:
    """Accuracy on a contrastive set: the share of items whose reference scores higher
    than the contrastive translation (summed log-probabilities, forced decoding), with its
    95% interval, overall and per "pronoun" class (where the items have one); and
    sacreBLEU and chrF of the sources translated in their context (a document each). Writes
    ``<results_dir>/<run>_<checkpoint>_contrastive.json``."""
    engine = Translator.from_settings([logdir], overrides, ckpt, "eval")
    hp, tok, model, ckpt_path = engine.hparams, engine.tok, engine.model, engine.checkpoints[0]
    items = read_contrastive(path)
    files.check_writable(hp.results_dir, "nothing was scored yet")
    sentences, docs = [], []
    for k, it in enumerate(items):  # each item a document: its context, then its source
        sentences += list(it["context"]) + [it["source"]]
        docs += [k] * (len(it["context"]) + 1)
    hyps = [r[0].text if r else "" for r in engine.translate_batch(sentences, docs=np.array(docs))]
    last = np.cumsum([len(it["context"]) + 1 for it in items]) - 1
    # a decoder memory reads the context's translations: the item's, else the model's own
    targets = [
        it.get("target_context") or hyps[end - len(it["context"]) : end]
        for it, end in zip(items, last)
    ]
    size = hp.eval_batch_size
    candidates = [[it[key] for it in items] for key in ("reference", "contrastive")]
    right, wrong = forced_scores(model, tok, items, candidates, size, targets)
    wins = right > wrong
    low, high = wilson(int(wins.sum()), len(items))
    figures = {"items": len(items), "accuracy": float(wins.mean()), "interval95": [low, high]}
    classes = sorted({str(it["pronoun"]) for it in items if "pronoun" in it})
    figures["by_class"] = {
        c: float(np.mean([w for w, it in zip(wins, items) if str(it.get("pronoun")) == c]))
        for c in classes
    }
    scores = metrics.scores([hyps[i] for i in last], [it["reference"] for it in items])
    figures.update(
        sacrebleu=scores["sacrebleu"],
        chrf=scores["chrf"],
        memory_sentences=model.memory_sentences,
        target_memory_sentences=model.target_memory_sentences,
    )
    name = f"{os.path.basename(os.path.normpath(logdir))}_{os.path.basename(ckpt_path)}"
    out = os.path.join(hp.results_dir, name + "_contrastive.json")
    files.atomic_write(out, json.dumps({**figures, "file": path}, indent=2) + "\n")
    print(
        f"contrastive: {figures['accuracy']:.1%} of {len(items)} items score the reference "
        f"higher (95% interval {low:.1%} to {high:.1%}; memory_sentences="
        f"{model.memory_sentences}, target_memory_sentences={model.target_memory_sentences})"
    )
    for c, acc in figures["by_class"].items():
        print(f"contrastive: {c}: {acc:.1%}")
    print(
        f"contrastive: sacreBLEU of the sources in context = {figures['sacrebleu']:.2f}, "
        f"chrF = {figures['chrf']:.2f}"
    )
    print(f"eval: results written to {out}")
    return {**figures, "results": out}


def count_sources(logdir: str, test_src: str) -> int | None:
    """How many sentences eval.py will translate: the lines of ``test_src``, or of the
    run's test.src; None where that cannot be told before loading the run."""
    try:
        run = hparams.load(os.path.join(logdir, "hparams.json"))
    except UserError:
        return None
    return files.count_lines(test_src or os.path.join(run.prepro_dir, "test.src"))


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    overrides = {k: getattr(hp, k) for k in opts["_set"]}
    runs = cli.ensemble_runs(opts, "eval")
    # before TensorFlow starts
    first = runs[0] if runs else hp.logdir
    translator.decoding_process(hp, count_sources(first, opts["test_src"]))
    if opts["contrastive"]:
        if runs:
            raise UserError("--contrastive scores one run in its documents: drop --ensemble")
        contrastive(hp.logdir, overrides, opts["contrastive"], opts["ckpt"])
        return
    evaluate(
        hp.logdir,
        overrides,
        opts["ckpt"],
        opts["test_src"],
        opts["test_ref"],
        length_buckets=opts["length_buckets"],
        runs=runs,
    )


if __name__ == "__main__":
    cli.run_main(main)
