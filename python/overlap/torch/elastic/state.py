"""TorchState: horovod.torch.elastic's state of a PyTorch training process. Models, optimizers,
learning-rate schedulers and ElasticSamplers given as keyword arguments are saved, restored and
synchronised by handlers; any other keyword argument is a plain attribute (ObjectState)."""

import copy

import torch

from overlap.basics import local_rank, rank
from overlap.elastic import ObjectState
from overlap.torch.elastic.sampler import ElasticSampler
from overlap.torch.functions import (allgather_object, broadcast_object,
                                     broadcast_optimizer_state, broadcast_parameters)


class _Handler:
    """Saves, restores and synchronises one object through its state_dict."""

    def __init__(self, value):
        self.value = value
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self, root_rank):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank))

    def set_value(self, value):
        self.value = value
        self.save()


class _ModelHandler(_Handler):
    def sync(self, root_rank):
        broadcast_parameters(self.value.state_dict(), root_rank=root_rank)


class _OptimizerHandler(_Handler):
    def sync(self, root_rank):
        broadcast_optimizer_state(self.value, root_rank=root_rank)


_HANDLERS = [
    (torch.nn.Module, _ModelHandler),
    (torch.optim.Optimizer, _OptimizerHandler),
    (torch.optim.lr_scheduler.LRScheduler, _Handler),
    (ElasticSampler, _Handler),
]


def _handler_for(value):
    for kind, handler in _HANDLERS:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """State of a PyTorch training process: `model`, `optimizer` and any keyword arguments, each
    an attribute of the state. sync() takes rank 0's; restore() returns to the last commit."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is not None:
                handlers[name] = handler
            else:
                plain[name] = value
        # Set before ObjectState's attributes, so __setattr__ below can tell them apart.
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank,
                         allgather_object=allgather_object, get_local_rank=local_rank, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self, root_rank=0):
        for handler in self._handlers.values():
            handler.sync(root_rank)
        super().sync(root_rank)

    def _committed(self):
        committed = super()._committed()
        committed["handlers"] = {name: h._saved for name, h in self._handlers.items()}
        return committed

    def _load_committed(self, committed):
        for name, saved in committed["handlers"].items():
            self._handlers[name]._saved = saved
            self._handlers[name].restore()
        super()._load_committed(committed)

    def __setattr__(self, name, value):
        # A new model or optimizer assigned to the state becomes the one it saves.
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)
