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

 private:
  void need(size_t n) const {
    HVD_CHECK(pos_ + n <= in_.size(), "truncated negotiation message (", in_.size(), " bytes)");
  }
  const std::string& in_;
  size_t pos_ = 0;
};

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

std::string serializeRequests(const std::vector<Request>& requests) {
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
  }
  return w.take();
}

std::vector<Request> parseRequests(const std::string& bytes) {
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
  }
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
  }
  std::string text = r.str();
  if (note) *note = std::move(text);
  HVD_CHECK(r.done(), "trailing bytes in response list");
  return out;
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
