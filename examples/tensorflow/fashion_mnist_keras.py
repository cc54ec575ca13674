"""A Keras CNN on Fashion-MNIST, trained data-parallel with overlap.tensorflow.keras, written as
a Horovod script.

    overlaprun -np 4 python examples/tensorflow/fashion_mnist_keras.py --epochs 2

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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import overlap.tensorflow.keras as hvd  # noqa: E402  (was: import horovod.tensorflow.keras)


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
    x = (images.astype(np.float32) / 255.0 - 0.2860) / 0.3530
    return x[..., None], labels.astype(np.int64)


def build_model():
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])


class EpochReport(keras.callbacks.Callback):
    """Rank 0 prints the epoch's averaged loss and the test accuracy as one JSON line."""

    def __init__(self, args, x_test, y_test):
        super().__init__()
        self.args, self.x_test, self.y_test = args, x_test, y_test
        self.start = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.time()

    def on_epoch_end(self, epoch, logs=None):
        # Under a delayed plan the variables hold their moved-ahead values between steps.
        getattr(self.model.optimizer, "restore_staleness_shift", lambda: None)()
        logits = self.model.predict(self.x_test, batch_size=1000, verbose=0)
        accuracy = float(np.mean(np.argmax(logits, 1) == self.y_test))
        if hvd.rank() == 0:
            print(json.dumps({"epoch": epoch + 1, "ranks": hvd.size(),
                              "planner": self.args.planner or "observed",
                              "train_loss": round(float(logs["loss"]), 4),
                              "test_accuracy": round(accuracy, 4),
                              "epoch_s": round(time.time() - self.start, 2),
                              "plan": hvd_stats_planner()}), flush=True)


def hvd_stats_planner():
    import overlap.tensorflow as core
    return core.stats()["planner"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by ranks")
    parser.add_argument("--planner", default=None, help="overlap planner (default: observed)")
    parser.add_argument("--staleness", type=int, default=None,
                        help="deft's bound on delayed updates (default: the runtime's, 0)")
    parser.add_argument("--compression", default="none",
                        help="none, fp16 (Horovod's cast) or an overlap compressor spec")
    parser.add_argument("--train-limit", type=int, default=0, help="use the first N images")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--staleness-correction", default="auto",
                        choices=["auto", "predict", "on", "off"],
                        help="under a plan that delays gradients (docs/scheduler.md)")
    args = parser.parse_args()

    hvd.init(planner=args.planner, staleness=args.staleness)
    keras.utils.set_random_seed(args.seed + hvd.rank())  # the callback aligns the weights
    # Ranks sharing a host share its cores.
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)

    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    if args.train_limit:
        x_train, y_train = x_train[:args.train_limit], y_train[:args.train_limit]

    compression = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}.get(
        args.compression) or hvd.Compression.runtime(args.compression)
    optimizer = hvd.DistributedOptimizer(
        keras.optimizers.SGD(learning_rate=args.lr * hvd.size(), momentum=0.9),
        compression=compression, staleness_correction=args.staleness_correction)
    model = build_model()
    model.compile(optimizer=optimizer, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 EpochReport(args, x_test, y_test)]

    per_epoch = (len(x_train) // (args.batch_size * hvd.size())) * args.batch_size
    for epoch in range(args.epochs):
        # Every rank draws the same permutation and takes its own strided share of it.
        order = np.random.default_rng(epoch).permutation(len(x_train))
        mine = order[hvd.rank()::hvd.size()][:per_epoch]
        model.fit(x_train[mine], y_train[mine], batch_size=args.batch_size, epochs=epoch + 1,
                  initial_epoch=epoch, shuffle=False, verbose=0, callbacks=callbacks)
    hvd.shutdown()


if __name__ == "__main__":
    main()
