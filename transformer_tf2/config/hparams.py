"""Every hyperparameter of the pipeline, declared in one place.

A user sets values in the hparams.py at the repository root (plain assignments, read by
:func:`cli.user_values`), picks a named preset with ``--preset NAME``, and overrides any
field on the command line with ``--name value`` (parsed by cli.py; the comment on each
field's line is its ``--help`` text, so every field has one). The defaults are the run
that ``python train.py`` makes with no ``--preset`` (the ``demo`` preset adds nothing to
them): a small model on the synthetic demo corpus. A value in the root hparams.py changes
that run, and every preset that does not set the field; ``--help`` says where each value
comes from::

    python train.py --preset multi30k --d_model 512 --num_epochs 30

The effective values are saved as JSON next to the preprocessed data
(``<prepro_dir>/hparams.json``) and next to the checkpoints (``<logdir>/hparams.json``);
later scripts reload them, so eval.py always decodes with the model's own settings.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from typing import Any

from transformer_tf2.config import checks
from transformer_tf2.utils import files
from transformer_tf2.utils.errors import (
    UserError,  # the project's error type, used as hparams.UserError
)


@dataclasses.dataclass
class Hparams:
    # ---- data -----------------------------------------------------------------------
    corpus: str = "demo"  # demo | iwslt2016 | parallel (plain text, e.g. Multi30k)
    data_dir: str = "data/demo"  # raw corpus files
    prepro_dir: str = "prepro/demo"  # vocabularies, cleaned text, encoded ids, hparams.json
    src_lang: str = "de"  # source language: the file suffix of the source side
    tgt_lang: str = "en"  # target language: the file suffix of the target side
    train_stem: str = "train"  # corpus=parallel: training files <data_dir>/<stem>.<lang>[.gz]
    dev_stem: str = "val"  # corpus=parallel: dev files (dev loss and BLEU after each epoch)
    test_stem: str = "test_2016_flickr"  # corpus=parallel: test files (eval.py)
    iwslt_dev: str = "tst2013"  # IWSLT 2016 dev set: IWSLT16.TED.<name>.de-en.<lang>.xml
    iwslt_test: str = "tst2014"  # IWSLT 2016 test set, same naming
    demo_size: int = 20000  # training pairs of the synthetic demo corpus
    demo_documents: float = 0.0  # demo: share of sentences in pronoun episodes (docs)

    # ---- vocabulary -----------------------------------------------------------------
    vocab_type: str = "bpe"  # bpe (joint sentencepiece) | word (legacy, two vocabularies)
    vocab_size: int = 1000  # BPE: joint vocabulary size (keep it a multiple of 8)
    min_cnt: int = 1  # word: keep words seen at least this often
    maxlen1: int = 100  # max source tokens in training, </S> included
    maxlen2: int = 100  # max target tokens in training, <S> or </S> included
    # dev, test and decoding keep prepro.py's pieces; 0: the fixed segmentation (the paper's)
    bpe_dropout: float = 0.0  # BPE-dropout: P(skip a merge), training pieces drawn anew each epoch

    # ---- batching -------------------------------------------------------------------
    tokens_per_batch: int = 2048  # token budget: batch_rows * padded_length <= this
    batch_size: int = 0  # >0: fixed sentences per batch instead of the token budget
    pad_multiple: int = 1  # pad lengths to a multiple of this (8 bounds XLA shapes)
    eval_batch_size: int = 128  # sentences per decoding batch

    # ---- model (paper section 3) ----------------------------------------------------
    model_type: str = (
        "transformer"  # transformer | weighted (Ahmed 2017) | universal (Dehghani 2018)
    )
    d_model: int = 128  # width of every layer's input and output (3.1)
    d_ff: int = 512  # inner width of the position-wise feed-forward networks (3.3)
    num_blocks: int = 2  # N: layers in the encoder and in the decoder (3.1)
    num_heads: int = 4  # h: attention heads; d_model / h per head (3.2.2)
    dropout_rate: float = 0.0  # residual and embedding dropout (5.4: 0.1), unless set apart below
    embedding_dropout: float = -1.0  # on the embedding + position sums (5.4); <0: dropout_rate
    residual_dropout: float = -1.0  # on each sublayer's output (5.4; TF1: 0); <0: dropout_rate
    attention_dropout: float = 0.0  # on attention weights (Kyubyong; not in the paper)
    position: str = "xl"  # xl | sinusoid (3.5) | learned | shaw | t5 | alibi[_dir] | rotary
    max_position: int = 1024  # rows of the learned position table (TF1: maxlen)
    max_relative_position: int = 16  # shaw: distances clipped at +-k (Shaw et al. 2018)
    t5_buckets: int = 32  # t5: relative-distance buckets (half per direction in the encoder)
    t5_max_distance: int = 128  # t5: distances from here on share the last bucket
    position_add_absolute: bool = False  # relative families: also add the sinusoid (3.5)
    norm: str = "post"  # post (paper) | pre (LayerNorm before each sublayer)
    memory_sentences: int = 0  # M > 0: the encoder also reads the M sentences before (docs)
    target_memory_sentences: int = 0  # > 0: the decoder also reads the target sentences before
    share_embeddings: bool = True  # tie source and target embeddings (joint BPE vocab only)
    ut_max_steps: int = 6  # universal: the most recurrent steps of each shared block
    act: bool = True  # universal: Adaptive Computation Time per position (false: fixed depth)
    act_epsilon: float = 0.01  # universal: a position halts once its halting sum > 1 - this
    # Switches where the TF1 code differs from the paper (docs/model.md); the
    # defaults are the paper's
    qkv_activation: str = "none"  # none (3.2.2) | relu (TF1) on the Q, K, V projections
    qkv_bias: bool = False  # biases on the Q, K, V projections (TF1 and 2019 Kyubyong code)
    output_projection: bool = True  # W^O after the heads (3.2.2); TF1 has none
    query_masking: bool = False  # zero the attention weights of PAD queries (TF1)
    key_mask_defect: bool = False  # TF1 defect (Kyubyong#33): no PAD key/query mask fires
    tie_softmax: bool = True  # pre-softmax projection = target embedding (3.4); TF1: own
    layer_norm_epsilon: float = 1e-6  # LayerNorm epsilon (TF1: 1e-8)
    embedding_init: str = "normal"  # normal (d_model^-0.5; positions 1) | xavier (TF1)

    # ---- training (paper section 5) -------------------------------------------------
    lr_schedule: str = "wsd"  # wsd | linear (end at the budget) | noam (5.3) | kyubyong | constant
    lr: float = 0.003  # peak lr (kyubyong, wsd, linear), fixed lr (constant); noam ignores it
    warmup_steps: int = 200  # linear warmup steps of every schedule but constant (5.3: 4000)
    cooldown: float = 0.2  # wsd: the last fraction of the budget, where the lr decays to 0
    branch_warmup_steps: int = 400  # weighted: warmup of the kappa/alpha schedule (paper: 400)
    label_smoothing: float = 0.1  # epsilon_ls of the label-smoothed loss (5.4)
    act_loss_weight: float = 0.01  # universal: weight of the ACT ponder cost in the loss
    adam_beta1: float = 0.9  # Adam beta1 (5.3)
    adam_beta2: float = 0.98  # Adam beta2 (5.3)
    adam_epsilon: float = 1e-9  # Adam epsilon (5.3)
    clip_norm: float = 0.0  # >0: clip gradients to this global norm
    max_bad_steps: int = 10  # >0: stop after this many updates in a row skipped for NaN/Inf
    accum_steps: int = 1  # >1: accumulate this many batches per update
    num_epochs: int = 4  # passes over the training data
    max_steps: int = 0  # >0: stop after this many steps (checkpointed)
    max_minutes: float = 0.0  # >0: stop after this wall time (checkpointed)
    seed: int = 42  # weights, dropout, batch order; in eval.py and translate.py, sampling
    precision: str = "auto"  # auto (docs/training.md) | float32 | mixed_float16 | mixed_bfloat16
    jit_compile: bool = False  # XLA-compile the train step
    logdir: str = "log/demo"  # checkpoints, TensorBoard events, hparams.json, specs
    ckpt_every_steps: int = 0  # >0: also checkpoint every K steps
    keep_ckpts: int = 5  # checkpoints kept: at least average_checkpoints.py's --last (5)
    early_stopping: int = 0  # >0: stop after this many epochs without a better dev BLEU
    dev_bleu_sents: int = 200  # dev sentences decoded after each epoch (0 = all)
    eval_share: float = 0.1  # max_minutes: skip an epoch's dev BLEU past this share of time
    average: int = 3  # >1: the average of the last N checkpoints, where it wins on dev BLEU
    ema_decay: float = 0.0  # >0: keep an EMA of the weights (ema.py), e.g. 0.9999; 0: off
    init_from: str = ""  # a trained run's logdir: fine-tune its weights (finetune.py)
    init_optimizer: bool = False  # init_from: also take its Adam moments (step from 0)
    evaldir: str = "eval/demo"  # dev translations written after each epoch
    attention_layers: str = "last"  # last | all | none: attention figures in TensorBoard

    # ---- decoding -------------------------------------------------------------------
    results_dir: str = "results"  # eval.py writes <results_dir>/<run>_<checkpoint>[.json]
    beam_size: int = 1  # 1: greedy decoding; k > 1: beam search with k hypotheses
    length_penalty: float = 0.6  # alpha of Wu et al. 2016 (beam search)
    max_len_extra: int = 50  # decode at most source length + this many tokens
    max_len: int = 0  # >0: and never more than this many tokens
    legacy_protocol: bool = False  # eval.py scores the TF1 eval.py subset the TF1 way
    decode_streams: int = 0  # batches decoded at once (0: one per CPU core on a CPU, 1 on a GPU)
    sampling_topk: int = 1  # 1: no sampling; K > 1: sample from the K likeliest tokens; 0: from all
    sampling_topp: float = 1.0  # <1: sample from the likeliest tokens whose mass reaches this
    sampling_temperature: float = 1.0  # sampling: the logits are divided by this


# The --help groups (cli.py), in order: each group's first field and its title; a group
# runs to the next one's first field. The "# ---- ... ----" lines in Hparams only mirror
# them for the reader.
HELP_GROUPS = {
    "corpus": "data",
    "vocab_type": "vocabulary",
    "tokens_per_batch": "batching",
    "model_type": "model (paper section 3)",
    "lr_schedule": "training (paper section 5)",
    "results_dir": "decoding",
}

# Fields that must agree between preprocessing and training (the vocabulary).
DATA_KEYS = ("corpus", "src_lang", "tgt_lang", "vocab_type", "vocab_size", "min_cnt")

# The Hparams fields a model.Transformer is built from, as a ModelConfig (below); those
# that change training alone (the dropout rates, the ponder-cost weight) are training-only.
MODEL_FIELDS = (
    "model_type",
    "d_model",
    "d_ff",
    "num_blocks",
    "num_heads",
    "position",
    "max_position",
    "max_relative_position",
    "t5_buckets",
    "t5_max_distance",
    "position_add_absolute",
    "norm",
    "memory_sentences",
    "target_memory_sentences",
    "share_embeddings",
    "qkv_activation",
    "qkv_bias",
    "output_projection",
    "query_masking",
    "key_mask_defect",
    "tie_softmax",
    "layer_norm_epsilon",
    "embedding_init",
    "ut_max_steps",
    "act",
    "act_epsilon",
)
TRAINING_ONLY_FIELDS = (
    "dropout_rate",
    "attention_dropout",
    "embedding_dropout",
    "residual_dropout",
    "act_loss_weight",
)


class _ModelConfigMethods:
    """The methods of :data:`ModelConfig`."""

    @classmethod
    def from_hparams(cls, hp: Hparams, src_vocab_size: int, tgt_vocab_size: int):
        """The config of ``hp``'s model for vocabularies of the given sizes."""
        values = {name: getattr(hp, name) for name in MODEL_FIELDS + TRAINING_ONLY_FIELDS}
        values["embedding_dropout"] = dropout(hp, "embedding")
        values["residual_dropout"] = dropout(hp, "residual")
        return cls(src_vocab_size, tgt_vocab_size, **values)

    def rate(self, where: str) -> float:
        """The ``embedding`` or ``residual`` dropout rate: its own, or dropout_rate where
        it is negative (None in a config saved before the sentinel was -1)."""
        own = getattr(self, f"{where}_dropout")
        return self.dropout_rate if own is None or own < 0 else own


# Every setting a model.Transformer is built from, in one place: the model reads only
# these, its ``get_config`` is this frozen dataclass as a dict, and MODEL_KEYS (what a
# checkpoint and the model built to load it must agree on) is every field that changes
# the model's function. Its fields are the vocabulary sizes and the Hparams fields named
# above, each with the type and the default of its Hparams declaration (the one place a
# setting is declared: a new model setting is one Hparams field, named in MODEL_FIELDS,
# whose default reproduces the current model so that every earlier checkpoint still loads
# and decodes the same). Hparams' defaults are the demo's model; the paper's base model
# (3, 6.1) is the iwslt2016 presets' (_IWSLT2016 below).
ModelConfig = dataclasses.make_dataclass(
    "ModelConfig",
    [("src_vocab_size", int), ("tgt_vocab_size", int)]
    + [
        (
            f.name,
            f.type,
            dataclasses.field(
                default=f.default, metadata={"training_only": f.name in TRAINING_ONLY_FIELDS}
            ),
        )
        for f in dataclasses.fields(Hparams)
        if f.name in MODEL_FIELDS + TRAINING_ONLY_FIELDS
    ],
    bases=(_ModelConfigMethods,),
    frozen=True,
)
ModelConfig.__module__ = __name__  # make_dataclass's module= is Python 3.12's


# Fields that must agree between a checkpoint and the model built to load it: the
# vocabulary and every ModelConfig field that changes the model's function (the vocabulary
# sizes follow from the vocabulary).
MODEL_KEYS = ("vocab_type", "vocab_size", "min_cnt") + tuple(
    f.name
    for f in dataclasses.fields(ModelConfig)
    if not f.metadata.get("training_only") and f.name not in ("src_vocab_size", "tgt_vocab_size")
)

# Fields eval.py, translate.py and export.py may change without touching the model.
DECODE_KEYS = (
    "beam_size",
    "length_penalty",
    "max_len_extra",
    "max_len",
    "eval_batch_size",
    "results_dir",
    "precision",
    "legacy_protocol",
    "decode_streams",
    "sampling_topk",
    "sampling_topp",
    "sampling_temperature",
    "seed",
)

# Fields that fix the batch plan and the position within an epoch: a resumed run must
# keep them, or it would skip some pairs and repeat others.
RESUME_KEYS = (
    "seed",
    "tokens_per_batch",
    "batch_size",
    "pad_multiple",
    "maxlen1",
    "maxlen2",
    "accum_steps",
    "bpe_dropout",
)

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
    """The prepro, log and eval folders of preset ``name``."""
    return dict(prepro_dir=f"prepro/{name}", logdir=f"log/{name}", evaldir=f"eval/{name}")


PRESETS: dict[str, dict[str, Any]] = {
    # Tiny model on the embedded synthetic corpus, the smoke test of the whole pipeline:
    # prepro -> train -> eval in about 3.5 min on 2 CPU cores (docs/results.md). It is the
    # defaults above, nothing more: Transformer-XL positions (chosen on dev: docs/tuning.md,
    # stages 1 and 2), 4 epochs with a 200-step warmup and no dropout, test sacreBLEU
    # about 95.7 (8 epochs with dropout 0.1 and a 400-step warmup: 98.7 in twice the time;
    # the grammar has no noise to overfit in 4 epochs: its dev loss falls at every epoch)
    "demo": {},
    # A small model sized for Multi30k (29k pairs); pre-norm, lr 0.003 and xl positions
    # chosen on dev (docs/tuning.md).
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
    # The updated (2019) Kyubyong code's hyperparameter values for IWSLT 2016 de-en (its
    # hparams.py), on the paper's model; docs/training.md, "The presets", lists
    # where its model differs and the switches that would follow it.
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
    # The paper's base model and training (sections 5.3-5.4, 6.1): Noam with 4000 warmup
    # steps, about 25k tokens per update (3 accumulated batches of 8192), beam 4; average
    # the last 5 checkpoints with average_checkpoints.py before eval.py.
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
    # The tf1.2 code (Kyubyong/transformer, tf1.2_legacy; hyperparams.py, train.py,
    # modules.py): word vocabulary, sentences of at most 10 tokens padded to 10, and its
    # model, switch by switch (docs/model.md); eval.py follows its protocol.
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

CHOICES = {
    "corpus": ("demo", "iwslt2016", "parallel"),
    "vocab_type": ("bpe", "word"),
    "model_type": ("transformer", "weighted", "universal"),
    # the names of positions.REGISTRY, for a --help before TensorFlow loads; importing
    # positions.py replaces this with a live view of its registry
    "position": ("sinusoid", "learned", "shaw", "t5", "xl", "alibi", "alibi_dir", "rotary"),
    "norm": ("post", "pre"),
    "qkv_activation": ("none", "relu"),
    "embedding_init": ("normal", "xavier"),
    "lr_schedule": ("noam", "kyubyong", "constant", "wsd", "linear"),
    "attention_layers": ("last", "all", "none"),
    "precision": ("auto", "float32", "mixed_float16", "mixed_bfloat16"),
}

FIELDS = {f.name: f for f in dataclasses.fields(Hparams)}


def _convert(key: str, value: Any) -> Any:
    """Type-check and convert ``value`` (a string from the command line or a JSON value)."""
    kind = type(getattr(Hparams(), key))
    if kind is bool:
        return to_bool(key, value)
    try:
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(str(value)) if not isinstance(value, (int, float)) else int(value)
        if kind is float:
            return float(value)
        return str(value)
    except ValueError:
        raise UserError(f"--{key} expects {kind.__name__}, got {value!r}") from None


def to_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise UserError(f"--{key} expects true or false, got {value!r}")


def suggest(key: str) -> str:
    close = difflib.get_close_matches(key, list(FIELDS) + ["preset", "sinusoid"], n=1)
    return f"; did you mean --{close[0]}?" if close else "; see hparams.py for the list"


def apply(hp: Hparams, overrides: dict[str, Any]) -> Hparams:
    """Return a copy of hp with overrides applied, type-checked and validated."""
    values = dataclasses.asdict(hp)
    for key, value in overrides.items():
        if key == "sinusoid":  # legacy flag of the original: sinusoid=False -> learned
            values["position"] = "sinusoid" if to_bool(key, value) else "learned"
            continue
        if key not in FIELDS:
            raise UserError(f"unknown hyperparameter '{key}'{suggest(key)}")
        values[key] = _convert(key, value)
    for key, allowed in CHOICES.items():
        if values[key] not in allowed:
            raise UserError(f"--{key} must be one of {', '.join(allowed)}; got {values[key]!r}")
    checks.check(values)
    for check in CHECKS:
        check(values)
    if values["vocab_type"] == "word":
        values["share_embeddings"] = False  # two vocabularies cannot share one matrix
    return Hparams(**values)


# Checks of a whole set of values that modules above this one add (positions.py adds
# each position family's): each raises UserError.
CHECKS: list = []


def dropout(hp: Hparams, where: str) -> float:
    """The rate of ``embedding_dropout`` or ``residual_dropout`` (``where`` = "embedding" |
    "residual"): its own value, or ``dropout_rate`` where it is negative, so that an older
    hparams.json or command line with dropout_rate alone keeps its meaning."""
    own = getattr(hp, f"{where}_dropout")
    return hp.dropout_rate if own < 0 else own


def preset(name: str, user: dict[str, Any] | None = None) -> Hparams:
    """The settings of preset ``name``: the defaults declared above, then ``user`` (the
    values of the user's hparams.py at the repository root, :func:`cli.user_values`),
    then the preset's own values, each over the one before."""
    if name not in PRESETS:
        close = difflib.get_close_matches(name, PRESETS, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise UserError(f"unknown preset '{name}'{hint} (known: {', '.join(PRESETS)})")
    return apply(apply(Hparams(), user or {}), PRESETS[name])


def save(hp: Hparams, path: str) -> None:
    files.atomic_write(path, json.dumps(dataclasses.asdict(hp), indent=2, sort_keys=True) + "\n")


def load(path: str) -> Hparams:
    """Load hparams saved by :func:`save`. Unknown keys from a newer version are an error."""
    if not os.path.exists(path):
        raise UserError(
            f"{path} not found: run the previous step (prepro.py, then train.py) "
            f"with the same --preset and directories first"
        )
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is not valid hparams JSON ({e}); delete it and rerun") from None
    if "position" not in values and "sinusoid" not in values:
        values["position"] = "sinusoid"  # a run saved before positions were a setting
    return apply(Hparams(), values)


def check_same(
    saved: Hparams, wanted: Hparams, keys: tuple[str, ...], where: str, what_to_do: str
) -> None:
    """Raise a one-line UserError if any of ``keys`` differs between saved and wanted."""
    diff = [
        f"{k}={getattr(saved, k)!r} (you asked for {getattr(wanted, k)!r})"
        for k in keys
        if getattr(saved, k) != getattr(wanted, k)
    ]
    if diff:
        raise UserError(f"{where} was built with {', '.join(diff)}; {what_to_do}")
