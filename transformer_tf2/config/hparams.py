"""Every hyperparameter of the pipeline, each declared once: its field in :class:`Hparams`.

A field's declaration, ``name: type = setting(default, help, section=..., ...)``, says
everything about the setting: its type, default, ``--help`` text and section, its allowed
values (``choices``, or a range such as ``at_least=1``) and the groups it belongs to (a
model setting, a decoding key, ...). ``--help`` (cli.py), the range checks (checks.py)
and the key tuples below (MODEL_FIELDS, DECODE_KEYS, CHOICES, ...) are read from there.

A user sets values in the hparams.py at the repository root (plain assignments, read by
:func:`cli.user_values`), picks a named preset with ``--preset NAME`` (presets.py), and
overrides any field on the command line with ``--name value`` (parsed by cli.py). The
defaults are the run that ``python train.py`` makes with no ``--preset`` (the ``demo``
preset adds nothing to them): a small model on the synthetic demo corpus. A value in the
root hparams.py changes that run, and every preset that does not set the field; ``--help``
says where each value comes from::

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
from collections.abc import Collection
from typing import Any

from transformer_tf2.config import checks, families
from transformer_tf2.config.presets import PRESETS
from transformer_tf2.utils import files
from transformer_tf2.utils.errors import (
    UserError,  # the project's error type, used as hparams.UserError
)

# The --help sections, in order: name -> the title of its group in --help.
SECTIONS = {
    "data": "data",
    "vocabulary": "vocabulary",
    "batching": "batching",
    "model": "model (paper section 3)",
    "training": "training (paper section 5)",
    "decoding": "decoding",
}

# The groups a setting may belong to (setting's ``groups``): name -> what a member is.
GROUPS = {
    "data": "DATA_KEYS: must agree between preprocessing and training (the vocabulary)",
    "checkpoint": "MODEL_KEYS: besides the model's own fields, what a checkpoint depends on",
    "model": "MODEL_FIELDS: a model.Transformer is built from it (a ModelConfig field)",
    "training_only": "TRAINING_ONLY_FIELDS: a ModelConfig field that changes training alone",
    "decode": "DECODE_KEYS: eval.py, translate.py and export.py may change it (not the model)",
    # or a resumed run would skip some pairs and repeat others
    "resume": "RESUME_KEYS: fixes the batch plan and the place in an epoch: resuming keeps it",
}


def setting(
    default: Any,
    help: str,
    *,
    section: str,
    choices: Collection[str] = (),
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
    negative: str = "",
    note: str = "",
    groups: tuple[str, ...] = (),
    order: dict[str, int] | None = None,
) -> Any:
    """The declaration of one setting, as a dataclass field: ``default``, and in its
    metadata everything else read about it.

    ``help`` is its ``--help`` text, ``section`` its --help section (a key of SECTIONS).
    ``choices`` are the values a string setting allows; ``at_least``, ``above``,
    ``at_most`` and ``below`` bound a numeric one (a :class:`checks.Range`, with its
    ``negative`` and ``note``). ``groups`` names the GROUPS it belongs to; ``order`` gives
    its place in a group (or in CHOICES, as "choices") whose order is not the order of
    declaration: each group is sorted by place (0 where none is given), ties in the order
    of declaration.
    """
    bounds = dict(at_least=at_least, above=above, at_most=at_most, below=below)
    limits = {k: v for k, v in bounds.items() if v is not None}
    unknown = set(groups) - set(GROUPS)
    elsewhere = set(order or {}) - set(groups) - ({"choices"} if choices else set())
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r} (known: {', '.join(SECTIONS)})")
    if unknown:
        raise ValueError(f"unknown groups {sorted(unknown)} (known: {', '.join(GROUPS)})")
    if elsewhere:
        raise ValueError(f"order places it in {sorted(elsewhere)}, which it is not in")
    if (negative or note) and not limits:
        raise ValueError("negative and note describe a range: give its bounds too")
    if {"model", "training_only"} <= set(groups):
        raise ValueError("a model setting either changes the model or is training-only")
    metadata = dict(
        help=help,
        section=section,
        choices=choices,  # a tuple, or a live view of a table's names (families.py)
        range=checks.Range(**limits, negative=negative, note=note) if limits else None,
        groups=tuple(groups),
        order=dict(order or {}),
    )
    return dataclasses.field(default=default, metadata=metadata)


# Each field's declaration, laid out as a table (hence "fmt: off"). The defaults are the
# demo's run; the paper's base model (3, 6.1) is the iwslt2016 presets' (presets.py). A new
# model setting is a field in the group "model" whose default reproduces the current model,
# so that every earlier checkpoint still loads and decodes the same.
# fmt: off
@dataclasses.dataclass
class Hparams:
    # ---- data -----------------------------------------------------------------------
    corpus: str = setting("demo", "demo | iwslt2016 | parallel (plain text, e.g. Multi30k)",
        section="data", choices=("demo", "iwslt2016", "parallel"), groups=("data",))
    data_dir: str = setting("data/demo", "raw corpus files", section="data")
    prepro_dir: str = setting("prepro/demo",
        "vocabularies, cleaned text, encoded ids, hparams.json", section="data")
    src_lang: str = setting("de", "source language: the file suffix of the source side",
        section="data", groups=("data",))
    tgt_lang: str = setting("en", "target language: the file suffix of the target side",
        section="data", groups=("data",))
    train_stem: str = setting("train",
        "corpus=parallel: training files <data_dir>/<stem>.<lang>[.gz]", section="data")
    dev_stem: str = setting("val",
        "corpus=parallel: dev files (dev loss and BLEU after each epoch)", section="data")
    test_stem: str = setting("test_2016_flickr", "corpus=parallel: test files (eval.py)",
        section="data")
    iwslt_dev: str = setting("tst2013",
        "IWSLT 2016 dev set: IWSLT16.TED.<name>.de-en.<lang>.xml", section="data")
    iwslt_test: str = setting("tst2014", "IWSLT 2016 test set, same naming", section="data")
    demo_size: int = setting(20000, "training pairs of the synthetic demo corpus", section="data")
    demo_documents: float = setting(0.0, "demo: share of sentences in pronoun episodes (docs)",
        section="data", at_least=0, below=1)

    # ---- vocabulary -----------------------------------------------------------------
    vocab_type: str = setting("bpe", "bpe (joint sentencepiece) | word (legacy, two vocabularies)",
        section="vocabulary", choices=("bpe", "word"), groups=("data", "checkpoint"))
    vocab_size: int = setting(1000, "BPE: joint vocabulary size (keep it a multiple of 8)",
        section="vocabulary", at_least=1, groups=("data", "checkpoint"))
    min_cnt: int = setting(1, "word: keep words seen at least this often",
        section="vocabulary", groups=("data", "checkpoint"))
    maxlen1: int = setting(100, "max source tokens in training, </S> included",
        section="vocabulary", at_least=1, groups=("resume",), order={"resume": 5})
    maxlen2: int = setting(100, "max target tokens in training, <S> or </S> included",
        section="vocabulary", at_least=1, groups=("resume",), order={"resume": 6})
    # dev, test and decoding keep prepro.py's pieces; 0: the fixed segmentation (the paper's)
    bpe_dropout: float = setting(0.0,
        "BPE-dropout: P(skip a merge), training pieces drawn anew each epoch",
        section="vocabulary", at_least=0, below=1, groups=("resume",), order={"resume": 8})

    # ---- batching -------------------------------------------------------------------
    tokens_per_batch: int = setting(2048, "token budget: batch_rows * padded_length <= this",
        section="batching", at_least=1, groups=("resume",), order={"resume": 2})
    batch_size: int = setting(0, ">0: fixed sentences per batch instead of the token budget",
        section="batching", at_least=0, groups=("resume",), order={"resume": 3})
    pad_multiple: int = setting(1, "pad lengths to a multiple of this (8 bounds XLA shapes)",
        section="batching", at_least=1, groups=("resume",), order={"resume": 4})
    eval_batch_size: int = setting(128, "sentences per decoding batch",
        section="batching", at_least=1, groups=("decode",), order={"decode": 5})

    # ---- model (paper section 3) ----------------------------------------------------
    model_type: str = setting("transformer",
        "transformer | weighted (Ahmed 2017) | universal (Dehghani 2018)", section="model",
        choices=families.MODEL_TYPES.keys(), groups=("model",))
    d_model: int = setting(128, "width of every layer's input and output (3.1)",
        section="model", at_least=1, groups=("model",))
    d_ff: int = setting(512, "inner width of the position-wise feed-forward networks (3.3)",
        section="model", at_least=1, groups=("model",))
    num_blocks: int = setting(2, "N: layers in the encoder and in the decoder (3.1)",
        section="model", at_least=1, groups=("model",))
    num_heads: int = setting(4, "h: attention heads; d_model / h per head (3.2.2)",
        section="model", at_least=1, groups=("model",))
    dropout_rate: float = setting(0.0,
        "residual and embedding dropout (5.4: 0.1), unless set apart below",
        section="model", at_least=0, below=1, groups=("training_only",),
        order={"training_only": 1})
    embedding_dropout: float = setting(-1.0,
        "on the embedding + position sums (5.4); <0: dropout_rate",
        section="model", at_least=0, below=1, negative="to follow dropout_rate",
        groups=("training_only",), order={"training_only": 3})
    residual_dropout: float = setting(-1.0,
        "on each sublayer's output (5.4; TF1: 0); <0: dropout_rate",
        section="model", at_least=0, below=1, negative="to follow dropout_rate",
        groups=("training_only",), order={"training_only": 4})
    attention_dropout: float = setting(0.0, "on attention weights (Kyubyong; not in the paper)",
        section="model", at_least=0, below=1, groups=("training_only",),
        order={"training_only": 2})
    # the choices are a live view of families.POSITIONS (positions.REGISTRY agrees)
    position: str = setting("xl",
        "xl | sinusoid (3.5) | learned | shaw | t5 | alibi[_dir] | rotary", section="model",
        choices=families.POSITIONS.keys(), groups=("model",))
    max_position: int = setting(1024, "rows of the learned position table (TF1: maxlen)",
        section="model", at_least=1, groups=("model",))
    max_relative_position: int = setting(16, "shaw: distances clipped at +-k (Shaw et al. 2018)",
        section="model", at_least=1, groups=("model",))
    # (checks.check_t5 checks the two t5 settings together)
    t5_buckets: int = setting(32,
        "t5: relative-distance buckets (half per direction in the encoder)",
        section="model", groups=("model",))
    t5_max_distance: int = setting(128, "t5: distances from here on share the last bucket",
        section="model", groups=("model",))
    position_add_absolute: bool = setting(False,
        "relative families: also add the sinusoid (3.5)", section="model", groups=("model",))
    norm: str = setting("post", "post (paper) | pre (LayerNorm before each sublayer)",
        section="model", choices=("post", "pre"), groups=("model",))
    memory_sentences: int = setting(0,
        "M > 0: the encoder also reads the M sentences before (docs)",
        section="model", at_least=0, groups=("model",))
    target_memory_sentences: int = setting(0,
        "> 0: the decoder also reads the target sentences before",
        section="model", at_least=0, groups=("model",))
    share_embeddings: bool = setting(True,
        "tie source and target embeddings (joint BPE vocab only)",
        section="model", groups=("model",))
    ut_max_steps: int = setting(6, "universal: the most recurrent steps of each shared block",
        section="model", at_least=1, groups=("model",), order={"model": 1})
    act: bool = setting(True,
        "universal: Adaptive Computation Time per position (false: fixed depth)",
        section="model", groups=("model",), order={"model": 1})
    act_epsilon: float = setting(0.01,
        "universal: a position halts once its halting sum > 1 - this",
        section="model", at_least=0, below=1, groups=("model",), order={"model": 1})
    # Switches where the TF1 code differs from the paper (docs/model.md); the
    # defaults are the paper's
    qkv_activation: str = setting("none", "none (3.2.2) | relu (TF1) on the Q, K, V projections",
        section="model", choices=("none", "relu"), groups=("model",))
    qkv_bias: bool = setting(False,
        "biases on the Q, K, V projections (TF1 and 2019 Kyubyong code)",
        section="model", groups=("model",))
    output_projection: bool = setting(True, "W^O after the heads (3.2.2); TF1 has none",
        section="model", groups=("model",))
    query_masking: bool = setting(False, "zero the attention weights of PAD queries (TF1)",
        section="model", groups=("model",))
    key_mask_defect: bool = setting(False, "TF1 defect (Kyubyong#33): no PAD key/query mask fires",
        section="model", groups=("model",))
    tie_softmax: bool = setting(True, "pre-softmax projection = target embedding (3.4); TF1: own",
        section="model", groups=("model",))
    layer_norm_epsilon: float = setting(1e-6, "LayerNorm epsilon (TF1: 1e-8)",
        section="model", above=0, groups=("model",))
    embedding_init: str = setting("normal", "normal (d_model^-0.5; positions 1) | xavier (TF1)",
        section="model", choices=("normal", "xavier"), groups=("model",))

    # ---- training (paper section 5) -------------------------------------------------
    lr_schedule: str = setting("wsd",
        "wsd | linear (end at the budget) | noam (5.3) | kyubyong | constant",
        section="training", choices=("noam", "kyubyong", "constant", "wsd", "linear"))
    lr: float = setting(0.003,
        "peak lr (kyubyong, wsd, linear), fixed lr (constant); noam ignores it",
        section="training", above=0)
    warmup_steps: int = setting(200,
        "linear warmup steps of every schedule but constant (5.3: 4000)",
        section="training", at_least=1)
    cooldown: float = setting(0.2, "wsd: the last fraction of the budget, where the lr decays to 0",
        section="training", above=0, at_most=1)
    branch_warmup_steps: int = setting(400,
        "weighted: warmup of the kappa/alpha schedule (paper: 400)",
        section="training", at_least=1)
    label_smoothing: float = setting(0.1, "epsilon_ls of the label-smoothed loss (5.4)",
        section="training", at_least=0, below=1)
    act_loss_weight: float = setting(0.01, "universal: weight of the ACT ponder cost in the loss",
        section="training", at_least=0, groups=("training_only",), order={"training_only": 5})
    adam_beta1: float = setting(0.9, "Adam beta1 (5.3)", section="training", at_least=0, below=1)
    adam_beta2: float = setting(0.98, "Adam beta2 (5.3)", section="training", at_least=0, below=1)
    adam_epsilon: float = setting(1e-9, "Adam epsilon (5.3)", section="training", above=0)
    clip_norm: float = setting(0.0, ">0: clip gradients to this global norm",
        section="training", at_least=0)
    max_bad_steps: int = setting(10,
        ">0: stop after this many updates in a row skipped for NaN/Inf",
        section="training", at_least=0)
    accum_steps: int = setting(1, ">1: accumulate this many batches per update",
        section="training", at_least=1, groups=("resume",), order={"resume": 7})
    num_epochs: int = setting(4, "passes over the training data", section="training", at_least=1)
    max_steps: int = setting(0, ">0: stop after this many steps (checkpointed)",
        section="training", at_least=0)
    max_minutes: float = setting(0.0, ">0: stop after this wall time (checkpointed)",
        section="training", at_least=0)
    seed: int = setting(42, "weights, dropout, batch order; in eval.py and translate.py, sampling",
        section="training", groups=("decode", "resume"), order={"decode": 13, "resume": 1})
    precision: str = setting("auto",
        "auto (docs/training.md) | float32 | mixed_float16 | mixed_bfloat16", section="training",
        choices=("auto", "float32", "mixed_float16", "mixed_bfloat16"), groups=("decode",),
        order={"decode": 7, "choices": 1})
    jit_compile: bool = setting(False, "XLA-compile the train step", section="training")
    logdir: str = setting("log/demo", "checkpoints, TensorBoard events, hparams.json, specs",
        section="training")
    ckpt_every_steps: int = setting(0, ">0: also checkpoint every K steps",
        section="training", at_least=0)
    keep_ckpts: int = setting(5, "checkpoints kept: at least average_checkpoints.py's --last (5)",
        section="training", at_least=1)
    early_stopping: int = setting(0,
        ">0: stop after this many dev BLEU evaluations in a row without a better one",
        section="training", at_least=0)
    dev_bleu_sents: int = setting(200, "dev sentences decoded after each epoch (0 = all)",
        section="training", at_least=0)
    eval_share: float = setting(0.1,
        "max_minutes: skip an epoch's dev BLEU past this share of time",
        section="training", above=0, at_most=1)
    average: int = setting(3,
        ">1: the average of the last N checkpoints, where it wins on dev BLEU",
        section="training", at_least=0)
    ema_decay: float = setting(0.0,
        ">0: keep a moving average of the weights (docs/training.md), e.g. 0.9999; 0: off",
        section="training", at_least=0, below=1)
    init_from: str = setting("", "a trained run's logdir: fine-tune its weights (docs/training.md)",
        section="training")
    init_optimizer: bool = setting(False, "init_from: also take its Adam moments (step from 0)",
        section="training")
    evaldir: str = setting("",
        "dev translations written after each epoch (empty: <logdir>/eval, the run's own)",
        section="training")
    attention_layers: str = setting("last", "last | all | none: attention figures in TensorBoard",
        section="training", choices=("last", "all", "none"))

    # ---- decoding -------------------------------------------------------------------
    results_dir: str = setting("results", "eval.py writes <results_dir>/<run>_<checkpoint>[.json]",
        section="decoding", groups=("decode",), order={"decode": 6})
    beam_size: int = setting(1, "1: greedy decoding; k > 1: beam search with k hypotheses",
        section="decoding", at_least=1, groups=("decode",), order={"decode": 1})
    length_penalty: float = setting(0.6, "alpha of Wu et al. 2016 (beam search)",
        section="decoding", at_least=0, groups=("decode",), order={"decode": 2})
    max_len_extra: int = setting(50, "decode at most source length + this many tokens",
        section="decoding", at_least=0, groups=("decode",), order={"decode": 3})
    max_len: int = setting(0, ">0: and never more than this many tokens",
        section="decoding", at_least=0, groups=("decode",), order={"decode": 4})
    legacy_protocol: bool = setting(False, "eval.py scores the TF1 eval.py subset the TF1 way",
        section="decoding", groups=("decode",), order={"decode": 8})
    decode_streams: int = setting(0,
        "batches decoded at once (0: one per CPU core on a CPU, 1 on a GPU)",
        section="decoding", at_least=0, groups=("decode",), order={"decode": 9})
    sampling_topk: int = setting(1,
        "1: no sampling; K > 1: sample from the K likeliest tokens; 0: from all",
        section="decoding", at_least=0, note="0: every token", groups=("decode",),
        order={"decode": 10})
    sampling_topp: float = setting(1.0,
        "<1: sample from the likeliest tokens whose mass reaches this",
        section="decoding", above=0, at_most=1, groups=("decode",), order={"decode": 11})
    sampling_temperature: float = setting(1.0, "sampling: the logits are divided by this",
        section="decoding", above=0, groups=("decode",), order={"decode": 12})
# fmt: on


# ---------------------------------------------------------------------------------------
# What the declarations give: the --help sections, the key groups, the choices and ranges


def _declared(cls: type) -> tuple[dataclasses.Field, ...]:
    """The fields of the dataclass ``cls``, each declared with :func:`setting`: a
    ValueError names the first one that is not, or whose help text is empty."""
    fields = dataclasses.fields(cls)
    for f in fields:
        if not str(f.metadata.get("help", "")).strip() or f.metadata.get("section") not in SECTIONS:
            raise ValueError(
                f"{cls.__name__}.{f.name} needs a declaration setting(default, help, "
                "section=...) with a help text"
            )
    return fields


def _ordered(fields, collection: str) -> list[dataclasses.Field]:
    """``fields`` sorted by their place in ``collection`` (setting's ``order``; 0 where
    none is given), ties in the order of declaration."""
    return sorted(fields, key=lambda f: f.metadata["order"].get(collection, 0))


def sections(cls: type = Hparams) -> dict[str, list[str]]:
    """Each --help section (a key of SECTIONS) that the fields of ``cls`` use -> those
    fields, in the order of declaration; a section's fields are declared together."""
    out: dict[str, list[str]] = {}
    for f in _declared(cls):
        section = f.metadata["section"]
        if section in out and section != list(out)[-1]:
            raise ValueError(
                f"{cls.__name__}.{f.name}: the fields of section {section!r} are not declared "
                "together"
            )
        out.setdefault(section, []).append(f.name)
    return out


def help_groups(cls: type = Hparams) -> dict[str, str]:
    """The --help groups of ``cls``, in order: each group's first field and its title (a
    group runs to the next one's first field)."""
    return {names[0]: SECTIONS[section] for section, names in sections(cls).items()}


def members(group: str, cls: type = Hparams) -> tuple[str, ...]:
    """The fields of ``cls`` that belong to ``group`` (a key of GROUPS), in its order."""
    return tuple(f.name for f in _ordered(_declared(cls), group) if group in f.metadata["groups"])


def declared_choices(cls: type = Hparams) -> dict[str, Collection[str]]:
    """Each field of ``cls`` with choices -> its choices."""
    with_choices = [f for f in _declared(cls) if f.metadata["choices"]]
    return {f.name: f.metadata["choices"] for f in _ordered(with_choices, "choices")}


def declared_ranges(cls: type = Hparams) -> dict[str, checks.Range]:
    """Each field of ``cls`` with a range -> its range."""
    return {f.name: f.metadata["range"] for f in _declared(cls) if f.metadata["range"]}


# The --help groups (cli.py), in order: each group's first field and its title.
HELP_GROUPS = help_groups()
# The members of each of GROUPS, in its order (MODEL_KEYS follows ModelConfig, below).
DATA_KEYS = members("data")
MODEL_FIELDS = members("model")
TRAINING_ONLY_FIELDS = members("training_only")
DECODE_KEYS = members("decode")
RESUME_KEYS = members("resume")


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
# the model's function. Its fields are the vocabulary sizes and the Hparams fields of the
# groups "model" and "training_only", each with the type and default of its declaration.
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
MODEL_KEYS = members("checkpoint") + tuple(
    f.name
    for f in dataclasses.fields(ModelConfig)
    if not f.metadata.get("training_only") and f.name not in ("src_vocab_size", "tgt_vocab_size")
)

# Each string setting with a fixed set of values -> those values (position's and
# model_type's: live views of the tables of families.py), and each numeric setting's range.
CHOICES = declared_choices()
RANGES = declared_ranges()

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
    checks.check(values, RANGES)
    families.check(values)
    if values["vocab_type"] == "word":
        values["share_embeddings"] = False  # two vocabularies cannot share one matrix
    return Hparams(**values)


def eval_folder(hp: Hparams) -> str:
    """Where a run writes its dev translations: ``evaldir`` where given, else the folder
    ``eval`` inside its logdir, so that two runs never write the same file (their names,
    E{epoch}S{step}L{loss}, repeat from run to run) and a run's files stay together."""
    return hp.evaldir or os.path.join(hp.logdir, "eval")


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
