"""The checks of a set of hyperparameters (hparams.apply runs them on every script's
settings before TensorFlow starts): every float setting finite and every numeric one within
the :class:`Range` its declaration in hparams.py gives, sampling's settings together, T5's
buckets, and the combinations that cannot build a model or a vocabulary. Each failure is one
UserError line naming the option.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from transformer_tf2.utils.errors import UserError


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric setting may take, as its declaration in hparams.py states them
    (``hparams.setting(..., at_least=1)``): each bound given is one end of the range,
    inclusive (``at_least``, ``at_most``) or not (``above``, ``below``). ``negative``, when
    given, lets every negative value through too and says what one means ("to follow
    dropout_rate"); ``note`` is added to the error message in brackets."""

    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None
    negative: str = ""
    note: str = ""

    def __post_init__(self):
        if self.at_least is not None and self.above is not None:
            raise ValueError("a range has one lower end: at_least or above, not both")
        if self.at_most is not None and self.below is not None:
            raise ValueError("a range has one upper end: at_most or below, not both")

    def admits(self, value: float) -> bool:
        """Whether ``value`` lies in the range."""
        if self.negative and value < 0:
            return True
        return not (
            (self.at_least is not None and value < self.at_least)
            or (self.above is not None and value <= self.above)
            or (self.at_most is not None and value > self.at_most)
            or (self.below is not None and value >= self.below)
        )

    def rule(self, integer: bool = False) -> str:
        """What the error message says the value must be, e.g. "must be in [0, 1)" or, for
        an integer setting of at least 1, "must be a positive integer"."""
        low = self.at_least if self.at_least is not None else self.above
        high = self.at_most if self.at_most is not None else self.below
        if low is not None and high is not None:
            opening = "[" if self.at_least is not None else "("
            closing = "]" if self.at_most is not None else ")"
            text = f"must be in {opening}{low}, {high}{closing}"
        elif high is not None:
            text = f"must be {'at most' if self.at_most is not None else 'below'} {high}"
        elif self.above is not None:
            text = "must be positive" if self.above == 0 else f"must be above {self.above}"
        elif self.at_least == 1 and integer:
            text = "must be a positive integer"
        elif self.at_least == 0:
            text = "must not be negative"
        else:
            text = f"must be at least {self.at_least}"
        text += f" ({self.note})" if self.note else ""
        return text + (f", or negative {self.negative}" if self.negative else "")


def check(values: dict, ranges: Mapping[str, Range]) -> None:
    """Every check of this module on ``values`` (an Hparams as a dict), each numeric setting
    against its range in ``ranges`` (hparams.RANGES: the ranges the declarations give)."""
    check_ranges(values, ranges)
    check_sampling(values)
    if values["d_model"] % values["num_heads"]:
        raise UserError(
            f"d_model ({values['d_model']}) must be divisible by num_heads ({values['num_heads']})"
        )
    if values["model_type"] == "weighted" and values["d_ff"] % values["num_heads"]:
        raise UserError(
            f"model_type=weighted splits d_ff ({values['d_ff']}) into num_heads "
            f"({values['num_heads']}) branch FFNs: d_ff must be divisible by it"
        )
    if values["model_type"] == "weighted" and not values["output_projection"]:
        raise UserError(
            "model_type=weighted projects each head by its rows of W^O: it needs "
            "output_projection=true"
        )
    if values["bpe_dropout"] and values["vocab_type"] != "bpe":
        raise UserError(
            f"--bpe_dropout drops BPE merges; vocab_type={values['vocab_type']} has none: "
            "use --vocab_type bpe or --bpe_dropout 0"
        )
    check_t5(values)


def check_ranges(values: dict, ranges: Mapping[str, Range]) -> None:
    """Every float setting finite, then each setting that ``ranges`` names within its range:
    a one-line UserError naming the first that is not (in the order of ``values``)."""
    for key, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"--{key} must be a finite number; got {value}")
    for key, value in values.items():
        limits = ranges.get(key)
        if limits is not None and not limits.admits(value):
            rule = limits.rule(integer=isinstance(value, int))
            raise UserError(f"--{key} {rule}; got {shown(value)}")


def shown(value: float) -> str:
    """``value`` as an error message shows it: a whole float without its ".0" (``-1``,
    as the command line said it), any other number as Python writes it."""
    text = repr(value)
    return text[:-2] if isinstance(value, float) and text.endswith(".0") else text


def check_sampling(values: dict) -> None:
    """Sampling's settings together (each one's range is its declaration's): sampling
    (sampling_topk other than 1, as in CTranslate2) without a beam, and sampling_topp or
    sampling_temperature only where there is sampling."""
    topk, topp, temperature = (values[f"sampling_{k}"] for k in ("topk", "topp", "temperature"))
    if topk == 1 and (topp < 1 or temperature != 1):
        raise UserError(
            "--sampling_topp and --sampling_temperature shape sampling, which --sampling_topk "
            "1 (the default: greedy) turns off: add --sampling_topk 0 (every token) or K > 1"
        )
    if topk != 1 and values["beam_size"] > 1:
        raise UserError(
            f"--sampling_topk {topk} samples one token at a time: drop --beam_size "
            f"{values['beam_size']} (or use --sampling_topk 1 for beam search)"
        )


def check_t5(values: dict) -> None:
    """T5's buckets split into exact and log-spaced ones (the causal decoder has
    t5_buckets / 2 exact ones, which t5_max_distance must pass)."""
    buckets, far = values["t5_buckets"], values["t5_max_distance"]
    if buckets < 4 or buckets % 2:
        raise UserError(f"--t5_buckets must be an even number >= 4; got {buckets}")
    if far <= buckets // 2:
        raise UserError(
            f"--t5_max_distance ({far}) must exceed t5_buckets / 2 ({buckets // 2}), the "
            "distances with a bucket of their own; raise it or lower --t5_buckets"
        )
