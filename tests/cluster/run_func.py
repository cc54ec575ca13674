"""overlap.run across namespace hosts (run_func_test.sh): the driver runs on the head node and
each rank, on its own host, reaches it over the cluster's network."""

import socket
import sys

import overlap


def where():
    import torch
    import overlap.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum, name="total")
    return hvd.rank(), socket.gethostname(), float(total)


if __name__ == "__main__":
    hostfile, np = sys.argv[1], int(sys.argv[2])
    results = overlap.run(where, np=np, hostfile=hostfile, network_interface="10.77.0.0/24",
                          mpi_args="--mca btl self,tcp")
    expected = [(r, "h%d" % (r + 1), float(np * (np - 1) // 2)) for r in range(np)]
    assert results == expected, results
    print("run_func: %d ranks on %s returned %s" % (np, sorted({h for _, h, _ in results}),
                                                     results))
