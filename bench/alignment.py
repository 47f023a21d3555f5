"""Word alignments against the demo corpus's gold: precision, recall and AER of the
cross-attention alignment that ``translate.py --alignments`` prints, on a demo run's test
split, for each decoder layer, beside a diagonal baseline.

    python prepro.py && python train.py
    python bench/alignment.py [--logdir log/demo] [--split test] [--sentences N]

The gold is :func:`demo.alignment.gold_links`: the content words whose lexicon entry
occurs once on each side of a pair. Each layer's alignment is translate.py's
(:func:`scoring.hard_alignment` of the cross-attention averaged over the layer's heads),
forced through the reference translation, so that every pair has its gold; the layer
marked ``*`` is the one translate.py uses (:func:`scoring.alignment_layer`). The diagonal
baseline links target word j of J to source word round(j (I - 1) / (J - 1)) of I. Pairs
whose tokens do not split into the sentence's space-separated words (none in the demo)
are left out and counted. The end prints one table and a ``RESULT {json}`` line.
"""

import argparse
import time

import common

from transformer_tf2.config import cli, hparams


def diagonal(n_src: int, n_tgt: int) -> set[tuple[int, int]]:
    """The baseline: target word j linked to the source word at the same relative place."""
    if n_tgt == 1:
        return {(0, 0)}
    return {(round(j * (n_src - 1) / (n_tgt - 1)), j) for j in range(n_tgt)}


def layer_links(translator, tok, src_ids, tgt_ids, layer: int) -> list:
    """Per pair the links of ``layer``'s alignment (word indices), or None where the
    tokens' words are not the sentence's space-separated words."""
    from transformer_tf2.decoding import scoring

    out = []
    for w, s, t in zip(translator.align_ids(src_ids, tgt_ids, layer), src_ids, tgt_ids):
        src_words = scoring.word_index(tok.src_tokens(s), tok.kind)
        tgt_words = scoring.word_index(tok.tgt_tokens(t), tok.kind)
        out.append(scoring.hard_alignment(w, src_words, tgt_words))
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logdir", default="log/demo", help="a run trained on the demo corpus")
    ap.add_argument("--split", default="test", choices=("dev", "test"))
    ap.add_argument("--sentences", type=int, default=0, help="the first N pairs (0: all)")
    return ap


def main(argv: list[str] | None = None) -> None:
    opts = parser().parse_args(argv)
    import prepro
    from demo import alignment
    from transformer_tf2.decoding import scoring
    from transformer_tf2.decoding.translator import Translator
    from transformer_tf2.models import (
        checkpoints,  # TensorFlow loads here, after the arguments are read
    )

    hp, tok, model, _ = checkpoints.load_run(opts.logdir, {}, who="alignment")
    if hp.corpus != "demo":
        raise hparams.UserError(
            f"alignment: {opts.logdir} was trained on the {hp.corpus} corpus; the gold "
            f"alignment is the demo corpus's: give --logdir a run of the demo preset"
        )
    src, tgt, _ = prepro.read_split(hp, opts.split)
    if opts.sentences:
        src, tgt = src[: opts.sentences], tgt[: opts.sentences]
    gold = [alignment.gold_links(a, b) for a, b in zip(src, tgt)]
    src_ids, tgt_ids = tok.encode_src(src), tok.encode_tgt(tgt)
    translator = Translator(model, tok, hp)
    rows, start = {}, time.perf_counter()
    for layer in range(model.num_blocks):
        lines = layer_links(translator, tok, src_ids, tgt_ids, layer)
        rows[f"layer {layer}"] = [alignment.parse(x) for x in lines]
    seconds = time.perf_counter() - start
    sizes = [(len(a.split()), len(b.split())) for a, b in zip(src, tgt)]
    rows["diagonal"] = [diagonal(i, j) for i, j in sizes]
    # a pair whose tokens name a word past the sentence's last is not aligned by words
    split_ok = [
        all(i < n and j < m for i, j in links) for links, (n, m) in zip(rows["layer 0"], sizes)
    ]
    keep = [k for k, ok in enumerate(split_ok) if ok]
    used = scoring.alignment_layer(model.num_blocks)
    result = {"pairs": len(keep), "left_out": len(src) - len(keep), "seconds": seconds}
    print(f"alignment: {opts.logdir}, {opts.split} split, {len(keep):,} pairs", end="")
    print(f" ({len(src) - len(keep)} left out); {seconds:.1f} s for {model.num_blocks} layers")
    print(f"{'alignment':<12} {'precision':>9} {'recall':>7} {'AER':>6}  gold links")
    for name, links in rows.items():
        got = alignment.agreement([links[k] for k in keep], [gold[k] for k in keep])
        mark = " *" if name == f"layer {used}" else ""
        print(
            f"{name + mark:<12} {got['precision']:>9.3f} {got['recall']:>7.3f} "
            f"{got['aer']:>6.3f}  {got['links']:,}"
        )
        result[name] = got
    print(f"* translate.py --alignments (scoring.alignment_layer: layer {used})")
    common.emit(result)


if __name__ == "__main__":
    cli.run_main(main)
