"""horovod.torch.elastic's API on overlap (overlap/elastic.py says what "elastic" means here:
a fixed set of ranks, state synchronised and rolled back as in Horovod).

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(hvd.elastic.TorchState(model, optimizer, epoch=0))
"""

from overlap.basics import init
from overlap.elastic import run_fn
from overlap.torch.elastic.sampler import ElasticSampler
from overlap.torch.elastic.state import TorchState


def run(func):
    """Decorator: `func(state, ...)` runs after `state` is synchronised from rank 0; a failed
    collective inside it rolls `state` back to its last commit and is raised again."""
    return run_fn(func)


def shutdown():
    """overlap.torch.shutdown (horovod.torch.elastic re-exports it too)."""
    import overlap.torch
    overlap.torch.shutdown()


__all__ = ["ElasticSampler", "TorchState", "init", "run", "run_fn", "shutdown"]
