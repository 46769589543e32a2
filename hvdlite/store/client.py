"""The rendezvous store's Python client, used by the launcher, its agents on
remote hosts and elastic workers (the core has its own, in C++:
csrc/transport/store/tcp_store_client.cc). The wire protocol is in protocol.py.
"""
import socket
import threading
import time

from hvdlite.store.protocol import (
    ACCEPTED, CLIENT_TO_SERVER, CMD_ADD, CMD_GET, CMD_SET, CMD_TRY_GET, DIGEST_SIZE,
    HANDSHAKE_TIMEOUT_S, MAGIC, NONCE_SIZE, SERVER_TO_CLIENT, STATUS_ABSENT, STATUS_ERROR,
    STATUS_TAMPERED, STATUS_TIMEOUT, Channel, IntegrityError, client_proof,
    digests_match, new_nonce, recv_exact, server_proof, session_key)


class StoreError(RuntimeError):
    """The store could not be reached, refused this client, could not prove
    the job secret (Note [Store handshake]), sent a frame that failed its
    integrity check (Note [Store frames]), or answered with an error."""


class _Dropped(Exception):
    """The connection ended before the store's verdict (its cause says how)."""


def _as_bytes(value):
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


class StoreClient:
    """A blocking client; safe to share between threads (one request at a time).

    Connecting retries until `timeout` seconds have passed, so ranks may start
    before the store does. `timeout` is also the default wait of get().
    Keys and values may be str (sent as UTF-8) or bytes; values come back as bytes.
    """

    def __init__(self, host, port, secret, timeout=30.0):
        self._address = f"{host}:{port}"
        self.timeout = timeout
        self._lock = threading.Lock()
        self._broken = None  # why the connection cannot be used any more
        deadline = time.monotonic() + timeout
        delay, left = 0.05, timeout
        while True:
            self._sock = self._connect(host, port, left)
            try:
                self._channel = self._authenticate(secret)
                return
            except _Dropped as error:
                # Note [Pending handshakes]: a store flooded with strangers
                # closes the oldest handshakes; try again while time is left.
                self._sock.close()
                if time.monotonic() + delay > deadline:
                    raise StoreError(f"lost the connection to the rendezvous store at "
                                     f"{self._address} during the handshake, and again on "
                                     f"every retry for {timeout:g} s ({error.__cause__})") \
                        from error.__cause__
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                left = max(deadline - time.monotonic(), 0.1)
            except BaseException:
                self._sock.close()
                raise

    def set(self, key, value):
        self._request(CMD_SET, [_as_bytes(key), _as_bytes(value)])

    def get(self, key, timeout=None):
        """Waits until `key` exists and returns its value; raises TimeoutError."""
        wait_s = self.timeout if timeout is None else timeout
        status, fields = self._request(
            CMD_GET, [_as_bytes(key), str(int(wait_s * 1000)).encode("ascii")],
            socket_timeout=wait_s + self.timeout)
        if status == STATUS_TIMEOUT:
            raise TimeoutError(f"key {key!r} did not appear in the rendezvous store at "
                               f"{self._address} within {wait_s} s; another rank may "
                               f"have failed to start or to reach the store")
        return fields[0]

    def add(self, key, delta=1):
        """Adds `delta` to the integer at `key` (absent = 0); returns the new value."""
        _, fields = self._request(CMD_ADD, [_as_bytes(key), str(int(delta)).encode("ascii")])
        return int(fields[0])

    def try_get(self, key):
        """Returns the value of `key`, or None if it is absent."""
        status, fields = self._request(CMD_TRY_GET, [_as_bytes(key)])
        return None if status == STATUS_ABSENT else fields[0]

    def local_address(self):
        """This end's IP address: the one the store's host reaches us at."""
        return self._sock.getsockname()[0]

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _connect(self, host, port, timeout):
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except OSError as error:
                if time.monotonic() + delay > deadline:
                    raise StoreError(
                        f"cannot connect to the rendezvous store at {self._address} "
                        f"within {timeout} s ({error}); check that the launcher (or "
                        f"rank 0) is running and HVDLITE_STORE_ADDR/PORT point to it"
                    ) from error
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _authenticate(self, secret):
        """Note [Store handshake]. The greeting may wait for the store to
        accept (up to `timeout`); the rest of the handshake gets
        HANDSHAKE_TIMEOUT_S, so a listener that stalls it cannot hold a
        candidate address (hvdlite/runner/agent.py) for long."""
        try:
            greeting = recv_exact(self._sock, len(MAGIC) + NONCE_SIZE)
        except OSError as error:
            raise _Dropped() from error
        if not greeting.startswith(MAGIC):
            raise StoreError(f"{self._address} is not an hvdlite rendezvous store, or one of "
                             f"another hvdlite version (unexpected greeting {greeting[:4]!r})")
        server_nonce, client_nonce = greeting[len(MAGIC):], new_nonce()
        self._sock.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            self._sock.sendall(client_nonce + client_proof(secret, server_nonce, client_nonce))
            verdict = recv_exact(self._sock, 1)
        except OSError as error:
            raise _Dropped() from error
        if verdict != ACCEPTED:
            raise StoreError(f"the rendezvous store at {self._address} rejected this "
                             f"client's secret; HVDLITE_SECRET must be the one the "
                             f"launcher generated for this job")
        proof = self._recv(DIGEST_SIZE)
        if not digests_match(server_proof(secret, server_nonce, client_nonce), proof):
            raise StoreError(f"the listener at {self._address} answered as the rendezvous "
                             f"store but could not prove the job's secret, so this client "
                             f"refused it: another program (or another job's store) holds "
                             f"that address, or something in between relays the "
                             f"connection; check HVDLITE_STORE_ADDR/PORT")
        return Channel(self._sock, session_key(secret, server_nonce, client_nonce),
                       CLIENT_TO_SERVER, SERVER_TO_CLIENT)

    def _recv(self, size):
        try:
            return recv_exact(self._sock, size)
        except OSError as error:
            raise StoreError(f"lost the connection to the rendezvous store at "
                             f"{self._address}: {error}") from error

    def _request(self, command, fields, socket_timeout=None):
        with self._lock:
            if self._broken is not None:
                raise StoreError(f"the connection to the rendezvous store at {self._address} "
                                 f"failed earlier ({self._broken}) and cannot be used")
            try:
                self._sock.settimeout(socket_timeout or self.timeout)
                self._channel.send(command, fields)
                status, reply = self._channel.recv()
            except IntegrityError as error:
                self._broken = str(error)
                raise StoreError(f"a frame from the rendezvous store at {self._address} "
                                 f"(request {chr(command)!r}) was refused: {error}") from error
            except OSError as error:
                # A half-read reply would desynchronise every later one.
                self._broken = str(error)
                raise StoreError(f"request {chr(command)!r} to the rendezvous store at "
                                 f"{self._address} failed: {error}") from error
            if status == STATUS_TAMPERED:
                self._broken = "the store found a tampered request"
                raise StoreError(f"the rendezvous store at {self._address} closed this "
                                 f"connection: {reply[0].decode('utf-8', 'replace')}")
        if status == STATUS_ERROR:
            raise StoreError(f"the rendezvous store at {self._address} refused request "
                             f"{chr(command)!r}: {reply[0].decode('utf-8', 'replace')}")
        return status, reply
