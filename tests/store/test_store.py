"""Tests hvdlite/store/: the Python client against the server, and
the wire protocol byte by byte (the C++ client must speak exactly this)."""
import contextlib
import hashlib
import hmac
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hvdlite.store import StoreClient, StoreError, StoreServer

SECRET = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def server():
    server = StoreServer(SECRET, host="127.0.0.1").start()
    yield server
    server.stop()


def connect(server, secret=SECRET, timeout=5.0):
    return StoreClient("127.0.0.1", server.port, secret, timeout=timeout)


def test_set_get_add_try_get(server):
    with connect(server) as client:
        client.set("name", b"\x00binary\xff")
        assert client.get("name") == b"\x00binary\xff"
        client.set(b"text", "héllo")
        assert client.try_get("text") == "héllo".encode()
        assert client.try_get("absent") is None
        assert client.add("counter", 5) == 5
        assert client.add("counter", -2) == 3
        assert client.get("counter") == b"3"
        client.set("empty", b"")
        assert client.get("empty") == b""


def test_get_waits_until_another_client_sets_the_key(server):
    with connect(server) as waiter, connect(server) as setter:
        timer = threading.Timer(0.3, setter.set, args=("late", "here"))
        started = time.monotonic()
        timer.start()
        assert waiter.get("late", timeout=10) == b"here"
        assert time.monotonic() - started >= 0.25
        timer.join()


def test_get_times_out(server):
    with connect(server) as client:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="'missing' did not appear"):
            client.get("missing", timeout=0.2)
        # Room for a loaded 2-core machine: the bound only tells a timeout
        # that fired from one that did not.
        assert 0.15 < time.monotonic() - started < 10
        client.set("after", "ok")  # the connection still works
        assert client.get("after") == b"ok"


def test_a_blocked_get_does_not_block_other_clients(server):
    with connect(server) as waiter, connect(server) as other:
        result = []
        thread = threading.Thread(target=lambda: result.append(waiter.get("go", timeout=60)))
        thread.start()
        started = time.monotonic()
        for i in range(50):
            other.set(f"k{i}", str(i))
            assert other.get(f"k{i}") == str(i).encode()
        # Far below the waiter's 60 s, with room for a loaded machine: blocked
        # behind it, these calls would not end before "go" is set.
        assert time.monotonic() - started < 15
        other.set("go", "now")
        thread.join(timeout=5)
        assert result == [b"now"]


def test_wrong_secret_is_rejected(server):
    with pytest.raises(StoreError, match="rejected this client's secret"):
        connect(server, secret="not-the-secret")
    with connect(server) as client:  # the server keeps serving others
        client.set("still", "up")
        assert client.get("still") == b"up"


def test_non_integer_add_is_an_error(server):
    with connect(server) as client:
        client.set("word", "abc")
        with pytest.raises(StoreError, match="not a decimal integer"):
            client.add("word", 1)
        assert client.add("number", 1) == 1


@pytest.mark.timeout(60)
def test_concurrent_clients(server):
    clients_count, adds = 16, 50
    errors = []

    def work(index):
        try:
            with connect(server) as client:
                client.set(f"client.{index}", str(index))
                for _ in range(adds):
                    client.add("counter", 1)
                # Every client sees every other client's key: a barrier.
                for other in range(clients_count):
                    assert client.get(f"client.{other}", timeout=20) == str(other).encode()
        except Exception as error:  # reported on the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    with connect(server) as client:
        assert client.get("counter") == str(clients_count * adds).encode()


def test_stop_closes_clients_and_joins_threads():
    server = StoreServer(SECRET, host="127.0.0.1").start()
    client, waiter = connect(server), connect(server)
    outcome = []  # what the blocked get did, read here: a thread's own failure would be lost

    def wait_for_never():
        try:
            outcome.append(waiter.get("never", timeout=60))
        except BaseException as error:  # noqa: B036 - handed to the test's thread
            outcome.append(error)

    blocked = threading.Thread(target=wait_for_never)
    blocked.start()
    time.sleep(0.1)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 20  # far below the get's 60 s, room for a loaded machine
    blocked.join(timeout=20)
    assert not blocked.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], StoreError), outcome
    with pytest.raises(StoreError):
        client.set("after", "stop")
    assert not [t for t in threading.enumerate() if t.name == "hvdlite-store"]
    client.close()
    waiter.close()


def test_connecting_to_nothing_fails_with_a_clear_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StoreError, match=f"cannot connect to the rendezvous store at "
                                         f"127.0.0.1:{port} within 0.3 s"):
        StoreClient("127.0.0.1", port, SECRET, timeout=0.3)


# --- the wire protocol, byte by byte --------------------------------------
# Written from Note [Store handshake] and Note [Store frames] in
# hvdlite/store/protocol.py, without its helpers: the C++ client follows the
# same text.

def recv_exact(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "server closed the connection"
        data += chunk
    return data


def keyed(label, s, c, secret=SECRET):
    return hmac.new(secret.encode(), label + b"\x00" + s + c, hashlib.sha256).digest()


class RawClient:
    """A client speaking the protocol by hand, so a test can also break it."""

    def __init__(self, server, secret=SECRET):
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        greeting = recv_exact(self.sock, 20)
        assert greeting[:4] == b"HVS2"
        s, c = greeting[4:], os.urandom(16)
        self.sock.sendall(c + keyed(b"hvdlite-store-client", s, c, secret))
        self.verdict = recv_exact(self.sock, 1)
        if self.verdict == b"\x01":
            assert recv_exact(self.sock, 32) == keyed(b"hvdlite-store-server", s, c)
        self.key = keyed(b"hvdlite-store-session", s, c, secret)
        self.sent = self.received = 0

    def tag(self, direction, sequence, payload):
        return hmac.new(self.key, direction + struct.pack(">QI", sequence, len(payload)) + payload,
                        hashlib.sha256).digest()

    def frame(self, head, *fields):
        payload = bytes([head]) + b"".join(struct.pack(">I", len(f)) + f for f in fields)
        data = struct.pack(">I", len(payload)) + payload + self.tag(b"C", self.sent, payload)
        self.sent += 1
        return data

    def send(self, head, *fields):
        self.sock.sendall(self.frame(head, *fields))

    def reply(self):
        (size,) = struct.unpack(">I", recv_exact(self.sock, 4))
        payload = recv_exact(self.sock, size)
        assert recv_exact(self.sock, 32) == self.tag(b"S", self.received, payload)
        self.received += 1
        return payload

    def close(self):
        self.sock.close()


def test_wire_protocol(server):
    client = RawClient(server)
    try:
        assert client.verdict == b"\x01"
        client.send(ord("S"), b"k", b"v1")
        assert client.reply() == b"\x00"
        client.send(ord("G"), b"k", b"1000")
        assert client.reply() == b"\x00" + struct.pack(">I", 2) + b"v1"
        client.send(ord("G"), b"nope", b"50")
        assert client.reply() == b"\x01"
        client.send(ord("A"), b"n", b"7")
        assert client.reply() == b"\x00" + struct.pack(">I", 1) + b"7"
        client.send(ord("T"), b"nope")
        assert client.reply() == b"\x02"
        client.send(ord("T"), b"k")
        assert client.reply() == b"\x00" + struct.pack(">I", 2) + b"v1"
        client.send(ord("X"), b"k")
        assert client.reply().startswith(b"\x03")
    finally:
        client.close()


def test_wire_protocol_rejects_a_wrong_digest(server):
    client = RawClient(server, secret="wrong")
    with client.sock:
        assert client.verdict == b"\x00"
        assert client.sock.recv(1) == b""  # and the server closed the connection


def test_every_connection_gets_a_fresh_nonce(server):
    nonces = set()
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            nonces.add(recv_exact(sock, 20)[4:])
    assert len(nonces) == 5


def test_server_drops_a_client_whose_frame_fails_its_tag(server, caplog):
    client = RawClient(server)
    try:
        frame = bytearray(client.frame(ord("S"), b"k", b"v"))
        frame[4] ^= 0x01  # 'S' becomes 'R'
        client.sock.sendall(bytes(frame))
        answer = client.reply()  # authenticated, so the client can believe it
        assert answer[0] == 4 and b"failed its integrity check" in answer
        assert client.sock.recv(1) == b""
    finally:
        client.close()
    assert "failed its integrity check" in caplog.text
    with connect(server) as other:  # the store still serves everyone else
        assert other.try_get("k") is None


def test_server_detects_a_replayed_frame(server):
    client = RawClient(server)
    try:
        first = client.frame(ord("A"), b"n", b"1")
        client.sock.sendall(first)
        assert client.reply() == b"\x00" + struct.pack(">I", 1) + b"1"
        client.sock.sendall(first)  # the same bytes again: its sequence number is stale
        assert b"frame 1 failed its integrity check" in client.reply()
    finally:
        client.close()
    with connect(server) as other:
        assert other.get("n") == b"1"  # the replay did not add again


def test_server_refuses_an_absurd_length_without_allocating_it(server):
    client = RawClient(server)
    try:
        client.sock.sendall(struct.pack(">I", 0xFFFFFFF0) + b"S")
        answer = client.reply()
        assert b"claims 4294967280 bytes, outside 1..268435456" in answer
    finally:
        client.close()


# --- pending handshakes (Note [Pending handshakes]) --------------------------

def closed_by_server(sock, wait):
    """Whether the server closes `sock` within `wait` seconds (after its greeting)."""
    sock.settimeout(wait)
    try:
        while sock.recv(1 << 10):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:  # reset
        return True


@pytest.mark.timeout(90)
def test_trickling_strangers_are_dropped_after_the_handshake_deadline(server, monkeypatch):
    # A longer deadline than the real 5 s gives the bounds below room for a
    # loaded machine while keeping them apart.
    monkeypatch.setattr("hvdlite.store.server.HANDSHAKE_TIMEOUT_S", 10.0)
    threads_before = threading.active_count()
    started = time.monotonic()
    strangers = [socket.create_connection(("127.0.0.1", server.port), timeout=1)
                 for _ in range(40)]
    try:
        with connect(server) as client:  # a real client is not held up by them
            client.set("k", "v")
        assert time.monotonic() - started < 7.0  # held up by them, it would wait >= 10 s
        # No thread per stranger: the handshakes share one.
        assert threading.active_count() <= threads_before + 2
        # A byte every half second would reset a per-read timeout forever.
        open_ = list(strangers)
        while open_ and time.monotonic() - started < 40:
            for sock in list(open_):
                try:
                    sock.send(b"\x00")
                except OSError:
                    pass
                if closed_by_server(sock, 0.01):
                    open_.remove(sock)
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        assert not open_
        # HANDSHAKE_TIMEOUT_S for the whole handshake, not per read (which
        # the trickle would keep open until the loop gives up at 40 s).
        assert 9.0 <= elapsed < 30.0, elapsed
    finally:
        for sock in strangers:
            sock.close()


@pytest.mark.timeout(60)
def test_more_strangers_than_the_pending_cap_do_not_lock_out_clients(server, monkeypatch):
    from hvdlite.store.server import MAX_PENDING_HANDSHAKES
    # A longer deadline than the real 5 s: "long before the deadline" below
    # then has room for a loaded machine.
    monkeypatch.setattr("hvdlite.store.server.HANDSHAKE_TIMEOUT_S", 30.0)
    extra = 40
    strangers = [socket.create_connection(("127.0.0.1", server.port), timeout=1)
                 for _ in range(MAX_PENDING_HANDSHAKES + extra)]
    try:
        started = time.monotonic()
        with connect(server) as client:
            client.set("k", "v")
            assert client.get("k") == b"v"
        assert time.monotonic() - started < 10.0
        # The oldest were closed at once to stay within the cap, long before
        # their handshake deadline; the newest still wait.
        assert all(closed_by_server(sock, 1.0) for sock in strangers[:extra])
        assert time.monotonic() - started < 20.0
        assert not any(closed_by_server(sock, 0.01) for sock in strangers[-extra:])
    finally:
        for sock in strangers:
            sock.close()


@pytest.mark.timeout(60)
def test_client_tries_again_when_the_store_drops_its_handshake():
    """A store flooded with strangers closes the oldest handshakes; the
    client connects again instead of failing (written from the protocol
    notes, like RawClient)."""
    listener = socket.create_server(("127.0.0.1", 0))
    served = []

    def serve():
        first, _ = listener.accept()
        first.sendall(b"HVS2" + os.urandom(16))
        first.close()  # dropped mid-handshake
        with listener.accept()[0] as sock:
            s = os.urandom(16)
            sock.sendall(b"HVS2" + s)
            answer = recv_exact(sock, 48)
            c = answer[:16]
            assert answer[16:] == keyed(b"hvdlite-store-client", s, c)
            sock.sendall(b"\x01" + keyed(b"hvdlite-store-server", s, c))
            served.append(True)
            sock.recv(1)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with StoreClient("127.0.0.1", listener.getsockname()[1], SECRET, timeout=10):
            pass
        thread.join(timeout=10)
        assert served == [True]
    finally:
        listener.close()


# --- attacker processes on loopback --------------------------------------

ATTACKERS = Path(__file__).with_name("attackers.py")


@contextlib.contextmanager
def attacker(*args):
    """Runs tests/store/attackers.py with `args`; yields (process, the port
    it listens on), once it listens. A loris (port None) is yielded at once:
    it says "ready" on its stdout when it holds its connections."""
    process = subprocess.Popen([sys.executable, str(ATTACKERS), *map(str, args)],
                               stdout=subprocess.PIPE, text=True)
    try:
        if args[0] == "loris":
            yield process, None
            return
        line = process.stdout.readline().split()
        assert line, "the attacker process did not start"
        yield process, int(line[1])
    finally:
        process.kill()
        process.wait(timeout=10)
        process.stdout.close()


@pytest.mark.timeout(60)
def test_the_launchers_client_refuses_a_rogue_store():
    with attacker("rogue") as (_, port):
        started = time.monotonic()
        with pytest.raises(StoreError, match=f"the listener at 127.0.0.1:{port} answered as the "
                                             f"rendezvous store but could not prove the job's "
                                             f"secret"):
            StoreClient("127.0.0.1", port, SECRET, timeout=10)
        assert time.monotonic() - started < 5


@pytest.mark.timeout(60)
@pytest.mark.parametrize("action", ["flip", "truncate"])
@pytest.mark.parametrize("direction", ["to-client", "to-server"])
def test_a_relay_that_alters_a_frame_is_detected(server, direction, action):
    with attacker("relay", server.port, direction, 1, action) as (_, port):
        client = StoreClient("127.0.0.1", port, SECRET, timeout=10)
        with client:
            client.set("first", "ok")  # frame 0 each way passes untouched
            where = "a frame from the rendezvous store" if direction == "to-client" else \
                "closed this connection: a request from this client failed its integrity check"
            with pytest.raises(StoreError, match=f"{where}.*tampered with, or the peer does not "
                                                 f"know the job's secret"):
                client.set("second", "changed?")
            with pytest.raises(StoreError, match="failed earlier"):
                client.set("third", "refused")
    with connect(server) as other:
        assert other.try_get("first") == b"ok"
        if direction == "to-server":
            assert other.try_get("second") is None  # the tampered request was not run


@pytest.mark.timeout(60)
@pytest.mark.parametrize("direction", ["to-client", "to-server"])
def test_a_relay_that_replays_a_frame_is_detected(server, direction):
    with attacker("relay", server.port, direction, 1, "replay") as (_, port):
        with StoreClient("127.0.0.1", port, SECRET, timeout=10) as client:
            client.set("first", "ok")
            with pytest.raises(StoreError, match="frame 1 failed its integrity check"):
                client.add("counter", 1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("direction", ["to-client", "to-server"])
def test_a_relay_that_claims_an_absurd_length_is_refused(server, direction):
    with attacker("relay", server.port, direction, 0, "length") as (_, port):
        with StoreClient("127.0.0.1", port, SECRET, timeout=10) as client:
            started = time.monotonic()
            with pytest.raises(StoreError, match="claims 4294967280 bytes, outside 1..268435456"):
                client.set("k", "v")
            assert time.monotonic() - started < 5
