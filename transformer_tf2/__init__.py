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

import importlib
import importlib.machinery
import importlib.util
import sys
import types

__version__ = "0.1.0"
__all__ = ["Hypothesis", "Score", "Translator", "UserError"]


class _OnFirstUse(types.ModuleType):
    """A module imported on its first attribute: Keras imports matplotlib.pyplot as it
    loads (for keras.visualization, which this project never calls), 0.35 s of every
    script's start-up; in its place until then, this loads the real one, which then
    replaces it, the moment anything reads from it (``plt.subplots``, ``from
    matplotlib.pyplot import figure``)."""

    def _load(self) -> types.ModuleType:
        """The real module, in sys.modules in place of this one."""
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return importlib.import_module(self.__name__)

    @property
    def __spec__(self):
        """The real module's spec, found without importing anything: every import
        statement that finds this module reads it (``_initializing``), and so does
        ``importlib.util.find_spec``."""
        if "_spec" not in self.__dict__:
            parent, _, child = self.__name__.rpartition(".")
            where = importlib.util.find_spec(parent).submodule_search_locations
            found = importlib.machinery.PathFinder.find_spec(self.__name__, where)
            self.__dict__["_spec"] = found
        return self.__dict__["_spec"]

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            # a module's own attributes (``__file__``, ``__path__``), read as sys.modules
            # is walked (AutoGraph does it for every function it converts): not a use
            raise AttributeError(name)
        return getattr(self._load(), name)


if "matplotlib.pyplot" not in sys.modules and "keras" not in sys.modules:
    sys.modules["matplotlib.pyplot"] = _OnFirstUse("matplotlib.pyplot")


def __getattr__(name: str):
    if name in ("Hypothesis", "Score", "Translator"):
        from transformer_tf2 import api

        return getattr(api, name)
    if name == "UserError":
        from transformer_tf2.utils.errors import UserError

        return UserError
    raise AttributeError(f"module 'transformer_tf2' has no attribute {name!r}")
