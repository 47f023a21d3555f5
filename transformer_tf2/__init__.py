"""transformer_tf2: the Transformer of "Attention Is All You Need" for German->English
translation, in TensorFlow 2 / Keras 3, after Kyubyong/transformer.

The Python API (docs/api.md)::

    from transformer_tf2 import Translator
    translator = Translator.from_run("log/demo", beam_size=4)
    translator.translate(["Die Frau liest ein Buch."])

Its names load on first use: importing the package (as every script does before it
parses its command line) loads no TensorFlow. The subpackages, by job, in their import
order (CONTRIBUTING.md): utils, config, kernels, data, layers, models, decoding,
training, evaluation, export.
"""

__version__ = "0.1.0"
__all__ = ["Hypothesis", "Score", "Translator", "UserError"]


def __getattr__(name: str):
    if name in ("Hypothesis", "Score", "Translator"):
        from transformer_tf2 import api

        return getattr(api, name)
    if name == "UserError":
        from transformer_tf2.utils.errors import UserError

        return UserError
    raise AttributeError(f"module 'transformer_tf2' has no attribute {name!r}")
