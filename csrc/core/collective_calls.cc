#include "core/collective_calls.h"

namespace hvdlite::core {

void allgatherInto(const Response& r, const AllgatherLayout& layout, TensorEntry* e, void* out,
                   transport::Communicator& comm, Timeline& timeline, const char* activity) {
  timeline.activityStart(r.name, activity);
  comm.allgatherv(e ? e->input : nullptr, out, layout.bytes);
  timeline.activityEnd(r.name);
  if (e) e->output_shape = layout.out_shape;
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
