#include "core/collective_calls.h"

namespace hvdlite::core {

void allgatherInto(const Response& r, const AllgatherLayout& layout, const void* in, void* out,
                   transport::Communicator& comm, Timeline& timeline, const char* activity) {
  timeline.activityStart(r.name, activity);
  comm.allgatherv(in, out, layout.bytes);
  timeline.activityEnd(r.name);
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto begin_a = reinterpret_cast<uintptr_t>(a), begin_b = reinterpret_cast<uintptr_t>(b);
  return a_bytes && b_bytes && begin_a < begin_b + b_bytes && begin_b < begin_a + a_bytes;
}

void alltoallInto(const Response& r, const AlltoallLayout& layout, TensorEntry& e, void* out,
                  transport::Communicator& comm, Timeline& timeline, const char* activity) {
  timeline.activityStart(r.name, activity);
  comm.alltoallv(e.input, layout.send, out, layout.recv);
  timeline.activityEnd(r.name);
  e.output_shape = layout.out_shape;
  e.received_splits = layout.received;
}

}  // namespace hvdlite::core
