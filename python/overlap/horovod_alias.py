"""Runs programs written for Horovod unchanged: `python -m overlap.horovod_alias DIR` writes a
package named `horovod` into DIR and prints DIR; with DIR on PYTHONPATH, `import horovod.torch`
is overlap.torch, `horovod.tensorflow` and `horovod.tensorflow.keras` are overlap's, `horovod.keras`
is overlap.tensorflow.keras, `horovod.common.elastic` and `horovod.common.exceptions` are
overlap.elastic and overlap.common, and `horovod.run` is overlap.run.

    export PYTHONPATH=$(python -m overlap.horovod_alias ~/.cache/overlap/alias):$PYTHONPATH
    overlaprun -np 4 python pytorch_mnist.py      # a Horovod example, as published

The modules are overlap's own objects, not copies: `horovod.torch is overlap.torch` (only
`horovod.common` itself is a small package of overlap.common's names, so that its submodules
import). Nothing is
written outside DIR, and a real Horovod installation is untouched (the alias shadows it only
where DIR comes first on the path). Modules Horovod has and overlap has not (horovod.spark,
horovod.ray, horovod.runner's internals, horovod.mxnet) fail to import with a message that
names the alias.
"""

import os
import sys

# horovod.<name> -> overlap.<name>; anything not listed maps to the same name under overlap.
RENAMES = {"keras": "tensorflow.keras", "common": "_horovod_common"}
# Whole module names whose overlap module has another name: horovod.common's elastic state and
# exceptions, which scripts import directly.
MODULE_RENAMES = {"common.elastic": "elastic", "common.exceptions": "common"}

ALIAS_PACKAGE = '''"""Horovod's names for overlap's modules, written by `python -m overlap.horovod_alias`."""

import importlib
import importlib.abc
import importlib.util
import sys

import overlap
from overlap import RunError, run  # noqa: F401 - horovod.run

__version__ = overlap.__version__
_RENAMES = %(renames)r
_MODULE_RENAMES = %(module_renames)r


def _target(name):
    rest = name[len("horovod."):]
    if rest in _MODULE_RENAMES:
        return "overlap." + _MODULE_RENAMES[rest]
    head, _, tail = rest.partition(".")
    head = _RENAMES.get(head, head)
    return "overlap." + (head + "." + tail if tail else head)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports horovod.X as overlap's module itself (one object under two names)."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("horovod."):
            return None
        try:
            found = importlib.util.find_spec(_target(name))
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ModuleNotFoundError(
                "No module named %%r: overlap's Horovod alias has no %%s (overlap provides "
                "horovod.torch, horovod.tensorflow, horovod.tensorflow.keras, horovod.keras and "
                "horovod.run)" %% (name, _target(name)), name=name)
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        module = importlib.import_module(_target(spec.name))
        spec.loader_state = module.__spec__  # put back in exec_module: the module keeps its own
        return module

    def exec_module(self, module):
        own = module.__spec__.loader_state
        if own is not None:
            module.__spec__ = own


if not any(isinstance(f, _Alias) or type(f).__name__ == "_Alias" for f in sys.meta_path):
    sys.meta_path.insert(0, _Alias())
'''


def write(directory):
    """Writes DIR/horovod/__init__.py and returns DIR."""
    package = os.path.join(os.path.abspath(directory), "horovod")
    os.makedirs(package, exist_ok=True)
    path = os.path.join(package, "__init__.py")
    text = ALIAS_PACKAGE % {"renames": RENAMES, "module_renames": MODULE_RENAMES}
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return os.path.abspath(directory)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        sys.exit("usage: python -m overlap.horovod_alias DIR  (writes DIR/horovod, prints DIR)")
    print(write(argv[0]))


if __name__ == "__main__":
    main()
