"""A Horovod Keras elastic script (hvd.elastic.KerasState, the commit/batch/epoch callbacks,
hvd.elastic.run around model.fit) for tests/elastic/test_elastic.py. Logs as elastic_train.py
does, to $ELASTIC_LOG: "resume" (every rank, with a digest of the model's and optimizer's
variables and the state's epoch and batch) and rank 0's "commit" (before each commit, through a
callback placed before CommitStateCallback) and "done". ELASTIC_KILL="G:B:R": rank R kills
itself with SIGKILL at its batch B (counted over fit) of generation G."""

import hashlib
import json
import os
import signal
import time

import numpy as np
import tensorflow as tf
import keras

import overlap.tensorflow.keras as hvd

EPOCHS = int(os.environ.get("ELASTIC_EPOCHS", "2"))
GENERATION = int(os.environ.get("OVERLAP_ELASTIC_GENERATION", "-1"))
STEPS = 8


def log(event, **fields):
    fields.update(event=event, gen=GENERATION, t=time.time())
    with open(os.environ["ELASTIC_LOG"], "a") as f:
        f.write(json.dumps(fields) + "\n")


def digest(state):
    h = hashlib.sha256()
    for v in list(state.model.variables) + list(state.optimizer.variables):
        h.update(np.asarray(v.numpy()).tobytes())
    h.update(json.dumps([state.epoch, state.batch]).encode())
    return h.hexdigest()


class Probe(keras.callbacks.Callback):
    """Logs each commit before CommitStateCallback makes it, and kills on request."""

    def __init__(self, state, kill):
        super().__init__()
        self.state, self.kill, self.batches = state, kill, 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.kill and self.kill == (GENERATION, self.batches, hvd.rank()):
            os.kill(os.getpid(), signal.SIGKILL)
        if hvd.rank() == 0:
            # UpdateBatchStateCallback runs first (it is earlier in the list), so state.batch
            # is what the commit will hold.
            log("commit", seq=self.state._commit_seq + 1, digest=digest(self.state))


def main():
    hvd.init()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 8)).astype("float32")
    y = (x @ rng.standard_normal((8, 1))).astype("float32")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
    model.compile(optimizer=optimizer, loss="mse")
    state = hvd.elastic.KerasState(model, optimizer, batch=0, epoch=0)
    kill = os.environ.get("ELASTIC_KILL")
    kill = tuple(int(v) for v in kill.split(":")) if kill else None
    callbacks = [hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 Probe(state, kill),
                 hvd.elastic.CommitStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        log("resume", seq=state._commit_seq, rank=hvd.rank(), digest=digest(state))
        data = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank())
        data = data.batch(8).repeat()
        state.model.fit(data, steps_per_epoch=STEPS, epochs=EPOCHS - state.epoch,
                        callbacks=callbacks, verbose=0)

    train(state)
    if hvd.rank() == 0:
        log("done", seq=state._commit_seq, epoch=state.epoch, digest=digest(state))


if __name__ == "__main__":
    main()
