"""The rendezvous store: a small authenticated key-value server that the
launcher runs for each job, and a Python client for it.

Ranks use it to find each other (addresses, ports) before any data
connection exists. The wire protocol is described in protocol.py.
"""
import secrets
import socket
import socketserver
import threading
import time

from hvdlite.runner.protocol import (
    ACCEPTED, CMD_ADD, CMD_GET, CMD_SET, CMD_TRY_GET, DIGEST_SIZE, HANDSHAKE_TIMEOUT_S, MAGIC,
    NONCE_SIZE, REJECTED, STATUS_ABSENT, STATUS_ERROR, STATUS_OK, STATUS_TIMEOUT, recv_exact,
    recv_frame, send_frame)
from hvdlite.runner.secret import digests_match, store_client_digest


class StoreError(RuntimeError):
    """The store could not be reached, refused this client, or answered with
    an error."""


# --- server ----------------------------------------------------------------

class _Table:
    """The key-value data. Thread-safe; get() waits on a condition variable,
    so a blocked get never holds up other clients."""

    def __init__(self):
        self._data = {}
        self._cond = threading.Condition()
        self._closed = False

    def set(self, key, value):
        with self._cond:
            self._data[key] = value
            self._cond.notify_all()

    def get(self, key, timeout_s):
        """Waits until `key` exists (None = no limit); returns None on timeout."""
        with self._cond:
            self._cond.wait_for(lambda: key in self._data or self._closed, timeout_s)
            return self._data.get(key)

    def add(self, key, delta):
        with self._cond:
            current = self._data.get(key, b"0")
            try:
                value = int(current) + delta
            except ValueError:
                raise ValueError(f"value of key {key!r} is not a decimal integer: "
                                 f"{current[:40]!r}") from None
            self._data[key] = str(value).encode("ascii")
            self._cond.notify_all()
            return self._data[key]

    def try_get(self, key):
        with self._cond:
            return self._data.get(key)

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Wakes every waiting get(); they return what they have (or None)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _handle_request(table, command, fields):
    """Runs one request; returns (status, response fields)."""
    if command == CMD_SET and len(fields) == 2:
        table.set(fields[0], fields[1])
        return STATUS_OK, []
    if command == CMD_GET and len(fields) == 2:
        timeout_ms = int(fields[1])
        value = table.get(fields[0], None if timeout_ms < 0 else timeout_ms / 1000)
        if value is None and table.closed:
            # Not a timeout: the store is going away. Dropping the connection
            # tells the client so.
            raise ConnectionError("the store is stopping")
        return (STATUS_TIMEOUT, []) if value is None else (STATUS_OK, [value])
    if command == CMD_ADD and len(fields) == 2:
        return STATUS_OK, [table.add(fields[0], int(fields[1]))]
    if command == CMD_TRY_GET and len(fields) == 1:
        value = table.try_get(fields[0])
        return (STATUS_ABSENT, []) if value is None else (STATUS_OK, [value])
    raise ValueError(f"unknown command {bytes([command])!r} with {len(fields)} fields")


class _TcpServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    block_on_close = False  # StoreServer.stop() joins the client threads itself
    request_queue_size = 1024  # every rank connects at once at start-up


class _Connection(socketserver.BaseRequestHandler):
    def handle(self):
        self.server.store._serve(self.request)


class StoreServer:
    """Serves one job's store on a background thread, one thread per client.

        server = StoreServer(secret, host="127.0.0.1")   # port 0: any free port
        server.start(); ...; server.stop()
    """

    def __init__(self, secret, host="0.0.0.0", port=0):
        self._secret = secret
        self._table = _Table()
        self._tcp = _TcpServer((host, port), _Connection)
        self._tcp.store = self
        self._clients = {}  # socket -> the thread serving it
        self._lock = threading.Lock()
        self._stopping = False
        self._thread = None

    @property
    def port(self):
        return self._tcp.server_address[1]

    def start(self):
        self._thread = threading.Thread(target=self._tcp.serve_forever, args=(0.1,),
                                        name="hvdlite-store", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Closes the listener and every client connection, and joins all threads."""
        if self._thread is not None:
            self._tcp.shutdown()
            self._thread.join()
            self._thread = None
        self._tcp.server_close()
        self._table.close()
        with self._lock:
            self._stopping = True
            clients = list(self._clients.items())
        for sock, _ in clients:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the client
        for _, thread in clients:
            thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _serve(self, sock):
        with self._lock:
            if self._stopping:
                return  # accepted just before stop(); stop() will not wait for it
            self._clients[sock] = threading.current_thread()
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._authenticate(sock):
                self._serve_requests(sock)
        except OSError:
            pass  # the client went away; nothing to answer
        finally:
            with self._lock:
                self._clients.pop(sock, None)

    def _authenticate(self, sock):
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        nonce = secrets.token_bytes(NONCE_SIZE)
        sock.sendall(MAGIC + nonce)
        digest = recv_exact(sock, DIGEST_SIZE)
        accepted = digests_match(store_client_digest(self._secret, nonce), digest)
        sock.sendall(ACCEPTED if accepted else REJECTED)
        sock.settimeout(None)
        return accepted

    def _serve_requests(self, sock):
        while True:
            command, fields = recv_frame(sock)
            try:
                status, reply = _handle_request(self._table, command, fields)
            except ValueError as error:
                status, reply = STATUS_ERROR, [str(error).encode("utf-8")]
            send_frame(sock, status, reply)


# --- client ----------------------------------------------------------------

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
        self._sock = self._connect(host, port, timeout)
        try:
            self._authenticate(secret)
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
        greeting = self._recv(len(MAGIC) + NONCE_SIZE)
        if not greeting.startswith(MAGIC):
            raise StoreError(f"{self._address} is not an hvdlite rendezvous store "
                             f"(unexpected greeting {greeting[:4]!r})")
        self._sock.sendall(store_client_digest(secret, greeting[len(MAGIC):]))
        if self._recv(1) != ACCEPTED:
            raise StoreError(f"the rendezvous store at {self._address} rejected this "
                             f"client's secret; HVDLITE_SECRET must be the one the "
                             f"launcher generated for this job")

    def _recv(self, size):
        try:
            return recv_exact(self._sock, size)
        except OSError as error:
            raise StoreError(f"lost the connection to the rendezvous store at "
                             f"{self._address}: {error}") from error

    def _request(self, command, fields, socket_timeout=None):
        with self._lock:
            try:
                self._sock.settimeout(socket_timeout or self.timeout)
                send_frame(self._sock, command, fields)
                status, reply = recv_frame(self._sock)
            except OSError as error:
                raise StoreError(f"request {chr(command)!r} to the rendezvous store at "
                                 f"{self._address} failed: {error}") from error
        if status == STATUS_ERROR:
            raise StoreError(f"the rendezvous store at {self._address} refused request "
                             f"{chr(command)!r}: {reply[0].decode('utf-8', 'replace')}")
        return status, reply
