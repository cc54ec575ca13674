"""hvd.elastic (overlap/elastic.py, overlap/torch/elastic): Horovod's elastic API on a fixed set
of ranks. State is synchronised from rank 0 when the wrapped function starts, rolled back to its
last commit when a collective fails, and the ElasticSampler partitions what is left of an epoch.
Every value is checked against what rank 0 or the test itself holds.
"""

import math

import pytest
import torch


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))


def _same_on_every_rank(hvd, tensor, name):
    gathered = hvd.allgather_object(tensor.detach().clone(), name=name)
    return all(torch.equal(t, gathered[0]) for t in gathered)


def _take_a_step(model, optimizer, seed):
    torch.manual_seed(seed)
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()


def test_the_wrapped_function_starts_from_rank_0s_state(hvd):
    model = _model(seed=hvd.rank())  # different weights on every rank
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _take_a_step(model, optimizer, seed=100 + hvd.rank())
    state = hvd.elastic.TorchState(model, optimizer, epoch=hvd.rank(), batch=10 * hvd.rank())
    rank0_weight = hvd.broadcast_object(model[0].weight.detach().clone(), name="w0")
    seen = {}

    @hvd.elastic.run
    def train(state, tag):
        seen.update(tag=tag, epoch=state.epoch, batch=state.batch)
        return "done"

    assert train(state, "t") == "done"
    assert seen == {"tag": "t", "epoch": 0, "batch": 0}
    assert torch.equal(model[0].weight.detach(), rank0_weight)
    for i, p in enumerate(model.parameters()):
        assert _same_on_every_rank(hvd, p, "param.%d" % i)
        momentum = optimizer.state[p]["momentum_buffer"]
        assert _same_on_every_rank(hvd, momentum, "momentum.%d" % i)


def test_restore_returns_to_the_last_commit(hvd):
    model = _model(seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    state = hvd.elastic.TorchState(model, optimizer, scheduler=scheduler, epoch=3, history=[1])
    _take_a_step(model, optimizer, seed=2)
    scheduler.step()
    state.epoch, state.history = 4, [1, 2]
    state.commit()
    committed = [p.detach().clone() for p in model.parameters()]
    committed_lr = optimizer.param_groups[0]["lr"]
    committed_steps = optimizer.state[next(model.parameters())]["step"].clone()

    _take_a_step(model, optimizer, seed=3)
    scheduler.step()
    state.epoch = 9
    state.history.append(3)
    state.restore()

    assert all(torch.equal(p.detach(), c) for p, c in zip(model.parameters(), committed))
    assert optimizer.param_groups[0]["lr"] == committed_lr == 0.005
    assert torch.equal(optimizer.state[next(model.parameters())]["step"], committed_steps)
    assert scheduler.last_epoch == 1
    assert state.epoch == 4 and state.history == [1, 2]


def test_a_failed_collective_rolls_the_state_back_and_is_raised(hvd):
    model = _model(seed=5)
    state = hvd.elastic.TorchState(model, batch=0)
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(1)
        state.batch = 7
        state.commit()
        state.batch = 8
        with torch.no_grad():
            model[0].weight.add_(1.0)
        raise hvd.HorovodInternalError("rank 1: allreduce 'grad' failed: peer lost")

    committed = model[0].weight.detach().clone() + 0.0
    with pytest.raises(hvd.HorovodInternalError) as error:
        train(state)
    message = str(error.value)
    assert "peer lost" in message and "ranks are fixed" in message
    assert "rolled back to its last commit" in message
    assert calls == [1]  # not retried: the failed rank cannot come back
    assert state.batch == 7
    assert torch.equal(model[0].weight.detach(), committed)


def test_reset_callbacks_and_host_updates(hvd):
    state = hvd.elastic.TorchState(epoch=0)
    called = []
    state.register_reset_callbacks([lambda: called.append("a"), lambda: called.append("b")])
    state.on_reset()
    assert called == ["a", "b"]
    state.check_host_updates()  # fixed ranks: never interrupts
    state.commit()


def test_assigning_a_new_model_makes_it_the_one_saved(hvd):
    state = hvd.elastic.TorchState(_model(seed=1), epoch=0)
    replacement = _model(seed=2)
    state.model = replacement
    with torch.no_grad():
        replacement[0].weight.zero_()
    state.restore()
    assert state.model is replacement
    assert torch.equal(replacement[0].weight.detach(), _model(seed=2)[0].weight.detach())


@pytest.mark.parametrize("n", [10, 17])
def test_the_sampler_partitions_the_rest_of_the_epoch(hvd, n):
    dataset = list(range(n))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=4)
    per_rank = math.ceil(n / hvd.size())
    mine = list(sampler)
    assert len(sampler) == len(mine) == per_rank
    everyone = hvd.allgather_object(mine, name="sampler.%d" % n)
    assert set().union(*map(set, everyone)) == set(range(n))
    assert sum(map(len, everyone)) == per_rank * hvd.size()  # padded by repeats only

    # Two batches of 1 per rank processed: the rest of the epoch skips them on every rank.
    order = [i for batch in zip(*everyone) for i in batch]  # the shuffled order, rank-interleaved
    sampler.record_batch(0, 1)
    sampler.record_batch(1, 1)
    sampler.reset()
    rest = hvd.allgather_object(list(sampler), name="rest.%d" % n)
    processed = set(order[:2 * hvd.size()])
    remaining = set(range(n)) - processed
    assert set().union(*map(set, rest)) == remaining
    assert len(sampler) == math.ceil(len(remaining) / hvd.size())

    # The count survives a state_dict round trip; set_epoch starts over in a new order.
    copy = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=4)
    copy.load_state_dict(sampler.state_dict())
    assert list(copy) == list(sampler)
    sampler.set_epoch(1)
    assert sampler.processed_num == 0 and len(sampler) == per_rank
    epoch1 = hvd.allgather_object(list(sampler), name="epoch1.%d" % n)
    assert set().union(*map(set, epoch1)) == set(range(n))
    assert epoch1 != everyone or n < 3


def test_an_elastic_training_loop_in_horovods_style(hvd):
    torch.manual_seed(0)
    features, targets = torch.randn(96, 8), torch.randn(96, 2)
    dataset = torch.utils.data.TensorDataset(features, targets)
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler)
    model = _model(seed=hvd.rank())
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    losses = []

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, 2):
            for state.batch, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                state.sampler.record_batch(state.batch, 4)
                if state.batch % 3 == 0:
                    state.commit()
            state.sampler.set_epoch(state.epoch + 1)
            state.batch = 0
            state.commit()

    train(state)
    batches = math.ceil(96 / hvd.size() / 4)
    assert len(losses) == 2 * batches
    assert state.epoch == 1 and state.sampler.epoch == 2 and state.sampler.processed_num == 0
    for i, p in enumerate(model.parameters()):
        assert _same_on_every_rank(hvd, p, "trained.%d" % i)


def test_module_reexports_horovods_names(hvd):
    """horovod.torch.elastic also exports init, shutdown and run_fn; scripts call
    hvd.elastic.init() (a no-op once initialised) before building their state."""
    import overlap.basics
    import overlap.elastic
    assert hvd.elastic.init is overlap.basics.init
    assert hvd.elastic.run_fn is overlap.elastic.run_fn
    hvd.elastic.init()  # already initialised: nothing changes
    assert hvd.is_initialized() and hvd.elastic.shutdown.__module__ == "overlap.torch.elastic"
