"""overlaprun's elastic mode on this machine: real overlaprun, mpirun and overlap.torch ranks
running tests/elastic/elastic_train.py (hvd.elastic.run, TorchState, ElasticSampler). One host,
so a lost host is a killed rank whose host comes back after its blacklist cooldown, and an
arriving host is a discovery script that lists more slots; tests/cluster/elastic_cluster_test.sh
loses and regains real (namespace) hosts. tests/runner/run_test.sh sets OVERLAP_LAUNCHER,
OVERLAP_LIBRARY and PYTHONPATH."""

import json
import os
import subprocess
import sys
import time

import pytest

from overlap import elastic, elastic_driver

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "elastic_train.py")
EPOCHS = 2


def overlaprun(args, tmp_path, timeout=240, own_state_dir=False, **env):
    log = tmp_path / "events.jsonl"
    environment = dict(os.environ, ELASTIC_LOG=str(log), ELASTIC_EPOCHS=str(EPOCHS),
                       ELASTIC_SAMPLES="256", OVERLAP_ELASTIC_PYTHON=sys.executable,
                       OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                       OVERLAP_ELASTIC_STATE_DIR=str(tmp_path / "state"), **env)
    if own_state_dir:  # the driver's default, under /dev/shm
        del environment["OVERLAP_ELASTIC_STATE_DIR"]
    started = time.time()
    done = subprocess.run([os.environ["OVERLAP_LAUNCHER"]] + args, env=environment,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    events = []
    if log.exists():
        events = [json.loads(line) for line in log.read_text().splitlines()]
    return done.returncode, done.stdout, events, started


def by(events, event, **match):
    return [e for e in events if e["event"] == event and
            all(e.get(k) == v for k, v in match.items())]


def check_resumed_exactly(events, output, generation):
    """Generation `generation` started from the last commit of the one before, bit for bit, on
    every rank, and the job trained to the end."""
    before = by(events, "commit", gen=generation - 1)
    assert before, output
    last = max(before, key=lambda e: e["seq"])
    resumed = by(events, "resume", gen=generation)
    assert resumed, output
    for r in resumed:
        assert r["seq"] == last["seq"], output
        assert r["digest"] == last["digest"], output
    done = by(events, "done")
    assert len(done) == 1 and done[0]["epoch"] == EPOCHS, output
    return last, resumed


# -- the driver's own pieces ----------------------------------------------------------------------

def test_discovery_output_is_parsed_and_garbage_is_named():
    assert elastic_driver.parse_hosts("h1:2\n\nh2\n", 4, "s") == {"h1": 2, "h2": 4}
    for bad in ("h1:0", "h1:x", "bad host", "h1:2:3"):
        with pytest.raises(elastic_driver.DiscoveryError, match="printed '%s' on line 1" % bad):
            elastic_driver.parse_hosts(bad, 1, "s")


def test_blacklist_cooldown_grows_within_its_range_and_ends():
    forever = elastic_driver.Blacklist(None)
    assert forever.add("h1", 100.0) == float("inf")
    assert forever.blocked("h1", 1e12) and not forever.blocked("h2", 100.0)
    cooling = elastic_driver.Blacklist((10, 25))
    first = cooling.add("h1", 0.0)
    assert 10 <= first <= 25 and cooling.blocked("h1", first - 0.1)
    assert not cooling.blocked("h1", first + 0.1)
    assert cooling.add("h1", 100.0) == 25  # 10 * 4 + up to 10, clamped to the range


def test_the_drivers_socket_admits_only_the_jobs_key():
    import socket
    from overlap import runner
    key = os.urandom(32)
    server = elastic_driver._Server(key, ["127.0.0.1"])
    try:
        address, port = server.endpoints[0].rsplit(":", 1)
        # A stranger: the challenge, a wrong answer, a closed connection and one logged line.
        with socket.create_connection((address, int(port)), timeout=5) as s:
            s.settimeout(5)
            runner.answer_challenge(s, os.urandom(32))
            assert s.recv(1) == b""
        deadline = time.time() + 5
        while not server.problems and time.time() < deadline:
            time.sleep(0.05)
        assert "a wrong answer to the challenge" in server.problems[0]
        # Rank 0 with the job's key: asks whether hosts changed, then says it restarts.
        server.changed[3] = "h5 can take 1 more rank"
        ask = elastic._DriverLink.__new__(elastic._DriverLink)
        ask.endpoints, ask.key = [(address, int(port))], key
        assert ask.ask(("hosts_changed", 2)) is None
        assert ask.ask(("hosts_changed", 3)) == "h5 can take 1 more rank"
        assert ask.ask(("restarting", 3, 17)) == ("ack",) and server.restarting == {3: 17}
    finally:
        server.close()


def test_a_commit_file_not_signed_with_the_jobs_key_is_never_unpickled(tmp_path, capfd):
    def link(key):
        link = elastic._DriverLink.__new__(elastic._DriverLink)
        link.key, link.generation, link.state_dir = key, 0, str(tmp_path / "state")
        return link
    ours = link(os.urandom(32))
    assert ours.read_commit() == (0, None)
    ours.write_commit(7, {"objects": {"epoch": 3}})
    assert ours.read_commit() == (7, {"objects": {"epoch": 3}})
    assert oct(os.stat(ours.state_dir).st_mode & 0o777) == "0o700"
    # Another job's file (or a planted one) in its place: refused before pickle sees it.
    link(os.urandom(32)).write_commit(9, {"objects": {"evil": 1}})
    assert ours.read_commit() == (0, None)
    assert "is not this job's commit (its signature does not check)" in capfd.readouterr().err


# -- refusals -------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--min-np", "4", "--max-np", "2", "--host-discovery-script", "true"],
     "--min-np 4 is above --max-np 2"),
    (["--min-np", "2", "--host-discovery-script", "/nonexistent/hosts.sh"],
     "the host discovery script '/nonexistent/hosts.sh' exited with status 127"),
    (["--min-np", "2", "--host-discovery-script", "echo 'h1 h2'"],
     "printed 'h1 h2' on line 1: expected \"host\" or \"host:slots\""),
    (["--min-np", "3", "--elastic-timeout", "2", "--host-discovery-script", "echo localhost:2"],
     "gave up after 2s (--elastic-timeout): 2 usable slots (localhost:2) but --min-np is 3"),
])
def test_bad_elastic_settings_are_refused_within_seconds(args, message, tmp_path):
    started = time.time()
    rc, output, _, _ = overlaprun(args + [sys.executable, TRAIN], tmp_path, timeout=60)
    assert rc == 2, output
    assert message in output
    assert time.time() - started < 20


def test_dry_run_prints_the_settings_and_the_first_generation(tmp_path):
    rc, output, events, _ = overlaprun(
        ["--dry-run", "--min-np", "1", "--max-np", "3", "--host-discovery-script",
         "printf 'localhost:2\\n'", "-x", "A=1", sys.executable, TRAIN], tmp_path)
    assert rc == 0, output
    assert "elastic: --min-np 1, --max-np 3, hosts from" in output
    assert "-x A=1 --host-timeout 8 -np 2 -H localhost:2 -- %s %s" % (sys.executable, TRAIN) in output
    assert "mpirun" in output and not events  # nothing ran


# -- faults and arrivals --------------------------------------------------------------------------

def test_a_killed_rank_restarts_the_job_from_the_last_commit_bit_for_bit(tmp_path):
    # Rank 1 kills itself at its 5th step of generation 0; the host is blacklisted for 1-2 s,
    # then generation 1 resumes from commit 2 (taken after step 4) on both ranks.
    rc, output, events, _ = overlaprun(
        ["--min-np", "2", "-H", "localhost:2", "--blacklist-cooldown-range", "1", "2",
         sys.executable, TRAIN], tmp_path, ELASTIC_KILL="0:5:1")
    assert rc == 0, output
    assert "rank 1 on host localhost was killed by signal 9" in output
    assert "host localhost blacklisted for 2s" in output
    assert "waiting for hosts: 0 usable slots" in output
    last, resumed = check_resumed_exactly(events, output, 1)
    assert last["seq"] == 2 and len(resumed) == 2
    # The sampler carried over: the job did every epoch's batches once, not again from 0.
    assert by(events, "done")[0]["steps"] == EPOCHS * 256 // 32


def test_a_host_that_joins_enters_at_the_next_commit(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:1\n")
    log = tmp_path / "events.jsonl"

    # Once rank 0 of generation 0 has committed, the discovery script lists a second slot. Steps
    # of 0.25 s (32 of them) leave time for the two discovery polls a change needs.
    script = "grep -q '\"commit\"' %s 2>/dev/null && echo localhost:2 || cat %s" % (log, hosts)
    rc, output, events, _ = overlaprun(
        ["--min-np", "1", "--max-np", "2", "--host-discovery-script", script,
         sys.executable, TRAIN], tmp_path, ELASTIC_STEP_S="0.25")
    assert rc == 0, output
    assert "localhost can take 1 more rank" in output
    assert "generation 1 on localhost:2 (2 ranks)" in output
    last, resumed = check_resumed_exactly(events, output, 1)
    assert {r["size"] for r in resumed} == {2} and len(resumed) == 2
    assert by(events, "commit", gen=0)[0]["size"] == 1


def test_the_programs_own_error_ends_the_job(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import overlap.torch as hvd\nhvd.init()\n"
                      "raise SystemExit(3 if hvd.rank() == 1 else 0)\n")
    rc, output, _, _ = overlaprun(["--min-np", "2", "-H", "localhost:2",
                                   sys.executable, str(script)], tmp_path, timeout=120)
    assert rc == 3, output
    assert "not after the program's own errors; stopping" in output
    assert "generation 1" not in output


def test_the_reset_limit_ends_a_job_that_keeps_failing(tmp_path):
    # Killed after its first commit (step 2), with the commits in the driver's own folder under
    # /dev/shm: the driver removes it when it gives up (the commits are signed with its key).
    def folders():
        return {n for n in os.listdir("/dev/shm") if n.startswith("overlap-elastic-")} \
            if os.path.isdir("/dev/shm") else set()
    before = folders()
    rc, output, events, _ = overlaprun(
        ["--min-np", "2", "-H", "localhost:2", "--reset-limit", "0",
         "--blacklist-cooldown-range", "1", "1", sys.executable, TRAIN], tmp_path,
        own_state_dir=True, ELASTIC_KILL="0:3:0")
    assert rc == 137, output
    assert "giving up: 1 restarts exceed --reset-limit 0" in output
    assert by(events, "committed"), output
    assert folders() == before


def test_a_keras_job_resumes_from_the_last_commit_bit_for_bit(tmp_path):
    # hvd.elastic.KerasState and the commit/batch/epoch callbacks around model.fit: rank 1 kills
    # itself after its 5th batch; generation 1 resumes from the newest commit, the model's and
    # the optimizer's variables and the state's batch as they were.
    check = subprocess.run([sys.executable, "-c", "import tensorflow, keras"],
                           stderr=subprocess.PIPE, text=True)
    if check.returncode != 0:
        pytest.skip("no TensorFlow here (tools/setup.sh installs tensorflow-cpu): %s"
                    % check.stderr.strip().splitlines()[-1])
    # The op library, built once before the ranks start, in the cache the TF suites share.
    cache = os.environ.get("OVERLAP_TF_OPS_CACHE") or "/tmp/overlap-tf-ops-%d" % os.getuid()
    subprocess.run([sys.executable, "-c", "from overlap.tensorflow import op_library; "
                    "op_library.library_path()"], check=True, timeout=300,
                   env=dict(os.environ, OVERLAP_TF_OPS_CACHE=cache))
    rc, output, events, _ = overlaprun(
        ["--min-np", "2", "-H", "localhost:2", "--blacklist-cooldown-range", "1", "1",
         "-x", "TF_CPP_MIN_LOG_LEVEL=2", sys.executable, os.path.join(HERE, "elastic_keras.py")],
        tmp_path, timeout=400, ELASTIC_KILL="0:5:1", OVERLAP_TF_OPS_CACHE=cache)
    assert rc == 0, output
    resumed = by(events, "resume", gen=1)
    # Commit 4 returned on both ranks. Rank 0 may also have written commit 5 (the state after
    # batch 5, which both ranks had finished) before its collective found rank 1 gone: then that
    # one, a consistent state too, is the newest.
    seqs = {r["seq"] for r in resumed}
    assert len(resumed) == 2 and len(seqs) == 1 and seqs <= {4, 5}, output
    committed = [e for e in by(events, "commit", gen=0) if e["seq"] in seqs]
    assert committed and all(r["digest"] == committed[0]["digest"] for r in resumed), output
    assert by(events, "done")[0]["epoch"] == 2, output


def test_a_job_that_dies_before_its_first_commit_every_time_gives_up(tmp_path):
    # Rank 1 is killed at start in every generation: a fault, so each is restarted, but five in a
    # row without a commit end the job (no --reset-limit needed).
    script = tmp_path / "dies.py"
    script.write_text("import os, overlap.torch as hvd\nhvd.init()\n"
                      "if hvd.rank() == 1:\n    os.kill(os.getpid(), 9)\nhvd.barrier()\n")
    rc, output, _, _ = overlaprun(["--min-np", "2", "-H", "localhost:2",
                                   "--blacklist-cooldown-range", "1", "1",
                                   sys.executable, str(script)], tmp_path, timeout=200)
    assert rc == 137, output
    assert "giving up: 5 generations in a row failed before their first commit" in output
    assert "generation 4 on localhost:2" in output and "generation 5" not in output
