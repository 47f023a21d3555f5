"""Every hyperparameter of the pipeline, in one place.

Edit the defaults below, pick a named preset with ``--preset NAME``, and override any
field on the command line with ``--name value``::

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
import sys
from typing import Any

import files
from errors import UserError  # the project's error type, used as hparams.UserError


@dataclasses.dataclass
class Hparams:
    # ---- data -----------------------------------------------------------------------
    corpus: str = "demo"  # demo | iwslt2016 | parallel (plain text, e.g. Multi30k)
    data_dir: str = "data/demo"  # raw corpus files
    prepro_dir: str = "prepro/demo"  # vocabularies, cleaned text, encoded ids, hparams.json
    src_lang: str = "de"
    tgt_lang: str = "en"
    # file stems for corpus=parallel: <data_dir>/<stem>.<lang>[.gz]
    train_stem: str = "train"
    dev_stem: str = "val"
    test_stem: str = "test_2016_flickr"
    # IWSLT 2016 dev and test sets (IWSLT16.TED.<name>.de-en.<lang>.xml)
    iwslt_dev: str = "tst2013"
    iwslt_test: str = "tst2014"
    demo_size: int = 20000  # training pairs of the synthetic demo corpus

    # ---- vocabulary -----------------------------------------------------------------
    vocab_type: str = "bpe"  # bpe (joint sentencepiece) | word (legacy, two vocabularies)
    vocab_size: int = 1000  # BPE: joint vocabulary size (keep it a multiple of 8)
    min_cnt: int = 1  # word: keep words seen at least this often
    maxlen1: int = 100  # max source tokens in training, </S> included
    maxlen2: int = 100  # max target tokens in training, <S> or </S> included

    # ---- batching -------------------------------------------------------------------
    tokens_per_batch: int = 2048  # token budget: batch_rows * padded_length <= this
    batch_size: int = 0  # >0: fixed sentences per batch instead of the token budget
    pad_multiple: int = 1  # pad lengths to a multiple of this (8 bounds XLA shapes)
    eval_batch_size: int = 128  # sentences per decoding batch

    # ---- model (paper section 3) ----------------------------------------------------
    model_type: str = (
        "transformer"  # transformer | weighted (Ahmed et al. 2017: branched attention)
    )
    d_model: int = 128
    d_ff: int = 512
    num_blocks: int = 2
    num_heads: int = 4
    dropout_rate: float = 0.1  # residual and embedding dropout (5.4)
    attention_dropout: float = (
        0.0  # on attention weights (Kyubyong/tensor2tensor; not in the paper)
    )
    position: str = "sinusoid"  # sinusoid (3.5) | learned (legacy sinusoid=False)
    max_position: int = 1024  # rows of the learned position table
    norm: str = "post"  # post (paper) | pre (LayerNorm before each sublayer)
    share_embeddings: bool = True  # tie source and target embeddings (joint BPE vocab only)

    # ---- training (paper section 5) -------------------------------------------------
    lr_schedule: str = "noam"  # noam (5.3) | kyubyong (lr * warmup^0.5 * min(...)) | constant
    lr: float = 0.0005  # peak lr for kyubyong, fixed lr for constant; noam ignores it
    warmup_steps: int = 400
    branch_warmup_steps: int = 400  # weighted: warmup of the kappa/alpha schedule (paper: 400)
    label_smoothing: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-9
    clip_norm: float = 0.0  # >0: clip gradients to this global norm
    max_bad_steps: int = 10  # >0: stop after this many updates in a row skipped for NaN/Inf
    accum_steps: int = 1  # >1: accumulate this many batches per update
    num_epochs: int = 6
    max_steps: int = 0  # >0: stop after this many steps (checkpointed)
    max_minutes: float = 0.0  # >0: stop after this wall time (checkpointed)
    seed: int = 42
    precision: str = "auto"  # auto | float32 | mixed_float16 | mixed_bfloat16
    jit_compile: bool = False  # XLA-compile the train step
    logdir: str = "log/demo"  # checkpoints, TensorBoard events, hparams.json, specs
    ckpt_every_steps: int = 0  # >0: also checkpoint every K steps
    keep_ckpts: int = 3
    early_stopping: int = 0  # >0: stop after this many epochs without a better dev BLEU
    dev_bleu_sents: int = 200  # dev sentences decoded after each epoch (0 = all)
    evaldir: str = "eval/demo"  # dev translations written after each epoch

    # ---- decoding -------------------------------------------------------------------
    results_dir: str = "results"
    beam_size: int = 1
    length_penalty: float = 0.6  # alpha of Wu et al. 2016 (beam search)
    max_len_extra: int = 50  # decode at most source length + this many tokens
    max_len: int = 0  # >0: and never more than this many tokens


# Fields that must agree between preprocessing and training, and between a checkpoint
# and the model built to load it.
DATA_KEYS = ("corpus", "src_lang", "tgt_lang", "vocab_type", "vocab_size", "min_cnt")
MODEL_KEYS = (
    "model_type",
    "vocab_type",
    "vocab_size",
    "min_cnt",
    "d_model",
    "d_ff",
    "num_blocks",
    "num_heads",
    "position",
    "max_position",
    "norm",
    "share_embeddings",
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
)

PRESETS: dict[str, dict[str, Any]] = {
    # Tiny model on the embedded synthetic corpus: prepro -> train -> eval in ~5 min on 2 CPUs.
    "demo": {},
    # A small model sized for Multi30k (29k pairs).
    "multi30k": dict(
        corpus="parallel",
        data_dir="data/multi30k",
        prepro_dir="prepro/multi30k",
        logdir="log/multi30k",
        evaldir="eval/multi30k",
        vocab_size=8000,
        d_model=256,
        d_ff=1024,
        num_blocks=3,
        num_heads=8,
        dropout_rate=0.1,
        lr_schedule="kyubyong",
        lr=0.0015,
        warmup_steps=400,
        num_epochs=30,
        tokens_per_batch=2048,
        dev_bleu_sents=0,
    ),
    # The updated (2019) Kyubyong defaults for IWSLT 2016 de-en.
    "iwslt2016": dict(
        corpus="iwslt2016",
        data_dir="data/iwslt2016",
        prepro_dir="prepro/iwslt2016",
        logdir="log/iwslt2016",
        evaldir="eval/iwslt2016",
        vocab_size=32000,
        d_model=512,
        d_ff=2048,
        num_blocks=6,
        num_heads=8,
        dropout_rate=0.3,
        label_smoothing=0.1,
        lr_schedule="kyubyong",
        lr=0.0003,
        warmup_steps=4000,
        num_epochs=20,
        maxlen1=100,
        maxlen2=100,
        tokens_per_batch=8192,
        dev_bleu_sents=500,
    ),
    # The tf1.2 legacy settings: word vocabulary, short sentences, learned positions.
    "iwslt2016_legacy": dict(
        corpus="iwslt2016",
        data_dir="data/iwslt2016",
        prepro_dir="prepro/iwslt2016_legacy",
        logdir="log/iwslt2016_legacy",
        evaldir="eval/iwslt2016_legacy",
        vocab_type="word",
        min_cnt=20,
        maxlen1=10,
        maxlen2=10,
        position="learned",
        share_embeddings=False,
        lr_schedule="constant",
        lr=0.0001,
        batch_size=32,
        d_model=512,
        d_ff=2048,
        num_blocks=6,
        num_heads=8,
        dropout_rate=0.1,
        label_smoothing=0.1,
        num_epochs=20,
        dev_bleu_sents=500,
    ),
}

CHOICES = {
    "corpus": ("demo", "iwslt2016", "parallel"),
    "vocab_type": ("bpe", "word"),
    "model_type": ("transformer", "weighted"),
    "position": ("sinusoid", "learned"),
    "norm": ("post", "pre"),
    "lr_schedule": ("noam", "kyubyong", "constant"),
    "precision": ("auto", "float32", "mixed_float16", "mixed_bfloat16"),
}

FIELDS = {f.name: f for f in dataclasses.fields(Hparams)}


def _convert(key: str, value: Any) -> Any:
    """Type-check and convert ``value`` (a string from the command line or a JSON value)."""
    kind = type(getattr(Hparams(), key))
    if kind is bool:
        return _to_bool(key, value)
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


def _to_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise UserError(f"--{key} expects true or false, got {value!r}")


def _suggest(key: str) -> str:
    close = difflib.get_close_matches(key, list(FIELDS) + ["preset", "sinusoid"], n=1)
    return f"; did you mean --{close[0]}?" if close else "; see hparams.py for the list"


def apply(hp: Hparams, overrides: dict[str, Any]) -> Hparams:
    """Return a copy of hp with overrides applied, type-checked and validated."""
    values = dataclasses.asdict(hp)
    for key, value in overrides.items():
        if key == "sinusoid":  # legacy flag of the original: sinusoid=False -> learned
            values["position"] = "sinusoid" if _to_bool(key, value) else "learned"
            continue
        if key not in FIELDS:
            raise UserError(f"unknown hyperparameter '{key}'{_suggest(key)}")
        values[key] = _convert(key, value)
    for key, allowed in CHOICES.items():
        if values[key] not in allowed:
            raise UserError(f"--{key} must be one of {', '.join(allowed)}; got {values[key]!r}")
    for key in (
        "d_model",
        "d_ff",
        "num_blocks",
        "num_heads",
        "vocab_size",
        "maxlen1",
        "maxlen2",
        "tokens_per_batch",
        "eval_batch_size",
        "max_position",
        "accum_steps",
        "warmup_steps",
        "branch_warmup_steps",
        "pad_multiple",
        "beam_size",
        "keep_ckpts",
    ):
        if values[key] < 1:
            raise UserError(f"--{key} must be a positive integer; got {values[key]}")
    for key in (
        "max_len_extra",
        "max_len",
        "batch_size",
        "max_steps",
        "ckpt_every_steps",
        "early_stopping",
        "dev_bleu_sents",
        "max_bad_steps",
    ):
        if values[key] < 0:
            raise UserError(f"--{key} must not be negative; got {values[key]}")
    for key in ("dropout_rate", "attention_dropout", "label_smoothing"):
        if not 0 <= values[key] < 1:
            raise UserError(f"--{key} must be in [0, 1); got {values[key]}")
    if values["d_model"] % values["num_heads"]:
        raise UserError(
            f"d_model ({values['d_model']}) must be divisible by num_heads ({values['num_heads']})"
        )
    if values["model_type"] == "weighted" and values["d_ff"] % values["num_heads"]:
        raise UserError(
            f"model_type=weighted splits d_ff ({values['d_ff']}) into num_heads "
            f"({values['num_heads']}) branch FFNs: d_ff must be divisible by it"
        )
    if values["vocab_type"] == "word":
        values["share_embeddings"] = False  # two vocabularies cannot share one matrix
    return Hparams(**values)


def preset(name: str) -> Hparams:
    if name not in PRESETS:
        close = difflib.get_close_matches(name, PRESETS, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise UserError(f"unknown preset '{name}'{hint} (known: {', '.join(PRESETS)})")
    return apply(Hparams(), PRESETS[name])


def parse_args(
    argv: list[str] | None = None, extra: dict[str, Any] | None = None
) -> tuple[Hparams, dict[str, Any]]:
    """Parse ``--preset NAME`` and ``--key value`` pairs (also ``--key=value``).

    ``extra`` maps script-specific options (not hyperparameters) to their defaults, e.g.
    ``{"ckpt": ""}`` for eval.py; their values come back in the second return value.
    ``extra['_preset']`` is the preset name and ``extra['_set']`` the hyperparameters
    given explicitly on the command line.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = dict(extra or {})
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--"):
            raise UserError(f"unexpected argument '{arg}': options look like --name value")
        key, eq, value = arg[2:].partition("=")
        key = key.replace("-", "_")
        if eq:
            pass
        elif (
            key in ("help", "h")
            or key in extra
            and isinstance(extra[key], bool)
            and (i + 1 == len(argv) or argv[i + 1].startswith("--"))
        ):
            value = "true"  # bare switch such as --download or --help
        else:
            if i + 1 == len(argv):
                raise UserError(f"--{key} needs a value")
            i += 1
            value = argv[i]
        pairs.append((key, value))
        i += 1
    name = "demo"
    overrides: dict[str, Any] = {}
    for key, value in pairs:
        if key == "preset":
            name = value
        elif key in extra:
            default = extra[key]
            if isinstance(default, bool):
                extra[key] = _to_bool(key, value)
            elif isinstance(default, int):
                try:
                    extra[key] = int(value)
                except ValueError:
                    raise UserError(f"--{key} expects int, got {value!r}") from None
            else:
                extra[key] = value
        elif key == "help" or key == "h":
            print(__doc__)
            print("hyperparameters:", ", ".join(FIELDS))
            print("script options:", ", ".join(k for k in extra if not k.startswith("_")))
            sys.exit(0)
        else:
            overrides[key] = value
    hp = apply(preset(name), overrides)
    extra["_preset"] = name
    extra["_set"] = set(overrides) - {"sinusoid"} | (
        {"position"} if "sinusoid" in overrides else set()
    )
    return hp, extra


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


def run_main(main) -> None:
    """Run a script's main(), turning UserError into one line on stderr and exit status 2."""
    try:
        main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
