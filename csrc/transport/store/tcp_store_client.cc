// Client of the launcher's rendezvous store. The wire protocol is described
// once, in hvdlite/store/protocol.py; this file follows it byte for byte.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "common/hmac.h"
#include "transport/store.h"
#include "transport/tcp/socket.h"

namespace hvdlite::transport {
namespace {

using tcp::Deadline;
using tcp::SocketError;

constexpr char kMagic[4] = {'H', 'V', 'D', 'S'};
constexpr size_t kNonceSize = 16;
constexpr const char* kClientLabel = "hvdlite-store-client";
constexpr uint8_t kStatusOk = 0, kStatusTimeout = 1, kStatusAbsent = 2, kStatusError = 3;
// Beyond a get's own wait, how long the store may take to answer anything.
constexpr std::chrono::milliseconds kMinReplyLimit = std::chrono::seconds(30);

void putU32(std::string* out, size_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(value >> shift));
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
    try {
      socket_ = tcp::Socket::connect(host, port, connect_timeout);
    } catch (const TransportError& error) {
      throw TransportError(detail::concat(
          "cannot reach the rendezvous store: ", error.what(), "; check that the launcher (or ",
          "rank 0) is running and HVDLITE_STORE_ADDR/PORT point to it"));
    }
    socket_.tuneForData(std::chrono::seconds(60));  // the launcher's host
    authenticate(secret, tcp::deadlineAfter(reply_limit_));
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
  void authenticate(const std::string& secret, Deadline deadline) {
    char greeting[sizeof(kMagic) + kNonceSize];
    char verdict = 0;
    try {
      socket_.recvAll(greeting, sizeof(greeting), deadline);
      if (std::memcmp(greeting, kMagic, sizeof(kMagic)) != 0) {
        throw TransportError(address_ + " is not an hvdlite rendezvous store (unexpected greeting)");
      }
      std::string message = kClientLabel + std::string(greeting + sizeof(kMagic), kNonceSize);
      Sha256Digest proof = hmacSha256(secret, message);
      socket_.sendAll(proof.data(), proof.size(), deadline);
      socket_.recvAll(&verdict, 1, deadline);
    } catch (const SocketError& error) {
      throw TransportError(detail::concat("lost the connection to the rendezvous store at ",
                                          address_, " during authentication (", error.what(), ")"));
    }
    if (verdict != 1) {
      throw TransportError("rendezvous store at " + address_ + " rejected the job secret "
                           "(authentication failed); is HVDLITE_SECRET the launcher's?");
    }
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
    std::string frame;
    putU32(&frame, body.size());
    frame += body;
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) {
      throw TransportError("the connection to the rendezvous store at " + address_ +
                           " failed earlier and cannot be used");
    }
    try {
      socket_.sendAll(frame.data(), frame.size(), deadline);
      char size_bytes[4];
      socket_.recvAll(size_bytes, 4, deadline);
      std::string payload(getU32(size_bytes), '\0');
      socket_.recvAll(payload.data(), payload.size(), deadline);
      return parse(payload, command);
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
  bool broken_ = false;
};

}  // namespace

std::unique_ptr<Store> connectTcpStore(const std::string& host, int port, const std::string& secret,
                                       std::chrono::milliseconds connect_timeout) {
  return std::make_unique<TcpStoreClient>(host, port, secret, connect_timeout);
}

}  // namespace hvdlite::transport
