// Two transports in one: data over one, negotiation over the other
// (HVDLITE_CONTROLLER=mpi with the built-in transport for data, or the
// reverse), as Horovod lets its controller and its operations differ.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace hvdlite::transport {

class SplitTransport : public Transport {
 public:
  // control_aborts_last: abort() ends with control's half (it is MPI's).
  SplitTransport(std::unique_ptr<Transport> data, std::unique_ptr<Transport> control,
                 bool control_aborts_last)
      : data_(std::move(data)), control_(std::move(control)), control_aborts_last_(control_aborts_last) {}

  std::unique_ptr<Communicator> communicator(const std::vector<int>& global_ranks) override {
    return data_->communicator(global_ranks);
  }
  std::unique_ptr<Communicator> controlCommunicator(const std::vector<int>& global_ranks) override {
    return control_->communicator(global_ranks);
  }
  // The built-in transport's half first: its peers then fail fast with their
  // own message before an MPI_Abort may end the job.
  void abort() override {
    Transport& first = control_aborts_last_ ? *data_ : *control_;
    Transport& last = control_aborts_last_ ? *control_ : *data_;
    first.abort();
    last.abort();
  }
  const std::vector<std::string>& hostnames() const override { return data_->hostnames(); }
  // Both halves may share the link to a peer: their bytes add up.
  uint64_t bytesSentTo(int global_rank) const override {
    return data_->bytesSentTo(global_rank) + control_->bytesSentTo(global_rank);
  }

 private:
  std::unique_ptr<Transport> data_;
  std::unique_ptr<Transport> control_;
  bool control_aborts_last_;
};

}  // namespace hvdlite::transport
