"""What config holds after its import: its choices, ranges, key lists and the tables of
families.py, as JSON-ready values. tests/test_config_tables.py compares a fresh process
that imported config alone (``python tests/config_state.py`` prints it, and checks that
TensorFlow was not loaded) with a process that imported every module of the package."""

import json
import sys

from transformer_tf2.config import families, hparams


def state() -> dict:
    return {
        "choices": {k: list(v) for k, v in hparams.CHOICES.items()},
        "ranges": {k: repr(v) for k, v in hparams.RANGES.items()},
        "positions": {
            k: [v.relative, v.check and v.check.__name__] for k, v in families.POSITIONS.items()
        },
        "model_types": {k: repr(v) for k, v in families.MODEL_TYPES.items()},
        "model_keys": list(hparams.MODEL_KEYS),
        "fields": list(hparams.FIELDS),
        "presets": {k: repr(v) for k, v in hparams.PRESETS.items()},
    }


if __name__ == "__main__":
    assert "tensorflow" not in sys.modules, "importing config loaded TensorFlow"
    print(json.dumps(state()))
