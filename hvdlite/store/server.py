"""The rendezvous store's server: a small authenticated key-value table that
hvdliterun serves for each job (and rank 0 of a job that another launcher
started, hvdlite/common/rendezvous.py). The wire protocol is in protocol.py,
the client in client.py.
"""
import dataclasses
import errno
import logging
import selectors
import socket
import threading
import time

from hvdlite.store.protocol import (
    ACCEPTED, CLIENT_TO_SERVER, CMD_ADD, CMD_GET, CMD_SET, CMD_TRY_GET, DIGEST_SIZE,
    HANDSHAKE_TIMEOUT_S, MAGIC, NONCE_SIZE, REJECTED, SERVER_TO_CLIENT, STATUS_ABSENT,
    STATUS_ERROR, STATUS_OK, STATUS_TAMPERED, STATUS_TIMEOUT, Channel, IntegrityError,
    client_proof, digests_match, new_nonce, server_proof, session_key)

_log = logging.getLogger("hvdlite.store")

# Note [Pending handshakes]
# Anyone who can reach the port can open connections, so a connection costs
# the server nothing but a socket until it has proven the secret: one thread
# runs every pending handshake from a selector, each gets HANDSHAKE_TIMEOUT_S
# for the whole exchange (a peer trickling a byte a second gains nothing),
# and at most MAX_PENDING_HANDSHAKES wait at once; beyond that the oldest is
# closed, which is the one most likely silent, since a real client finishes
# its handshake within a round trip. Only a proven client gets a thread of
# its own. So silent or refused strangers never hold up the job's ranks: they
# neither use up threads nor stop the server from accepting.
MAX_PENDING_HANDSHAKES = 128
_CLIENT_MESSAGE_SIZE = NONCE_SIZE + DIGEST_SIZE


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


# Note [Listening where offered]
# A store that remote hosts reach listens on the addresses the launcher
# offers them and on loopback for its own machine's ranks, one socket each,
# never on the wildcard: an address the job did not offer (a management
# network, a container bridge) gets no open port. Every listener has the same
# port, so that (address, port) pairs need not be told apart. With port 0 the
# first listener picks a free port and the others take it; when one of the
# other addresses already has that port in use, every listener is closed and
# a fresh port tried.
_PORT_ATTEMPTS = 20


def _listen_on(hosts, port):
    """Listening sockets, one per address in `hosts`, all on one port (`port`,
    or a free one when 0); raises create_server's OSError, which names the
    address that failed."""
    if not hosts:
        raise ValueError("the store needs at least one address to listen on")
    attempts = 1 if port else _PORT_ATTEMPTS
    for attempt in range(1, attempts + 1):
        listeners = []
        try:
            for host in hosts:
                listeners.append(_listener(host, listeners[0].getsockname()[1] if listeners
                                           else port))
            return listeners
        except OSError as error:
            for listener in listeners:
                listener.close()
            # Only a port that the first address chose may be given up for another.
            if not (listeners and error.errno == errno.EADDRINUSE and attempt < attempts):
                raise


def _listener(host, port):
    # Every rank connects at once at start-up, hence the long backlog. An
    # error's message names the address (create_server adds it).
    listener = socket.create_server((host, port), backlog=1024)
    listener.setblocking(False)
    return listener


@dataclasses.dataclass
class _Pending:
    """A connection whose handshake is under way (Note [Pending handshakes])."""
    sock: socket.socket
    peer: str  # host:port, for the log
    nonce: bytes  # the server's
    deadline: float  # time.monotonic() by which the handshake must be done
    received: bytes = b""  # so far of the client's nonce and proof


class StoreServer:
    """Serves one job's store on a background thread: one thread runs every
    pending handshake, and each authenticated client gets a thread of its own.

        server = StoreServer(secret, host="127.0.0.1")   # port 0: any free port
        server = StoreServer(secret, host=["127.0.0.1", "10.0.0.7"])  # one socket each
        server.start(); ...; server.stop()

    `host` is one address or several: the store listens on each, on one port
    (Note [Listening where offered]).
    """

    def __init__(self, secret, host="127.0.0.1", port=0):
        self._secret = secret
        self._table = _Table()
        self._listeners = _listen_on([host] if isinstance(host, str) else list(host), port)
        self._clients = {}  # socket -> the thread serving it
        self._lock = threading.Lock()
        self._stopping = False
        self._stop_accepting = threading.Event()
        self._thread = None

    @property
    def port(self):
        return self._listeners[0].getsockname()[1]

    @property
    def addresses(self):
        """The addresses the store listens on, in the order given."""
        return [listener.getsockname()[0] for listener in self._listeners]

    def start(self):
        self._thread = threading.Thread(target=self._accept_and_authenticate,
                                        name="hvdlite-store", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Closes the listener and every client connection, and joins all threads."""
        if self._thread is not None:
            self._stop_accepting.set()
            self._thread.join()
            self._thread = None
        for listener in self._listeners:
            listener.close()
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

    # --- handshakes (Note [Pending handshakes]) ------------------------------

    def _accept_and_authenticate(self):
        pending = {}  # socket -> _Pending, oldest first
        with selectors.DefaultSelector() as selector:
            for listener in self._listeners:
                selector.register(listener, selectors.EVENT_READ, data=listener)
            while not self._stop_accepting.is_set():
                now = time.monotonic()
                wait = 0.1 if not pending else \
                    max(0.0, min(0.1, next(iter(pending.values())).deadline - now))
                for key, _ in selector.select(wait):
                    if key.data is not None:  # one of the listeners
                        self._accept_all(key.data, selector, pending)
                    elif key.fileobj in pending:
                        self._advance(selector, pending, pending[key.fileobj])
                now = time.monotonic()
                while pending and next(iter(pending.values())).deadline <= now:
                    self._drop(selector, pending, next(iter(pending.values())))
            for connection in list(pending.values()):
                self._drop(selector, pending, connection)

    def _accept_all(self, listener, selector, pending):
        # At most a cap's worth per round, so that a flood of connections
        # cannot keep this thread from reading the handshakes under way.
        for _ in range(MAX_PENDING_HANDSHAKES):
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # e.g. out of file descriptors: try again later
                _log.warning("rendezvous store: cannot accept a connection: %s", error)
                time.sleep(0.05)  # the listener stays readable; do not spin
                return
            connection = _Pending(sock, f"{peer[0]}:{peer[1]}", new_nonce(),
                                  time.monotonic() + HANDSHAKE_TIMEOUT_S)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                greeting = MAGIC + connection.nonce
                # A fresh socket's send buffer takes these few bytes whole.
                if sock.send(greeting) != len(greeting):
                    raise ConnectionError("greeting not sent whole")
            except OSError:
                sock.close()
                continue
            pending[sock] = connection
            selector.register(sock, selectors.EVENT_READ)
            if len(pending) > MAX_PENDING_HANDSHAKES:
                self._drop(selector, pending, next(iter(pending.values())))

    def _advance(self, selector, pending, connection):
        try:
            chunk = connection.sock.recv(_CLIENT_MESSAGE_SIZE - len(connection.received))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(selector, pending, connection)
            return
        connection.received += chunk
        if len(connection.received) < _CLIENT_MESSAGE_SIZE:
            return
        selector.unregister(connection.sock)
        del pending[connection.sock]
        client_nonce, proof = connection.received[:NONCE_SIZE], connection.received[NONCE_SIZE:]
        if not digests_match(client_proof(self._secret, connection.nonce, client_nonce), proof):
            _log.debug("rendezvous store: %s did not prove the job secret", connection.peer)
            try:
                connection.sock.send(REJECTED)
            except OSError:
                pass  # it is gone already; the verdict stands
            connection.sock.close()
            return
        try:
            connection.sock.setblocking(True)
            connection.sock.settimeout(max(0.01, connection.deadline - time.monotonic()))
            connection.sock.sendall(
                ACCEPTED + server_proof(self._secret, connection.nonce, client_nonce))
            connection.sock.settimeout(None)
        except OSError:
            connection.sock.close()
            return
        key = session_key(self._secret, connection.nonce, client_nonce)
        threading.Thread(target=self._serve, args=(connection.sock, connection.peer, key),
                         name="hvdlite-store-client", daemon=True).start()

    @staticmethod
    def _drop(selector, pending, connection):
        selector.unregister(connection.sock)
        del pending[connection.sock]
        connection.sock.close()

    # --- authenticated clients ----------------------------------------------

    def _serve(self, sock, peer, key):
        with self._lock:
            if self._stopping:
                sock.close()
                return  # authenticated just before stop(); stop() will not wait for it
            self._clients[sock] = threading.current_thread()
        channel = Channel(sock, key, SERVER_TO_CLIENT, CLIENT_TO_SERVER)
        try:
            self._serve_requests(channel)
        except IntegrityError as error:
            _log.warning("rendezvous store: dropped the connection from %s: %s", peer, error)
            try:
                channel.send(STATUS_TAMPERED, [f"a request from this client failed its integrity "
                                               f"check at the store ({error})".encode("utf-8")])
            except OSError:
                pass  # the relay or the client is gone
        except OSError:
            pass  # the client went away; nothing to answer
        finally:
            with self._lock:
                self._clients.pop(sock, None)
            sock.close()

    def _serve_requests(self, channel):
        while True:
            command, fields = channel.recv()
            try:
                status, reply = _handle_request(self._table, command, fields)
            except ValueError as error:
                status, reply = STATUS_ERROR, [str(error).encode("utf-8")]
            channel.send(status, reply)
