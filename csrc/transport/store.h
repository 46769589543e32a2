// The rendezvous store: a small key-value service through which ranks find
// each other. In a job it is served by the launcher (hvdlite/store/server.py)
// or, under torchrun, by rank 0; C++ tests use InMemoryStore shared by threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <map>
#include <string>

namespace hvdlite::transport {

// Thread-safe. Keys and values are arbitrary bytes.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists, then returns its value. Throws Timeout naming
  // the key and how long it waited.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds delta to the integer stored at key (0 if absent); returns the result.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Returns true and the value if key exists now, without waiting.
  virtual bool tryGet(const std::string& key, std::string* value) = 0;
};

// For tests that run ranks as threads of one process.
class InMemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool tryGet(const std::string& key, std::string* value) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

// Client of the launcher's TCP store. Connects, and client and store each
// prove the job secret over fresh nonces (Note [Store handshake] in
// hvdlite/store/protocol.py, the wire format); every frame after that carries
// an HMAC under the session key (Note [Store frames]). Throws TransportError
// naming host:port when unreachable, "authentication failed" on a wrong
// secret, "could not prove the job's secret" for a listener that is not the
// job's store, and "tampered with" for a frame that fails its check (the
// client is unusable after that).
std::unique_ptr<Store> connectTcpStore(const std::string& host, int port, const std::string& secret,
                                       std::chrono::milliseconds connect_timeout);

}  // namespace hvdlite::transport
