"""The rendezvous store's wire protocol. The server (server.py), the Python
client (client.py) and the core's C++ client all speak exactly this:

  Handshake. The server sends b"HVDS" and a 16-byte random nonce. The client
  answers with the 32-byte HMAC-SHA256(key=secret as UTF-8,
  message=b"hvdlite-store-client" + nonce), store_client_digest below. The
  server replies one byte: 0x01 accepted, or 0x00 rejected and closes the
  connection.

  Frames. Every request and response is a u32 big-endian length N and then N
  bytes. A request is one command byte and its fields; a response is one
  status byte and its fields. A field is a u32 big-endian length and bytes.

  Commands (status 0 = ok):
    b'S' set(key, value)          -> 0
    b'G' get(key, timeout_ms)     -> 0 [value] once the key exists, 1 on timeout.
                                     timeout_ms is decimal ASCII; negative waits
                                     without limit.
    b'A' add(key, delta)          -> 0 [new value]; delta and values are decimal
                                     ASCII integers, an absent key counts as 0.
    b'T' tryget(key)              -> 0 [value], or 2 if the key is absent.
  A malformed request gets status 3 and one field: a UTF-8 message.
"""
import hashlib
import hmac
import struct

MAGIC = b"HVDS"
NONCE_SIZE = 16
DIGEST_SIZE = 32
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

# Only authenticated clients can send frames, so this only guards against a
# buggy client asking the server to allocate something absurd.
MAX_FRAME_SIZE = 1 << 28
# A connection that has not proven the secret by then is dropped.
HANDSHAKE_TIMEOUT_S = 10.0

U32 = struct.Struct(">I")

# Mixed into the digest so that a digest made for the store can never be
# replayed as the proof for some other kind of connection.
STORE_CLIENT_LABEL = b"hvdlite-store-client"


def store_client_digest(secret, nonce):
    """The 32 bytes a store client sends to prove it knows `secret`."""
    return hmac.new(secret.encode("utf-8"), STORE_CLIENT_LABEL + nonce,
                    hashlib.sha256).digest()


def digests_match(expected, received):
    """Compares two digests in constant time."""
    return hmac.compare_digest(expected, received)


def recv_exact(sock, size):
    """Reads exactly `size` bytes; raises ConnectionError if the peer closes first."""
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def send_frame(sock, head, fields):
    """Sends one frame: the head byte (command or status), then each field."""
    parts = [bytes([head])]
    for field in fields:
        parts += [U32.pack(len(field)), field]
    payload = b"".join(parts)
    sock.sendall(U32.pack(len(payload)) + payload)


def recv_frame(sock):
    """Returns (head byte, [fields]) of the next frame."""
    (size,) = U32.unpack(recv_exact(sock, 4))
    if size < 1 or size > MAX_FRAME_SIZE:
        raise ConnectionError(f"bad frame length {size}")
    payload = recv_exact(sock, size)
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
