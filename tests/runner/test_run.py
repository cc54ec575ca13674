"""overlap.run (Horovod's horovod.run) from a plain Python process: it starts overlaprun, and the
ranks' return values, failures and refusals come back here. The ranks reduce real tensors with
overlap.torch. run_test.sh sets OVERLAP_LAUNCHER, OVERLAP_LIBRARY and PYTHONPATH."""

import hashlib
import hmac
import os
import pickle
import socket
import struct
import subprocess
import sys
import textwrap
import time

import pytest

import overlap
from overlap import runner


def reduce_ranks(scale, offset=0):
    import torch
    import overlap.torch as hvd
    hvd.init()
    x = torch.full((4,), float(hvd.rank() + 1) * scale)
    total = hvd.allreduce(x, op=hvd.Sum, name="x")
    gathered = hvd.allgather_object({"rank": hvd.rank()})
    return {"rank": hvd.rank(), "size": hvd.size(), "sum": total.tolist(), "offset": offset,
            "gathered": gathered}


def fail_on_rank_one():
    import overlap.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank one refuses this batch")
    hvd.barrier()  # rank 0 waits for a rank that is gone: overlaprun must stop it
    return hvd.rank()


def unpicklable_result():
    return (x for x in range(3))  # a generator pickles with neither pickle nor cloudpickle


def expected_sum(scale, n):
    return [scale * n * (n + 1) / 2] * 4


@pytest.mark.parametrize("np", [2, 3])
def test_each_rank_returns_its_own_value_in_rank_order(np):
    results = overlap.run(reduce_ranks, args=(2.0,), kwargs={"offset": 7}, np=np)
    assert [r["rank"] for r in results] == list(range(np))
    for r in results:
        assert r["size"] == np
        assert r["sum"] == expected_sum(2.0, np)
        assert r["offset"] == 7
        assert r["gathered"] == [{"rank": i} for i in range(np)]


def test_num_proc_is_the_same_as_np_and_they_must_agree():
    assert [r["rank"] for r in overlap.run(reduce_ranks, args=(1.0,), num_proc=2)] == [0, 1]
    with pytest.raises(ValueError, match="num_proc=2 and np=3 disagree"):
        overlap.run(reduce_ranks, num_proc=2, np=3)


def test_a_rank_that_raises_fails_the_run_with_its_traceback_within_seconds():
    start = time.monotonic()
    with pytest.raises(overlap.RunError) as info:
        overlap.run(fail_on_rank_one, np=2)
    message = str(info.value)
    assert "rank 1 raised" in message
    assert "ValueError: rank one refuses this batch" in message
    assert "fail_on_rank_one" in message  # the rank's traceback
    assert time.monotonic() - start < 60


def test_a_return_value_that_cannot_be_pickled_names_the_rank():
    # Every rank fails the same way; whichever reports first is named.
    with pytest.raises(overlap.RunError,
                       match=r"rank [01] raised:\nthe return value of unpicklable_result \(a "
                             r"generator\) cannot be pickled to go back to the driver: "
                             r"TypeError: cannot pickle 'generator' object"):
        overlap.run(unpicklable_result, np=2)


def test_a_lambda_travels_with_cloudpickle():
    if runner._cloudpickle is None:
        pytest.skip("cloudpickle is not installed (tools/setup.sh installs it)")
    base = 5
    assert overlap.run(lambda k: k + base, args=(1,), np=2) == [6, 6]


def test_without_cloudpickle_a_lambda_is_refused_before_anything_starts(monkeypatch):
    monkeypatch.setattr(runner, "_cloudpickle", None)
    monkeypatch.setenv("OVERLAP_LAUNCHER", "/nonexistent/overlaprun")  # must not be reached
    with pytest.raises(ValueError, match="pip install cloudpickle"):
        overlap.run(lambda: 1, np=2)


def test_without_cloudpickle_a_function_of_the_main_script_runs(tmp_path):
    # The script's own function pickles by reference to __main__: each rank runs the script
    # again as __mp_main__ to find it, as multiprocessing's spawn does.
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import overlap
        from overlap import runner
        runner._cloudpickle = None

        SCALE = 3.0

        def train(offset):
            import torch
            import overlap.torch as hvd
            hvd.init()
            t = hvd.allreduce(torch.tensor([SCALE * (hvd.rank() + 1)]), op=hvd.Sum, name="t")
            return float(t) + offset

        if __name__ == "__main__":
            print("RESULTS", overlap.run(train, args=(0.5,), np=2))
        """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "RESULTS [9.5, 9.5]" in out.stdout


@pytest.mark.parametrize("kwargs, message", [
    ({"hosts": "localhost:2", "hostfile": "/tmp/h"}, "hosts or hostfile, not both"),
    ({"use_gloo": True}, "MPI only"),
    ({"use_gloo": True, "use_mpi": True}, "cannot both be True"),
    ({"min_np": 1}, "elastic arguments min_num_proc"),
    ({"max_num_proc": 4, "reset_limit": 1}, "max_num_proc, reset_limit"),
    ({"np": 0}, "positive integer"),
])
def test_bad_arguments_are_refused_before_anything_starts(monkeypatch, kwargs, message):
    monkeypatch.setenv("OVERLAP_LAUNCHER", "/nonexistent/overlaprun")
    args = {"np": 2}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        overlap.run(reduce_ranks, **args)


def test_a_missing_launcher_is_named(monkeypatch):
    monkeypatch.setenv("OVERLAP_LAUNCHER", "/nonexistent/overlaprun")
    with pytest.raises(overlap.RunError,
                       match="OVERLAP_LAUNCHER=/nonexistent/overlaprun is not an executable"):
        overlap.run(reduce_ranks, args=(1.0,), np=2)


def _closed_on_us(sock):
    """Whether the driver closed the connection (a reset when our unread bytes were left)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _dial(driver):
    address, _, port = driver.endpoints[0].rpartition(":")
    sock = socket.create_connection((address, int(port)), timeout=5)
    return sock, "%s:%d" % sock.getsockname()


def test_the_driver_answers_only_ranks_that_prove_the_job_key(monkeypatch, capsys):
    monkeypatch.setattr(runner, "_HANDSHAKE_TIMEOUT_S", 1.0)
    key = os.urandom(32)
    call = ("pickle", b"call", {}, [], "/", [])
    driver = runner._Driver(key, call, runner._driver_addresses(None, None))
    strangers = []
    try:
        assert len(driver.endpoints) == 1 and driver.endpoints[0].startswith("127.0.0.1:")
        # A stranger that says nothing, first: it holds up no rank.
        silent, name = _dial(driver)
        strangers.append(name)
        # Another job's key.
        s, name = _dial(driver)
        with s:
            runner.answer_challenge(s, os.urandom(32))
            assert _closed_on_us(s)  # no answer
        strangers.append(name)
        # A message signed with the key, as before the handshake: no answer to the challenge.
        s, name = _dial(driver)
        with s:
            payload = pickle.dumps(("fetch", 0))
            s.sendall(struct.pack("!Q", len(payload)) +
                      hmac.new(key, payload, hashlib.sha256).digest() + payload)
            assert s.recv(1 << 16)[:4] == b"OVLD"  # the challenge, then the close
            assert _closed_on_us(s)
        strangers.append(name)
        # A rank of the job, with its conversation recorded...
        s, _ = _dial(driver)
        with s:
            challenge = runner._recv_exact(s, 36)
            nonce = challenge[4:]
            proof = runner._mac(key, runner._HANDSHAKE_CONTEXT, nonce)
            payload = pickle.dumps(("fetch", 0))
            frame = (struct.pack("!Q", len(payload)) +
                     runner._mac(key, runner.TO_DRIVER, nonce, payload) + payload)
            s.sendall(proof + frame)
            assert runner.recv_frame(s, key, nonce, runner.TO_RANK) == call
        # ...replayed on a connection of its own: another nonce, refused.
        s, name = _dial(driver)
        with s:
            s.sendall(proof + frame)
            assert runner._recv_exact(s, 36)[:4] == b"OVLD"
            assert _closed_on_us(s)
        strangers.append(name)
        # The silent one is dropped after the handshake timeout.
        silent.settimeout(5)
        assert runner._recv_exact(silent, 36)[:4] == b"OVLD"
        assert _closed_on_us(silent)
        silent.close()
    finally:
        driver.close()
    assert len(driver.problems) == 4
    err = capsys.readouterr().err
    for name in strangers:
        assert sum(name + ":" in p for p in driver.problems) == 1, (name, driver.problems)
        assert err.count("refused a connection from %s:" % name) == 1, (name, err)
    assert "wrong answer to the challenge" in "".join(driver.problems)
    assert "no answer to the challenge within 1s" in "".join(driver.problems)


def test_an_uncaught_exception_on_one_rank_stops_the_job_within_seconds(tmp_path):
    # Not overlap.run: a script under overlaprun. Rank 1 dies of an uncaught exception while
    # rank 0 waits for it in a barrier. The exit-time shutdown is collective and would wait for
    # rank 0 until OVERLAP_COLLECTIVE_TIMEOUT_S; the exception aborts rank 1's runtime instead, so
    # rank 0's wait fails naming rank 1, and the job ends in seconds.
    script = tmp_path / "dies.py"
    script.write_text(textwrap.dedent("""
        import overlap.torch as hvd
        hvd.init()
        if hvd.rank() == 1:
            raise ValueError("rank one cannot go on")
        hvd.barrier()
        """))
    start = time.monotonic()
    out = subprocess.run([os.environ["OVERLAP_LAUNCHER"], "-np", "2", sys.executable,
                          str(script)], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "ValueError: rank one cannot go on" in text
    assert ("rank 1: the program stopped on an uncaught ValueError: rank one cannot go on; this "
            "rank left the job without waiting for the others") in text
    assert "rank 1 on host" in text  # overlaprun names the rank that failed first
    assert elapsed < 60, text


@pytest.mark.parametrize("wait", ["barrier", "allreduce_with_a_process_set", "planned_allreduce"])
def test_a_rank_that_calls_sys_exit_stops_the_job_within_seconds(tmp_path, wait):
    # sys.exit is no exception to hook: rank 1's exit-time Shutdown runs, collective. It tells
    # the others that rank 1 will submit nothing more, so ranks 0 and 2 fail naming rank 1
    # (as under Horovod) instead of both waiting out OVERLAP_COLLECTIVE_TIMEOUT_S. With a
    # process set {0, 1} registered, rank 1 shuts the set down first, which must not keep it
    # waiting there for rank 0, itself stuck in the global allreduce. On the frozen plan rank 0
    # starts its collective unnegotiated: it learns from rank 1's launch count that it never will.
    script = tmp_path / "exits.py"
    script.write_text(textwrap.dedent("""
        import sys
        import time
        import torch
        import overlap.torch as hvd
        hvd.init()
        wait = sys.argv[1]
        pair = hvd.add_process_set([0, 1]) if wait == "allreduce_with_a_process_set" else None
        if wait == "planned_allreduce":  # a repeated step: the frozen plan runs it, unnegotiated
            for _ in range(30):
                hvd.allreduce(torch.ones(4), name="step")
        if hvd.rank() == 1:
            time.sleep(1)  # let the others reach their wait: a late rank is named apart
            sys.exit(3)
        try:
            if wait == "barrier":
                hvd.barrier()
            else:
                hvd.allreduce(torch.ones(4), name="step" if wait == "planned_allreduce" else "x")
        except hvd.HorovodInternalError as e:
            # A file of its own: the ranks' prints and logs interleave on overlaprun's output.
            with open(f"{sys.argv[2]}/rank{hvd.rank()}.txt", "w") as f:
                f.write(str(e))
            raise
        """))
    start = time.monotonic()
    out = subprocess.run([os.environ["OVERLAP_LAUNCHER"], "-np", "3", sys.executable,
                          str(script), wait, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    elapsed = time.monotonic() - start
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    # Ranks 0 and 2 fail naming rank 1, except that one of them may lose the other first, once
    # that one has failed and left (on a loaded machine a rank can even be late to its wait):
    # either way it ended, and at least one names the cause.
    failures = [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 2)
                if (tmp_path / f"rank{r}.txt").exists()]
    named = [f for f in failures if "but not by ranks [1 (" in f and "have called Shutdown" in f]
    assert named, text
    assert all(f in named or "lost the control connection to rank" in f for f in failures), text
    assert elapsed < 60, text


def test_the_horovod_alias_runs_a_horovod_script_unchanged(tmp_path):
    # A script as written for Horovod: `import horovod`, `horovod.torch` and `horovod.run`, with
    # the alias package (python -m overlap.horovod_alias DIR) first on PYTHONPATH.
    alias = subprocess.run([sys.executable, "-m", "overlap.horovod_alias", str(tmp_path / "a")],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert alias == str(tmp_path / "a")
    script = tmp_path / "horovod_script.py"
    script.write_text(textwrap.dedent("""
        import horovod
        import horovod.torch as hvd
        import horovod.torch.elastic
        import overlap.torch
        import overlap.torch.elastic
        import torch

        assert hvd is overlap.torch and horovod.torch.elastic is overlap.torch.elastic
        from horovod.common.elastic import ObjectState, run_fn
        from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
        import overlap.common, overlap.elastic
        assert ObjectState is overlap.elastic.ObjectState and run_fn is overlap.elastic.run_fn
        assert HorovodInternalError is overlap.common.HorovodInternalError
        assert overlap.torch.__spec__.name == "overlap.torch"  # the module keeps its own spec
        try:
            import horovod.spark
        except ModuleNotFoundError as e:
            assert "overlap's Horovod alias has no overlap.spark" in str(e), e
        else:
            raise AssertionError("horovod.spark imported")

        def train(n):
            hvd.init()
            return float(hvd.allreduce(torch.tensor([float(n + hvd.rank())]), name="v"))

        if __name__ == "__main__":
            print("RESULTS", horovod.run(train, args=(10,), np=2))
        """))
    env = dict(os.environ)
    env["PYTHONPATH"] = alias + os.pathsep + env["PYTHONPATH"]
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "RESULTS [10.5, 10.5]" in out.stdout  # the average of 10 and 11


def test_init_again_after_a_failed_init_is_an_error_not_an_abort(tmp_path):
    # A failed Init that started MPI finalises it, and MPI cannot start twice in a process: the
    # second init must say so (Horovod's test files call hvd.init() in every test). Before, Open
    # MPI aborted the process inside MPI_Query_thread, and pytest's captured output was lost.
    script = tmp_path / "reinit.py"
    # Each rank writes to a file of its own: two ranks' prints share one stdout and may interleave.
    script.write_text(textwrap.dedent("""
        import os
        import sys
        import overlap.torch as hvd
        rank = os.environ["OMPI_COMM_WORLD_RANK"]
        with open(os.path.join(sys.argv[1], "rank%s.txt" % rank), "w") as log:
            os.environ["OVERLAP_STALL_TIMEOUT_S"] = "5"  # below the warning's 60 s: refused
            try:
                hvd.init()
            except ValueError as e:
                print("FIRST", e, file=log)
            del os.environ["OVERLAP_STALL_TIMEOUT_S"]
            try:
                hvd.init()
            except Exception as e:
                print("SECOND", type(e).__name__, e, file=log)
        """))
    out = subprocess.run([os.environ["OVERLAP_LAUNCHER"], "-np", "2", sys.executable,
                          str(script), str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    text = out.stdout + out.stderr
    assert "MPI_FINALIZE was invoked" not in text
    for rank in (0, 1):
        log = (tmp_path / ("rank%d.txt" % rank)).read_text()
        assert log.startswith("FIRST rank "), log + text
        assert "OVERLAP_STALL_TIMEOUT_S=5 is below OVERLAP_STALL_WARNING_S=60" in log, log + text
        assert ("SECOND HorovodInternalError Init: MPI was finalised earlier in this process (by "
                "Shutdown, or by an Init that failed after starting MPI) and MPI cannot start "
                "twice in one process; run a new process") in log, log + text
