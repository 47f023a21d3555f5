"""The named presets (``--preset NAME``): each a set of values over the defaults that
hparams.py declares, with the one-line description that ``--help`` prints for it.

Each preset states only what differs from the defaults (the demo's run) and, for the
IWSLT 2016 presets, from their shared base. hparams.py imports :data:`PRESETS` and
:data:`DESCRIPTIONS`; the rest of the project reads them as ``hparams.PRESETS``.
"""

from __future__ import annotations

from typing import Any

# What the IWSLT 2016 presets share: the corpus, the paper's base model (3, 6.1) with the
# paper's sinusoid positions, and a dev BLEU subset of 500 sentences. Each preset below
# states only what differs from the defaults (the demo's run) and from this base.
_IWSLT2016 = dict(
    corpus="iwslt2016",
    data_dir="data/iwslt2016",
    d_model=512,
    d_ff=2048,
    num_blocks=6,
    num_heads=8,
    position="sinusoid",
    dropout_rate=0.1,
    warmup_steps=4000,
    num_epochs=20,
    dev_bleu_sents=500,
)


def _run_folders(name: str) -> dict[str, str]:
    """The prepro and log folders of preset ``name`` (its dev translations go inside its
    log folder: hparams.eval_folder)."""
    return dict(prepro_dir=f"prepro/{name}", logdir=f"log/{name}")


# What --help says of each preset (the same names as PRESETS, in its order). The demo's
# "defaults above" are the Hparams defaults that --help lists above the presets.
DESCRIPTIONS: dict[str, str] = {
    "demo": (
        "Tiny model on the embedded synthetic corpus, the smoke test of the whole pipeline: "
        "prepro -> train -> eval in about 3.5 min on 2 CPU cores (docs/results.md). It is "
        "the defaults above, nothing more: Transformer-XL positions (chosen on dev: "
        "docs/tuning.md, stages 1 and 2), 4 epochs with a 200-step warmup and no dropout, "
        "test sacreBLEU about 95.7 (8 epochs with dropout 0.1 and a 400-step warmup: 98.7 in "
        "twice the time; the grammar has no noise to overfit in 4 epochs: its dev loss falls "
        "at every epoch)"
    ),
    "multi30k": (
        "A small model sized for Multi30k (29k pairs); pre-norm, lr 0.003 and xl positions "
        "chosen on dev (docs/tuning.md)."
    ),
    "iwslt2016": (
        "The updated (2019) Kyubyong code's hyperparameter values for IWSLT 2016 de-en (its "
        "hparams.py), on the paper's model; docs/training.md, "
        '"The presets", lists where its model differs and the switches that would follow it.'
    ),
    "iwslt2016_paper": (
        "The paper's base model and training (sections 5.3-5.4, 6.1): Noam with 4000 warmup "
        "steps, about 25k tokens per update (3 accumulated batches of 8192), beam 4; average "
        "the last 5 checkpoints with average_checkpoints.py before eval.py."
    ),
    "iwslt2016_legacy": (
        "The tf1.2 code (Kyubyong/transformer, tf1.2_legacy; hyperparams.py, train.py, "
        "modules.py): word vocabulary, sentences of at most 10 tokens padded to 10, and its "
        "model, switch by switch (docs/model.md); eval.py follows its protocol."
    ),
}

PRESETS: dict[str, dict[str, Any]] = {
    "demo": {},
    "multi30k": dict(
        corpus="parallel",
        data_dir="data/multi30k",
        **_run_folders("multi30k"),
        vocab_size=8000,
        d_model=256,
        d_ff=1024,
        num_blocks=3,
        num_heads=8,
        dropout_rate=0.1,
        norm="pre",
        warmup_steps=400,
        # the decay over the last 40 % of the budget, with label smoothing 0.2 against the
        # overfitting of its last third: chosen on dev, two seeds (docs/tuning.md, stage 8)
        cooldown=0.4,
        label_smoothing=0.2,
        # dropout on the attention weights: 0.1 and then 0.2 each gave a lower dev loss and
        # led on all 1,014 dev sentences at both of two seeds (docs/tuning.md, stage 9)
        attention_dropout=0.2,
        num_epochs=30,
        dev_bleu_sents=500,
        # beam search: chosen on dev (docs/tuning.md, stage 6); 0.6 (the paper's) gave beams
        # 2-5 % shorter than the references
        length_penalty=1.0,
    ),
    "iwslt2016": dict(
        _IWSLT2016,
        **_run_folders("iwslt2016"),
        vocab_size=32000,
        dropout_rate=0.3,
        lr_schedule="kyubyong",
        lr=0.0003,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        batch_size=128,
    ),
    "iwslt2016_paper": dict(
        _IWSLT2016,
        **_run_folders("iwslt2016_paper"),
        vocab_size=32000,
        lr_schedule="noam",
        tokens_per_batch=8192,
        accum_steps=3,
        num_epochs=50,
        beam_size=4,
    ),
    "iwslt2016_legacy": dict(
        _IWSLT2016,
        **_run_folders("iwslt2016_legacy"),
        vocab_type="word",
        min_cnt=20,
        maxlen1=10,
        maxlen2=10,
        pad_multiple=10,
        position="learned",
        max_position=10,
        share_embeddings=False,
        lr_schedule="constant",
        lr=0.0001,
        adam_epsilon=1e-8,
        batch_size=32,
        embedding_dropout=0.1,
        residual_dropout=0.0,
        attention_dropout=0.1,
        qkv_activation="relu",
        qkv_bias=True,
        output_projection=False,
        query_masking=True,
        key_mask_defect=True,
        tie_softmax=False,
        layer_norm_epsilon=1e-8,
        embedding_init="xavier",
        legacy_protocol=True,
    ),
}
