"""One rank of overlap.run (overlap/runner.py): fetches the call from the driver, runs it, and
sends back its return value or its traceback. Started by overlaprun as
`python -m overlap._run_task`; exits 1 when the call raised, so that overlaprun stops the job."""

import os
import pickle
import sys
import time
import traceback

from overlap import runner


def _rank():
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    raise SystemExit("overlap._run_task: no rank in the environment (OMPI_COMM_WORLD_RANK); "
                     "it is started by overlap.run through overlaprun")


def _exchange(rank, endpoints, key, message, deadline):
    """Sends one message to the driver and returns its answer, trying each of its addresses
    until one answers or the deadline passes."""
    while True:
        try:
            return runner.ask_driver(endpoints, key, message, 2.0, runner._IO_TIMEOUT_S)
        except OSError as e:
            if time.monotonic() > deadline:
                raise SystemExit("overlap._run_task: rank %d cannot reach the overlap.run "
                                 "driver: %s" % (rank, e))
        time.sleep(0.5)


def _prepare(main_module, sys_path, cwd, argv):
    """The driver's import paths, working directory, argv and (under pickle) main script."""
    for entry in reversed(sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if os.path.isdir(cwd):
        os.chdir(cwd)
    sys.argv = list(argv)
    if main_module:
        import multiprocessing.spawn
        multiprocessing.spawn.prepare(main_module)


def _pickled(value, func):
    """(True, the return value pickled), or (False, why it cannot be)."""
    errors = []
    for pickler in (pickle, runner._cloudpickle):
        if pickler is None:
            continue
        try:
            return True, pickler.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001
            errors.append("%s: %s" % (type(e).__name__, e))
    return False, ("the return value of %s (a %s) cannot be pickled to go back to the driver: "
                   "%s\n" % (getattr(func, "__qualname__", func), type(value).__name__,
                              errors[-1]))


def main():
    rank = _rank()
    endpoints = runner.parse_endpoints(os.environ[runner.DRIVER_ENV])
    key = bytes.fromhex(os.environ[runner.KEY_ENV])
    deadline = time.monotonic() + runner._IO_TIMEOUT_S
    serializer, payload, main_module, sys_path, cwd, argv = _exchange(
        rank, endpoints, key, ("fetch", rank), deadline)
    try:
        _prepare(main_module, sys_path, cwd, argv)
        if serializer == "cloudpickle":
            import cloudpickle  # noqa: F401 - the payload's loader needs it importable
        func, args, kwargs = pickle.loads(payload)
        value = func(*args, **kwargs)
        ok = True
    except BaseException:  # noqa: BLE001 - every failure goes back to the driver
        ok, data = False, traceback.format_exc()
    if ok:
        ok, data = _pickled(value, func)
    _exchange(rank, endpoints, key, ("result", rank, ok, data), time.monotonic() + 30)
    if not ok:
        sys.stderr.write("overlap.run: rank %d raised:\n%s" % (rank, data))
        sys.stderr.flush()
        core = sys.modules.get("overlap._core")
        if core is not None:  # ranks waiting on this one fail now, not at the collective timeout
            core.abort("overlap.run: %s" % data.strip().splitlines()[-1])
        sys.exit(1)


if __name__ == "__main__":
    main()
