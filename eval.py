"""Translate a test set with a trained model and score it.

    python eval.py                                 # demo: the default model, test split
    python eval.py --preset multi30k --ckpt log/multi30k/best/ckpt-9000
    python eval.py --logdir log/demo --test_src my.de --test_ref my.en

Loads the run's own hparams from ``<logdir>/hparams.json``, decodes autoregressively
(greedy, batched, each sentence stopping at </S>) and writes ``results/<model_name>``
in the legacy format: ``- source:``, ``- expected:``, ``- got:`` blocks, then
``Bleu Score = X``, plus ``results/<model_name>.json`` with every figure:

* ``Bleu Score`` (legacy): nltk ``corpus_bleu`` (4-gram, uniform weights, no smoothing)
  x 100 over whitespace tokens of the legacy-cleaned text (``[^\\s\\p{Latin}']`` removed),
  counting only pairs where both reference and hypothesis have more than 3 tokens - the
  TF1 eval.py's formula, here over the whole test set;
* ``sacreBLEU``: the standard figure, cased, detokenized text, tokenizer 13a, with its
  signature;
* ``BLEU (tokenize=none)``: cased raw text split on whitespace, which equals
  multi-bleu.perl on untokenized text, the figure of the 2019 Kyubyong README;
* ``chrF``: sacreBLEU's chrF2.

A model with ``memory_sentences`` reads each document in order (prepro's talks; in
``--test_src``, a blank line ends a document) with the encoder states of its earlier
sentences reused (README "Document context").

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

from __future__ import annotations

import cli
import hparams

SCRIPT = cli.Script(
    "eval",
    __doc__,
    fields=cli.DECODING_FIELDS,
    options={
        "ckpt": ("", "checkpoint: a path, last or best (default: the run's default model)"),
        "test_src": ("", "a source file to translate instead of the test split"),
        "test_ref": ("", "its reference translations, line by line"),
        "length_buckets": ("", "e.g. 16,24: sacreBLEU per source length (<=16, 17-24, >=25)"),
    },
    note=cli.DECODING_NOTE,
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import json
import os
import time

import data_load
import decoding
import files
from hparams import UserError


def write_results(path: str, sources, refs, hyps, figures: dict, settings: dict) -> None:
    """The legacy results file plus a JSON summary beside it."""
    blocks = [
        f"- source: {s}\n- expected: {r}\n- got: {h}\n" for s, r, h in zip(sources, refs, hyps)
    ]
    tail = (
        f"Bleu Score = {figures['legacy_bleu']}\n"
        f"sacreBLEU = {figures['sacrebleu']:.2f} ({figures['sacrebleu_signature']})\n"
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
    keep, within = decoding.legacy_subset(tok, sources, refs, hp)
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
    hyps, runaway = decoding.legacy_translate(model, tok, hp, sources)
    figures = decoding.scores(hyps, refs)
    figures["legacy_bleu"] = decoding.legacy_bleu(hyps, refs, clean_hyps=False)
    return sources, refs, hyps, runaway, figures


def evaluate(
    logdir: str,
    overrides: dict,
    ckpt: str = "",
    test_src: str = "",
    test_ref: str = "",
    show: int = 5,
    length_buckets: str = "",
) -> dict:
    edges = parse_edges(length_buckets) if length_buckets else ()
    hp, tok, model, path = decoding.load_run(logdir, overrides, ckpt)
    if bool(test_src) != bool(test_ref):
        raise UserError("--test_src and --test_ref go together")
    if test_src:
        sources, refs = data_load.read_lines(test_src), data_load.read_lines(test_ref)
        if len(sources) != len(refs):
            raise UserError(
                f"{test_src} has {len(sources)} lines but {test_ref} has "
                f"{len(refs)}; they must be aligned"
            )
        docs = decoding.documents_of_lines(sources)  # blank lines end documents
    else:
        sources, refs = data_load.read_raw(hp, "test")
        docs = data_load.load_corpus(hp, "test").docs if model.memory_sentences else None
    if not sources:
        raise UserError(f"the test set is empty ({test_src or hp.prepro_dir + '/test.src'})")
    name = f"{os.path.basename(os.path.normpath(logdir))}_{os.path.basename(path)}"
    settings = {
        "search": "greedy" if hp.beam_size <= 1 else "beam",
        "beam_size": hp.beam_size,
        "max_len_extra": hp.max_len_extra,
        "max_len": hp.max_len,
        "checkpoint": path,
    }
    t0 = time.time()
    if hp.legacy_protocol:
        sources, refs, hyps, runaway, figures = legacy_protocol(
            hp, tok, model, sources, refs, settings
        )
        name += "_legacy"
    else:
        hyps, runaway = decoding.Translator(model, tok, hp).translate_counted(sources, docs)
        figures = decoding.scores(hyps, refs)
    figures["runaways"] = len(runaway)
    figures["runaway_lines"] = [i + 1 for i in runaway]
    seconds = time.time() - t0
    if edges:
        lengths = [len(ids) for ids in tok.encode_src(sources)]
        figures["length_buckets"] = decoding.bleu_by_length(hyps, refs, lengths, edges)
    if hp.beam_size > 1:
        name += f"_beam{hp.beam_size}"
        settings["length_penalty"] = hp.length_penalty
    out = os.path.join(hp.results_dir, name)
    write_results(out, sources, refs, hyps, figures, settings)
    for s, r, h in list(zip(sources, refs, hyps))[:show]:
        print(f"- source: {s}\n- expected: {r}\n- got: {h}\n")
    print(f"eval: {len(hyps)} sentences in {seconds:.1f}s ({len(hyps) / seconds:.1f}/s)")
    print(f"Bleu Score = {figures['legacy_bleu']:.2f} (legacy nltk)")
    print(f"sacreBLEU = {figures['sacrebleu']:.2f} ({figures['sacrebleu_signature']})")
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


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    overrides = {k: getattr(hp, k) for k in opts["_set"]}
    evaluate(
        hp.logdir,
        overrides,
        opts["ckpt"],
        opts["test_src"],
        opts["test_ref"],
        length_buckets=opts["length_buckets"],
    )


if __name__ == "__main__":
    hparams.run_main(main)
