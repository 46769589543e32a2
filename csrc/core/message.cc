#include "core/message.h"

#include <cstring>

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

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  T pod() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::string str() {
    auto n = pod<uint32_t>();
    need(n);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> ints() {
    auto n = pod<uint32_t>();
    need(size_t{n} * sizeof(int64_t));
    std::vector<int64_t> v(n);
    std::memcpy(v.data(), in_.data() + pos_, n * sizeof(int64_t));
    pos_ += n * sizeof(int64_t);
    return v;
  }
  bool done() const { return pos_ == in_.size(); }
  // A count of items at least `each` bytes long, checked against what is
  // left, so that a bad count fails here instead of allocating for it.
  uint32_t count(size_t each) {
    auto n = pod<uint32_t>();
    need(size_t{n} * each);
    return n;
  }

 private:
  void need(size_t n) const {
    HVD_CHECK(pos_ + n <= in_.size(), "truncated negotiation message (", in_.size(), " bytes)");
  }
  const std::string& in_;
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
  std::vector<std::string> out(r.count(sizeof(uint32_t)));
  for (auto& s : out) s = r.str();
  return out;
}

// A flag byte, then the details when there are any.
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
  for (const auto& call : details->calls) {
    w.pod(call.rank);
    w.str(call.tensor);
    w.str(call.op);
    writeSite(w, call.site);
    w.str(call.value);
    w.pod<uint8_t>(call.blocked ? 1 : 0);
  }
}

std::shared_ptr<const ErrorDetails> readDetails(Reader& r) {
  if (r.pod<uint8_t>() == 0) return nullptr;
  auto details = std::make_shared<ErrorDetails>();
  details->tensor_names = readStrings(r);
  for (auto* ranks : {&details->ranks, &details->missing_ranks}) {
    ranks->resize(r.count(sizeof(int32_t)));
    for (auto& rank : *ranks) rank = r.pod<int32_t>();
  }
  details->hosts = readStrings(r);
  details->lost_hosts = readStrings(r);
  details->field = r.str();
  details->calls.resize(r.count(sizeof(int32_t)));
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
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string serializeRequests(const std::vector<Request>& requests, const RankState& state) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const auto& r : requests) {
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
  w.pod<uint8_t>(state.blocked ? 1 : 0);
  return w.take();
}

std::vector<Request> parseRequests(const std::string& bytes, RankState* state) {
  Reader r(bytes);
  std::vector<Request> out(r.pod<uint32_t>());
  for (auto& q : out) {
    q.rank = r.pod<int32_t>();
    q.op = r.pod<OpType>();
    q.reduce_op = r.pod<ReduceOp>();
    q.dtype = r.pod<DataType>();
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
  const bool blocked = r.pod<uint8_t>() != 0;
  if (state) state->blocked = blocked;
  HVD_CHECK(r.done(), "trailing bytes in request list");
  return out;
}

std::string serializeResponses(const std::vector<Response>& responses, const std::string& note) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(responses.size()));
  for (const auto& r : responses) {
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
  w.str(note);
  return w.take();
}

std::vector<Response> parseResponses(const std::string& bytes, std::string* note) {
  Reader r(bytes);
  std::vector<Response> out(r.pod<uint32_t>());
  for (auto& s : out) {
    s.op = r.pod<OpType>();
    auto error = r.pod<uint8_t>();
    s.error = error != 0;
    if (s.error) s.error_kind = static_cast<StatusKind>(error);
    s.error_message = r.str();
    s.name = r.str();
    s.reduce_op = r.pod<ReduceOp>();
    s.dtype = r.pod<DataType>();
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
  std::string text = r.str();
  if (note) *note = std::move(text);
  HVD_CHECK(r.done(), "trailing bytes in response list");
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
  Reader r(bytes);
  Status failure;
  failure.kind = static_cast<StatusKind>(r.pod<uint8_t>());
  failure.message = r.str();
  failure.details = readDetails(r);
  HVD_CHECK(r.done(), "trailing bytes in a failure record");
  return failure;
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
