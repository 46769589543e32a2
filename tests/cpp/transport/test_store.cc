// Tests InMemoryStore and the TCP store client (csrc/transport/store/). The
// client talks to a small server written here from the wire protocol in
// hvdlite/store/protocol.py, so these tests need no Python.
#include <atomic>
#include <thread>

#include "common/errors.h"
#include "common/hmac.h"
#include "testing.h"
#include "transport/store.h"
#include "transport/tcp/socket.h"

using namespace hvdlite;
using namespace hvdlite::transport;
using std::chrono::milliseconds;

namespace {

uint32_t readU32(tcp::Socket& socket) {
  unsigned char b[4];
  socket.recvAll(b, 4);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

std::string u32(uint64_t value) {
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
  return out;
}

std::string u64(uint64_t value) {
  std::string out;
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
  return out;
}

std::string bytes(const Sha256Digest& digest) {
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

// HMAC(key, label 0x00 S C): protocol.py's proofs and session key.
std::string keyed(const std::string& key, const std::string& label, const std::string& s,
                  const std::string& c) {
  return bytes(hmacSha256(key, label + std::string(1, '\0') + s + c));
}

// What the fake store does wrong, to show the client notices.
enum class Misbehaviour {
  kNone,
  kRogueProof,       // answers "accepted" without knowing the secret
  kFlipReplyBit,     // flips a bit in its first reply after the handshake
  kReplayReply,      // sends its first reply again as the second
  kAbsurdLength,     // claims a 4 GiB reply
  kDropFirst,        // closes the first connection after its greeting, as a flooded store does
};

// Serves one client from an InMemoryStore, as the launcher's store would
// (Note [Store handshake] and Note [Store frames] in hvdlite/store/protocol.py).
class FakeStoreServer {
 public:
  explicit FakeStoreServer(std::string secret, Misbehaviour misbehaviour = Misbehaviour::kNone)
      : secret_(std::move(secret)),
        misbehaviour_(misbehaviour),
        listener_(tcp::Socket::listen("127.0.0.1", 0)) {
    thread_ = std::thread([this] { serveOne(); });
  }
  ~FakeStoreServer() { thread_.join(); }
  int port() const { return listener_.localPort(); }

 private:
  void serveOne() {
    if (misbehaviour_ == Misbehaviour::kDropFirst) {
      tcp::Socket first = listener_.accept(tcp::deadlineAfter(std::chrono::seconds(5)), nullptr);
      std::string greeting = "HVS2" + randomBytes(16);
      if (first.valid()) first.sendAll(greeting.data(), greeting.size());
    }  // closed here, before the client's retry is accepted
    tcp::Socket client = listener_.accept(tcp::deadlineAfter(std::chrono::seconds(5)), nullptr);
    if (!client.valid()) return;
    try {
      std::string s = randomBytes(16);
      std::string greeting = "HVS2" + s;
      client.sendAll(greeting.data(), greeting.size());
      char answer[48];
      client.recvAll(answer, sizeof(answer));
      std::string c(answer, 16);
      std::string expected = keyed(secret_, "hvdlite-store-client", s, c);
      bool proven = constantTimeEqual(answer + 16, expected.data(), 32);
      if (misbehaviour_ == Misbehaviour::kRogueProof) {
        std::string reply = "\x01" + randomBytes(32);  // cannot compute the real proof
        client.sendAll(reply.data(), reply.size());
        client.recvAll(answer, 1);  // a client that believed it would send a frame now
        return;
      }
      if (!proven) {
        client.sendAll("\0", 1);
        return;
      }
      std::string reply = "\x01" + keyed(secret_, "hvdlite-store-server", s, c);
      client.sendAll(reply.data(), reply.size());
      key_ = keyed(secret_, "hvdlite-store-session", s, c);
      while (true) serveRequest(client);
    } catch (const tcp::SocketError&) {
      // The client closed its connection: the test is over.
    }
  }

  std::string tag(char direction, uint64_t sequence, const std::string& payload) {
    return bytes(hmacSha256(key_, std::string(1, direction) + u64(sequence) +
                                      u32(payload.size()) + payload));
  }

  void serveRequest(tcp::Socket& client) {
    std::string frame(readU32(client), '\0');
    client.recvAll(frame.data(), frame.size());
    char received[32];
    client.recvAll(received, 32);
    std::string expected = tag('C', received_++, frame);
    CHECK(constantTimeEqual(received, expected.data(), 32));
    std::vector<std::string> fields;
    for (size_t at = 1; at < frame.size();) {
      uint32_t n = (uint32_t{uint8_t(frame[at])} << 24) | (uint32_t{uint8_t(frame[at + 1])} << 16) |
                   (uint32_t{uint8_t(frame[at + 2])} << 8) | uint8_t(frame[at + 3]);
      fields.push_back(frame.substr(at + 4, n));
      at += 4 + n;
    }
    std::string value;
    switch (frame[0]) {
      case 'S':
        store_.set(fields[0], fields[1]);
        return reply(client, 0, {});
      case 'G':
        try {
          return reply(client, 0, {store_.get(fields[0], milliseconds(std::stoll(fields[1])))});
        } catch (const Timeout&) {
          return reply(client, 1, {});
        }
      case 'A':
        if (fields[0] == "not-a-number") return reply(client, 3, {"value is not an integer"});
        return reply(client, 0, {std::to_string(store_.add(fields[0], std::stoll(fields[1])))});
      case 'T':
        if (!store_.tryGet(fields[0], &value)) return reply(client, 2, {});
        return reply(client, 0, {value});
    }
  }

  void reply(tcp::Socket& client, char status, const std::vector<std::string>& fields) {
    std::string payload(1, status);
    for (const auto& field : fields) payload += u32(field.size()) + field;
    std::string frame = u32(payload.size()) + payload + tag('S', sent_, payload);
    if (misbehaviour_ == Misbehaviour::kFlipReplyBit && sent_ == 0) frame[4] ^= 0x10;
    if (misbehaviour_ == Misbehaviour::kReplayReply && sent_ == 1) frame = first_reply_;
    if (misbehaviour_ == Misbehaviour::kAbsurdLength && sent_ == 0) {
      frame = u32(0xFFFFFFF0u) + payload;  // and then nothing of the 4 GiB it claims
    }
    if (sent_ == 0) first_reply_ = frame;
    ++sent_;
    client.sendAll(frame.data(), frame.size());
  }

  std::string secret_;
  Misbehaviour misbehaviour_;
  tcp::Socket listener_;
  InMemoryStore store_;
  std::thread thread_;
  std::string key_;
  uint64_t sent_ = 0, received_ = 0;
  std::string first_reply_;
};

// A port nobody listens on: bind one, then let it go.
int closedPort() { return tcp::Socket::listen("127.0.0.1", 0).localPort(); }

}  // namespace

TEST(in_memory_store_set_get_add_tryget) {
  InMemoryStore store;
  store.set("a", std::string("x\0y", 3));
  CHECK_EQ(store.get("a", milliseconds(0)), std::string("x\0y", 3));
  CHECK_EQ(store.add("n", 5), int64_t{5});
  CHECK_EQ(store.add("n", -7), int64_t{-2});
  std::string value;
  CHECK(store.tryGet("n", &value));
  CHECK_EQ(value, std::string("-2"));
  CHECK(!store.tryGet("missing", &value));
  CHECK_THROWS(store.add("a", 1), InvalidArgument, "does not hold a decimal integer");
}

TEST(in_memory_store_get_waits_then_times_out) {
  InMemoryStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    store.set("late", "here");
  });
  CHECK_EQ(store.get("late", milliseconds(5000)), std::string("here"));
  setter.join();
  CHECK_THROWS(store.get("never", milliseconds(30)), Timeout, "key 'never'");
}

TEST(tcp_store_client_round_trip) {
  FakeStoreServer server("s3cret");
  auto store = connectTcpStore("127.0.0.1", server.port(), "s3cret", milliseconds(2000));
  store->set("k", "v");
  CHECK_EQ(store->get("k", milliseconds(100)), std::string("v"));
  CHECK_EQ(store->add("count", 3), int64_t{3});
  CHECK_EQ(store->add("count", 4), int64_t{7});
  std::string value;
  CHECK(store->tryGet("count", &value));
  CHECK_EQ(value, std::string("7"));
  CHECK(!store->tryGet("absent", &value));
  CHECK_THROWS(store->get("absent", milliseconds(50)), Timeout, "key 'absent'");
  CHECK_THROWS(store->add("not-a-number", 1), InvalidArgument, "value is not an integer");
  // Still usable after an error status.
  CHECK_EQ(store->get("k", milliseconds(0)), std::string("v"));
}

TEST(tcp_store_client_wrong_secret) {
  FakeStoreServer server("right");
  std::string address = "127.0.0.1:" + std::to_string(server.port());
  CHECK_THROWS(connectTcpStore("127.0.0.1", server.port(), "wrong", milliseconds(2000)),
               TransportError,
               "rendezvous store at " + address + " rejected the job secret (authentication failed)");
}

TEST(tcp_store_client_connection_refused) {
  int port = closedPort();
  std::string address = "127.0.0.1:" + std::to_string(port);
  CHECK_THROWS(connectTcpStore("127.0.0.1", port, "s", milliseconds(300)), TransportError,
               "cannot connect to " + address + " within 300 ms (connection refused)");
  CHECK_THROWS(connectTcpStore("no-such-host.invalid", 1, "s", milliseconds(100)), TransportError,
               "no-such-host.invalid");
}

// A listener on the store's address that does not know the secret (a stale
// address, another program, a man in the middle) must be refused before the
// client reads a single frame from it.
TEST(tcp_store_client_refuses_a_store_that_cannot_prove_the_secret) {
  FakeStoreServer rogue("not-the-secret", Misbehaviour::kRogueProof);
  std::string address = "127.0.0.1:" + std::to_string(rogue.port());
  CHECK_THROWS(connectTcpStore("127.0.0.1", rogue.port(), "s3cret", milliseconds(2000)),
               TransportError,
               "the listener at " + address + " answered as the rendezvous store but could not "
               "prove the job's secret");
}

TEST(tcp_store_client_detects_a_flipped_bit) {
  FakeStoreServer server("s3cret", Misbehaviour::kFlipReplyBit);
  auto store = connectTcpStore("127.0.0.1", server.port(), "s3cret", milliseconds(2000));
  std::string address = "127.0.0.1:" + std::to_string(server.port());
  CHECK_THROWS(store->set("k", "v"), TransportError,
               "frame 0 from the rendezvous store at " + address + " failed its integrity "
               "check; the connection was tampered with, or the peer does not know the job's "
               "secret");
  // The stream is no longer trustworthy: nothing more is read from it.
  CHECK_THROWS(store->set("k", "v"), TransportError, "failed earlier and cannot be used");
}

TEST(tcp_store_client_detects_a_replayed_frame) {
  FakeStoreServer server("s3cret", Misbehaviour::kReplayReply);
  auto store = connectTcpStore("127.0.0.1", server.port(), "s3cret", milliseconds(2000));
  store->set("a", "1");
  CHECK_THROWS(store->set("b", "2"), TransportError, "frame 1 from the rendezvous store");
}

TEST(tcp_store_client_refuses_an_absurd_length_without_allocating_it) {
  FakeStoreServer server("s3cret", Misbehaviour::kAbsurdLength);
  auto store = connectTcpStore("127.0.0.1", server.port(), "s3cret", milliseconds(2000));
  CHECK_THROWS(store->set("k", "v"), TransportError,
               "frame 0 from the rendezvous store at 127.0.0.1:" + std::to_string(server.port()) +
               " claims 4294967280 bytes, outside 1..268435456");
}

// Note [Pending handshakes]: a store flooded with strangers closes the oldest
// handshakes; the client connects again instead of failing the rank.
TEST(tcp_store_client_tries_again_when_the_store_drops_its_handshake) {
  FakeStoreServer server("s3cret", Misbehaviour::kDropFirst);
  auto store = connectTcpStore("127.0.0.1", server.port(), "s3cret", milliseconds(5000));
  store->set("k", "v");
  CHECK_EQ(store->get("k", milliseconds(100)), std::string("v"));
}

int main() { return RUN_ALL_TESTS(); }
