// Client of the launcher's rendezvous store. The wire protocol is described
// once, in hvdlite/store/protocol.py (Note [Store handshake], Note [Store
// frames]); this file follows it byte for byte.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <string_view>
#include <thread>
#include <vector>

#include "common/hmac.h"
#include "transport/store.h"
#include "transport/tcp/socket.h"

namespace hvdlite::transport {
namespace {

using tcp::Deadline;
using tcp::SocketError;

constexpr char kMagic[4] = {'H', 'V', 'S', '2'};
constexpr size_t kNonceSize = 16;
constexpr const char* kClientLabel = "hvdlite-store-client";
constexpr const char* kServerLabel = "hvdlite-store-server";
constexpr const char* kSessionLabel = "hvdlite-store-session";
constexpr char kClientToServer = 'C', kServerToClient = 'S';
constexpr uint8_t kStatusOk = 0, kStatusTimeout = 1, kStatusAbsent = 2, kStatusError = 3,
                  kStatusTampered = 4;
// protocol.py's MAX_FRAME_SIZE: checked before any buffer is made.
constexpr size_t kMaxFrameSize = size_t{1} << 28;
// A payload is read in pieces of at most this, so a forged length costs no
// more memory than the bytes that actually arrive.
constexpr size_t kReadPiece = size_t{1} << 20;
// Beyond a get's own wait, how long the store may take to answer anything.
constexpr std::chrono::milliseconds kMinReplyLimit = std::chrono::seconds(30);
// protocol.py's HANDSHAKE_TIMEOUT_S: the handshake after the greeting.
constexpr std::chrono::milliseconds kHandshakeLimit = std::chrono::seconds(5);
constexpr const char* kTampered =
    "the connection was tampered with, or the peer does not know the job's secret";

void putU32(std::string* out, uint64_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(value >> shift));
}

void putU64(std::string* out, uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(value >> shift));
}

std::string digestBytes(const Sha256Digest& digest) {
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

// HMAC-SHA256(key, label 0x00 server nonce, client nonce): the proofs and the
// session key of Note [Store handshake].
std::string keyed(const std::string& key, const char* label, const std::string& server_nonce,
                  const std::string& client_nonce) {
  std::string message = label;
  message.push_back('\0');
  message += server_nonce;
  message += client_nonce;
  return digestBytes(hmacSha256(key, message));
}

uint32_t getU32(const char* p) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

struct Response {
  uint8_t status;
  std::vector<std::string> fields;
};

class TcpStoreClient : public Store {
 public:
  TcpStoreClient(const std::string& host, int port, const std::string& secret,
                 std::chrono::milliseconds connect_timeout)
      : address_(tcp::formatAddress(host, port)),
        reply_limit_(std::max(connect_timeout, kMinReplyLimit)) {
    // Note [Pending handshakes] (hvdlite/store/server.py): a store flooded
    // with strangers closes the oldest handshakes, so one that ends before
    // the store's verdict is tried again while connect_timeout lasts.
    Deadline deadline = tcp::deadlineAfter(connect_timeout);
    std::chrono::milliseconds left = connect_timeout, backoff(50);
    while (true) {
      try {
        socket_ = tcp::Socket::connect(host, port, left);
      } catch (const TransportError& error) {
        throw TransportError(detail::concat(
            "cannot reach the rendezvous store: ", error.what(), "; check that the launcher (or ",
            "rank 0) is running and HVDLITE_STORE_ADDR/PORT point to it"));
      }
      socket_.tuneForData(std::chrono::seconds(60));  // the launcher's host
      std::string dropped = authenticate(secret, tcp::deadlineAfter(reply_limit_));
      if (dropped.empty()) return;
      if (tcp::Clock::now() + backoff > deadline) {
        throw TransportError(detail::concat(
            "lost the connection to the rendezvous store at ", address_, " during "
            "authentication, and again on every retry for ", connect_timeout.count(), " ms (",
            dropped, ")"));
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
      left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - tcp::Clock::now()),
                      std::chrono::milliseconds(100));
    }
  }

  void set(const std::string& key, const std::string& value) override {
    request('S', {key, value}, tcp::deadlineAfter(reply_limit_));
  }

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    Deadline deadline = timeout.count() < 0 ? tcp::kNoDeadline
                                            : tcp::deadlineAfter(timeout + reply_limit_);
    Response response = request('G', {key, std::to_string(timeout.count())}, deadline);
    if (response.status == kStatusTimeout) {
      throw Timeout(detail::concat("key '", key, "' did not appear in the rendezvous store at ",
                                   address_, " within ", timeout.count(), " ms; another rank may ",
                                   "have failed to start or to reach the store"));
    }
    return expectValue(response, "get");
  }

  int64_t add(const std::string& key, int64_t delta) override {
    Response response = request('A', {key, std::to_string(delta)}, tcp::deadlineAfter(reply_limit_));
    std::string value = expectValue(response, "add");
    try {
      return std::stoll(value);
    } catch (const std::exception&) {
      throw TransportError("the rendezvous store at " + address_ + " answered add with '" +
                           value.substr(0, 40) + "', not an integer");
    }
  }

  bool tryGet(const std::string& key, std::string* value) override {
    Response response = request('T', {key}, tcp::deadlineAfter(reply_limit_));
    if (response.status == kStatusAbsent) return false;
    std::string found = expectValue(response, "tryget");
    if (value != nullptr) *value = std::move(found);
    return true;
  }

 private:
  // Note [Store handshake]. The greeting may wait until the store accepts
  // (`deadline`); the rest gets kHandshakeLimit, so a listener that stalls it
  // cannot hold a rank for long. Nothing is read as a frame before the store
  // has proven the secret.
  //
  // Returns why, when the connection ended before the store's verdict (the
  // caller may try again); "" once both sides have proven the secret.
  std::string authenticate(const std::string& secret, Deadline deadline) {
    char greeting[sizeof(kMagic) + kNonceSize];
    char verdict = 0;
    char proof[kSha256Size];
    std::string server_nonce, client_nonce = randomBytes(kNonceSize);
    Deadline handshake = tcp::kNoDeadline;
    try {
      socket_.recvAll(greeting, sizeof(greeting), deadline);
      if (std::memcmp(greeting, kMagic, sizeof(kMagic)) != 0) {
        throw TransportError(address_ + " is not an hvdlite rendezvous store, or one of another "
                                        "hvdlite version (unexpected greeting)");
      }
      server_nonce.assign(greeting + sizeof(kMagic), kNonceSize);
      handshake = tcp::deadlineAfter(kHandshakeLimit);
      std::string answer = client_nonce + keyed(secret, kClientLabel, server_nonce, client_nonce);
      socket_.sendAll(answer.data(), answer.size(), handshake);
      socket_.recvAll(&verdict, 1, handshake);
    } catch (const SocketError& error) {
      std::string why = error.what();
      return why.empty() ? "connection closed" : why;
    }
    try {
      if (verdict == 1) socket_.recvAll(proof, sizeof(proof), handshake);
    } catch (const SocketError& error) {
      throw TransportError(detail::concat("lost the connection to the rendezvous store at ",
                                          address_, " during authentication (", error.what(), ")"));
    }
    if (verdict != 1) {
      throw TransportError("rendezvous store at " + address_ + " rejected the job secret "
                           "(authentication failed); is HVDLITE_SECRET the launcher's?");
    }
    std::string expected = keyed(secret, kServerLabel, server_nonce, client_nonce);
    if (!constantTimeEqual(expected.data(), proof, kSha256Size)) {
      throw TransportError(
          "the listener at " + address_ + " answered as the rendezvous store but could not "
          "prove the job's secret, so this rank refused it: another program (or another job's "
          "store) holds that address, or something in between relays the connection; check "
          "HVDLITE_STORE_ADDR/PORT");
    }
    session_key_ = keyed(secret, kSessionLabel, server_nonce, client_nonce);
    return "";
  }

  // Note [Store frames]: the tag of one frame.
  std::string tag(char direction, uint64_t sequence, const std::string& payload) const {
    std::string message(1, direction);
    putU64(&message, sequence);
    putU32(&message, payload.size());
    message += payload;
    return digestBytes(hmacSha256(session_key_, message));
  }

  [[noreturn]] void failIntegrity(const std::string& what) {
    broken_ = true;
    throw TransportError(detail::concat("frame ", received_, " from the rendezvous store at ",
                                        address_, " ", what, "; ", kTampered));
  }

  // The next frame's payload, once its length and tag are checked.
  std::string receiveFrame(Deadline deadline) {
    char size_bytes[4];
    socket_.recvAll(size_bytes, 4, deadline);
    size_t size = getU32(size_bytes);
    if (size < 1 || size > kMaxFrameSize) {
      failIntegrity(detail::concat("claims ", size, " bytes, outside 1..", kMaxFrameSize));
    }
    // The payload and its tag, read together: one read for a small frame.
    std::string payload;
    while (payload.size() < size + kSha256Size) {
      size_t piece = std::min(kReadPiece, size + kSha256Size - payload.size());
      size_t at = payload.size();
      payload.resize(at + piece);
      socket_.recvAll(payload.data() + at, piece, deadline);
    }
    std::string received_tag = payload.substr(size);
    payload.resize(size);
    if (!constantTimeEqual(tag(kServerToClient, received_, payload).data(), received_tag.data(),
                           kSha256Size)) {
      failIntegrity("failed its integrity check");
    }
    ++received_;
    return payload;
  }

  // One frame out, one frame back, under the lock: the socket carries one
  // request at a time, so concurrent callers simply queue.
  Response request(char command, std::initializer_list<std::string_view> fields,
                   Deadline deadline) {
    std::string body(1, command);
    for (std::string_view field : fields) {
      putU32(&body, field.size());
      body.append(field.data(), field.size());
    }
    if (body.size() > kMaxFrameSize) {
      throw InvalidArgument(detail::concat("a request of ", body.size(), " bytes to the ",
                                           "rendezvous store is larger than its limit of ",
                                           kMaxFrameSize, " bytes"));
    }
    std::string frame;
    putU32(&frame, body.size());
    frame += body;
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) {
      throw TransportError("the connection to the rendezvous store at " + address_ +
                           " failed earlier and cannot be used");
    }
    frame += tag(kClientToServer, sent_++, body);
    try {
      socket_.sendAll(frame.data(), frame.size(), deadline);
      return parse(receiveFrame(deadline), command);
    } catch (const SocketError& error) {
      broken_ = true;  // a half-read reply would desynchronise every later one
      throw TransportError(detail::concat("request '", command, "' to the rendezvous store at ",
                                          address_, " failed (", error.what(), ")"));
    }
  }

  Response parse(const std::string& payload, char command) {
    if (payload.empty()) throw SocketError(EPROTO);
    Response response{static_cast<uint8_t>(payload[0]), {}};
    size_t offset = 1;
    while (offset < payload.size()) {
      if (offset + 4 > payload.size()) throw SocketError(EPROTO);
      size_t length = getU32(payload.data() + offset);
      offset += 4;
      if (length > payload.size() - offset) throw SocketError(EPROTO);
      response.fields.emplace_back(payload, offset, length);
      offset += length;
    }
    if (response.status == kStatusTampered) {
      broken_ = true;
      std::string why = response.fields.empty() ? kTampered : response.fields[0];
      throw TransportError(detail::concat("the rendezvous store at ", address_,
                                          " closed this connection: ", why));
    }
    if (response.status == kStatusError) {
      std::string why = response.fields.empty() ? "no reason given" : response.fields[0];
      throw InvalidArgument(detail::concat("the rendezvous store at ", address_,
                                           " refused request '", command, "': ", why));
    }
    return response;
  }

  std::string expectValue(Response& response, const char* what) {
    if (response.status != kStatusOk || response.fields.size() != 1) {
      throw TransportError(detail::concat("unexpected answer from the rendezvous store at ",
                                          address_, " to ", what, " (status ",
                                          int{response.status}, ")"));
    }
    return std::move(response.fields[0]);
  }

  std::string address_;
  std::chrono::milliseconds reply_limit_;
  std::mutex mutex_;
  tcp::Socket socket_;
  std::string session_key_;
  uint64_t sent_ = 0;      // frames sent, and so the next one's sequence number
  uint64_t received_ = 0;  // frames received
  bool broken_ = false;
};

}  // namespace

std::unique_ptr<Store> connectTcpStore(const std::string& host, int port, const std::string& secret,
                                       std::chrono::milliseconds connect_timeout) {
  return std::make_unique<TcpStoreClient>(host, port, secret, connect_timeout);
}

}  // namespace hvdlite::transport
