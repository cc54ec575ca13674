"""Emulated torch models for the side-by-side (bench/torch_side_by_side.sh).

A model here is the GPU training step with the GPU taken out, as in bench/model_step.cc: every
layer of a bundled profile (scheduler/profiles/<model>.json) owns torch parameters with the real
layer's shapes, and its forward and backward sleep the profile's times through a custom
autograd.Function, so the CPU stays free for the communication runtime as it would be while a GPU
computes. Each parameter's gradient appears when its layer's backward ends, which is what every
system under test hooks into (Horovod's grad accumulator hooks, DDP's reducer, overlap's hooks).

Scaling (the same idea as bench/model_step.cc, docs/torch_side_by_side.md): the reference is 16
workers on 10 Gbit/s links; 4 emulated hosts on 1 Gbit/s links keep its communication/computation
ratio when times are multiplied by ts and gradient bytes by s = ts x R / (1 GB/s). ts is chosen so
that the ideal step max(compute, ring bound) is the target step time. Bytes are scaled by
shrinking each parameter's first dimension (output channels, rows), so every other dimension and
the parameter's rank stay the real ones; rounding keeps at least one row.

Also here: a small real ResNet for the CPU-compute run (in the style of Horovod's
pytorch_synthetic_benchmark) and the 50-tiny-tensor model for the coordination micro-benchmark.
"""

import json
import math
import os
import time

import torch
from torch import nn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE_DIR = os.path.join(REPO, "scheduler", "profiles")

# Per-worker batch of each profile (scheduler/profiles/README.md): PipeDream's image models ran
# at 128 images, the BERT profile is 32 sequences of 128 tokens.
BATCH = {"vgg16": 128, "resnet50": 128, "bert-base": 32}

REF_WORKERS = 16
REF_BYTES_PER_S = 1.25e9  # 10 Gbit/s


def ring_factor(ranks):
    """Bytes each rank sends per byte of tensor in a ring allreduce."""
    return 2.0 * (ranks - 1) / ranks if ranks > 1 else 0.0


class ComputeClock:
    """Sleeps that add up to the sum of their durations, as a GPU stream would.

    time.sleep oversleeps by tens of microseconds, and a model has hundreds of layers, so each
    sleep ends at the previous end plus its duration. When the clock is behind the present by more
    than `slack_s`, the step really stalled (waiting for communication, or the CPU was taken), and
    the clock jumps to now instead of catching up; a stall shorter than the slack is absorbed.
    """

    def __init__(self, slack_s=0.001):
        self.slack_s = slack_s
        self.t = 0.0

    def run(self, ms):
        if ms <= 0:
            return
        now = time.perf_counter()
        if now - self.t > self.slack_s:
            self.t = now
        self.t += ms / 1e3
        left = self.t - time.perf_counter()
        if left > 0:
            time.sleep(left)


CLOCK = ComputeClock()


class _SleepLayer(torch.autograd.Function):
    """Forward and backward that only take time; parameter gradients are a constant.

    The constant is rank + 1 (set per model): after averaging every gradient must be
    (n + 1) / 2, which bench/torch_bench.py checks, so a fast wrong answer is not a result.
    """

    @staticmethod
    def forward(ctx, x, layer, *params):
        ctx.layer = layer
        CLOCK.run(layer.forward_ms)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        layer = ctx.layer
        CLOCK.run(layer.backward_ms)
        grads = [torch.full_like(p, layer.grad_value) for p in layer.params]
        return (grad, None, *grads)


class ProfiledLayer(nn.Module):
    """One leaf layer: owns its parameters, sleeps its share of the profile's time."""

    def __init__(self, shapes, forward_ms, backward_ms):
        super().__init__()
        self.forward_ms = forward_ms
        self.backward_ms = backward_ms
        self.grad_value = 1.0
        # Real modules name their tensors weight and bias; so do these.
        for name, shape in shapes:
            self.register_parameter(name, nn.Parameter(torch.zeros(shape)))
        self.params = [p for _, p in self.named_parameters()]

    def forward(self, x):
        return _SleepLayer.apply(x, self, *self.params)


class Container(nn.Module):
    """A non-leaf module on a parameter's path (features, layer1.0, bert.encoder...): it only
    gives the leaves their real names; EmulatedModel runs the leaves itself."""


class EmulatedModel(nn.Module):
    """The profile's layers, registered under their real module paths, run in profile order.

    The input is a one-element tensor: activations do not matter, only when each layer runs.
    """

    def __init__(self, name, batch, time_scale, bytes_scale, update_ms):
        super().__init__()
        self.name = name
        self.leaves = []  # forward order; a plain list, so parameter names come from the paths
        self.batch = batch
        self.time_scale = time_scale
        self.bytes_scale = bytes_scale
        self.update_ms = update_ms  # scaled

    def add_leaf(self, path, leaf):
        parent, _, name = path.rpartition(".")
        parent = _module_at(self, parent) if parent else self
        # BERT's cls.predictions owns a bias and has a child (transform) that came first.
        existing = getattr(parent, name, None)
        if existing is not None:
            leaf._modules.update(existing._modules)
        parent.add_module(name, leaf)
        self.leaves.append(leaf)

    def forward(self, x):
        for leaf in self.leaves:
            x = leaf(x)
        return x

    def set_grad_value(self, value):
        for layer in self.leaves:
            layer.grad_value = value

    def grad_bytes(self):
        return sum(p.numel() * p.element_size() for p in self.parameters())

    def compute_ms(self):
        return sum(l.forward_ms + l.backward_ms for l in self.leaves) + self.update_ms


# ---- real parameter shapes ----------------------------------------------------------------------
# The profiles store one byte count per PipeDream node (weight and bias together) or per Hugging
# Face tensor. These functions give the torchvision / Hugging Face shapes in the profile's order;
# build_emulated() checks that their bytes are the profile's bytes exactly.

def _vgg16_shapes():
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    shapes, channels, index = [], 3, 0
    for v in cfg:
        if v == "M":
            index += 1
            continue
        shapes.append((f"features.{index}", [("weight", [v, channels, 3, 3]), ("bias", [v])]))
        channels, index = v, index + 2  # conv, relu
    for index, (out, inp) in zip((0, 3, 6), ((4096, 512 * 7 * 7), (4096, 4096), (1000, 4096))):
        shapes.append((f"classifier.{index}", [("weight", [out, inp]), ("bias", [out])]))
    return shapes


def _resnet50_shapes():
    conv = lambda name, out, inp, k: (name, [("weight", [out, inp, k, k])])
    bn = lambda name, c: (name, [("weight", [c]), ("bias", [c])])
    shapes = [conv("conv1", 64, 3, 7), bn("bn1", 64)]
    inplanes = 64
    for stage, (planes, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), start=1):
        for b in range(blocks):
            p = f"layer{stage}.{b}"
            shapes += [conv(f"{p}.conv1", planes, inplanes, 1), bn(f"{p}.bn1", planes),
                       conv(f"{p}.conv2", planes, planes, 3), bn(f"{p}.bn2", planes),
                       conv(f"{p}.conv3", planes * 4, planes, 1), bn(f"{p}.bn3", planes * 4)]
            if b == 0:  # PipeDream records the downsample branch after conv3/bn3
                shapes += [conv(f"{p}.downsample.0", planes * 4, inplanes, 1),
                           bn(f"{p}.downsample.1", planes * 4)]
            inplanes = planes * 4
    shapes.append(("fc", [("weight", [1000, 2048]), ("bias", [1000])]))
    return shapes


def _bert_shape(name, nbytes, hidden=768, intermediate=3072):
    """Shape of a Hugging Face BERT tensor from its name (the byte count picks vocab sizes)."""
    numel = nbytes // 4
    if name.endswith(".bias") or "LayerNorm" in name:
        return [numel]
    if "embeddings" in name:
        return [numel // hidden, hidden]
    if "intermediate.dense" in name:
        return [intermediate, hidden]
    if ".output.dense" in name and "attention" not in name:
        return [hidden, intermediate]
    return [hidden, hidden]


def _scaled(shape, s):
    if s == 1.0:
        return list(shape)
    return [max(1, round(shape[0] * s))] + list(shape[1:])


def _sanitize(name):
    return name.replace(".", "_")


def _module_at(root, path):
    """The module at dotted `path` under root, creating Containers on the way."""
    module = root
    for part in path.split("."):
        if not hasattr(module, part):
            module.add_module(part, Container())
        module = getattr(module, part)
    return module


def load_profile(model):
    with open(os.path.join(PROFILE_DIR, f"{model}.json")) as f:
        return json.load(f)


def choose_scaling(profile, ranks, link_bytes_per_s, target_step_ms):
    """(time scale, bytes scale): the formula in the module docstring and bench/model_step.cc."""
    compute = sum(l["forward_ms"] + l["backward_ms"] for l in profile["layers"])
    compute += profile["update_ms"]
    total = sum(t["bytes"] for l in profile["layers"] for t in l["tensors"])
    ref_comm_ms = ring_factor(REF_WORKERS) * total / REF_BYTES_PER_S * 1e3
    ts = target_step_ms / max(compute, ref_comm_ms)
    ratio = ring_factor(REF_WORKERS) / ring_factor(ranks) if ranks > 1 else 1.0
    return ts, ts * ratio * link_bytes_per_s / REF_BYTES_PER_S


def build_emulated(model, time_scale, bytes_scale):
    """The emulated model of a bundled profile, times scaled by time_scale, bytes by bytes_scale."""
    profile = load_profile(model)
    emulated = EmulatedModel(model, BATCH[model], time_scale, bytes_scale,
                             profile["update_ms"] * time_scale)
    if model in ("vgg16", "resnet50"):
        real = iter(_vgg16_shapes() if model == "vgg16" else _resnet50_shapes())
        for layer in profile["layers"]:
            if layer["tensors"]:
                path, shapes = next(real)
                want = layer["tensors"][0]["bytes"]
                got = 4 * sum(math.prod(s) for _, s in shapes)
                assert got == want, f"{model} {layer['name']} ({path}): shapes hold {got} bytes, profile {want}"
            else:  # ReLU, pooling, Add, View: compute only, named after the profile node
                path, shapes = "compute." + _sanitize(layer["name"]), []
            leaf = ProfiledLayer([(n, _scaled(s, bytes_scale)) for n, s in shapes],
                                 layer["forward_ms"] * time_scale, layer["backward_ms"] * time_scale)
            emulated.add_leaf(path, leaf)
        assert next(real, None) is None, f"{model}: profile has fewer parameter layers than the architecture"
    elif model == "bert-base":
        # A profile layer (embeddings, blockN.attention, blockN.mlp, head) holds several real
        # modules (query, key, ...); each becomes a leaf with a share of the layer's time in
        # proportion to its bytes, so per-module hooks see the gradients appear in that order.
        for layer in profile["layers"]:
            groups = {}
            for t in layer["tensors"]:
                module, _, pname = t["name"].rpartition(".")
                groups.setdefault(module, []).append((pname, _bert_shape(t["name"], t["bytes"]), t["bytes"]))
            layer_bytes = sum(t["bytes"] for t in layer["tensors"])
            for module, tensors in groups.items():
                for _, shape, nbytes in tensors:
                    assert 4 * math.prod(shape) == nbytes, f"bert-base {module}: shape {shape} is not {nbytes} bytes"
                share = sum(b for _, _, b in tensors) / layer_bytes
                leaf = ProfiledLayer([(n, _scaled(s, bytes_scale)) for n, s, _ in tensors],
                                     layer["forward_ms"] * share * time_scale,
                                     layer["backward_ms"] * share * time_scale)
                emulated.add_leaf(module, leaf)
    else:
        raise ValueError(f"unknown model '{model}' (vgg16, resnet50, bert-base)")
    return emulated


class SleepOptimizer(torch.optim.Optimizer):
    """The optimizer step of a GPU: takes its time, leaves the CPU free.

    Sleeps update_ms x (bytes of the parameters that have a gradient / all bytes), so a runtime
    that updates layer by layer (overlap's deft) pays each layer's share where it runs it. The
    rate lives in the param groups because horovod.torch's DistributedOptimizer re-creates the
    optimizer from its param_groups alone. Parameters are not changed: their values do not
    affect the timing, and it keeps the check of averaged gradients simple.
    """

    def __init__(self, params, ms_per_byte=0.0):
        super().__init__(params, {"ms_per_byte": ms_per_byte})

    @torch.no_grad()
    def step(self, closure=None):
        ms = 0.0
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    ms += p.numel() * p.element_size() * group["ms_per_byte"]
        CLOCK.run(ms)
        return None


def sleep_optimizer(model):
    return SleepOptimizer(model.parameters(), ms_per_byte=model.update_ms / max(1, model.grad_bytes()))


# ---- real CPU compute ---------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, inp, out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.shortcut = nn.Sequential()
        if stride != 1 or inp != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


def small_resnet(width=32, num_classes=10):
    """A ResNet-18-shaped CNN for 32x32 images (about 2.8 M parameters at width 32).

    Small enough that four ranks on a shared two-core machine each run several steps per second,
    large enough that its gradients (11 MB) take real time on a 1 Gbit/s link.
    """
    layers = [nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    inp = width
    for out, stride in ((width, 1), (width, 1), (2 * width, 2), (2 * width, 1),
                        (4 * width, 2), (4 * width, 1), (8 * width, 2), (8 * width, 1)):
        layers.append(BasicBlock(inp, out, stride))
        inp = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inp, num_classes)]
    return nn.Sequential(*layers)


# ---- coordination overhead ----------------------------------------------------------------------

class TinyTensors(nn.Module):
    """`count` parameters of `elements` floats each, all in one cheap forward: each step hands
    the runtime `count` tiny gradients, so its time is almost all coordination."""

    def __init__(self, count=50, elements=16):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(elements, 1, bias=False) for _ in range(count))

    def forward(self, x):
        return sum(layer(x) for layer in self.layers)
