"""Gradient reduction shared by DistributedGradientTape and the Keras DistributedOptimizer.

Inside a tf.function every gradient gets its own allreduce op, which starts the moment backward
has produced that gradient, so communication overlaps the rest of backward, and the runtime
fuses and plans them (or `groups` bundles them). Eagerly each op would block until done, so the
dense gradients go out as one grouped allreduce. Either way every rank submits the same names,
derived from each variable's position and name, so each step repeats the last one.
IndexedSlices are allgathered unless sparse_as_dense; None gradients stay None, as Horovod.
With a process set, its members reduce over the set and the other ranks keep their own
gradients (as Horovod, and overlap.torch's DistributedOptimizer).

Local variables (register_local_var, as Horovod 0.28): their gradients are not reduced; each
rank keeps its own, divided by the set's size when scale_local_gradients (Horovod's default).

Delayed updates (delayed_updates.py): when they are configured, every dense gradient not in an
explicit group goes out as its own allreduce, eagerly too (through one internal tf.function per
set of names, so they still run concurrently), since the runtime plans, and so delays,
single-tensor allreduces only; each result is tagged with its has_update flag, so that the
optimizer skips a variable in a step that brings it no update, and, under
staleness_correction="auto", with this rank's own gradient, from which the optimizer looks ahead
(staleness.py).

Every single-tensor gradient allreduce is marked as a gradient (plan_may_delay; runtime/overlap.h):
only those may be delayed, and the planners plan those alone, leaving the step's other
allreduces (a metric, SyncBatchNormalization's statistics) negotiated with their own results.
"""

import tensorflow as tf

from overlap import _core, staleness
from overlap.common import _OP_NAMES, Adasum, Average, Sum, core_reduce_op, process_set_id
from overlap.tensorflow import delayed_updates, mpi_ops, step_markers

# Eager reductions under delayed updates: one tf.function per (reducer settings, names).
_eager_functions = {}


def variable_name(variable, index):
    """A name that is the same on every rank: the position, then the Keras 3 path or the name."""
    label = getattr(variable, "path", None) or getattr(variable, "name", None) or "tensor"
    return "%d.%s" % (index, str(label).replace(":0", ""))


class GradientReducer:
    def __init__(self, prefix, compression, sparse_as_dense, op, gradient_predivide_factor,
                 groups, process_set, scale_local_gradients=True, staleness_correction="auto"):
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("rank %d: gradient_predivide_factor not supported with op != Average"
                             % _core.rank())
        core_reduce_op(op)  # refuses unknown ops now, not at the first step
        process_set_id(process_set)  # refuses an unregistered set by name
        if op not in (Average, Sum, Adasum):
            raise ValueError("rank %d: gradients reduce with hvd.Average, hvd.Sum or hvd.Adasum, "
                             "got hvd.%s" % (_core.rank(), _OP_NAMES[op]))
        ranks = process_set.size() if process_set is not None else _core.size()
        if op == Adasum and ranks & (ranks - 1):
            raise ValueError("rank %d: Adasum needs a power-of-two number of ranks, and this job "
                             "has %d" % (_core.rank(), ranks))
        self.prefix = prefix
        # Carried to the optimizer on each delayed gradient's tag (delayed_updates.py).
        # "auto" stays itself (look-ahead where it applies: overlap/tensorflow/staleness.py).
        mode = staleness.check_mode(staleness_correction, "the gradient reducer")
        staleness.warn_unless_looking_ahead(staleness_correction, "the gradient reducer")
        self.correction = "auto" if staleness.looks_ahead(staleness_correction) else mode
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        self.predivide = float(gradient_predivide_factor)
        self.groups = groups
        self.process_set = process_set
        # As Horovod: a rank outside the process set reduces nothing and keeps its own
        # gradients.
        self.included = process_set is None or bool(process_set.included())
        self.scale_local_gradients = scale_local_gradients
        # id -> variable: the variables are held, so that an id is never reused by another.
        self._local = {}

    def register_local_var(self, var):
        """Leaves `var`'s gradient out of the reduction (module docstring)."""
        self._local[id(var)] = var

    def is_local(self, var):
        return self._local.get(id(var)) is var

    def _factors(self):
        if self.op == Average:
            return 1.0 / self.predivide, self.predivide
        return 1.0, 1.0

    def _group_of(self, variables):
        """index -> group number, from an int (that many groups of consecutive variables) or
        lists of variables."""
        if not self.groups:
            return {}
        if isinstance(self.groups, int):
            per = -(-len(variables) // self.groups) if variables else 1
            return {i: i // per for i in range(len(variables))}
        ids = {id(v): i for i, v in enumerate(variables)}
        mapping = {}
        for number, group in enumerate(self.groups):
            for v in group:
                if id(v) not in ids:
                    raise ValueError("rank %d: groups name a variable that has no gradient here"
                                     % _core.rank())
                mapping[ids[id(v)]] = number
        return mapping

    def reduce(self, grads, variables, backward_after=None):
        """The reduced gradients, in order, for `grads` of `variables` (lists of equal length).
        Emits the backward marker (after `backward_after`) and the update marker (after every
        gradient)."""
        grads = list(grads)
        marker = step_markers.backward(after=backward_after)
        deps = [marker] if marker is not None and not tf.executing_eagerly() else []
        shared = [i for i, v in enumerate(variables) if not self.is_local(v)]
        reduced = list(grads)
        if self.included and shared:
            with tf.control_dependencies(deps):
                done = self._reduce_all([grads[i] for i in shared],
                                        [variables[i] for i in shared])
            for i, g in zip(shared, done):
                reduced[i] = g
        if len(shared) < len(grads) and self.scale_local_gradients:
            reduced = [self._scale_local(g) if self.is_local(v) else g
                       for g, v in zip(reduced, variables)]
        step_markers.update(after=[g for g in grads if isinstance(g, tf.Tensor)])
        return reduced

    def _set_size(self):
        return self.process_set.size() if self.process_set is not None else _core.size()

    def _scale_local(self, grad):
        if grad is None:
            return None
        size = float(self._set_size())
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values / size, grad.indices, grad.dense_shape)
        return grad / size

    def _reduce_all(self, grads, variables):
        names = ["%s.%s" % (self.prefix, variable_name(v, i)) for i, v in enumerate(variables)]
        out = list(grads)
        pre, post = self._factors()
        dense = []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    out[i] = mpi_ops.allreduce(g, op=self.op, name=names[i],
                                               process_set=self.process_set)
                    continue
                g = tf.convert_to_tensor(g)
            dense.append((i, g))
        groups = self._group_of(variables)
        if delayed_updates.enabled():
            single = [(i, g) for i, g in dense if i not in groups]
            # Look-ahead's stand-in for the reduced gradient: this rank's, as the op scales it.
            scale = float(self._set_size()) if self.op == Sum else 1.0
            for (i, g), (r, flag) in zip(single, self._reduce_with_updates(single, names)):
                local = g if self.correction == "auto" else None
                if local is not None and scale != 1.0:
                    local = local * scale
                out[i] = delayed_updates.tag(r, flag, names[i], self.correction, local)
            dense = [(i, g) for i, g in dense if i in groups]
        elif not groups and tf.executing_eagerly():
            groups = {i: 0 for i, _ in dense}
        bundles = {}
        for i, g in dense:
            if i in groups:
                bundles.setdefault(groups[i], []).append((i, g))
            else:
                # A gradient (plan_may_delay): the planners plan these and leave the step's
                # other allreduces (metrics, SyncBatchNormalization's statistics) negotiated.
                out[i] = mpi_ops.allreduce_with_update(
                    g, names[i], op=self.op, compression=self.compression, prescale_factor=pre,
                    postscale_factor=post, process_set=self.process_set)[0]
        for number, members in sorted(bundles.items()):
            reduced = mpi_ops.grouped_allreduce(
                [g for _, g in members], op=self.op, compression=self.compression,
                prescale_factor=pre, postscale_factor=post,
                name="%s.group%d.%s" % (self.prefix, number, names[members[0][0]]),
                process_set=self.process_set)
            for (i, _), r in zip(members, reduced):
                out[i] = r
        return out

    def _reduce_with_updates(self, dense, names):
        """[(reduced, has_update)] for `dense` [(index, gradient)], one allreduce each."""
        if not dense:
            return []
        pre, post = self._factors()
        chosen = [names[i] for i, _ in dense]

        def reduce_each(grads):
            return [mpi_ops.allreduce_with_update(
                g, name, op=self.op, compression=self.compression, prescale_factor=pre,
                postscale_factor=post, process_set=self.process_set,
                looks_ahead=self.correction == "auto")
                for g, name in zip(grads, chosen)]

        if not tf.executing_eagerly():
            return reduce_each([g for _, g in dense])
        key = (tuple(chosen), self.op, pre, post, self.compression,
               getattr(self.compression, "runtime_spec", None), process_set_id(self.process_set))
        function = _eager_functions.get(key)
        if function is None:
            function = _eager_functions[key] = tf.function(reduce_each)
        return function([g for _, g in dense])
