"""A CNN on Fashion-MNIST, trained data-parallel with overlap.torch, written as a Horovod script.

    overlaprun -np 4 python examples/torch/fashion_mnist_cnn.py --epochs 2

Switching from Horovod is the import line; `--planner` picks overlap's communication planner.
Each rank trains on its own shard of every epoch (global batch = batch size x ranks, learning
rate scaled by ranks as Horovod recommends); rank 0 prints one JSON line per epoch with the test
accuracy. Data: the Debian package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
"""

import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import overlap.torch as hvd


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return (x - 0.2860) / 0.3530, torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def evaluate(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            correct += (model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
    model.train()
    return correct / len(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by ranks")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--planner", default=None, help="overlap planner (default: observed)")
    parser.add_argument("--compression", default="none",
                        help="none, fp16 (Horovod's cast) or an overlap compressor spec")
    parser.add_argument("--staleness-correction", default="auto",
                        choices=["auto", "predict", "on", "off"],
                        help="what DistributedOptimizer does under a plan that delays gradients "
                             "(docs/scheduler.md, \"Staleness correction in the adapters\")")
    parser.add_argument("--train-limit", type=int, default=0, help="use the first N images")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    hvd.init(planner=args.planner)
    torch.manual_seed(args.seed)
    # Ranks sharing a host share its cores.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))

    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    if args.train_limit:
        x_train, y_train = x_train[:args.train_limit], y_train[:args.train_limit]

    model = Net()
    lr = args.lr * hvd.size()
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr / 10)
    compression = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}.get(
        args.compression) or hvd.Compression.runtime(args.compression)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         staleness_correction=args.staleness_correction)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    steps_per_epoch = len(x_train) // (args.batch_size * hvd.size())
    for epoch in range(args.epochs):
        start = time.time()
        # Every rank draws the same permutation and takes its own strided share of it.
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(epoch))
        mine = order[hvd.rank()::hvd.size()]
        total_loss = 0.0
        for step in range(steps_per_epoch):
            idx = mine[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
        loss_avg = hvd.allreduce(torch.tensor(total_loss / steps_per_epoch), name="epoch_loss")
        accuracy = evaluate(model, x_test, y_test)
        if hvd.rank() == 0:
            print(json.dumps({"epoch": epoch + 1, "ranks": hvd.size(), "planner": args.planner
                              or "observed", "train_loss": round(loss_avg.item(), 4),
                              "test_accuracy": round(accuracy, 4),
                              "epoch_s": round(time.time() - start, 2),
                              "plan": hvd.stats()["planner"],
                              "plan_mean_staleness": hvd.stats()["plan_mean_staleness"],
                              "staleness_correction": args.staleness_correction,
                              "correction_bytes": optimizer.staleness_correction_bytes()}),
                  flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
