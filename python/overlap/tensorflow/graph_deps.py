"""Whether a tensor being traced into a tf.function needs the result of an overlap collective.

The runtime's observed plan cuts a launch unit wherever the program saw an operation finish
between two submissions, because the later submission may have needed that result
(AllreduceOptions::independent_of_results, runtime/overlap.h). A traced step's ops run on
TensorFlow's threads, and the op library's waiter sees every allreduce finish the moment it does,
while backward is still submitting gradients: counted as the program's sights, those finishes cut
bert-base's 204 gradients into 105 units. The graph says which submissions truly could need a
result, so the adapter tells the core, per allreduce, when its input cannot.

An input needs a collective's result when, in the graph being traced,
  - a collective (an Overlap* op other than the step marker) or an op that calls a function
    holding one (tf.cond, tf.while_loop, a nested tf.function) is among its ancestors, through
    data and control inputs; or
  - one of its ancestors is a stateful op that tf.function will run in program order (a
    tf.py_function, an Assert: auto_control_deps chains those when the function is finished, after
    this decision), and any such op traced so far needs a collective's result.
Inputs captured from outside the function were computed before the call: they need nothing of
this step. Eagerly nothing is known, and the answer is False (the safe one).
"""

import weakref

import tensorflow as tf
from tensorflow.python.framework import auto_control_deps

_NOT_COLLECTIVES = {"OverlapStepMarker"}
# Node attributes that name a function the op runs.
_FUNCTION_ATTRS = ("f", "then_branch", "else_branch", "body", "cond", "branches")


class _GraphFacts:
    """Per graph: for each op seen, (needs a collective's result, has a chained op among its
    ancestors or itself), and whether any chained op needs a result."""

    def __init__(self):
        self.facts = {}
        self.functions = {}  # function name -> holds a collective
        self.scanned = 0     # graph ops looked at for chained ops
        self.chain_needs_result = False


_by_graph = weakref.WeakKeyDictionary()


def _is_collective_type(op_type):
    return op_type.startswith("Overlap") and op_type not in _NOT_COLLECTIVES


def _function_holds_collective(graph, name, facts, seen=None):
    if name in facts.functions:
        return facts.functions[name]
    seen = seen if seen is not None else set()
    if name in seen:
        return False
    seen.add(name)
    function = graph._get_function(name)  # pylint: disable=protected-access
    holds = True  # a function we cannot read may hold anything
    if function is not None and hasattr(function, "definition"):
        holds = False
        for node in function.definition.node_def:
            if _is_collective_type(node.op) or any(
                    _function_holds_collective(graph, called, facts, seen)
                    for called in _called_functions(node.attr)):
                holds = True
                break
    facts.functions[name] = holds
    return holds


def _called_functions(attrs):
    for key in _FUNCTION_ATTRS:
        if key not in attrs:
            continue
        value = attrs[key]
        if value.HasField("func"):
            yield value.func.name
        elif value.HasField("list"):
            for f in value.list.func:
                yield f.name


def _is_chained(op):
    """Whether tf.function runs `op` in program order with the other such ops."""
    if op.type in auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS:
        return False
    is_stateful = getattr(auto_control_deps, "op_is_stateful", None)  # TensorFlow 2.16-2.21
    stateful = is_stateful(op) if is_stateful else op._is_stateful  # pylint: disable=W0212
    if not stateful:
        return False
    return not any(t.dtype == tf.resource for t in op.inputs)


def _op_facts(graph, op, facts):
    """(needs a collective's result, has a chained op among its ancestors or itself)."""
    known = facts.facts.get(op)
    if known is not None:
        return known
    stack = [op]
    while stack:
        current = stack[-1]
        if current in facts.facts:
            stack.pop()
            continue
        parents = [t.op for t in current.inputs] + list(current.control_inputs)
        missing = [p for p in parents if p not in facts.facts and p.graph is graph]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        own = _is_collective_type(current.type) or any(
            _function_holds_collective(graph, name, facts)
            for name in _called_functions(current.node_def.attr))
        needs = own or any(facts.facts[p][0] for p in parents if p in facts.facts)
        chained = _is_chained(current) or any(facts.facts[p][1] for p in parents
                                              if p in facts.facts)
        facts.facts[current] = (needs, chained)
    return facts.facts[op]


def independent_of_results(tensor):
    """True when `tensor`, being traced, cannot need the result of an overlap collective (module
    docstring); False eagerly or when unsure."""
    if tf.executing_eagerly() or not hasattr(tensor, "op"):
        return False
    graph = tensor.graph
    facts = _by_graph.get(graph)
    if facts is None:
        facts = _by_graph[graph] = _GraphFacts()
    needs, chained = _op_facts(graph, tensor.op, facts)
    if needs:
        return False
    if not chained:
        return True
    operations = graph.get_operations()
    for op in operations[facts.scanned:]:
        if _is_chained(op) and _op_facts(graph, op, facts)[0]:
            facts.chain_needs_result = True
    facts.scanned = len(operations)
    return not facts.chain_needs_result
