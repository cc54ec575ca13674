"""The three data-parallel systems of the side-by-side behind one small interface.

bench/torch_bench.py runs the same training loop under each; this file is the only place that
knows how a system is initialised, how it wraps a model and optimizer, and how to agree on a
number across ranks. horovod.torch and overlap.torch go through the very same code, because
overlap.torch is meant to be a drop-in (`import overlap.torch as hvd`); only the module differs.
"""

import importlib
import os
import sys

import torch


class HorovodAPI:
    """horovod.torch, or anything with its API (overlap.torch)."""

    def __init__(self, module_name, optimizer_options=None):
        self.name = module_name.split(".")[0]  # "horovod" or "overlap"
        self.optimizer_options = optimizer_options or {}
        self.hvd = importlib.import_module(module_name)
        self.hvd.init()
        self.rank = self.hvd.rank()
        self.size = self.hvd.size()

    def wrap(self, model, optimizer, **_):
        hvd = self.hvd
        # Rank 0's weights and optimizer state everywhere, as every Horovod script starts.
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             **self.optimizer_options)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, optimizer

    def max_over_ranks(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        return self.hvd.allreduce(t, op=self.hvd.Max, name="bench.max_over_ranks").tolist()

    def shutdown(self, exit_code=0):
        self.hvd.shutdown()


class TorchDDP:
    """torch.nn.parallel.DistributedDataParallel over gloo; rank and size from Open MPI's
    environment, since overlaprun (mpirun) starts every system's ranks the same way."""

    name = "ddp"

    def __init__(self, master_addr, master_port):
        import torch.distributed as dist

        self.dist = dist
        self.rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        self.size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
        dist.init_process_group("gloo", init_method=f"tcp://{master_addr}:{master_port}",
                                rank=self.rank, world_size=self.size)

    def wrap(self, model, optimizer, bucket_cap_mb=None):
        from torch.nn.parallel import DistributedDataParallel

        kwargs = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
        # DDP broadcasts rank 0's parameters in its constructor; the optimizer holds the same
        # parameter objects, so it needs no wrapping.
        return DistributedDataParallel(model, **kwargs), optimizer

    def max_over_ranks(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def shutdown(self, exit_code=0):
        # The process ends here, once every rank is done with the group, without tearing the
        # group down: on 2026-11-27 torch 2.0's TCPStore server thread spun on a closed client
        # connection while destroy_process_group waited for it, for ever, and the newest torch
        # aborted a rank at exit ("terminate called without an active exception"), each after
        # the results were printed. Neither is part of what is measured.
        self.dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)


class LocalOnly(TorchDDP):
    """No communication: each rank trains its own model and the process group only gathers the
    timings. Its step is the compute floor under which no system can go on this machine, so
    `system step - local step` (same torch) is that system's coordination overhead."""

    name = "local"

    def wrap(self, model, optimizer, **_):
        return model, optimizer


def make_system(name, master_addr="127.0.0.1", master_port=29500, update_at_forward="auto"):
    """'horovod', 'overlap', 'ddp' or 'local'. update_at_forward (overlap: auto, on or off) is
    DistributedOptimizer's option of that name (auto: the planner's default)."""
    if name == "horovod":
        return HorovodAPI("horovod.torch")
    if name == "overlap":
        options = {} if update_at_forward == "auto" else {
            "update_at_forward": update_at_forward == "on"}
        return HorovodAPI("overlap.torch", options)
    if name == "ddp":
        return TorchDDP(master_addr, master_port)
    if name == "local":
        return LocalOnly(master_addr, master_port)
    raise ValueError(f"unknown system '{name}' (horovod, overlap, ddp, local)")
