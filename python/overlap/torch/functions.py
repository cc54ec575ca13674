"""Model and object helpers of horovod.torch: broadcast_parameters, broadcast_optimizer_state,
broadcast_object and allgather_object."""

import io
import pickle

import torch

from overlap import _core
from overlap.common import global_process_set, process_set_id, rank_prefix
from overlap.torch import mpi_ops


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Copies root_rank's values into these tensors on every rank (of `process_set`; root_rank
    is a global rank, as in Horovod), in place. `params` is a state_dict or an iterable of
    (name, tensor), e.g. model.named_parameters()."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = list(params)
        for item in items:
            if not isinstance(item, tuple) or len(item) != 2:
                raise ValueError("broadcast_parameters needs a state_dict or (name, tensor) pairs")
    else:
        raise ValueError("%sbroadcast_parameters: invalid params of type: %s"
                         % (rank_prefix(), type(params)))
    handles = []
    for name, p in items:
        if p is None:
            continue
        if isinstance(p, torch.Tensor):
            handles.append(mpi_ops.broadcast_async_(p.data if p.requires_grad else p, root_rank,
                                                    "broadcast." + name, process_set))
    for handle in handles:
        mpi_ops.synchronize(handle)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state (hyperparameters, momentum buffers, step counts) equal
    to root_rank's. The whole state_dict travels as one object from the root, so state the
    other ranks have not created yet (Adam before its first step) arrives too. An optimizer that
    has not stepped yet first creates its state, as in Horovod (_create_state)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("%sbroadcast_optimizer_state: cannot broadcast torch.optim.LBFGS state"
                         % rank_prefix())
    _create_state(optimizer)
    state = optimizer.state_dict() if _core.rank() == root_rank else None
    state = broadcast_object(state, root_rank, "broadcast_optimizer_state", process_set)
    if _core.rank() != root_rank:
        optimizer.load_state_dict(state)


def _create_state(optimizer):
    """As horovod.torch does for an optimizer that has not stepped yet: every trainable
    parameter gets a zero gradient and the wrapped torch optimizer (not DistributedOptimizer,
    whose step would reduce) steps once, which creates its state (momentum buffers, Adam's
    moments and step count). Scripts rely on both: gradients that are tensors, and state to load
    into. Unlike Horovod, that step runs without weight decay and the parameters are put back
    after it: Horovod's moves the parameters by the decay, on the ranks whose optimizer had not
    stepped, after broadcast_parameters made them equal, and leaves the decay in the momentum
    buffers. Here SGD's buffers are zeros, so its first real step equals a fresh optimizer's."""
    if optimizer.state_dict()["state"]:
        return
    trainable = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    with torch.no_grad():
        before = [p.detach().clone() for p in trainable]
    for p in trainable:
        p.grad = torch.zeros_like(p)
    decays = [group.get("weight_decay") for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        if "weight_decay" in group:
            group["weight_decay"] = 0.0
    from overlap.torch.optimizer import _DistributedOptimizer
    try:
        if isinstance(optimizer, _DistributedOptimizer):
            super(_DistributedOptimizer, optimizer).step()
        else:
            optimizer.step()
    finally:
        for group, decay in zip(optimizer.param_groups, decays):
            if decay is not None:
                group["weight_decay"] = decay
        with torch.no_grad():
            for p, value in zip(trainable, before):
                p.copy_(value)


def _to_bytes_tensor(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _from_bytes_tensor(t):
    return torch.load(io.BytesIO(t.numpy().tobytes()), weights_only=False)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's picklable `obj`, on every rank."""
    process_set_id(process_set)  # refuses an unregistered set by name
    name = name or type(obj).__name__
    if _core.rank() == root_rank:
        payload = _to_bytes_tensor(obj)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload, length = None, torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, "broadcast_object.%s.size" % name, process_set)
    if payload is None:
        payload = torch.zeros(int(length.item()), dtype=torch.uint8)
    mpi_ops.broadcast_(payload, root_rank, "broadcast_object.%s.bytes" % name, process_set)
    return obj if _core.rank() == root_rank else _from_bytes_tensor(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's picklable `obj`, as a list in rank order (of `process_set`'s members)."""
    process_set_id(process_set)  # refuses an unregistered set by name
    name = name or type(obj).__name__
    payload = _to_bytes_tensor(obj)
    sizes = mpi_ops.allgather(torch.tensor([payload.numel()], dtype=torch.int64),
                              "allgather_object.%s.sizes" % name, process_set)
    gathered = mpi_ops.allgather(payload, "allgather_object.%s.bytes" % name, process_set)
    objects, offset = [], 0
    for n in sizes.tolist():
        objects.append(_from_bytes_tensor(gathered[offset:offset + n]))
        offset += n
    return objects
