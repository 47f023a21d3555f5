"""What config knows of the position families (layers/positions.py) and the model types
(models/): plain tables of their names, with what the checks of a set of settings need of
each, and those checks. ``hparams.apply`` runs :func:`check` on every script's settings,
so ``cli.start`` answers a combination no model can run before TensorFlow loads.

The tables are the lists of choices of ``--position`` and ``--model_type``. The registries
they name (``positions.REGISTRY``, ``model.VARIANTS``) check at registration that their
entries agree (``positions.register``; tests/test_config_tables.py for both): a new family
or variant adds its row here, and config never imports the layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from transformer_tf2.utils.errors import UserError


@dataclasses.dataclass(frozen=True)
class Position:
    """A position family as config sees it: whether it places keys by their distance to
    the query (``relative``: earlier sentences' keys at negative positions, which document
    memory needs; no absolute encoding of its own, so ``position_add_absolute`` may add the
    sinusoid), and its own check of a set of settings (an Hparams as a dict), if any."""

    relative: bool
    check: Callable[[dict], None] | None = None


@dataclasses.dataclass(frozen=True)
class ModelType:
    """A ``model_type`` as config sees it: whether its encoder layers take the states of
    earlier sentences (``memory_sentences``, ``target_memory_sentences``)."""

    document_memory: bool


def even_d_model(values: dict) -> None:
    if values["d_model"] % 2:
        raise UserError(f"position=xl needs an even d_model; got {values['d_model']}")


def two_heads(values: dict) -> None:
    if values["num_heads"] < 2:
        raise UserError(
            "position=alibi_dir splits the encoder's heads into left- and right-looking "
            f"halves: it needs num_heads >= 2; got {values['num_heads']}"
        )


def even_head_width(values: dict) -> None:
    if values["d_model"] // values["num_heads"] % 2:
        raise UserError(
            f"position=rotary rotates pairs of dimensions: d_model / num_heads "
            f"({values['d_model']} / {values['num_heads']}) must be even"
        )


# --position's values, in --help's order: the paper's sinusoid (3.5) and the others of
# docs/positions.md
POSITIONS: dict[str, Position] = {
    "sinusoid": Position(relative=False),
    "learned": Position(relative=False),
    "shaw": Position(relative=True),
    "t5": Position(relative=True),  # its two settings: checks.check_t5, for every family
    "xl": Position(relative=True, check=even_d_model),
    "alibi": Position(relative=True),
    "alibi_dir": Position(relative=True, check=two_heads),
    "rotary": Position(relative=True, check=even_head_width),
}

# --model_type's values: the paper's Transformer, Ahmed et al. 2017, Dehghani et al. 2018
MODEL_TYPES: dict[str, ModelType] = {
    "transformer": ModelType(document_memory=True),
    "weighted": ModelType(document_memory=True),
    "universal": ModelType(document_memory=False),  # its recurrent stack has no memory yet
}


def relative_names() -> list[str]:
    return [name for name, family in POSITIONS.items() if family.relative]


def check(values: dict) -> None:
    """The checks of this module on ``values`` (an Hparams as a dict, its choices checked
    already): the position family's own, ``position_add_absolute`` only with a relative
    family, and document memory's (:func:`memory_problem`); each one UserError line."""
    family = POSITIONS[values["position"]]
    if values["position_add_absolute"] and not family.relative:
        raise UserError(
            f"--position_add_absolute adds the sinusoid to a relative family; "
            f"position={values['position']} is absolute already: drop it or pick one of "
            f"{', '.join(relative_names())}"
        )
    if family.check:
        family.check(values)
    problem = memory_problem(values)
    if problem:
        raise UserError(problem)


def memory_problem(values: dict) -> str | None:
    """Why settings (an Hparams or ModelConfig as a dict) cannot have ``memory_sentences``
    or ``target_memory_sentences`` > 0, or None: the earlier sentences' keys sit at
    negative positions, which only a relative family places, and the model type's layers
    must take a memory."""
    wanted = [k for k in ("memory_sentences", "target_memory_sentences") if values.get(k, 0) > 0]
    if not wanted:
        return None
    setting = f"{wanted[0]}={values[wanted[0]]}"
    if not POSITIONS[values["position"]].relative:
        return (
            f"{setting} places the earlier sentences at negative relative positions; "
            f"position={values['position']} is absolute: pick one of {', '.join(relative_names())}"
        )
    if values["key_mask_defect"]:
        return (
            "key_mask_defect=true attends to padding, and the memory is padded: use "
            f"{wanted[0]}=0 with it"
        )
    if not MODEL_TYPES[values["model_type"]].document_memory:
        return (
            f"model_type={values['model_type']} has no document memory; use {wanted[0]}=0 or "
            "another model_type"
        )
    return None
