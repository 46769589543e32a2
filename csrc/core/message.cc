#include "core/message.h"

#include <cstring>
#include <type_traits>

#include "common/checked_math.h"
#include "common/errors.h"

namespace hvdlite::core {
namespace {

// Little-endian-native packing: every rank of a job runs the same build on the
// same architecture, so no byte swapping is needed.
class Writer {
 public:
  template <typename T>
  void pod(T value) {
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void ints(const std::vector<int64_t>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Note [Checked peer messages]
// Every message parsed here came from another process: a request list from
// each rank to the coordinator, a response list from the coordinator, a
// failure record from the store. Authenticated is not the same as correct
// (a bug, another build of hvdlite, a process that got hold of the secret),
// and the coordinator serves every rank, so a bad message must end as a
// failure that names its sender, never as a huge allocation, a read past
// the end, or a wrong size reaching a buffer. So each count is checked
// against the bytes actually left before anything is sized from it (an item
// takes at least its fixed fields' bytes), each enum against its range, and
// what the bytes mean (ranks, shapes, splits, products) by whoever knows the
// process set: the coordinator for requests (Coordinator::add), every rank
// for responses (checkResponse in collective_math.h), with overflow-checked
// arithmetic (common/checked_math.h). The frame itself is capped by the
// transport (Communicator::kMaxMessageBytes).
class Reader {
 public:
  // `what`: "a request list", ...; `sender`: the global rank it came from
  // (-1: not from a rank, e.g. the store), named by every failure.
  Reader(const std::string& in, const char* what, int sender) : in_(in), what_(what), sender_(sender) {}
  template <typename T>
  T pod() {
    need(sizeof(T), "a field");
    T value;
    std::memcpy(&value, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  // An enum of a uint8_t (or int) wire value below `limit`.
  template <typename E, typename Wire = std::underlying_type_t<E>>
  E enumeration(int limit, const char* name) {
    auto raw = pod<Wire>();
    if (static_cast<int64_t>(raw) < 0 || static_cast<int64_t>(raw) >= limit) {
      fail(detail::concat("with ", name, " ", static_cast<int64_t>(raw), " (valid: 0 to ", limit - 1, ")"));
    }
    return static_cast<E>(raw);
  }
  std::string str() {
    auto n = pod<uint32_t>();
    need(n, "a string");
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> ints() {
    const uint32_t n = count("numbers", sizeof(int64_t));
    std::vector<int64_t> v(n);
    if (n > 0) std::memcpy(v.data(), in_.data() + pos_, n * sizeof(int64_t));
    pos_ += n * sizeof(int64_t);
    return v;
  }
  bool done() const { return pos_ == in_.size(); }
  // A count of `items`, each at least `each` bytes long, checked against
  // what is left, so that a bad count fails here instead of allocating for it.
  uint32_t count(const char* items, size_t each) {
    auto n = pod<uint32_t>();
    // n < 2^32 and each is a few dozen bytes: no overflow in 64 bits.
    if (size_t{n} * each > left()) {
      fail(detail::concat("claiming ", n, " ", items, " in ", left(), " bytes (each takes at least ", each, ")"));
    }
    return n;
  }
  void expectDone() const {
    if (!done()) fail(detail::concat("with ", left(), " bytes after its end"));
  }
  [[noreturn]] void fail(const std::string& why) const {
    throwBadPeerMessage(sender_, detail::concat("sent ", what_, " ", why, ", in a message of ", in_.size(), " bytes"));
  }

 private:
  size_t left() const { return in_.size() - pos_; }
  void need(size_t n, const char* item) const {
    if (n > left()) fail(detail::concat("cut short: ", item, " of ", n, " bytes at byte ", pos_, " of ", in_.size()));
  }
  const std::string& in_;
  const char* what_;
  int sender_;
  size_t pos_ = 0;
};

void writeSite(Writer& w, const CallSite& site) {
  w.str(site.file);
  w.pod(site.line);
  w.str(site.function);
}

CallSite readSite(Reader& r) {
  CallSite site;
  site.file = r.str();
  site.line = r.pod<int32_t>();
  site.function = r.str();
  return site;
}

void writeStrings(Writer& w, const std::vector<std::string>& strings) {
  w.pod<uint32_t>(static_cast<uint32_t>(strings.size()));
  for (const auto& s : strings) w.str(s);
}

std::vector<std::string> readStrings(Reader& r) {
  std::vector<std::string> out(r.count("strings", sizeof(uint32_t)));
  for (auto& s : out) s = r.str();
  return out;
}

// A flag byte, then the details when there are any.
void writeCall(Writer& w, const RankCall& call) {
  w.pod(call.rank);
  w.str(call.tensor);
  w.str(call.op);
  writeSite(w, call.site);
  w.str(call.value);
  w.pod<uint8_t>(call.blocked ? 1 : 0);
}

// The fewest bytes one item takes on the wire (every string and list in it
// empty): what a claimed count of such items needs at least.
template <typename Item, typename Write>
size_t minimalBytes(Write write) {
  Writer w;
  write(w, Item());
  return w.take().size();
}

void writeDetails(Writer& w, const std::shared_ptr<const ErrorDetails>& details) {
  w.pod<uint8_t>(details ? 1 : 0);
  if (!details) return;
  writeStrings(w, details->tensor_names);
  for (const auto* ranks : {&details->ranks, &details->missing_ranks}) {
    w.pod<uint32_t>(static_cast<uint32_t>(ranks->size()));
    for (int32_t rank : *ranks) w.pod(rank);
  }
  writeStrings(w, details->hosts);
  writeStrings(w, details->lost_hosts);
  w.str(details->field);
  w.pod<uint32_t>(static_cast<uint32_t>(details->calls.size()));
  for (const auto& call : details->calls) writeCall(w, call);
}

std::shared_ptr<const ErrorDetails> readDetails(Reader& r) {
  if (r.pod<uint8_t>() == 0) return nullptr;
  auto details = std::make_shared<ErrorDetails>();
  details->tensor_names = readStrings(r);
  for (auto* ranks : {&details->ranks, &details->missing_ranks}) {
    ranks->resize(r.count("ranks", sizeof(int32_t)));
    for (auto& rank : *ranks) rank = r.pod<int32_t>();
  }
  details->hosts = readStrings(r);
  details->lost_hosts = readStrings(r);
  details->field = r.str();
  static const size_t kMinCallBytes = minimalBytes<RankCall>(writeCall);
  details->calls.resize(r.count("call sites", kMinCallBytes));
  for (auto& call : details->calls) {
    call.rank = r.pod<int32_t>();
    call.tensor = r.str();
    call.op = r.str();
    call.site = readSite(r);
    call.value = r.str();
    call.blocked = r.pod<uint8_t>() != 0;
  }
  return details;
}

}  // namespace

bool Request::sameParameters(const Request& o) const {
  return op == o.op && reduce_op == o.reduce_op && dtype == o.dtype && name == o.name &&
         root_rank == o.root_rank && prescale == o.prescale && postscale == o.postscale &&
         shape == o.shape && splits == o.splits && device == o.device && group == o.group &&
         group_size == o.group_size && process_set_ranks == o.process_set_ranks &&
         process_set_id == o.process_set_id;
}

int64_t Response::elementCount() const {
  // Checked on receipt (checkResponse); a product that overflows here is a bug.
  auto n = checkedProduct(shape);
  HVD_CHECK(n, "the shape ", shapeString(shape), " of '", name, "' has no element count");
  return *n;
}

namespace {

void writeRequest(Writer& w, const Request& r) {
  w.pod(r.rank);
  w.pod(r.op);
  w.pod(r.reduce_op);
  w.pod(r.dtype);
  w.str(r.name);
  w.pod(r.root_rank);
  w.pod(r.prescale);
  w.pod(r.postscale);
  w.ints(r.shape);
  w.ints(r.splits);
  w.pod(r.device);
  w.str(r.group);
  w.pod(r.group_size);
  w.ints(r.process_set_ranks);
  w.pod(r.process_set_id);
  writeSite(w, r.call_site ? *r.call_site : CallSite());
  w.pod(r.waited_ms);
}

void readRequest(Reader& r, Request& q) {
  q.rank = r.pod<int32_t>();
  q.op = r.enumeration<OpType>(kNumOpTypes, "operation");
  q.reduce_op = r.enumeration<ReduceOp>(kNumUserReduceOps, "reduce op");
  q.dtype = r.enumeration<DataType>(kNumDataTypes, "dtype");
  q.name = r.str();
  q.root_rank = r.pod<int32_t>();
  q.prescale = r.pod<double>();
  q.postscale = r.pod<double>();
  q.shape = r.ints();
  q.splits = r.ints();
  q.device = r.pod<int32_t>();
  q.group = r.str();
  q.group_size = r.pod<int32_t>();
  q.process_set_ranks = r.ints();
  q.process_set_id = r.pod<int32_t>();
  CallSite site = readSite(r);
  if (site.known()) q.call_site = std::make_shared<const CallSite>(std::move(site));
  q.waited_ms = r.pod<uint32_t>();
}

void writeResponse(Writer& w, const Response& r) {
  w.pod(r.op);
  // One byte: 0 = no error, else the error's StatusKind.
  w.pod<uint8_t>(r.error ? static_cast<uint8_t>(r.error_kind) : 0);
  w.str(r.error_message);
  w.str(r.name);
  w.pod(r.reduce_op);
  w.pod(r.dtype);
  w.pod(r.root_rank);
  w.pod(r.prescale);
  w.pod(r.postscale);
  w.ints(r.shape);
  w.ints(r.per_rank);
  w.pod(r.device);
  w.pod(r.average_ranks);
  w.pod(r.value);
  w.str(r.group);
  w.pod(r.group_size);
  w.ints(r.process_set_ranks);
  w.pod(r.process_set_id);
  writeDetails(w, r.error ? r.error_details : nullptr);
}

void readResponse(Reader& r, Response& s) {
  s.op = r.enumeration<OpType>(kNumOpTypes, "operation");
  auto error = r.enumeration<StatusKind, uint8_t>(kNumStatusKinds, "error kind");
  s.error = error != StatusKind::kOk;
  if (s.error) s.error_kind = error;
  s.error_message = r.str();
  s.name = r.str();
  s.reduce_op = r.enumeration<ReduceOp>(kNumUserReduceOps, "reduce op");
  s.dtype = r.enumeration<DataType>(kNumDataTypes, "dtype");
  s.root_rank = r.pod<int32_t>();
  s.prescale = r.pod<double>();
  s.postscale = r.pod<double>();
  s.shape = r.ints();
  s.per_rank = r.ints();
  s.device = r.pod<int32_t>();
  s.average_ranks = r.pod<int32_t>();
  s.value = r.pod<int32_t>();
  s.group = r.str();
  s.group_size = r.pod<int32_t>();
  s.process_set_ranks = r.ints();
  s.process_set_id = r.pod<int32_t>();
  s.error_details = readDetails(r);
}

}  // namespace

std::string serializeRequests(const std::vector<Request>& requests, const RankState& state) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const auto& r : requests) writeRequest(w, r);
  w.pod<uint8_t>(state.blocked ? 1 : 0);
  return w.take();
}

std::vector<Request> parseRequests(const std::string& bytes, RankState* state, int sender) {
  static const size_t kMinRequestBytes = minimalBytes<Request>(writeRequest);
  Reader r(bytes, "a request list", sender);
  std::vector<Request> out(r.count("requests", kMinRequestBytes));
  for (auto& q : out) readRequest(r, q);
  const bool blocked = r.pod<uint8_t>() != 0;
  if (state) state->blocked = blocked;
  r.expectDone();
  return out;
}

std::string serializeResponses(const std::vector<Response>& responses, const std::string& note) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(responses.size()));
  for (const auto& r : responses) writeResponse(w, r);
  w.str(note);
  return w.take();
}

std::vector<Response> parseResponses(const std::string& bytes, std::string* note, int sender) {
  static const size_t kMinResponseBytes = minimalBytes<Response>(writeResponse);
  Reader r(bytes, "a response list", sender);
  std::vector<Response> out(r.count("responses", kMinResponseBytes));
  for (auto& s : out) readResponse(r, s);
  std::string text = r.str();
  if (note) *note = std::move(text);
  r.expectDone();
  return out;
}

std::string serializeFailure(const Status& failure) {
  Writer w;
  w.pod<uint8_t>(static_cast<uint8_t>(failure.kind));
  w.str(failure.message);
  writeDetails(w, failure.details);
  return w.take();
}

Status parseFailure(const std::string& bytes) {
  Reader r(bytes, "a failure record", -1);
  Status failure;
  failure.kind = r.enumeration<StatusKind, uint8_t>(kNumStatusKinds, "kind");
  failure.message = r.str();
  failure.details = readDetails(r);
  r.expectDone();
  return failure;
}

void throwBadPeerMessage(int sender, const std::string& sent) {
  const std::string who = sender >= 0 ? "rank " + std::to_string(sender) : std::string("a peer");
  const std::string message =
      who + " " + sent + ". hvdlite never sends that: " + who +
      " runs another version of hvdlite, has a bug, or is not one of this job's processes, so the job stops here "
      "rather than trust it. Check that every rank runs the same hvdlite build; if they do, please report this.";
  if (sender >= 0) throw BadPeerMessage(message, sender);
  throw TransportError(message);
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace hvdlite::core
