"""ElasticSampler: horovod.torch.elastic's sampler, which partitions a dataset over the ranks and
remembers how much of the epoch was processed, so that a restored state skips it."""

import math
import random

import torch.utils.data

from overlap.basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Like DistributedSampler: each rank takes every size()-th index of the (shuffled) indices
    not yet processed this epoch, padded so every rank gets as many. Call record_batch after each
    batch and set_epoch at the end of each epoch; keep the sampler in the TorchState."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # samples processed this epoch, over all ranks
        self.reset()

    def set_epoch(self, epoch):
        """Starts `epoch`: a new order when shuffling, and nothing processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of `batch_size` samples on every rank as processed."""
        del batch_idx
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Re-partitions what is left of the epoch over the current ranks."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            # The same seed on every rank, so all ranks agree on the order.
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        # Pad by repeating from the start, so every rank gets num_samples.
        while len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
