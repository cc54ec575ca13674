"""Staleness correction for delayed plans, the framework-neutral part (docs/scheduler.md,
"Staleness correction in the adapters").

Under a plan with delays or update periods (planner deft; runtime/planes/plan_delays.h) the gradient a
parameter receives at step k was computed at step k - d, or summed over a period. The adapters'
optimizers correct for it as examples/mnist_mlp.cc's `predict` does:
- the momentum (SGD) or beta1 (Adam, AdamW) m of a tensor with mean staleness s = delay +
  (period - 1) / 2 becomes max(0, 1 - (1 - m)(1 + s)), since stale gradients act as momentum;
- weight prediction: before the forward that computes a gradient, each tensor is moved ahead by
  the number of updates it will still take before that gradient is applied, times its last
  update, and put back after backward, so the gradient is taken about where it will be applied;
- SGD with momentum and a period p: an update carrying p steps' summed gradient is applied as p
  momentum steps of 1/p of it (closed form).
Each tensor uses its own (delay, period, phase) slices under the plan in force
(_core.plan_schedule()).
"""

from overlap import _core

MODES = ("auto", "predict", "on", "off")


def check_mode(mode, who):
    """The mode `mode` resolves to ("predict", "on" or "off"); ValueError naming `who` for an
    unknown one."""
    if mode is True:
        mode = "auto"
    elif mode is False or mode is None:
        mode = "off"
    if mode not in MODES:
        raise ValueError("rank %d: %s: staleness_correction must be one of %s, got %r" %
                         (_core.rank(), who, ", ".join(MODES), mode))
    # auto: the best measured choice (docs/scheduler.md, the accuracy table): prediction.
    return "predict" if mode == "auto" else mode


def looks_ahead(requested):
    """Whether the staleness_correction argument `requested` asks for look-ahead where a tensor's
    schedule allows it ("auto", the default, or True)."""
    return requested is True or requested == "auto"


def delays_configured():
    """Whether the runtime's configuration (the environment and init()'s options) lets deft
    delay updates: staleness > 0 or max_period > 1."""
    return _core.setting("OVERLAP_STALENESS", 0) > 0 or _core.setting("OVERLAP_MAX_PERIOD", 1) > 1


def warn_unless_looking_ahead(requested, who):
    """Warns (each rank) when `who`'s staleness_correction `requested` does not look ahead while
    deft may delay under the adapters' default budget (overlap/common.py start_runtime): that
    default was measured with look-ahead only."""
    from overlap import common
    if (looks_ahead(requested) or not common.budget_defaulted() or
            not _core.is_initialized() or not delays_configured()):
        return
    import warnings
    warnings.warn("rank %d: %s: staleness_correction=%r does not look ahead, but deft's "
                  "convergence budget is the adapters' default, its bound, measured with "
                  "look-ahead only: keep the default correction (\"auto\"), or pass init(budget=0) "
                  "(or a budget you measured) for this one (docs/time_to_accuracy.md, "
                  "\"Convergence budget\")" % (_core.rank(), who, requested), stacklevel=3)


def uniform_schedule(slices):
    """(delay, period, phase) when every slice of a tensor shares one schedule that is not
    synchronous: what look-ahead needs, in both adapters; None for any other (none, mixed)."""
    if not slices:
        return None
    schedule = tuple(slices[0][2:5])
    if schedule[:2] == (0, 1) or any(tuple(s[2:5]) != schedule for s in slices):
        return None
    return schedule


def pending_passes(pass_, delay, period, phase):
    """How many passes just before `pass_` (counted from the plan's adoption) a tensor slice
    (delay, period, phase) has computed gradients for that no update has applied yet by the
    forward of `pass_`: the passes after the last communicating one whose update came, at most
    delay + period - 1. 0 while no communicating pass has been applied (then whether a rank
    kept the gradients of the first passes depends on when it saw the plan)."""
    # Pass c's update comes in the step of pass c + delay, after that pass's forward.
    newest_applied = pass_ - 1 - delay
    if newest_applied < 0:
        return 0
    last = newest_applied - (newest_applied - phase) % period
    return pass_ - 1 - last if last >= 0 else 0


def carried_passes(pass_, period, phase):
    """How many passes' gradients the communicating pass `pass_` of a slice (period, phase)
    sends summed: its own and those since the last one, `period` but for the first (phase + 1);
    0 when `pass_` does not communicate."""
    if pass_ < 0 or (pass_ - phase) % period:
        return 0
    return min(period, pass_ + 1)


def updates_before_applied(pass_, delay, period, phase):
    """How many updates a tensor slice (delay, period, phase) takes between the forward of its
    submission `pass_` (counted from the plan's adoption) and the update that applies that
    submission's gradient, not counting that one (examples/weight_prediction.cc's
    UpdatesBeforeApplied)."""
    # c: the first pass >= pass_ that communicates; its result is applied at pass c + delay.
    # Pass j brings an update when pass j - delay communicated.
    communicates = pass_ + (phase - pass_) % period
    return sum(1 for j in range(pass_, communicates + delay)
               if j >= delay and (j - delay) % period == phase)


def lowered_momentum(m, staleness):
    """The momentum (or beta1) for gradients `staleness` steps old on average."""
    if staleness <= 0:
        return m
    return max(0.0, 1.0 - (1.0 - m) * (1.0 + staleness))


def mean_staleness(slices):
    """Elements-weighted delay + (period - 1) / 2 over a tensor's slices."""
    total = sum(s[1] for s in slices)
    if total <= 0:
        return 0.0
    return sum(s[1] * (s[2] + (s[3] - 1) / 2.0) for s in slices) / total


def period_steps(m, p):
    """Coefficients (c, s, k, a) of p momentum steps v = m v + G / p, x -= lr v in closed form:
    x -= lr (c v + s G), v = k v + a G (examples/sgd.cc, MomentumSgd)."""
    carry = spread = sum_powers = 0.0
    keep = 1.0
    for _ in range(p):
        sum_powers += keep
        keep *= m
        carry += keep
        spread += sum_powers
    return carry, spread / p, keep, sum_powers / p


class ScheduleView:
    """The plan in force as the correction needs it, re-read only when a plan is adopted or
    dropped. refresh() once a step, after that step's forward marker."""

    def __init__(self):
        self._generation = None
        self._schedule = {"first_step": 0, "first_pass": 0, "tensors": {}}
        self.step = 0

    def refresh(self):
        generation, self.step = _core.plan_clock()
        if generation != self._generation:
            self._generation = generation
            self._schedule = _core.plan_schedule() if generation else {
                "first_step": 0, "first_pass": 0, "tensors": {}}
        return bool(self._schedule["tensors"])

    @property
    def delayed(self):
        return bool(self._schedule["tensors"])

    def slices(self, name):
        """[[offset, count, delay, period, phase], ...] of gradient `name`, or None when the plan
        runs it synchronously."""
        return self._schedule["tensors"].get(name)

    def covers(self, step):
        """Whether the plan in force ran the submissions of the step of forward marker `step`:
        a plan is adopted while the program runs on, so an update applied after its adoption
        may still carry a gradient reduced before it (synchronously)."""
        return self.delayed and step >= self._schedule["first_step"]

    def current_pass(self):
        """The plan pass of the submissions of the step whose forward marker was last read."""
        return self.pass_of(self.step)

    def pass_of(self, step):
        """The plan pass of the submissions of the step of forward marker `step`."""
        return self._schedule["first_pass"] + step - self._schedule["first_step"]
