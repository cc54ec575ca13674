"""overlaprun's elastic driver: runs a job that survives the loss and arrival of hosts.

overlaprun parses and validates horovodrun's elastic flags (--min-np, --max-np,
--host-discovery-script, --slots-per-host, --reset-limit, --blacklist-cooldown-range,
--elastic-timeout) and then runs `python -m overlap.elastic_driver` (launcher/elastic_launch.h).

MPI cannot shrink or grow a running job here (Open MPI without ULFM), so an elastic job runs in
generations, as torchrun restarts its workers: each generation is an ordinary overlaprun job on
the hosts available when it starts. What survives from one generation to the next is the last
`state.commit()`: every host keeps its copy in OVERLAP_ELASTIC_STATE_DIR (overlap/elastic.py), and
the next generation resumes from the newest copy any of its hosts holds. A generation ends:
 - with success: the job is done;
 - because hosts changed: the discovery script listed a new host (and there is room under
   --max-np) or stopped listing one in use; rank 0 learns it from this driver at the next
   commit, every rank keeps its state and exits, and the next generation starts on the new set;
 - with a fault: a rank killed, a host lost. overlaprun's own failure analysis names the host to
   blame (launcher/failure_log.h); it is blacklisted (for the cooldown range, else for good) and
   the next generation starts without it.
A program's own error (a rank exiting with a status that is not a lost peer's) ends the job: only
faults restart it. Every wait is bounded: discovery by _DISCOVERY_TIMEOUT_S per call, waiting
for --min-np slots by --elastic-timeout, the number of restarts by --reset-limit.

Rank 0 reaches this driver over TCP, authenticated as overlap.run's driver is (overlap/runner.py):
a per-job key, a fresh nonce per connection, every message signed.
"""

import argparse
import json
import os
import random
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from overlap import runner

# A rank exits with this status when a collective failed under it (a peer lost, a timeout) and
# the elastic driver should restart the job: overlap/elastic.py.
EXIT_RESTART = 75

# overlaprun --host-timeout for every generation, unless given: a lost host noticed in ~8 s.
HOST_TIMEOUT_S = 8
_DISCOVERY_TIMEOUT_S = 10.0
# Generations in a row that may fail before their first commit: a job that cannot get going
# (a crash at start, ranks that never start) ends instead of restarting for ever.
_MOST_BARREN = 5
_POLL_S = 1.0


def _say(message):
    sys.stderr.write("overlaprun: elastic: %s\n" % message)
    sys.stderr.flush()


class DiscoveryError(RuntimeError):
    """The discovery script failed or printed something that is not a host list. `fatal`: it
    cannot be run at all, or printed garbage; waiting would not help."""

    def __init__(self, message, fatal=False):
        super().__init__(message)
        self.fatal = fatal


class Discovery:
    """The hosts available now, as an ordered {host: slots}: the discovery script's output, or
    the fixed -H/--hostfile list."""

    def __init__(self, script, fixed_hosts, slots_per_host):
        self.script = script
        self._fixed = fixed_hosts
        self._slots = slots_per_host

    def describe(self):
        if self.script:
            return "hosts from %r (every %gs; slots per host %d where it names none)" % (
                self.script, _POLL_S, self._slots)
        return "fixed hosts %s" % format_hosts(self._fixed)

    def find(self):
        if not self.script:
            return dict(self._fixed)
        try:
            done = subprocess.run(["/bin/sh", "-c", self.script], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=_DISCOVERY_TIMEOUT_S,
                                  text=True)
        except subprocess.TimeoutExpired:
            raise DiscoveryError("the host discovery script %r did not finish within %gs"
                                 % (self.script, _DISCOVERY_TIMEOUT_S))
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["(no output on stderr)"]
            # 126 and 127: the shell could not run it (not executable, not found).
            raise DiscoveryError("the host discovery script %r exited with status %d: %s"
                                 % (self.script, done.returncode, tail[0]),
                                 fatal=done.returncode in (126, 127))
        return parse_hosts(done.stdout, self._slots, "the host discovery script %r" % self.script)


def parse_hosts(text, default_slots, source):
    """{host: slots} from lines "host" or "host:slots"; blank lines are skipped. DiscoveryError
    naming the line for anything else."""
    hosts = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        host, sep, slots = line.partition(":")
        ok = host and all(c.isalnum() or c in ".-_" for c in host)
        if ok and sep:
            ok = slots.isdigit() and int(slots) > 0
        if not ok:
            raise DiscoveryError("%s printed %r on line %d: expected \"host\" or \"host:slots\" "
                                 "(slots a positive integer)" % (source, raw, number), fatal=True)
        hosts[host] = int(slots) if sep else default_slots
    return hosts


def _is_local(host):
    return host in ("localhost", "127.0.0.1", socket.gethostname())


def format_hosts(hosts):
    return ",".join("%s:%d" % (h, s) for h, s in hosts.items()) or "(none)"


class Blacklist:
    """Hosts that failed. Without a cooldown range a host stays out for the rest of the job; with
    (low, high) it returns after low * 2^failures plus up to `low` at random, clamped to the
    range, as Horovod's blacklist does."""

    def __init__(self, cooldown):
        self._cooldown = cooldown
        self._until = {}     # host -> time it may return (inf: never)
        self._failures = {}  # host -> times blacklisted

    def add(self, host, now):
        count = self._failures.get(host, 0) + 1
        self._failures[host] = count
        if self._cooldown is None:
            self._until[host] = float("inf")
        else:
            low, high = self._cooldown
            delay = low * (1 << min(count, 20)) + random.uniform(0, 1) * low
            self._until[host] = now + max(low, min(high, delay))
        return self._until[host] - now

    def blocked(self, host, now):
        return self._until.get(host, 0) > now

    def describe(self, now):
        out = []
        for host, until in sorted(self._until.items()):
            if until > now:
                out.append(host if until == float("inf") else "%s (for %.0fs more)"
                           % (host, until - now))
        return ", ".join(out)


class _Server(runner._Driver):
    """Where rank 0 asks whether hosts changed and says that the ranks are restarting."""

    NAME = "overlaprun: elastic driver"

    def __init__(self, key, addresses):
        self.changed = {}     # generation -> why the hosts changed (str), set by the poller
        self.restarting = {}  # generation -> commit the ranks kept
        self.committed = set()  # generations whose rank 0 asked at a commit: they progressed
        super().__init__(key, None, addresses)

    def _answer(self, conn, nonce):
        message = runner.recv_frame(conn, self._key, nonce, runner.TO_DRIVER)
        if message[0] == "hosts_changed":
            with self._lock:
                reply = self.changed.get(message[1])
                self.committed.add(message[1])
            runner.send_frame(conn, self._key, nonce, runner.TO_RANK, reply)
        elif message[0] == "restarting":
            with self._lock:
                self.restarting[message[1]] = message[2]
            runner.send_frame(conn, self._key, nonce, runner.TO_RANK, ("ack",))


class Driver:
    """One elastic job: its discovery, blacklist and generations (module docstring)."""

    def __init__(self, args):
        self.args = args
        fixed = parse_hosts(args.hosts.replace(",", "\n"), 1, "-H") if args.hosts else None
        self.discovery = Discovery(args.discovery_script, fixed, args.slots_per_host)
        self.blacklist = Blacklist(tuple(args.cooldown) if args.cooldown else None)
        self.max_np = args.max_np if args.max_np > 0 else None
        self.resets = 0
        self.generation = 0
        self.current = {}  # the running generation's hosts
        self.seen_hosts = set()  # every host a generation ran on

    # -- hosts -----------------------------------------------------------------------------------

    def usable(self, discovered, now):
        """The discovered hosts less the blacklisted, those of the running generation first (in
        their order) so that ranks stay where they were."""
        order = [h for h in self.current if h in discovered] + \
            [h for h in discovered if h not in self.current]
        return {h: discovered[h] for h in order if not self.blacklist.blocked(h, now)}

    def assign(self, hosts):
        """The generation's hosts and rank count: every slot, up to --max-np."""
        left = sum(hosts.values()) if self.max_np is None else self.max_np
        chosen = {}
        for h, s in hosts.items():
            if left <= 0:
                break
            chosen[h] = min(s, left)
            left -= chosen[h]
        return chosen, sum(chosen.values())

    def wait_for_hosts(self, first):
        """Hosts for the next generation, once at least --min-np slots are usable. Waits at most
        --elastic-timeout; a script that cannot be run at all, or prints garbage on the first
        call, fails at once."""
        deadline = time.monotonic() + self.args.elastic_timeout
        said = None
        while True:
            now = time.time()
            try:
                discovered = self.discovery.find()
                why = None
            except DiscoveryError as e:
                if first and e.fatal:
                    raise
                discovered, why = {}, str(e)
            hosts = self.usable(discovered, now)
            slots = sum(hosts.values())
            if why is None and slots >= self.args.min_np:
                return hosts
            if why is None:
                blocked = self.blacklist.describe(now)
                why = ("%d usable slot%s (%s%s) but --min-np is %d" % (
                    slots, "" if slots == 1 else "s", format_hosts(hosts),
                    "; blacklisted: %s" % blocked if blocked else "", self.args.min_np))
            if why != said:
                _say("waiting for hosts: %s (at most %gs, --elastic-timeout)"
                     % (why, self.args.elastic_timeout))
                said = why
            if time.monotonic() > deadline:
                raise DiscoveryError("gave up after %gs (--elastic-timeout): %s"
                                     % (self.args.elastic_timeout, why))
            time.sleep(_POLL_S)

    def _watch_hosts(self, server, generation, running, stop):
        """While a generation runs: tells rank 0 (through the server) when hosts changed, once
        two polls in a row agree, so that a discovery output read half-written (or a script's
        one odd answer) restarts nothing."""
        seen = None
        while not stop.wait(_POLL_S):
            try:
                discovered = self.discovery.find()
            except DiscoveryError as e:
                _say("%s; keeping the hosts as they are" % e)
                continue
            now = time.time()
            gone = [h for h in running if h not in discovered]
            usable = self.usable(discovered, now)
            _, count = self.assign(usable)
            why = None
            if gone:
                why = "host%s %s left the discovery output" % (
                    "" if len(gone) == 1 else "s", ", ".join(gone))
            elif count > sum(running.values()):
                more = count - sum(running.values())
                why = "%s can take %d more rank%s" % (
                    ", ".join(h for h in usable if h not in running or usable[h] > running[h]),
                    more, "" if more == 1 else "s")
            if why and why == seen:
                with server._lock:
                    server.changed.setdefault(generation, why)
            seen = why

    # -- generations -----------------------------------------------------------------------------

    def command(self, hosts, count, report):
        extra = []
        if not any(a.split("=")[0] == "--host-timeout" for a in self.args.generation_args):
            # Notice a host cut off from the network within seconds (Open MPI's own keepalive
            # takes 8 minutes; the runtime's control plane half the collective timeout).
            extra = ["--host-timeout", str(HOST_TIMEOUT_S)]
        return ([self.args.overlaprun] + self.args.generation_args + extra +
                ["-np", str(count), "-H", format_hosts(hosts), "--failure-report", report, "--"] +
                self.args.program)

    def environment(self, server, key, state_dir, generation):
        env = dict(os.environ)
        env.update(OVERLAP_ELASTIC_DRIVER=",".join(server.endpoints),
                   OVERLAP_ELASTIC_KEY=key.hex(),
                   OVERLAP_ELASTIC_GENERATION=str(generation),
                   OVERLAP_ELASTIC_STATE_DIR=state_dir)
        return env

    def dry_run(self):
        hosts, count = self.assign(self.wait_for_hosts(first=True))
        self.describe()
        command = self.command(hosts, count, "REPORT")
        command.remove("--failure-report")
        command.remove("REPORT")
        print("first generation: %s" % " ".join(shlex.quote(a) for a in command))
        sys.stdout.flush()
        return subprocess.call([command[0], "--dry-run"] + command[1:])

    def describe(self):
        a = self.args
        print("elastic: --min-np %d, --max-np %s, %s, --reset-limit %s, blacklist cooldown %s, "
              "--elastic-timeout %gs" % (
                  a.min_np, a.max_np or "(every slot)", self.discovery.describe(),
                  a.reset_limit if a.reset_limit >= 0 else "(none)",
                  "%d-%ds" % tuple(a.cooldown) if a.cooldown else "(for good)",
                  a.elastic_timeout))

    def run(self):
        key = os.urandom(32)
        state_dir = os.environ.get("OVERLAP_ELASTIC_STATE_DIR")
        own_state_dir = not state_dir
        if own_state_dir:
            state_dir = os.path.join(
                "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir(),
                "overlap-elastic-%s" % os.urandom(6).hex())
        hosts = self.wait_for_hosts(first=True)
        addresses = runner._driver_addresses(",".join(hosts), None) if any(
            not _is_local(h) for h in hosts) else ["127.0.0.1"]
        server = _Server(key, addresses)
        report = tempfile.NamedTemporaryFile(prefix="overlap-elastic-", suffix=".json",
                                             delete=False).name
        why = "the job starts"
        barren = 0  # generations in a row that failed before their first commit
        try:
            while True:
                chosen, count = self.assign(hosts)
                self.current = chosen
                self.seen_hosts.update(chosen)
                _say("generation %d on %s (%d rank%s): %s" % (
                    self.generation, format_hosts(chosen), count, "" if count == 1 else "s", why))
                if os.path.exists(report):
                    os.unlink(report)
                stop = threading.Event()
                watcher = threading.Thread(target=self._watch_hosts, daemon=True,
                                           args=(server, self.generation, chosen, stop))
                watcher.start()
                started = time.monotonic()
                status = subprocess.call(self.command(chosen, count, report),
                                         env=self.environment(server, key, state_dir,
                                                              self.generation))
                stop.set()
                watcher.join()
                outcome = self._read_report(report)
                with server._lock:
                    restarting = self.generation in server.restarting
                    changed = server.changed.get(self.generation)
                if status == 0 and not restarting:
                    _say("the job finished in generation %d after %d restart%s" % (
                        self.generation, self.resets, "" if self.resets == 1 else "s"))
                    return 0
                if outcome.get("interrupted"):
                    return status
                if restarting:
                    why = "restarted at commit %s because %s" % (
                        server.restarting[self.generation], changed or "hosts changed")
                else:
                    fault = self._fault(outcome, status, time.monotonic() - started)
                    if fault is None:
                        return status
                    why = fault
                    with server._lock:
                        progressed = self.generation in server.committed
                    barren = 0 if progressed else barren + 1
                    if barren >= _MOST_BARREN:
                        _say("giving up: %d generations in a row failed before their first "
                             "commit (the last: %s)" % (barren, why))
                        return status or 1
                self.resets += 1
                if 0 <= self.args.reset_limit < self.resets:
                    _say("giving up: %d restarts exceed --reset-limit %d (the last: %s)"
                         % (self.resets, self.args.reset_limit, why))
                    return status or 1
                self.generation += 1
                try:
                    hosts = self.wait_for_hosts(first=False)
                except DiscoveryError as e:
                    _say("giving up: %s" % e)
                    return status or 1
        finally:
            server.close()
            if os.path.exists(report):
                os.unlink(report)
            # The commits are signed with this run's key, which ends here: no later job can use
            # them. The ranks remove their host's copy when the job succeeds; after a failure,
            # this host's folder goes here and the other hosts' are named.
            if own_state_dir:
                shutil.rmtree(state_dir, ignore_errors=True)
                if any(not _is_local(h) for h in self.seen_hosts):
                    _say("the other hosts may keep commits in %s (memory, when under /dev/shm) "
                         "after a job that did not succeed: remove them with rm -rf" % state_dir)

    @staticmethod
    def _read_report(path):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}  # refused before launch (a host did not answer): overlaprun said why

    def _blacklisted(self, host):
        """Blacklists `host` and says for how long: "blacklisted for 12s" or "blacklisted"."""
        away = self.blacklist.add(host, time.time())
        return "blacklisted" + ("" if away == float("inf") else " for %.0fs" % away)

    def _fault(self, outcome, status, elapsed):
        """Why the next generation starts after a failed one, blacklisting the host to blame; None
        when the failure is the program's own and ends the job."""
        host = outcome.get("blamed_host") or ""
        how, code, rank = (outcome.get("cause_how"), outcome.get("cause_code"),
                           outcome.get("cause_rank"))
        if not outcome:
            return "generation %d did not start (status %d; overlaprun said why above)" % (
                self.generation, status)
        if outcome.get("refused"):
            if host:
                return "host %s did not answer before the launch; %s" % (
                    host, self._blacklisted(host))
            return "generation %d was refused before the launch (status %d; overlaprun said " \
                   "why above)" % (self.generation, status)
        if outcome.get("lost_host") or how == "signaled" or how == "exec_failed":
            what = ("lost host %s" % host if outcome.get("lost_host") else
                    "rank %s on host %s %s" % (rank, host, "was killed by signal %s" % code
                                               if how == "signaled" else "could not start"))
            if host:
                return "%s after %.1fs; host %s %s" % (what, elapsed, host,
                                                      self._blacklisted(host))
            return "%s after %.1fs" % (what, elapsed)
        if how == "exited" and code == EXIT_RESTART:
            return "a collective failed on rank %s (host %s) with no rank lost" % (rank, host)
        if outcome.get("start_timeout"):
            return "ranks did not start in time (status %d)" % status
        _say("rank %s on host %s failed with status %s: an elastic job restarts after faults "
             "(a killed rank, a lost host), not after the program's own errors; stopping"
             % (rank, host, code))
        return None


def _parse(argv):
    parser = argparse.ArgumentParser(prog="overlap.elastic_driver",
                                     description="run by overlaprun's elastic mode")
    parser.add_argument("--overlaprun", required=True)
    parser.add_argument("--min-np", type=int, required=True)
    parser.add_argument("--max-np", type=int, default=0)
    parser.add_argument("--discovery-script")
    parser.add_argument("--hosts")
    parser.add_argument("--slots-per-host", type=int, default=1)
    parser.add_argument("--reset-limit", type=int, default=-1)
    parser.add_argument("--cooldown", type=int, nargs=2)
    parser.add_argument("--elastic-timeout", type=float, default=600)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--generation-args", type=int, required=True)
    at = argv.index("--generation-args")
    count = int(argv[at + 1])
    generation_args = argv[at + 2:at + 2 + count]
    rest = argv[at + 2 + count:]
    head = argv[:at + 2]
    args = parser.parse_args(head)
    if rest[:1] != ["--"]:
        parser.error("expected -- before the program")
    args.generation_args = generation_args
    args.program = rest[1:]
    return args


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    driver = Driver(args)
    try:
        if args.dry_run:
            return driver.dry_run()
        return driver.run()
    except DiscoveryError as e:
        _say(str(e))
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
