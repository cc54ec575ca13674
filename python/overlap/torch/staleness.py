"""Staleness correction in overlap.torch's DistributedOptimizer (overlap/staleness.py has the
maths; docs/scheduler.md, "Staleness correction in the adapters").

Per step, for each parameter whose gradient the plan in force delays or updates with a period:
  update: its group's momentum / beta1 is lowered for its mean staleness (mode "on" and
          "predict"); with "predict" and SGD with momentum, a period's summed gradient is applied
          as p momentum steps; then its update is recorded (new value - old value);
  next training forward of its module: it is moved ahead by (updates still to come before this
          step's gradient is applied) x (its last update) ("predict"): the moved-ahead value is
          written into a second buffer and the parameter's data swapped to it, so its true
          value stays untouched in its own storage;
  step() / synchronize(): the true values come back (the data swapped back, no copy) before
          anything reads or updates them.
Per delayed parameter and step that is an add at the forward, and a copy and a subtraction around
the update (the update recorded), with no copy out before the forward and back after it: those
two had slowed deft's steps where ranks share cores with spinning threads
(docs/torch_side_by_side.md).
Look-ahead ("auto", on a parameter whose every slice has the same schedule: delay d, period p,
phase f; any optimizer that steps without a closure): the delayed gradient is applied by the
optimizer's own step (momentum / beta1 not lowered), and the forward of pass n runs where the
updates still to come will put the parameter: the wrapped optimizer's own step, run once for each
pass before n whose gradient no update has applied yet (overlap/staleness.py's pending_passes: d
of them with no period, between d and d + p - 1 with one), on a scratch copy of the parameter's
optimizer state (torch's SGD: buf = m buf + g, W -= lr buf; Adam's moments and step count alike),
each from g, this rank's own gradient of that pass, standing in for the average it will bring.
Where the last update only extrapolates, these are the next updates themselves up to the other
ranks' share of g: on the time-to-accuracy task without overlap they closed a one-step delay's
loss from 2.5 points to 0.1 for SGD with momentum (docs/time_to_accuracy.md, "What a delay costs
without overlap"), and a period 4's from 4.5-17.8 points (uncorrected) to 0.1-1.2. With a
period, an update carrying the sum of k passes' gradients (k = p but for the first,
carried_passes) is applied as k steps of the optimizer, each with their mean: the steps a
synchronous run would have taken, had the k averages been equal, where one step of the sum would
be a k-times step for SGD and a single step for Adam. The rank's gradients of the last
d + p - 1 passes are kept from the gradient hook; a step without one empties them. Passes before
the first applied update run unshifted, since whether the gradients of pass 0 were kept depends
on when this rank saw the plan, and every rank must shift alike. The scratch steps run the
optimizer class's own step, with the groups' settings of now; they call its step hooks, not an
LR scheduler's count. Under a period, a pass that no update reached since the last one continues
from where that one's look-ahead left the parameter and its scratch state, with one step on the
newest gradient, instead of pending_passes steps from the true value: the same steps in the same
order, so the same values, at one optimizer step per pass between updates instead of up to
d + p - 1 (a recomputation whenever the true value, its real state or its group's settings
changed).
Parameters the plan runs synchronously (and every parameter under a synchronous plan, or with
mode "off") go through the wrapped optimizer's own step untouched, bit for bit.

Memory (staleness_correction_bytes()): with "predict", two copies of each delayed parameter (its
saved value while shifted, and its last update), 1 + d + p - 1 under look-ahead (its saved value
and up to d + p - 1 local gradients), and under a period also its scratch optimizer state
(SGD's momentum buffer, Adam's two moments) from a pass that no update reached until the next
update; with "on", none.
"""

import weakref

import torch

from overlap import staleness
from overlap.torch import compiled, layerwise, step_markers


def _is_sgd(optimizer):
    return isinstance(optimizer, torch.optim.SGD)


def _steps_without_closure(optimizer):
    """Whether optimizer.step() can run with no closure (LBFGS re-evaluates the loss)."""
    return not isinstance(optimizer, torch.optim.LBFGS)


def _momentum_key(group):
    """('momentum', None) for SGD-like groups, ('betas', 0) for Adam-like ones, None otherwise."""
    if "betas" in group:
        return ("betas", 0)
    if "momentum" in group:
        return ("momentum", None)
    return None


def _lowered_settings(group_settings, s):
    """A copy of one group's settings with its momentum / beta1 lowered for staleness s."""
    settings = dict(group_settings)
    key = _momentum_key(settings)
    if key is None or s <= 0:
        return settings
    name, index = key
    if index is None:
        settings[name] = staleness.lowered_momentum(float(settings[name]), s)
    else:
        betas = list(settings[name])
        betas[index] = staleness.lowered_momentum(float(betas[index]), s)
        settings[name] = tuple(betas)
    return settings


class _Ahead:
    """Where the last look-ahead of a parameter under a period left it, kept while no update of
    that parameter has come, so that the next pass continues from it with one step."""
    __slots__ = ("pass_", "pending", "settings", "scratch", "real", "version")

    def __init__(self, pass_, pending, settings, scratch, real):
        self.pass_ = pass_        # the pass whose forward ran there
        self.pending = pending    # the steps it took from the true value
        self.settings = settings  # its group's settings then
        self.scratch = scratch    # the optimizer state after those steps
        self.real = real          # the real optimizer state it started from (its object)
        self.version = None       # the parameter's in-place version once its true value is back


class _State:
    __slots__ = ("saved", "last", "shifted", "due", "local", "local_fresh", "ahead")

    def __init__(self):
        # The true value's storage while shifted (the parameter's data is the moved-ahead
        # buffer then); the value before the last update otherwise.
        self.saved = None
        self.last = None     # its last update
        self.shifted = False
        self.due = False     # to be shifted at its module's next training forward
        self.local = []      # look-ahead: this rank's gradients of the last steps, oldest first
        self.local_fresh = False  # one was kept since the last forward
        self.ahead = None         # look-ahead under a period: an _Ahead to continue from


def _same_settings(a, b):
    """Whether two snapshots of one group's settings (layerwise.snapshot_settings) are equal."""
    if a.keys() != b.keys():
        return False
    for key, value in a.items():
        other = b[key]
        if torch.is_tensor(value) or torch.is_tensor(other):
            if not (torch.is_tensor(value) and torch.is_tensor(other) and
                    value.shape == other.shape and torch.equal(value, other)):
                return False
        elif value != other:
            return False
    return True


class StalenessCorrection:
    """The correction of one DistributedOptimizer. `optimizer`: the wrapped optimizer (its
    param_groups and state); `params`: [(parameter, gradient name)]; `mode`: "predict", "on" or
    "off" (staleness.check_mode); `base_step(optimizer)`: the wrapped optimizer class's own step,
    which look-ahead runs on scratch state (None: no look-ahead)."""

    def __init__(self, optimizer, params, mode, base_step=None):
        self._optimizer_ref = weakref.ref(optimizer)  # its forward hook must not keep it alive
        self._name = {p: name for p, name in params}
        self._group = {}
        for index, group in enumerate(optimizer.param_groups):
            for p in group["params"]:
                self._group[p] = index
        self.mode = mode
        self._predict = mode == "predict"
        # Look-ahead where it applies ("auto"): the module docstring.
        self._base_step = base_step
        self._lookahead = (self._predict and base_step is not None and
                           _steps_without_closure(optimizer))
        self._view = staleness.ScheduleView()
        self._states = {}
        self._viewed = False  # the view was refreshed after this step's forward marker
        # Parameters whose look-ahead this step's forward has done: a later forward of the same
        # step (gradient accumulation) runs where the first did and keeps the window.
        self._looked = set()
        self._hook = compiled.SwitchedHook(self._on_forward)

    @property
    def _optimizer(self):
        return self._optimizer_ref()

    @property
    def looks_ahead(self):
        """Whether a delayed parameter of this optimizer looks ahead where its schedule allows:
        its gradients tell the planner so (_core.gradient_flags), which charges the steps."""
        return self._lookahead

    def close(self):
        self._watch_forwards(False)

    def _watch_forwards(self, on):
        """The forward pre-hook is on only while a delayed plan is in force: any global hook
        sends every module call through torch's slow path. Called outside module hooks (step(),
        synchronize()): a hook switched on inside one would miss that module's call."""
        self._hook.switch(on)

    def active(self):
        """Re-reads the plan in force (once a step, from step() or synchronize()) and says
        whether it delays some gradient, so that the step must be corrected."""
        if self.mode == "off":
            return False
        self._view.refresh()
        delayed = self._view.delayed
        if self._predict:
            self._watch_forwards(delayed)
        return delayed

    def step_now(self):
        """The forward marker of the step in progress as active() last read it: the step whose
        gradients step() hands over now."""
        return self._view.step

    def bytes(self):
        """Bytes of extra state the correction holds now (saved values, last updates and kept
        local gradients)."""
        total = 0
        for state in self._states.values():
            tensors = [state.saved, state.last] + state.local
            if state.ahead is not None:
                tensors += [v for v in state.ahead.scratch.values() if torch.is_tensor(v)]
            for t in tensors:
                if t is not None:
                    total += t.numel() * t.element_size()
        return total

    def state_dict(self, params):
        """The state a checkpoint must carry for a resumed run to repeat this one bit for bit:
        {position in `params`: the parameter's last update} for every parameter that the next
        forward moves ahead ("predict"), and {"local:<position>:<i>": its i-th kept local gradient}
        for every one it looks ahead; {} otherwise."""
        position = {p: i for i, p in enumerate(params)}
        saved = {position[p]: state.last.detach().clone() for p, state in self._states.items()
                 if state.last is not None and p in position}
        for p, state in self._states.items():
            if state.local_fresh and p in position:
                for i, g in enumerate(state.local):
                    saved["local:%d:%d" % (position[p], i)] = g.detach().clone()
        return saved

    def load_state_dict(self, params, saved):
        """Takes back what state_dict() gave, in a fresh process before its first forward: the
        forward hook is armed at once, since no step() has run yet to arm it."""
        self._states = {}
        locals_ = {}
        for index, value in saved.items():
            local = isinstance(index, str) and index.startswith("local:")
            where = index.split(":")[1:] if local else [index, 0]
            p = params[int(where[0])]
            state = self._states.setdefault(p, _State())
            state.saved = torch.empty_like(p)
            value = value.to(device=p.device, dtype=p.dtype).clone()
            if local:
                locals_.setdefault(p, []).append((int(where[1]), value))
            else:
                state.last, state.due = value, True
        for p, kept in locals_.items():
            self._states[p].local = [g for _, g in sorted(kept, key=lambda e: e[0])]
            self._states[p].local_fresh = True
        if self._predict and self._states:
            self._watch_forwards(True)

    # -- schedule ---------------------------------------------------------------------------

    def _look_ahead_schedule(self, p):
        """(delay, period, phase) by which parameter `p` looks ahead under the plan in force,
        or None when it does not (the module docstring)."""
        return staleness.uniform_schedule(self._slices(p)) if self._lookahead else None

    def _looks_ahead(self, p):
        return self._look_ahead_schedule(p) is not None

    def keep_local(self, p, grad):
        """The gradient hook's: keeps this rank's gradient of `p`, before it is reduced, for the
        next forward's look-ahead."""
        if not self._lookahead or not self._view.delayed:
            return
        schedule = self._look_ahead_schedule(p)
        if schedule is None:
            return
        delay, period, _ = schedule
        most = delay + period - 1  # pending_passes' bound
        state = self._states.setdefault(p, _State())
        # A last update from an earlier plan's prediction must not move a later forward too.
        state.last, state.due = None, False
        with torch.no_grad():
            if len(state.local) >= most and state.local[0].shape == grad.shape:
                reuse = state.local.pop(0)  # the oldest one's buffer
                reuse.copy_(grad)
                state.local.append(reuse)
            else:
                state.local.append(grad.detach().clone())
            del state.local[:-most]
        state.local_fresh = True

    def _slices(self, p):
        if self.mode == "off":
            return None
        name = self._name.get(p)
        return None if name is None else self._view.slices(name)

    # -- around the update ------------------------------------------------------------------

    def restore(self):
        """Puts back every shifted parameter's true value (before step() reads or updates it);
        the next step's forward refreshes the schedule."""
        self._viewed = False
        self._looked.clear()
        for p, state in self._states.items():
            if state.shifted:
                p.data, state.saved = state.saved, p.data
                state.shifted = False
                if state.ahead is not None:  # saved holds where its forward ran now
                    state.ahead.version = p._version
            # Every step's forward moves it ahead, with or without an update in between (an
            # off-period step still has updates to come before its gradient is applied).
            state.due = state.last is not None

    def step(self, base_step, grads, snapshot, submitted_step=None):
        """Runs the wrapped optimizer's step on `grads` ({param: gradient}) with the group
        settings `snapshot` (layerwise.snapshot_settings), corrected where the plan delays.
        `submitted_step`: the forward marker of the step that submitted the gradients these
        updates carry (step_now() then). The coordinator adopts a plan while the program runs
        on, so an update applied just after the adoption may carry a gradient reduced before
        it, synchronously: that one is not corrected (and records no last update), whatever the
        moment this runs at, so that every rank, and every copy of a model, corrects the same
        updates."""
        if self.mode == "off":
            self._plain(base_step, grads, snapshot)
            return
        self._view.refresh()  # the update of a plan adopted or dropped since the forward
        for p in grads:
            state = self._states.get(p)
            if state is not None:
                state.ahead = None  # the next look-ahead starts from the updated value
        if submitted_step is not None and not self._view.covers(submitted_step):
            self._plain(base_step, grads, snapshot)
            return
        classes, spread = {}, {}
        for p in grads:
            schedule = self._look_ahead_schedule(p)
            carried = 1
            if schedule is not None and submitted_step is not None:
                delay, period, phase = schedule
                passed = self._view.pass_of(submitted_step) - delay
                carried = max(1, staleness.carried_passes(passed, period, phase))
            if carried > 1:
                spread.setdefault(carried, {})[p] = grads[p]
                continue
            slices = None if schedule is not None else self._slices(p)
            s = 0.0 if slices is None else staleness.mean_staleness(slices)
            classes.setdefault(s, {})[p] = grads[p]
        plain = classes.pop(0.0, None)
        if plain:
            self._plain(base_step, plain, snapshot)
        for s, members in classes.items():
            self._corrected(base_step, members, snapshot, s)
        for carried, members in spread.items():
            self._spread(base_step, members, snapshot, carried)

    def _spread(self, base_step, grads, snapshot, carried):
        """Look-ahead's update under a period: the sum of `carried` passes' gradients applied
        as `carried` steps of the wrapped optimizer, each with their mean (the module
        docstring)."""
        with torch.no_grad():
            means = {p: g / carried for p, g in grads.items()}  # p.grad keeps the sum
        for _ in range(carried):
            self._plain(base_step, means, snapshot)

    def _plain(self, base_step, grads, snapshot):
        if snapshot is None:
            layerwise.step_subset(self._optimizer.param_groups, base_step, grads,
                                  layerwise.snapshot_settings(self._optimizer.param_groups))
        else:
            layerwise.step_subset(self._optimizer.param_groups, base_step, grads, snapshot)

    def _corrected(self, base_step, grads, snapshot, s):
        groups = self._optimizer.param_groups
        if snapshot is None:
            snapshot = layerwise.snapshot_settings(groups)
        lowered = [_lowered_settings(settings, s) for settings in snapshot]
        if self._predict:
            for p in grads:
                state = self._states.setdefault(p, _State())
                if state.saved is None:
                    state.saved = torch.empty_like(p)
                with torch.no_grad():
                    state.saved.copy_(p)
        spread = {}
        if self._predict and _is_sgd(self._optimizer):
            for p in list(grads):
                period = self._uniform_period(p)
                settings = lowered[self._group[p]]
                if period > 1 and self._spreadable(settings):
                    spread[p] = grads.pop(p)
        if grads:
            layerwise.step_subset(groups, base_step, grads, lowered)
        for p, g in spread.items():
            self._sgd_period_step(p, g, lowered[self._group[p]], self._uniform_period(p))
        if self._predict:
            with torch.no_grad():
                for p in list(grads) + list(spread):
                    state = self._states[p]
                    if state.last is None:
                        state.last = torch.empty_like(p)
                    torch.sub(p, state.saved, out=state.last)
                    state.due = True

    def _uniform_period(self, p):
        slices = self._slices(p) or []
        periods = {s[3] for s in slices}
        return periods.pop() if len(periods) == 1 else 1

    @staticmethod
    def _spreadable(settings):
        return (float(settings.get("momentum", 0)) > 0 and not settings.get("nesterov", False)
                and float(settings.get("dampening", 0)) == 0 and
                float(settings.get("weight_decay", 0)) == 0 and
                not settings.get("maximize", False))

    def _sgd_period_step(self, p, grad, settings, period):
        """p momentum steps of grad / p each, in closed form (torch.optim.SGD's buffer)."""
        c, s, k, a = staleness.period_steps(float(settings["momentum"]), period)
        lr = settings["lr"]
        state = self._optimizer.state[p]
        with torch.no_grad():
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = torch.zeros_like(p)
                state["momentum_buffer"] = buf
            p.sub_((c * buf + s * grad) * lr)
            buf.mul_(k).add_(grad, alpha=a)

    # -- weight prediction ------------------------------------------------------------------

    def _look_ahead(self, params, current):
        """Runs this forward of `params` (one module's) where the updates still to come will
        put them (the module docstring), from pass d + 1 on."""
        fresh, continued = {}, []
        settings = None
        for p in params:
            state = self._states[p]
            if p in self._looked:
                continue  # a later forward of the same step (accumulation) runs there too
            self._looked.add(p)
            if not state.local_fresh:
                state.local, state.ahead = [], None  # a step without a kept gradient: the
                continue                             # window starts again
            state.local_fresh = False
            schedule = self._look_ahead_schedule(p)
            pending = 0 if schedule is None else staleness.pending_passes(current, *schedule)
            if pending <= 0 or len(state.local) < pending:
                state.ahead = None
                continue
            if settings is None:
                settings = layerwise.snapshot_settings(self._optimizer.param_groups)
            if self._continues(p, state, current, pending, settings):
                continued.append(p)
            else:
                fresh.setdefault(pending, []).append(p)
        for pending, members in fresh.items():
            self._run_ahead(members, pending, current, settings, False)
        if continued:
            self._run_ahead(continued, 1, current, settings, True)

    def _continues(self, p, state, current, pending, settings):
        """Whether `p`'s look-ahead of pass `current` can continue from the last one's point
        with one step: no update of `p` came since (step() drops it), the pass before ran it
        one step short, and neither its true value (in place), its real optimizer state (a
        load_state_dict) nor its group's settings (a scheduler) changed. The steps, and so the
        values, are then those a recomputation from the true value would take."""
        ahead = state.ahead
        if ahead is None:
            return False
        group = self._group[p]
        return (ahead.pass_ == current - 1 and ahead.pending == pending - 1 and
                ahead.version == p._version and
                self._optimizer.state.get(p) is ahead.real and
                _same_settings(ahead.settings, settings[group]))

    def _run_ahead(self, params, steps, current, settings, continued):
        """Moves `params` by `steps` steps of the wrapped optimizer on their last `steps` kept
        gradients, oldest first, on a copy of each (its true value stays in its own storage, in
        `saved`) and on a scratch copy of its optimizer state (the real state is put back
        untouched): from the true value and real state, or (`continued`) from where the last
        pass's look-ahead left them. Under a period the point and scratch state are kept for
        the next pass's continuation (_continues)."""
        optimizer = self._optimizer
        kept = {p: optimizer.state[p] for p in params if p in optimizer.state}
        with torch.no_grad():
            for p in params:
                state = self._states[p]
                if continued:
                    scratch = state.ahead.scratch  # and `saved` holds the last point
                else:
                    if state.saved is None or state.saved.shape != p.shape:
                        state.saved = torch.empty_like(p)
                    state.saved.copy_(p.data)
                    scratch = {k: (v.clone() if torch.is_tensor(v) else v)
                               for k, v in kept.get(p, {}).items()}
                p.data, state.saved = state.saved, p.data
                state.shifted = True
                optimizer.state[p] = scratch
        try:
            for i in range(-steps, 0):
                layerwise.step_subset(optimizer.param_groups,
                                      lambda: self._base_step(optimizer),
                                      {p: self._states[p].local[i] for p in params}, settings)
        finally:
            for p in params:
                state = self._states[p]
                scratch = optimizer.state.get(p, {})
                if p in kept:
                    optimizer.state[p] = kept[p]
                else:
                    optimizer.state.pop(p, None)
                schedule = self._look_ahead_schedule(p)
                if schedule is not None and schedule[1] > 1:
                    pending = steps + (state.ahead.pending if continued else 0)
                    state.ahead = _Ahead(current, pending, settings[self._group[p]], scratch,
                                         kept.get(p))
                else:
                    state.ahead = None  # without a period an update comes every pass

    def _on_forward(self, module, inputs):
        if not (module.training and torch.is_grad_enabled()):
            return
        own = [p for p in module._parameters.values()
               if p is not None and p in self._states and
               (self._states[p].due or self._states[p].local)]
        if not own:
            return
        if not self._viewed:
            step_markers.before_module_forward(module, inputs)  # the step's marker first
            self._view.refresh()
            self._viewed = True
        current = self._view.current_pass()
        ahead_of = [p for p in own if self._states[p].local]
        own = [p for p in own if not self._states[p].local and self._states[p].due]
        if ahead_of:
            self._look_ahead(ahead_of, current)
        for p in own:
            state = self._states[p]
            state.due = False
            slices = self._slices(p)
            if slices is None or current < 0 or state.last is None:
                continue
            aheads = [(offset, count, staleness.updates_before_applied(current, delay, period,
                                                                       phase))
                      for offset, count, delay, period, phase in slices]
            if not any(ahead for _, _, ahead in aheads):
                continue
            with torch.no_grad():
                flat, last = p.data.view(-1), state.last.view(-1)
                moved = state.saved.view(-1)
                whole = sum(count for _, count, _ in aheads) == flat.numel()
                if not whole:
                    moved.copy_(flat)
                for offset, count, ahead in aheads:
                    end = offset + count
                    if ahead:
                        torch.add(flat[offset:end], last[offset:end], alpha=float(ahead),
                                  out=moved[offset:end])
                    elif whole:
                        moved[offset:end].copy_(flat[offset:end])
            p.data, state.saved = state.saved, p.data
            state.shifted = True
