"""The rendezvous store's server: a small authenticated key-value table that
hvdliterun serves for each job (and rank 0 of a job that another launcher
started, hvdlite/common/rendezvous.py). The wire protocol is in protocol.py,
the client in client.py.
"""
import secrets
import socket
import socketserver
import threading

from hvdlite.store.protocol import (
    ACCEPTED, CMD_ADD, CMD_GET, CMD_SET, CMD_TRY_GET, DIGEST_SIZE, HANDSHAKE_TIMEOUT_S, MAGIC,
    NONCE_SIZE, REJECTED, STATUS_ABSENT, STATUS_ERROR, STATUS_OK, STATUS_TIMEOUT, digests_match,
    recv_exact, recv_frame, send_frame, store_client_digest)

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
