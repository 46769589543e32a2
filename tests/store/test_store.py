"""Tests hvdlite/store/: the Python client against the server, and
the wire protocol byte by byte (the C++ client must speak exactly this)."""
import hashlib
import hmac
import socket
import struct
import threading
import time

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
        assert 0.15 < time.monotonic() - started < 2
        client.set("after", "ok")  # the connection still works
        assert client.get("after") == b"ok"


def test_a_blocked_get_does_not_block_other_clients(server):
    with connect(server) as waiter, connect(server) as other:
        result = []
        thread = threading.Thread(target=lambda: result.append(waiter.get("go", timeout=10)))
        thread.start()
        started = time.monotonic()
        for i in range(50):
            other.set(f"k{i}", str(i))
            assert other.get(f"k{i}") == str(i).encode()
        assert time.monotonic() - started < 2
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
    blocked = threading.Thread(target=lambda: pytest.raises(StoreError, waiter.get,
                                                            "never", timeout=30))
    blocked.start()
    time.sleep(0.1)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 3
    blocked.join(timeout=5)
    assert not blocked.is_alive()
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

def recv_exact(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "server closed the connection"
        data += chunk
    return data


def frame(head, *fields):
    payload = bytes([head]) + b"".join(struct.pack(">I", len(f)) + f for f in fields)
    return struct.pack(">I", len(payload)) + payload


def read_frame(sock):
    (size,) = struct.unpack(">I", recv_exact(sock, 4))
    return recv_exact(sock, size)


def raw_handshake(server, secret=SECRET):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    greeting = recv_exact(sock, 20)
    assert greeting[:4] == b"HVDS"
    nonce = greeting[4:]
    sock.sendall(hmac.new(secret.encode(), b"hvdlite-store-client" + nonce,
                          hashlib.sha256).digest())
    return sock, recv_exact(sock, 1)


def test_wire_protocol(server):
    sock, answer = raw_handshake(server)
    with sock:
        assert answer == b"\x01"
        sock.sendall(frame(ord("S"), b"k", b"v1"))
        assert read_frame(sock) == b"\x00"
        sock.sendall(frame(ord("G"), b"k", b"1000"))
        assert read_frame(sock) == b"\x00" + struct.pack(">I", 2) + b"v1"
        sock.sendall(frame(ord("G"), b"nope", b"50"))
        assert read_frame(sock) == b"\x01"
        sock.sendall(frame(ord("A"), b"n", b"7"))
        assert read_frame(sock) == b"\x00" + struct.pack(">I", 1) + b"7"
        sock.sendall(frame(ord("T"), b"nope"))
        assert read_frame(sock) == b"\x02"
        sock.sendall(frame(ord("T"), b"k"))
        assert read_frame(sock) == b"\x00" + struct.pack(">I", 2) + b"v1"
        sock.sendall(frame(ord("X"), b"k"))
        assert read_frame(sock).startswith(b"\x03")


def test_wire_protocol_rejects_a_wrong_digest(server):
    sock, answer = raw_handshake(server, secret="wrong")
    with sock:
        assert answer == b"\x00"
        assert sock.recv(1) == b""  # and the server closed the connection


def test_every_connection_gets_a_fresh_nonce(server):
    nonces = set()
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            nonces.add(recv_exact(sock, 20)[4:])
    assert len(nonces) == 5
