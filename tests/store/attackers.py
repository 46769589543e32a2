"""Attackers on the rendezvous store, each run as its own process on loopback
by tests/store/test_store.py and tests/store/test_store_attacks_on_jobs.py:

    python attackers.py rogue [HOST PORT]          a listener (on 127.0.0.1 and any free port
                                                   unless given) that answers "accepted" and
                                                   a made-up proof without knowing the secret
    python attackers.py relay PORT DIRECTION N ACTION
                                                   forwards every byte between its clients
                                                   and the store at PORT, except frame N
                                                   (counted from 0 after the handshake) in
                                                   DIRECTION (to-server or to-client):
                                                   flip (one bit), replay (sends frame N-1
                                                   again instead), length (claims 4 GiB),
                                                   truncate (drops its last byte and says so
                                                   in its length)
    python attackers.py loris PORT COUNT           opens COUNT connections to the store at
                                                   PORT and trickles a byte a second into
                                                   each, reopening any the store closes

Each prints "listening PORT" (or "ready") once it is ready and runs until killed.
"""
import os
import socket
import struct
import sys
import threading
import time

GREETING_SIZE = 4 + 16           # Note [Store handshake]: server -> client
VERDICT_SIZE = 1 + 32            # server -> client, after the client's answer
CLIENT_ANSWER_SIZE = 16 + 32     # client -> server
TAG_SIZE = 32


def listen(host="127.0.0.1", port=0):
    listener = socket.create_server((host, port))
    print(f"listening {listener.getsockname()[1]}", flush=True)
    return listener


def recv_exact(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def rogue(host="127.0.0.1", port=0):
    listener = listen(host, port)
    while True:
        sock, _ = listener.accept()
        threading.Thread(target=_pose_as_store, args=(sock,), daemon=True).start()


def _pose_as_store(sock):
    with sock:
        try:
            sock.sendall(b"HVS2" + os.urandom(16))
            recv_exact(sock, CLIENT_ANSWER_SIZE)
            sock.sendall(b"\x01" + os.urandom(32))  # "accepted", and a proof it cannot make
            # What a fooled client sends next would be ours to answer; a
            # careful one closes instead.
            while sock.recv(1 << 16):
                pass
        except OSError:
            pass


def relay(store_port, direction, target, action):
    listener = listen()
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", store_port))
        for source, sink, handshake, name in ((server, client, GREETING_SIZE + VERDICT_SIZE,
                                               "to-client"),
                                              (client, server, CLIENT_ANSWER_SIZE, "to-server")):
            tamper = (target, action) if name == direction else None
            threading.Thread(target=_pump, args=(source, sink, handshake, tamper),
                             daemon=True).start()


def _pump(source, sink, handshake, tamper):
    """Forwards the handshake as is, then frame by frame, tampering with one."""
    try:
        if handshake == GREETING_SIZE + VERDICT_SIZE:
            sink.sendall(recv_exact(source, GREETING_SIZE))
            sink.sendall(recv_exact(source, 1))
            sink.sendall(recv_exact(source, VERDICT_SIZE - 1))
        else:
            sink.sendall(recv_exact(source, handshake))
        previous, number = None, 0
        while True:
            head = recv_exact(source, 4)
            (size,) = struct.unpack(">I", head)
            frame = head + recv_exact(source, size + TAG_SIZE)
            if tamper is not None and number == tamper[0]:
                if tamper[1] == "flip":
                    # The command or status byte: what a forger would change.
                    frame = frame[:4] + bytes([frame[4] ^ 0x01]) + frame[5:]
                elif tamper[1] == "replay":
                    frame = previous
                elif tamper[1] == "length":
                    frame = struct.pack(">I", 0xFFFFFFF0) + frame[4:]
                elif tamper[1] == "truncate":  # one byte shorter, length to match
                    frame = struct.pack(">I", size - 1) + frame[4:4 + size - 1] + frame[-TAG_SIZE:]
            sink.sendall(frame)
            previous, number = frame, number + 1
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def loris(store_port, count):
    """Keeps `count` silent-ish connections open to the store."""
    open_ = []
    announced = False
    while True:
        while len(open_) < count:
            try:
                open_.append(socket.create_connection(("127.0.0.1", store_port), timeout=1))
            except OSError:
                time.sleep(0.05)  # the store is not listening yet
        if not announced:
            print("ready", flush=True)
            announced = True
        time.sleep(1)
        for sock in list(open_):
            try:
                sock.send(b"\x00")  # one byte: a per-read timeout would never fire
            except OSError:
                sock.close()
                open_.remove(sock)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "rogue":
        rogue(*(sys.argv[2:3] + [int(p) for p in sys.argv[3:4]]))
    elif mode == "relay":
        relay(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif mode == "loris":
        loris(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(f"unknown attacker {mode!r}")
