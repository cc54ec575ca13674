"""A stranger on a host outside the job (tests/cluster/control_stranger_test.sh): once rank 0 of
tests/cluster/control_stranger publishes its control address in DIR/contact, opens three
connections to it before any rank does: (a) sends a bare rank number, the whole handshake before
the current one; (b) answers the challenge with a well-formed answer for rank 1 that is no MAC of
its nonce (what a replayed handshake sends); (c) says nothing. Writes each connection's
"address:port" to DIR/names and touches DIR/strangers_in, then checks that rank 0 sent each one
the challenge and closed it: never an admission. Exits 1, saying why, otherwise.
    python3 control_stranger.py DIR"""

import os
import socket
import struct
import sys
import time


def main(directory):
    deadline = time.monotonic() + 120
    contact = os.path.join(directory, "contact")
    while not os.path.exists(contact):
        if time.monotonic() > deadline:
            sys.exit("control_stranger.py: FAIL: no contact from rank 0 within 120 s")
        time.sleep(0.02)
    with open(contact) as f:
        address, _, port = f.read().strip().split(",")[0].rpartition(":")
    conns = [socket.create_connection((address, int(port)), timeout=10) for _ in range(3)]
    bare, replay, silent = conns
    bare.sendall(struct.pack("=i", 1))
    with open(os.path.join(directory, "names"), "w") as f:
        for c in conns:
            f.write("%s:%d\n" % c.getsockname())
    open(os.path.join(directory, "strangers_in"), "w").close()

    failures = []
    replay.settimeout(60)
    challenge = b""
    while len(challenge) < 36:
        chunk = replay.recv(36 - len(challenge))
        if not chunk:
            break
        challenge += chunk
    if len(challenge) == 36:
        try:
            replay.sendall(struct.pack("!i", 1) + challenge[4:])
        except OSError:
            pass  # rank 0 may have closed on it already: the ranks were all in
    for name, c in (("bare rank number", bare), ("replay", replay), ("silent", silent)):
        c.settimeout(60)
        got = challenge if c is replay else b""
        try:
            while True:
                chunk = c.recv(256)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            pass
        except socket.timeout:
            failures.append("%s: still open after 60 s" % name)
        if len(got) != 36 or not got.startswith(b"OVLC"):
            failures.append("%s: rank 0 sent %r, not just a challenge" % (name, got))
        c.close()
    if failures:
        sys.exit("control_stranger.py: FAIL: " + "; ".join(failures))
    print("control_stranger.py: %s:%s refused all three strangers" % (address, port))


if __name__ == "__main__":
    main(sys.argv[1])
