"""overlap: a data-parallel training runtime with Horovod's Python API.

Use a framework adapter: ``import overlap.torch as hvd`` where a script had
``import horovod.torch as hvd``. The adapters share one core library (liboverlap.so), loaded by
``overlap._core``. ``overlap.run`` is Horovod's ``horovod.run``: it runs a function on N ranks
and returns what each returned (overlap/runner.py).
"""

from overlap.runner import RunError, run

__version__ = "0.3.0"
