"""What a delay costs the maths alone: bench/time_to_accuracy.sh's fmnist task trained in one
process, with no runtime and no communication, on gradients applied `--delay` steps late, with
the staleness corrections of the adapters (overlap/staleness.py) done by hand here. It separates
what delayed updates cost in accuracy from anything overlap's runtime does (docs/time_to_accuracy.md,
"What a delay costs without overlap").

  python3 bench/delayed_sgd_reference.py --delay 0                  # synchronous
  python3 bench/delayed_sgd_reference.py --delay 1 --correction predict --seed 2

The model, data and normalisation are bench/tta_train.py's; the batch is the 4-rank global batch
(4 x 64) and the learning rate its 0.01 x 4, SGD with momentum 0.9 (`--optimizer adam|adamw`:
Adam / AdamW, lr 1e-3, AdamW's weight decay 0.01 as the lm task's; momentum means beta1).
Corrections:
  off      the delayed gradient applied as it is;
  on       momentum lowered to max(0, 1 - (1 - m)(1 + delay));
  predict  "on", and each forward run at W + delay x (last update), as "predict" does for a
           delay with no update period;
  predict-keep  the prediction with the momentum kept (lowered for delay - 1 steps only);
  lookahead  overlap.torch's "auto": the momentum kept, and each forward run where the `delay`
           updates still to come will put the weights (for SGD at delay 1, W - lr (m buf + g)),
           each the optimizer's own step on a scratch copy of its state from g, one rank's
           share of its step's batch (its first batch / --ranks examples), standing in for
           the average that update brings.
With `--period P` every gradient is also summed locally over P steps and sent once per P
(phase 0, as a deft item of period P: the first update carries one step, the later ones P), and
applied `--delay` steps after its last step:
  off      the summed gradient applied as one step (what the runtime delivers);
  spread   applied as one optimizer step per step it carries, each with their mean;
  lookahead  "spread", and each forward run where the updates of every step not yet applied
           (the delay's and the period's, up to delay + P - 1) will put the weights, each the
           optimizer's own step from one rank's share of that step's batch.
Prints one JSON line: the settings and the final test accuracy on all 10,000 test images.
"""

import argparse
import collections
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tta_train  # noqa: E402


def load(data_dir, name):
    x = tta_train.read_idx(os.path.join(data_dir, name + "-images-idx3-ubyte.gz"))
    y = tta_train.read_idx(os.path.join(data_dir, name + "-labels-idx1-ubyte.gz"))
    x = (torch.tensor(x, dtype=torch.float32) / 255.0 - 0.2860) / 0.3530
    return x.unsqueeze(1), torch.tensor(y).long()


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--delay", type=int, default=1)
    p.add_argument("--period", type=int, default=1)
    p.add_argument("--correction", default="off",
                   choices=["off", "on", "predict", "predict-keep", "lookahead", "spread"])
    p.add_argument("--ranks", type=int, default=4, help="lookahead: the batch's share of one rank")
    p.add_argument("--epochs", type=float, default=2)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    p.add_argument("--lr", type=float, default=None, help="default: 0.04 (SGD), 1e-3 (Adam)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    x, y = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "t10k")

    torch.manual_seed(args.seed)
    model = tta_train.FashionCNN()
    params = list(model.parameters())
    momentum = args.momentum
    lowered_for = {"off": 0, "predict-keep": args.delay - 1,
                   "lookahead": 0}.get(args.correction, args.delay)
    if lowered_for > 0:
        momentum = max(0.0, 1.0 - (1.0 - momentum) * (1 + lowered_for))
    if args.lr is None:
        args.lr = 0.04 if args.optimizer == "sgd" else 1e-3
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=args.lr, momentum=momentum)
    elif args.optimizer == "adam":
        opt = torch.optim.Adam(params, lr=args.lr, betas=(momentum, 0.999))
    else:
        opt = torch.optim.AdamW(params, lr=args.lr, betas=(momentum, 0.999), weight_decay=0.01)
    if args.period > 1:
        if args.correction not in ("off", "spread", "lookahead"):
            p.error("--period takes --correction off, spread or lookahead")
        train_periodic(args, model, opt, x, y)
        report(args, model, x_test, y_test)
        return
    predict = args.correction.startswith("predict") and args.delay > 0
    pending = collections.deque()  # gradients not yet applied, oldest first
    last = None                    # the last update, for prediction
    lookahead = args.correction == "lookahead" and args.delay > 0
    local = collections.deque()    # lookahead: one rank's gradients of the last `delay` steps
    order = torch.Generator().manual_seed(args.seed)
    per_epoch = len(x) // args.batch
    steps = int(args.epochs * per_epoch)
    for step in range(steps):
        if step % per_epoch == 0:
            perm = torch.randperm(len(x), generator=order)
        batch = perm[(step % per_epoch) * args.batch:(step % per_epoch + 1) * args.batch]
        saved = None
        if predict and last is not None:
            saved = [q.detach().clone() for q in params]
            with torch.no_grad():
                for q, u in zip(params, last):
                    q.add_(u, alpha=args.delay)
        if lookahead and len(local) == args.delay:
            saved = [q.detach().clone() for q in params]
            scratch_steps(opt, params, local)  # oldest first: the order the updates come in
        if lookahead:
            local.append(rank_share_gradient(args, model, opt, x, y, batch))
            if len(local) > args.delay:
                local.popleft()
        opt.zero_grad()
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        if saved is not None:
            with torch.no_grad():
                for q, s in zip(params, saved):
                    q.copy_(s)
        pending.append([q.grad.detach().clone() for q in params])
        if len(pending) <= args.delay:
            continue  # the first `delay` steps bring no update
        for q, g in zip(params, pending.popleft()):
            q.grad = g
        before = [q.detach().clone() for q in params] if predict else None
        opt.step()
        if predict:
            last = [q.detach() - b for q, b in zip(params, before)]
    report(args, model, x_test, y_test)


def report(args, model, x_test, y_test):
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    line = {"optimizer": args.optimizer, "delay": args.delay, "correction": args.correction,
            "epochs": args.epochs, "lr": args.lr, "batch": args.batch, "seed": args.seed,
            "accuracy": round(accuracy, 4)}
    if args.period > 1:
        line["period"] = args.period
    print(json.dumps(line))


def scratch_steps(opt, params, steps):
    """Runs opt's own step once per gradient list in `steps` (oldest first) on a scratch copy
    of its state, leaving the parameters moved and the real state as it was."""
    kept = {q: opt.state[q] for q in params if q in opt.state}
    for q in params:
        opt.state[q] = {k: v.clone() if torch.is_tensor(v) else v
                        for k, v in kept.get(q, {}).items()}
    for grads in steps:
        for q, g in zip(params, grads):
            q.grad = g
        opt.step()
    for q in params:
        if q in kept:
            opt.state[q] = kept[q]
        else:
            del opt.state[q]


def rank_share_gradient(args, model, opt, x, y, batch):
    """One rank's gradient of this step (its first batch / --ranks examples), at the point the
    model is at now: look-ahead's stand-in for the average its update will bring."""
    share = batch[:args.batch // args.ranks]
    opt.zero_grad()
    F.cross_entropy(model(x[share]), y[share]).backward()
    return [q.grad.detach().clone() for q in model.parameters()]


def train_periodic(args, model, opt, x, y):
    """The --period > 1 loop (the module docstring): pass k sends at k % period == 0 what it
    summed since the last send, and that sum is applied at pass k + delay."""
    params = list(model.parameters())
    residual, count = None, 0
    in_flight = collections.deque()  # (the pass it applies at, summed gradient, steps in it)
    local = collections.deque()      # lookahead: one rank's gradients of the passes not applied
    order = torch.Generator().manual_seed(args.seed)
    per_epoch = len(x) // args.batch
    for step in range(int(args.epochs * per_epoch)):
        if step % per_epoch == 0:
            perm = torch.randperm(len(x), generator=order)
        batch = perm[(step % per_epoch) * args.batch:(step % per_epoch + 1) * args.batch]
        saved = None
        if args.correction == "lookahead" and local:
            saved = [q.detach().clone() for q in params]
            scratch_steps(opt, params, list(local))
        if args.correction == "lookahead":
            local.append(rank_share_gradient(args, model, opt, x, y, batch))
        opt.zero_grad()
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        if saved is not None:
            with torch.no_grad():
                for q, s in zip(params, saved):
                    q.copy_(s)
        grads = [q.grad.detach().clone() for q in params]
        residual = grads if residual is None else [r + g for r, g in zip(residual, grads)]
        count += 1
        if step % args.period == 0:
            in_flight.append((step + args.delay, residual, count))
            residual, count = None, 0
        if not in_flight or in_flight[0][0] != step:
            continue
        _, summed, carried = in_flight.popleft()
        if args.correction == "off":
            steps = [summed]
        else:
            steps = [[g / carried for g in summed]] * carried
        for grads in steps:
            for q, g in zip(params, grads):
                q.grad = g
            opt.step()
        for _ in range(carried if args.correction == "lookahead" else 0):
            local.popleft()  # those passes are applied now


if __name__ == "__main__":
    main(sys.argv[1:])
