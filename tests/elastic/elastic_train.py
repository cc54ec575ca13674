"""A Horovod elastic training script (hvd.elastic.run, TorchState, ElasticSampler, commit) that
the elastic tests and tools/chaos.sh run under overlaprun's elastic flags. It logs one JSON line
per event to $ELASTIC_LOG (rank 0, plus every rank's "resume"), so a test can check what
survived a fault:
  {"event": "commit", "gen": g, "seq": n, "size": s, "epoch": e, "digest": ..., "t": ...}
  {"event": "resume", "gen": g, "seq": n, "rank": r, "digest": ..., "t": ...}
  {"event": "committed", "gen": g, "seq": n, "steps": k, "t": ...}   (commit() returned)
  {"event": "first_step", "gen": g, "size": s, "t": ...}              (a generation's first step)
  {"event": "epoch", "gen": g, "epoch": e, "loss": mean loss of the epoch on rank 0, "t": ...}
  {"event": "done", "gen": g, "seq": n, "epoch": e, "loss": ..., "steps": k, "t": ...}
digest: SHA-256 of the model's parameters, the optimizer's state and the sampler's position.

Faults it injects on itself (for tests that need them deterministic): ELASTIC_KILL="G:S:R"
makes rank R kill itself with SIGKILL at its step S of generation G. ELASTIC_STEP_S sleeps that
long per step (slept compute, so faults land mid-training)."""

import hashlib
import json
import os
import signal
import sys
import time

import torch

import overlap.torch as hvd

EPOCHS = int(os.environ.get("ELASTIC_EPOCHS", "3"))
SAMPLES = int(os.environ.get("ELASTIC_SAMPLES", "512"))
BATCH = 16
COMMIT_EVERY = int(os.environ.get("ELASTIC_COMMIT_EVERY", "2"))
STEP_S = float(os.environ.get("ELASTIC_STEP_S", "0"))
GENERATION = int(os.environ.get("OVERLAP_ELASTIC_GENERATION", "-1"))


def log(event, **fields):
    path = os.environ.get("ELASTIC_LOG")
    if not path:
        return
    fields.update(event=event, gen=GENERATION, t=time.time())
    with open(path, "a") as f:
        f.write(json.dumps(fields) + "\n")


def digest(state):
    h = hashlib.sha256()
    for p in state.model.parameters():
        h.update(p.detach().numpy().tobytes())
    for group in state.optimizer.state_dict()["state"].values():
        for value in group.values():
            if torch.is_tensor(value):
                h.update(value.numpy().tobytes())
    h.update(json.dumps(state.sampler.state_dict(), sort_keys=True).encode())
    h.update(json.dumps([state.epoch, state.steps]).encode())
    return h.hexdigest()


def commit(state):
    # Logged before the commit, which may end the generation (hosts changed) without returning.
    if hvd.rank() == 0:
        log("commit", seq=state._commit_seq + 1, size=hvd.size(), epoch=state.epoch,
            steps=state.steps, digest=digest(state))
    state.commit()
    if hvd.rank() == 0:
        log("committed", seq=state._commit_seq, steps=state.steps)


def main():
    hvd.init()
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(SAMPLES, 32, generator=generator)
    weights = torch.randn(32, 4, generator=generator)
    targets = (inputs @ weights).argmax(dim=1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=3)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                                   steps=0)
    kill = os.environ.get("ELASTIC_KILL")
    kill = tuple(int(x) for x in kill.split(":")) if kill else None

    @hvd.elastic.run
    def train(state):
        log("resume", seq=state._commit_seq, rank=hvd.rank(), size=hvd.size(),
            digest=digest(state))
        steps_here = 0
        loss = None
        losses = []
        while state.epoch < EPOCHS:
            indices = list(iter(state.sampler))
            for start in range(0, len(indices), BATCH):
                batch = torch.tensor(indices[start:start + BATCH])
                if kill and kill[0] == GENERATION and kill[1] == steps_here and \
                        kill[2] == hvd.rank():
                    os.kill(os.getpid(), signal.SIGKILL)
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(inputs[batch]), targets[batch])
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                if steps_here == 0 and hvd.rank() == 0:
                    log("first_step", size=hvd.size())
                if STEP_S:
                    time.sleep(STEP_S)
                steps_here += 1
                state.steps += 1
                state.sampler.record_batch(start // BATCH, len(batch))
                if state.steps % COMMIT_EVERY == 0:
                    commit(state)
            if hvd.rank() == 0 and losses:
                log("epoch", epoch=state.epoch, loss=sum(losses) / len(losses))
            losses = []
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            commit(state)
        return loss.item() if loss is not None else None

    loss = train(state)
    if hvd.rank() == 0:
        log("done", seq=state._commit_seq, epoch=state.epoch, loss=loss, steps=state.steps,
            size=hvd.size(), digest=digest(state))
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
