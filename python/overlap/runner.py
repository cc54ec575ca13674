"""overlap.run: Horovod's `horovod.run`. Runs a Python function on N ranks started by overlaprun
and returns what each rank's call returned, as a list indexed by rank.

    import overlap as horovod                 # was: import horovod
    results = horovod.run(train, args=(args,), np=4)

How it works, as in Horovod: this process (the driver) listens on a TCP port and starts
`overlaprun -np N ... python -m overlap._run_task`. Each rank connects back, fetches the function
and its arguments, calls it, and sends back its return value or its traceback.

Only the job's own processes can talk to the driver, as with the runtime's control plane
(runtime/control/control_handshake.h): the driver makes a random key for the run, which reaches the ranks
through overlaprun's environment, and listens only on the addresses the job's hosts reach it by
(loopback for a job on this machine). On each connection it sends a fresh nonce; the rank must
answer HMAC-SHA256(key, context || nonce) within _HANDSHAKE_TIMEOUT_S, or it is refused, logged
once with its address, and read no further. Every message after that is signed over the nonce
too, so a recorded conversation replayed on another connection is refused, and nothing is
unpickled before its signature checks. Each connection is served on a thread of its own: a
stranger that says nothing holds up no rank.

The function travels with cloudpickle when it is installed (lambdas, closures, notebooks), else
with pickle: a function of the main script is then found by running that script again in each
rank under the name `__mp_main__`, as multiprocessing's spawn does, so the script must keep its
entry point under `if __name__ == "__main__":` (Horovod's examples do).

The launcher is $OVERLAP_LAUNCHER when set, else the one installed with this package, else
`overlaprun` on PATH. overlaprun's own options (timeouts, --planner, ...) can be set through their
OVERLAP_* environment variables, which reach every rank.
"""

import hashlib
import hmac
import os
import pickle
import selectors
import shlex
import socket
import struct
import subprocess
import sys
import threading

try:
    import cloudpickle as _cloudpickle
except ImportError:  # pickle, with the main script run again in each rank
    _cloudpickle = None

__all__ = ["run"]

# The environment that tells a rank where the driver is (see overlap/_run_task.py).
DRIVER_ENV = "OVERLAP_RUN_DRIVER"
KEY_ENV = "OVERLAP_RUN_KEY"
# How long a rank may take to reach the driver, and one read or write may take.
_IO_TIMEOUT_S = 60.0
# How long a connection may take to answer the driver's challenge (a rank answers at once).
_HANDSHAKE_TIMEOUT_S = 10.0
# Connections served at once; more are refused until one ends.
_MAX_CONNECTIONS = 64
_MAX_FRAME = 1 << 31
_MAGIC = b"OVLD"
# Bound into every MAC, so that no MAC of one kind is a valid MAC of another.
_HANDSHAKE_CONTEXT = b"overlap.run handshake v1"
TO_DRIVER = b"overlap.run rank to driver v1"
TO_RANK = b"overlap.run driver to rank v1"


class RunError(RuntimeError):
    """The job of overlap.run failed: a rank raised, died or could not reach the driver."""


# -- the handshake and framing: length, HMAC-SHA256 of (direction, nonce, payload), payload ----

def _mac(key, *parts):
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def answer_challenge(sock, key):
    """The rank's side of the handshake: reads the driver's nonce, proves it knows the key, and
    returns the nonce, which every message on this connection is signed over."""
    challenge = _recv_exact(sock, len(_MAGIC) + 32)
    if challenge[:len(_MAGIC)] != _MAGIC:
        raise ConnectionError("the peer is not an overlap.run driver")
    nonce = challenge[len(_MAGIC):]
    sock.sendall(_mac(key, _HANDSHAKE_CONTEXT, nonce))
    return nonce


def challenge(sock, key):
    """The listening side of the handshake: sends a fresh nonce and checks the answer within the
    socket's timeout. Returns the nonce; raises ConnectionError saying why the peer is refused.
    Any socket overlap listens on in Python uses this pair (answer_challenge on the other end)."""
    nonce = os.urandom(32)
    try:
        sock.sendall(_MAGIC + nonce)
        proof = _recv_exact(sock, 32)
    except OSError as e:
        raise ConnectionError("no answer to the challenge within %gs (%s)"
                              % (sock.gettimeout(), str(e) or type(e).__name__))
    if not hmac.compare_digest(proof, _mac(key, _HANDSHAKE_CONTEXT, nonce)):
        raise ConnectionError("a wrong answer to the challenge (not this job's key, or a replay)")
    return nonce


def parse_endpoints(text):
    """[(address, port)] from a driver's "address:port,address:port" (DRIVER_ENV and the
    elastic driver's OVERLAP_ELASTIC_DRIVER)."""
    endpoints = []
    for endpoint in text.split(","):
        address, _, port = endpoint.rpartition(":")
        endpoints.append((address, int(port)))
    return endpoints


def ask_driver(endpoints, key, message, connect_timeout_s, io_timeout_s):
    """A rank's one exchange with a driver: `message` sent, the answer returned, through the
    first of its addresses that answers. OSError naming every address's error when none does."""
    errors = []
    for address, port in endpoints:
        try:
            with socket.create_connection((address, port), timeout=connect_timeout_s) as sock:
                sock.settimeout(io_timeout_s)
                nonce = answer_challenge(sock, key)
                send_frame(sock, key, nonce, TO_DRIVER, message)
                return recv_frame(sock, key, nonce, TO_RANK)
        except OSError as e:  # ConnectionError, timeouts and refusals alike
            errors.append("%s:%d: %s" % (address, port, e))
    raise OSError("; ".join(errors))


def send_frame(sock, key, nonce, direction, obj):
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    digest = _mac(key, direction, nonce, payload)
    sock.sendall(struct.pack("!Q", len(payload)) + digest + payload)


def _recv_exact(sock, n):
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the peer closed the connection mid-message")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock, key, nonce, direction):
    (length,) = struct.unpack("!Q", _recv_exact(sock, 8))
    if length > _MAX_FRAME:
        raise ConnectionError("a message of %d bytes: not from this job" % length)
    digest = _recv_exact(sock, 32)
    payload = _recv_exact(sock, length)
    if not hmac.compare_digest(digest, _mac(key, direction, nonce, payload)):
        raise ConnectionError("a message whose signature does not match this job's key")
    return pickle.loads(payload)


# -- the driver -----------------------------------------------------------------------------------

def _launcher():
    path = os.environ.get("OVERLAP_LAUNCHER")
    if path:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise RunError("overlap.run: OVERLAP_LAUNCHER=%s is not an executable file" % path)
        return path
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "overlaprun")
    if os.path.exists(bundled):
        return bundled
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory, "overlaprun")
        if os.access(candidate, os.X_OK):
            return candidate
    raise RunError("overlap.run: no overlaprun launcher: set OVERLAP_LAUNCHER to its path, put "
                   "it on PATH, or install the package with `pip install .`")


def _serialize_call(func, args, kwargs):
    """(serializer name, bytes) of the call; a clear error when the function cannot travel."""
    call = (func, tuple(args), dict(kwargs))
    if _cloudpickle is not None:
        try:
            return "cloudpickle", _cloudpickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - any pickling failure gets the same message
            raise ValueError("overlap.run: cannot pickle %r with its arguments: %s" % (func, e))
    try:
        return "pickle", pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001
        raise ValueError(
            "overlap.run: cannot pickle %r with its arguments (%s): without cloudpickle, the "
            "function must be defined at the top level of a module or of the main script; "
            "`pip install cloudpickle` to run lambdas, closures and functions defined in a "
            "notebook" % (func, e))


def _main_module():
    """What a rank needs to import the main script's functions under pickle (see the module
    docstring): multiprocessing's own description of the main module."""
    import multiprocessing.spawn
    data = multiprocessing.spawn.get_preparation_data("overlap-run")
    return {k: data[k] for k in ("init_main_from_path", "init_main_from_name") if k in data}


def _local_addresses():
    """This machine's IPv4 addresses, loopback last."""
    import fcntl
    addresses = []
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                answer = fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:
                continue  # no IPv4 address
            addresses.append(socket.inet_ntoa(answer[20:24]))
    finally:
        probe.close()
    return sorted(set(addresses), key=lambda a: (a.startswith("127."), a))


def _route_to(host):
    """The address this machine sends from to reach `host`, or None (no packet is sent)."""
    try:
        target = socket.gethostbyname(host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))
            return s.getsockname()[0]
    except OSError:
        return None


def _host_names(hosts, hostfile):
    if hosts:
        return [h.split(":")[0] for h in hosts.split(",") if h.strip()]
    names = []
    with open(hostfile) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                names.append(line.split()[0].split(":")[0])
    return names


def _driver_addresses(hosts, hostfile):
    """Where the driver listens and ranks reach it: loopback for a job on this machine; else the
    addresses this machine sends from to reach the job's hosts, or, when none routes, every
    non-loopback address it has."""
    if not hosts and not hostfile:
        return ["127.0.0.1"]
    ordered = []
    for a in (_route_to(h) for h in _host_names(hosts, hostfile)):
        if a and a not in ordered:
            ordered.append(a)
    return ordered or [a for a in _local_addresses() if not a.startswith("127.")] or \
        ["127.0.0.1"]


class _Driver:
    """The listening side: hands the call to each rank and collects what each returns."""

    NAME = "overlap.run"  # in the line that logs a refused connection

    def __init__(self, key, call, addresses):
        self._key = key
        self._call = call
        self._selector = selectors.DefaultSelector()
        self.endpoints = []  # "address:port" for each address it listens on
        for address in addresses:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((address, 0))
            sock.listen(128)
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)
            self.endpoints.append("%s:%d" % (address, sock.getsockname()[1]))
        self.results = {}  # rank -> (ok, pickled value or traceback text)
        self.problems = []  # connections that were not this job's or broke off
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="overlap-run-driver",
                                        daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            for ready, _ in self._selector.select(timeout=0.2):
                try:
                    conn, peer = ready.fileobj.accept()
                except OSError:
                    continue
                if not self._slots.acquire(blocking=False):
                    self._refuse(peer, "too many connections at once")
                    conn.close()
                    continue
                threading.Thread(target=self._handle, args=(conn, peer), daemon=True,
                                 name="overlap-run-connection").start()

    def _refuse(self, peer, why):
        problem = "%s:%d: %s" % (peer[0], peer[1], why)
        with self._lock:
            self.problems.append(problem)
        sys.stderr.write("%s: refused a connection from %s\n" % (self.NAME, problem))

    def _handle(self, conn, peer):
        try:
            with conn:
                conn.setblocking(True)
                conn.settimeout(_HANDSHAKE_TIMEOUT_S)
                try:
                    nonce = challenge(conn, self._key)
                except ConnectionError as e:
                    self._refuse(peer, str(e))
                    return
                conn.settimeout(_IO_TIMEOUT_S)
                try:
                    self._answer(conn, nonce)
                except Exception as e:  # noqa: BLE001 - one bad peer must not stop the driver
                    with self._lock:
                        self.problems.append("%s:%d: %s" % (peer[0], peer[1], e))
        finally:
            self._slots.release()

    def _answer(self, conn, nonce):
        message = recv_frame(conn, self._key, nonce, TO_DRIVER)
        if message[0] == "fetch":
            send_frame(conn, self._key, nonce, TO_RANK, self._call)
        elif message[0] == "result":
            _, rank, ok, data = message
            with self._lock:
                self.results[rank] = (ok, data)
            send_frame(conn, self._key, nonce, TO_RANK, ("ack",))

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()


def _launch_command(num_proc, hosts, hostfile, start_timeout, rsh_agent, network_interface,
                    mpi_args, executable):
    command = [_launcher(), "-np", str(num_proc)]
    if hosts:
        command += ["-H", hosts]
    if hostfile:
        command += ["--hostfile", hostfile]
    if start_timeout is not None:
        command += ["--start-timeout", str(int(start_timeout))]
    if rsh_agent:
        command += ["--rsh-agent", rsh_agent]
    if network_interface:
        command += ["--network-interface", network_interface]
    if mpi_args:
        command += ["--mpi-args", mpi_args]
    return command + ["--", executable or sys.executable, "-m", "overlap._run_task"]


def _failure(driver, num_proc, rc):
    # In the order they arrived: the first rank to fail is the cause, the others mostly its
    # consequence (their collectives lost that rank).
    failed = [r for r, (ok, _) in driver.results.items() if not ok]
    missing = [r for r in range(num_proc) if r not in driver.results]
    lines = ["overlap.run: the job failed (overlaprun exited with status %d)" % rc]
    if failed:
        lines.append("rank %d raised:\n%s" % (failed[0], driver.results[failed[0]][1].rstrip()))
        for r in failed[1:]:
            last = driver.results[r][1].strip().splitlines()[-1]
            lines.append("then rank %d raised %s" % (r, last))
    if missing and rc != 0:
        lines.append("ranks that returned nothing: %s (overlaprun's message above says why)"
                     % ", ".join(map(str, missing)))
    for problem in driver.problems:
        lines.append("a connection to the driver failed: %s" % problem)
    return RunError("\n".join(lines))


def run(func, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None,
        slots=None, reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None,
        output_filename=None, verbose=None, use_gloo=None, use_mpi=None, mpi_args=None,
        network_interface=None, executable=None, np=None, min_np=None, max_np=None):
    """Runs func(*args, **kwargs) on num_proc ranks (np is Horovod's older name) and returns the
    list of their return values, indexed by rank. Raises RunError, naming the rank and carrying
    its traceback, when a rank raises or dies.

    hosts ("host1:2,host2:2") or hostfile place the ranks (default: all on this machine; slots
    sets the slots of hosts listed without them). start_timeout, network_interface and mpi_args
    are overlaprun's options of the same names; ssh_port and ssh_identity_file make its
    --rsh-agent; output_filename is Open MPI's --output-filename. disable_cache and verbose are
    accepted (verbose prints the command). overlap runs one fixed set of ranks over MPI:
    use_gloo and the elastic arguments (min/max_num_proc, reset_limit, cooldown_range) are
    refused with a ValueError."""
    if num_proc is not None and np is not None and num_proc != np:
        raise ValueError("overlap.run: num_proc=%d and np=%d disagree; pass one" % (num_proc, np))
    num_proc = num_proc if num_proc is not None else (np if np is not None else 1)
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError("overlap.run: num_proc must be a positive integer, got %r" % (num_proc,))
    min_num_proc = min_num_proc if min_num_proc is not None else min_np
    max_num_proc = max_num_proc if max_num_proc is not None else max_np
    elastic = [name for name, value in (("min_num_proc", min_num_proc),
                                        ("max_num_proc", max_num_proc),
                                        ("reset_limit", reset_limit),
                                        ("cooldown_range", cooldown_range))
               if value is not None and not (name.endswith("_proc") and value == num_proc)]
    if elastic:
        raise ValueError("overlap.run runs a fixed set of %d ranks; the elastic arguments %s are "
                         "not supported here (start an elastic job with overlaprun's elastic "
                         "flags: docs/elastic.md)" % (num_proc, ", ".join(elastic)))
    if hosts is not None and hostfile is not None:
        raise ValueError("overlap.run: pass hosts or hostfile, not both")
    if use_gloo and use_mpi:
        raise ValueError("overlap.run: use_gloo and use_mpi cannot both be True")
    if use_gloo:
        raise ValueError("overlap.run: overlap runs over MPI only; use_gloo=True is not "
                         "available (leave it unset, or pass use_mpi=True)")
    if hosts is not None and slots is not None:
        hosts = ",".join(h if ":" in h else "%s:%d" % (h, slots)
                         for h in hosts.split(",") if h.strip())
    rsh_agent = None
    if ssh_port is not None or ssh_identity_file is not None:
        rsh_agent = " ".join(["ssh"] + (["-p", str(int(ssh_port))] if ssh_port else [])
                             + (["-i", shlex.quote(ssh_identity_file)]
                                if ssh_identity_file else []))
    if output_filename:
        mpi_args = ((mpi_args + " ") if mpi_args else "") + \
            "--output-filename " + shlex.quote(output_filename)
    del disable_cache  # overlaprun checks the hosts on every start; it has nothing to cache

    serializer, payload = _serialize_call(func, args, kwargs or {})
    call = (serializer, payload, _main_module() if serializer == "pickle" else {},
            list(sys.path), os.getcwd(), list(sys.argv))
    key = os.urandom(32)
    driver = _Driver(key, call, _driver_addresses(hosts, hostfile))
    try:
        env = dict(os.environ)
        env[DRIVER_ENV] = ",".join(driver.endpoints)
        env[KEY_ENV] = key.hex()
        # The ranks import overlap from where this process did.
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(
            [package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        command = _launch_command(num_proc, hosts, hostfile, start_timeout, rsh_agent,
                                  network_interface, mpi_args, executable)
        if verbose:
            print("overlap.run: %s (driver at %s)" % (" ".join(map(shlex.quote, command)),
                                                      env[DRIVER_ENV]), file=sys.stderr)
        # A rank exits only after the driver acknowledged its result: when overlaprun returns,
        # every result sent is here.
        rc = subprocess.call(command, env=env)
    finally:
        driver.close()
    if rc != 0 or len(driver.results) < num_proc or not all(ok for ok, _ in
                                                                driver.results.values()):
        raise _failure(driver, num_proc, rc)
    return [_loads(driver.results[r][1], r) for r in range(num_proc)]


def _loads(data, rank):
    try:
        return pickle.loads(data)
    except Exception as e:  # noqa: BLE001
        raise RunError("overlap.run: rank %d's return value cannot be unpickled here: %s"
                       % (rank, e))

