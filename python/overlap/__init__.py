"""overlap: a data-parallel training runtime with Horovod's Python API.

Use a framework adapter: ``import overlap.torch as hvd`` where a script had
``import horovod.torch as hvd``. The adapters share one core library (liboverlap.so), loaded by
``overlap._core``.
"""

__version__ = "0.3.0"
