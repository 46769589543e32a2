"""The rendezvous store's wire protocol. The server (server.py), the Python
client (client.py) and the core's C++ client
(csrc/transport/store/tcp_store_client.cc) all speak exactly this.

Note [Store handshake]
Both ends prove the job secret over fresh nonces from both, and the client
believes nothing the server says before the server has proven it too:
  server -> client  MAGIC, nonce S (16 random bytes)
  client -> server  nonce C (16 random bytes),
                    HMAC-SHA256(secret, CLIENT_LABEL 0x00 S C)
  server -> client  0x00 (rejected; closes), or
                    0x01, HMAC-SHA256(secret, SERVER_LABEL 0x00 S C)
The labels differ, so a proof can never be reflected back as the other
side's; the nonces make each proof good for one connection only. A rogue
listener (a stale address, docker0's 172.17.0.1 on another host) or a relay
that does not know the secret cannot produce the server's proof, and the
client refuses it before reading a single frame. Both sides then derive the
session key HMAC-SHA256(secret, SESSION_LABEL 0x00 S C). The server gives
the whole handshake HANDSHAKE_TIMEOUT_S, not each read (Note [Pending
handshakes] in server.py); secret is UTF-8.

Note [Store frames]
Every frame after the handshake, both ways, is
  u32 big-endian length N, N bytes of payload, 32-byte tag
  tag = HMAC-SHA256(session key, direction, u64 sequence, u32 N, payload)
direction is b"C" for client to server and b"S" for server to client, and
each direction counts its frames from 0. A frame that was altered, cut
short, replayed (from this connection or another: the key differs), moved,
or sent the other way fails its tag, and the connection ends with an error
naming the store's address. N is checked against MAX_FRAME_SIZE before any
buffer is made, and the payload is read in chunks, so a forged length costs
no more memory than the bytes that actually arrive. Nothing read from the
store is used (in particular, unpickled) before its tag has been checked.

  A request's payload is one command byte and its fields; a response's is
  one status byte and its fields. A field is a u32 big-endian length and
  bytes.

  Commands (status 0 = ok):
    b'S' set(key, value)          -> 0
    b'G' get(key, timeout_ms)     -> 0 [value] once the key exists, 1 on timeout.
                                     timeout_ms is decimal ASCII; negative waits
                                     without limit.
    b'A' add(key, delta)          -> 0 [new value]; delta and values are decimal
                                     ASCII integers, an absent key counts as 0.
    b'T' tryget(key)              -> 0 [value], or 2 if the key is absent.
  A malformed request gets status 3 and one field: a UTF-8 message. A
  request whose tag fails gets status 4 and one field (a UTF-8 message),
  and the server closes the connection.
"""
import hashlib
import hmac
import secrets
import struct

MAGIC = b"HVS2"
NONCE_SIZE = 16
DIGEST_SIZE = 32
TAG_SIZE = 32
ACCEPTED = b"\x01"
REJECTED = b"\x00"

CMD_SET = ord("S")
CMD_GET = ord("G")
CMD_ADD = ord("A")
CMD_TRY_GET = ord("T")

STATUS_OK = 0
STATUS_TIMEOUT = 1
STATUS_ABSENT = 2
STATUS_ERROR = 3
STATUS_TAMPERED = 4

# The largest frame either side accepts: a value of hvdlite.run's largest
# (hvdlite/runner/task.py: MAX_VALUE_SIZE) with its key and framing.
MAX_FRAME_SIZE = 1 << 28
# The whole handshake, on either side (Note [Pending handshakes]).
HANDSHAKE_TIMEOUT_S = 5.0

U32 = struct.Struct(">I")
_TAG_HEADER = struct.Struct(">cQI")

CLIENT_LABEL = b"hvdlite-store-client"
SERVER_LABEL = b"hvdlite-store-server"
SESSION_LABEL = b"hvdlite-store-session"
CLIENT_TO_SERVER = b"C"
SERVER_TO_CLIENT = b"S"

TAMPERED = ("the connection was tampered with, or the peer does not know the job's "
            "secret")


class IntegrityError(ConnectionError):
    """A frame failed its integrity check (Note [Store frames])."""


def new_nonce():
    return secrets.token_bytes(NONCE_SIZE)


def _keyed(secret, label, server_nonce, client_nonce):
    key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    return hmac.new(key, label + b"\x00" + server_nonce + client_nonce, hashlib.sha256).digest()


def client_proof(secret, server_nonce, client_nonce):
    """What the client sends to prove it knows `secret` (Note [Store handshake])."""
    return _keyed(secret, CLIENT_LABEL, server_nonce, client_nonce)


def server_proof(secret, server_nonce, client_nonce):
    """What the server sends to prove it knows `secret`."""
    return _keyed(secret, SERVER_LABEL, server_nonce, client_nonce)


def session_key(secret, server_nonce, client_nonce):
    """The key that authenticates this connection's frames."""
    return _keyed(secret, SESSION_LABEL, server_nonce, client_nonce)


def digests_match(expected, received):
    """Compares two digests in constant time."""
    return hmac.compare_digest(expected, received)


def recv_exact(sock, size):
    """Reads exactly `size` bytes; raises ConnectionError if the peer closes
    first. Reads at most 1 MiB at a time, so memory grows with what arrives,
    not with what a peer claims."""
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def encode_payload(head, fields):
    """A frame's payload: the head byte (command or status), then each field."""
    parts = [bytes([head])]
    for field in fields:
        parts += [U32.pack(len(field)), field]
    return b"".join(parts)


def decode_payload(payload, size=None):
    """(head byte, [fields]) of a payload whose tag has been checked: the
    first `size` bytes of `payload` (default all)."""
    size = len(payload) if size is None else size
    if not size:
        raise ConnectionError("empty frame")
    fields, offset = [], 1
    while offset < size:
        if offset + 4 > size:
            raise ConnectionError("truncated field length in frame")
        (length,) = U32.unpack_from(payload, offset)
        offset += 4
        if offset + length > size:
            raise ConnectionError("field runs past the end of its frame")
        fields.append(payload[offset:offset + length])
        offset += length
    return payload[0], fields


class Channel:
    """One authenticated connection's frames (Note [Store frames]). Not
    thread-safe: each side sends and receives one frame at a time."""

    def __init__(self, sock, key, outgoing, incoming):
        self.sock = sock
        self._mac = hmac.new(key, digestmod=hashlib.sha256)  # copied per frame
        self._outgoing, self._incoming = outgoing, incoming
        self._sent = 0
        self._received = 0

    def send(self, head, fields):
        payload = encode_payload(head, fields)
        if len(payload) > MAX_FRAME_SIZE:
            raise ValueError(f"a store frame of {len(payload)} bytes is larger than the "
                             f"{MAX_FRAME_SIZE} bytes the store accepts")
        tag = self._tag(self._outgoing, self._sent, payload, len(payload))
        self._sent += 1
        self.sock.sendall(b"".join((U32.pack(len(payload)), payload, tag)))

    def recv(self):
        """(head byte, [fields]) of the next frame; raises IntegrityError for
        a frame that fails its tag or claims an impossible length."""
        (size,) = U32.unpack(recv_exact(self.sock, 4))
        if size < 1 or size > MAX_FRAME_SIZE:
            raise IntegrityError(f"frame {self._received} claims {size} bytes, outside 1.."
                                 f"{MAX_FRAME_SIZE}; {TAMPERED}")
        data = recv_exact(self.sock, size + TAG_SIZE)  # one read for payload and tag
        view = memoryview(data)
        if not digests_match(self._tag(self._incoming, self._received, view[:size], size),
                             view[size:]):
            raise IntegrityError(f"frame {self._received} failed its integrity check; "
                                 f"{TAMPERED}")
        self._received += 1
        return decode_payload(data, size)

    def _tag(self, direction, sequence, payload, size):
        mac = self._mac.copy()
        mac.update(_TAG_HEADER.pack(direction, sequence, size))
        mac.update(payload)
        return mac.digest()
