"""How much document context a model reads: how many earlier sentences, and what of each
(Transformer-XL's segment-level recurrence, Dai et al. 2019, 3.2, a sentence as the
segment). Plain arithmetic on the model's settings, which the data pipeline (the context a
batch carries) and the model (layers/recurrence.py, the states it computes) both read.
"""

from __future__ import annotations

import math


def context_needs(num_blocks: int, memory: int, target_memory: int) -> tuple[list, list]:
    """What a sentence's document context needs of each earlier sentence, for a model of
    ``num_blocks`` (L) layers per stack whose encoder reads the ``memory`` (M) sentences
    before and whose decoder reads the ``target_memory`` (M_t) target sentences before
    (Transformer-XL's recurrence, Dai et al. 2019, 3.2): per earlier sentence, index
    ``back`` - 1 (1: the sentence just before), the number of encoder layer inputs (L + 1:
    the encoder output too) and decoder layer inputs its states must give. Layer l of a
    sentence reads layer l's inputs of the M (M_t) before it, so a sentence ``back``
    before gives L - ceil(back / M) + 1 of them to the encoder chain; a target sentence
    whose decoder runs a layer cross-attends to its source's encoder output, which then
    needs its own encoder chain. The list's length is the context depth (0: none)."""

    def chain(back: int, per: int) -> int:
        return num_blocks - math.ceil(back / per) + 1 if per and back <= num_blocks * per else 0

    depth = num_blocks * target_memory + num_blocks * memory
    enc = [chain(b, memory) for b in range(1, depth + 1)]
    dec = [chain(b, target_memory) for b in range(1, depth + 1)]
    for b in range(1, depth + 1):
        if dec[b - 1] >= 2:  # its decoder runs a layer: its source's encoder output
            enc[b - 1] = num_blocks + 1
            for b2 in range(1, num_blocks * memory + 1):
                if b + b2 <= depth:
                    enc[b + b2 - 1] = max(enc[b + b2 - 1], chain(b2, memory))
    while depth and not (enc[depth - 1] or dec[depth - 1]):
        depth -= 1
    return enc[:depth], dec[:depth]


def context_depths(num_blocks: int, memory: int, target_memory: int) -> tuple[int, int]:
    """How many earlier sentences a sentence's context reads (:func:`context_needs`), and
    of how many of the last of them the targets too."""
    enc, dec = context_needs(num_blocks, memory, target_memory)
    return len(enc), sum(1 for d in dec if d)
