#include "transport/nccl/nccl_communicator.h"

#include <cstdio>
#include <cstring>
#include <thread>

#include "common/errors.h"
#include "common/half.h"
#include "common/prefix_sum.h"

namespace hvdlite::transport::nccl {
namespace {

bool allEqual(const std::vector<size_t>& values) {
  for (auto v : values) {
    if (v != values.front()) return false;
  }
  return true;
}

char* at(void* base, size_t offset) { return static_cast<char*>(base) + offset; }
const char* at(const void* base, size_t offset) { return static_cast<const char*>(base) + offset; }

}  // namespace

ncclDataType_t ncclType(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt8: return ncclInt8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kBool: return ncclUint8;
  }
  throw InvalidArgument("NCCL has no type for dtype " + std::string(dtypeName(dtype)));
}

ncclRedOp_t ncclOp(DataType dtype, ReduceOp op) {
  bool logical = dtype == DataType::kBool;
  switch (op) {
    case ReduceOp::kSum: return logical ? ncclMax : ncclSum;
    case ReduceOp::kProduct: return logical ? ncclMin : ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    default: break;
  }
  throw InvalidArgument(std::string("reduce op ") + reduceOpName(op) +
                        " has no NCCL equivalent (averages are scaled sums in the executor)");
}

void* DeviceBuffer::reserve(const CudaApi& cuda, size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_ && data_) return data_;
  // Stream-ordered: work queued on `stream` still using the old memory runs
  // before it is freed, so nothing waits for the GPU here.
  release();
  cuda_ = &cuda;
  stream_ = stream;
  cudaError_t result = cuda.MallocAsync(&data_, std::max<size_t>(bytes, 1), stream);
  if (result == cudaErrorMemoryAllocation) {
    data_ = nullptr;
    return nullptr;
  }
  checkCuda(cuda, result, ("allocating a " + std::to_string(bytes) + "-byte device fusion buffer").c_str());
  bytes_ = bytes;
  return data_;
}

void DeviceBuffer::release() {
  if (data_) cuda_->FreeAsync(data_, stream_);
  data_ = nullptr;
  bytes_ = 0;
}

NcclCommunicator::~NcclCommunicator() {
  if (!libs_) return;
  // Note [Failing, not hanging]: ncclCommDestroy waits for the work queued on
  // the communicator, which never ends if a peer is gone.
  if (comm_ && !aborted_) {
    if (ready_to_use_ && drained(timeout_seconds_)) api().CommDestroy(comm_);
    else api().CommAbort(comm_);
  }
  // buffers_ are freed after this body, in stream order.
  if (pinned_) cuda().FreeHost(pinned_);
  for (auto* event : {ready_, staged_, last_done_}) {
    if (event) cuda().EventDestroy(event);
  }
  for (auto* event : spare_events_) {
    if (event != last_done_) cuda().EventDestroy(event);
  }
  for (auto& p : pending_) {
    if (p.done != last_done_) cuda().EventDestroy(p.done);
  }
}

std::string NcclCommunicator::where() const {
  return "rank " + std::to_string(globalRank(rank())) + " (GPU " + std::to_string(device_) + ")";
}

void NcclCommunicator::useDevice(int device) {
  if (device_ < 0) return create(device);
  if (device != device_) {
    throw TransportError("a tensor is on GPU " + std::to_string(device) + " but rank " +
                         std::to_string(globalRank(rank())) + "'s NCCL communicator for this process set is on GPU " +
                         std::to_string(device_) +
                         "; hvdlite uses one GPU per rank: pin it with torch.cuda.set_device(hvd.local_rank()) "
                         "and keep every tensor there");
  }
  checkCuda(cuda(), cuda().SetDevice(device_), "cudaSetDevice");
}

int NcclCommunicator::callerDevice() {
  if (!libs_) libs_ = load_();
  int device = 0;
  checkCuda(cuda(), cuda().GetDevice(&device), "cudaGetDevice");
  return device;
}

void NcclCommunicator::restoreDevice(int device) { cuda().SetDevice(device); }

void NcclCommunicator::create(int device) {
  libs_ = load_();
  checkCuda(cuda(), cuda().SetDevice(device), ("cudaSetDevice(" + std::to_string(device) + ")").c_str());
  device_ = device;
  ncclUniqueId id{};
  if (rank() == 0) checkNccl(api(), api().GetUniqueId(&id), "ncclGetUniqueId");
  std::string message(id.internal, sizeof id.internal);
  cpu_.broadcastMessage(message, 0);
  HVD_CHECK(message.size() == sizeof id.internal, "NCCL unique id of ", message.size(), " bytes");
  std::memcpy(id.internal, message.data(), sizeof id.internal);
  stream_ = streams_(device);
  checkCuda(cuda(), cuda().EventCreateWithFlags(&ready_, kCudaEventDisableTiming), "cudaEventCreateWithFlags");
  checkCuda(cuda(), cuda().EventCreateWithFlags(&staged_, kCudaEventDisableTiming), "cudaEventCreateWithFlags");
  const std::string what = "creating the NCCL communicator (ncclCommInitRank" +
                           std::string(api().CommInitRankConfig ? "Config" : "") + ", set rank " +
                           std::to_string(rank()) + " of " + std::to_string(size()) + ")";
  ncclResult_t result;
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (aborted_) throw TransportError(what + " on " + where() + ": NCCL was aborted after an earlier failure");
    if (api().CommInitRankConfig) {
      ncclConfig_t config;
      config.blocking = 0;  // returns at once; settle() polls with a deadline
      result = api().CommInitRankConfig(&comm_, size(), id, rank(), &config);
    } else {
      result = api().CommInitRank(&comm_, size(), id, rank());
    }
  }
  settle(result, what);
  ready_to_use_ = true;
}

template <typename Fn>
void NcclCommunicator::call(const std::string& what, Fn&& fn) {
  ncclResult_t result;
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (aborted_) {
      throw TransportError(what + " on " + where() + ": NCCL was aborted after an earlier failure");
    }
    result = fn(comm_);
  }
  if (result != ncclSuccess) settle(result, what);
}

void NcclCommunicator::settle(ncclResult_t result, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds_);
  auto pause = std::chrono::microseconds(20);
  while (result == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw Timeout(what + " on " + where() + " did not finish within " + std::to_string(timeout_seconds_) +
                    " s (HVDLITE_NCCL_TIMEOUT_SECONDS): a peer probably died or never reached it");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (aborted_) throw TransportError(what + " on " + where() + ": NCCL was aborted after a failure");
    api().CommGetAsyncError(comm_, &result);
  }
  checkNccl(api(), result, (what + " on " + where()).c_str());
}

void NcclCommunicator::await(cudaEvent_t event, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds_);
  auto pause = std::chrono::microseconds(5);
  for (;;) {
    cudaError_t result = cuda().EventQuery(event);
    if (result == cudaSuccess) return;
    if (result != cudaErrorNotReady) checkCuda(cuda(), result, what);
    if (aborted_) throw TransportError(std::string(what) + " on " + where() + ": NCCL was aborted after a failure");
    if (std::chrono::steady_clock::now() > deadline) {
      throw Timeout(std::string(what) + " on " + where() + " did not finish within " +
                    std::to_string(timeout_seconds_) + " s (HVDLITE_NCCL_TIMEOUT_SECONDS)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

void NcclCommunicator::waitFor(void* ready_event, void* stream) {
  auto event = static_cast<cudaEvent_t>(ready_event);
  if (!event) {
    checkCuda(cuda(), cuda().EventRecord(ready_, static_cast<cudaStream_t>(stream)),
              "recording the framework stream's ready event");
    event = ready_;
  }
  checkCuda(cuda(), cuda().StreamWaitEvent(stream_, event, 0), "waiting for the framework's ready event");
}

void NcclCommunicator::recordDone(const std::string& what) {
  std::lock_guard<std::mutex> lock(done_mutex_);
  cudaEvent_t event = nullptr;
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else {
    checkCuda(cuda(), cuda().EventCreateWithFlags(&event, kCudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  checkCuda(cuda(), cuda().EventRecord(event, stream_), "recording the NCCL done event");
  pending_.push_back({event, std::chrono::steady_clock::now(), what});
  last_done_ = event;
}

void NcclCommunicator::signalDone(void* stream) {
  // last_done_ is recycled only once it fired, so waiting on it is safe.
  checkCuda(cuda(), cuda().StreamWaitEvent(static_cast<cudaStream_t>(stream), last_done_, 0),
            "making the framework's stream wait for NCCL");
}

bool NcclCommunicator::drained(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(done_mutex_);
      while (!pending_.empty() && cuda().EventQuery(pending_.front().done) == cudaSuccess) {
        spare_events_.push_back(pending_.front().done);
        pending_.pop_front();
      }
      if (pending_.empty()) return true;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string NcclCommunicator::health(double timeout_seconds) {
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (!comm_ || aborted_ || !ready_to_use_) return {};
    ncclResult_t error = ncclSuccess;
    api().CommGetAsyncError(comm_, &error);
    if (error != ncclSuccess && error != ncclInProgress) {
      return "NCCL reported an asynchronous error on " + where() + ": NCCL error " + std::to_string(error) + " (" +
             api().GetErrorString(error) + "); set NCCL_DEBUG=WARN for NCCL's own explanation";
    }
  }
  std::lock_guard<std::mutex> lock(done_mutex_);
  while (!pending_.empty() && cuda().EventQuery(pending_.front().done) == cudaSuccess) {
    spare_events_.push_back(pending_.front().done);
    pending_.pop_front();
  }
  if (pending_.empty()) return {};
  const double age = std::chrono::duration<double>(std::chrono::steady_clock::now() - pending_.front().queued).count();
  if (age <= timeout_seconds) return {};
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", age);
  return pending_.front().what + " on " + where() + " was queued on the GPU " + seconds +
         " s ago and has not finished (HVDLITE_NCCL_TIMEOUT_SECONDS=" + std::to_string(timeout_seconds) +
         "): a peer probably died, hangs, or never reached this collective";
}

void NcclCommunicator::abort() {
  std::lock_guard<std::mutex> lock(comm_mutex_);
  if (aborted_) return;
  aborted_ = true;
  if (comm_) api().CommAbort(comm_);
  comm_ = nullptr;
}

void* NcclCommunicator::reserve(size_t bytes, int slot) {
  HVD_CHECK(slot == 0 || slot == 1, "device buffer slot ", slot);
  return buffers_[slot].reserve(cuda(), bytes, stream_);
}

void NcclCommunicator::copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  checkCuda(cuda(), cuda().MemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
}

void* NcclCommunicator::pinned(size_t bytes) {
  if (staging_in_flight_) {
    await(staged_, "a copy from the host");
    staging_in_flight_ = false;
  }
  if (bytes > pinned_bytes_ || !pinned_) {
    if (pinned_) cuda().FreeHost(pinned_);
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    checkCuda(cuda(), cuda().MallocHost(&pinned_, std::max<size_t>(bytes, 1)),
              ("allocating " + std::to_string(bytes) + " bytes of pinned host memory").c_str());
    pinned_bytes_ = bytes;
  }
  return pinned_;
}

void* NcclCommunicator::stageToHost(const void* device, size_t bytes) {
  void* host = pinned(bytes);
  checkCuda(cuda(), cuda().MemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_), "copying to the host");
  checkCuda(cuda(), cuda().EventRecord(staged_, stream_), "recording a copy to the host");
  await(staged_, "a copy to the host");
  return host;
}

void NcclCommunicator::copyFromHost(void* device, const void* host, size_t bytes) {
  if (host != pinned_) {
    void* staging = pinned(bytes);
    std::memcpy(staging, host, bytes);
    host = staging;
  }
  checkCuda(cuda(), cuda().MemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "copying from the host");
  checkCuda(cuda(), cuda().EventRecord(staged_, stream_), "recording a copy from the host");
  staging_in_flight_ = true;  // the next staging waits for it, not this call
}

int NcclCommunicator::firstFailedRank(bool ok) {
  int32_t first = ok ? size() : rank();
  cpu_.allreduce(&first, 1, DataType::kInt32, ReduceOp::kMin);
  return first;
}

void NcclCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  call("ncclAllReduce", [&](ncclComm_t comm) {
    return api().AllReduce(data, data, count, ncclType(dtype), ncclOp(dtype, op), comm, stream_);
  });
}

ncclResult_t NcclCommunicator::scaledSum(ncclComm_t comm, DataType dtype, double factor, ncclRedOp_t* op) {
  // The scalar is read at creation (host-immediate), in the data's own type.
  float f = static_cast<float>(factor);
  uint16_t half = dtype == DataType::kFloat16 ? floatToHalf(f) : floatToBFloat16(f);
  void* scalar = nullptr;
  switch (dtype) {
    case DataType::kFloat32: scalar = &f; break;
    case DataType::kFloat64: scalar = &factor; break;
    case DataType::kFloat16:
    case DataType::kBFloat16: scalar = &half; break;
    default:
      throw InvalidArgument(std::string("a scaled NCCL sum needs a floating-point dtype, not ") + dtypeName(dtype));
  }
  return api().RedOpCreatePreMulSum(op, scalar, ncclType(dtype), ncclScalarHostImmediate, comm);
}

void NcclCommunicator::doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) {
  call("ncclAllReduce (scaled sum)", [&](ncclComm_t comm) {
    ncclRedOp_t op = 0;
    ncclResult_t result = scaledSum(comm, dtype, factor, &op);
    if (result != ncclSuccess) return result;
    result = api().AllReduce(data, data, count, ncclType(dtype), op, comm, stream_);
    // NCCL allows destroying an operator once the call that uses it returned.
    api().RedOpDestroy(op, comm);
    return result;
  });
}

void NcclCommunicator::doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  const int me = rank();
  if (allEqual(bytes_per_rank)) {
    size_t each = bytes_per_rank.front();
    call("ncclAllGather", [&](ncclComm_t comm) { return api().AllGather(in, out, each, ncclUint8, comm, stream_); });
    return;
  }
  // Uneven contributions: every rank broadcasts its part, in one group.
  const std::vector<size_t> offsets = exclusivePrefixSum(bytes_per_rank);
  call("ncclBroadcast (allgather of uneven parts)", [&](ncclComm_t comm) {
    ncclResult_t result = api().GroupStart();
    for (int r = 0; r < size() && result == ncclSuccess; ++r) {
      if (bytes_per_rank[r] == 0) continue;
      const void* send = r == me ? in : at(out, offsets[r]);
      result = api().Broadcast(send, at(out, offsets[r]), bytes_per_rank[r], ncclUint8, r, comm, stream_);
    }
    ncclResult_t end = api().GroupEnd();
    return result != ncclSuccess ? result : end;
  });
}

void NcclCommunicator::doBroadcast(void* data, size_t bytes, int root) {
  call("ncclBroadcast", [&](ncclComm_t comm) {
    return api().Broadcast(data, data, bytes, ncclUint8, root, comm, stream_);
  });
}

void NcclCommunicator::doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                   const std::vector<size_t>& recv_bytes) {
  const std::vector<size_t> send_at = exclusivePrefixSum(send_bytes);
  const std::vector<size_t> recv_at = exclusivePrefixSum(recv_bytes);
  call("ncclSend/ncclRecv (alltoall)", [&](ncclComm_t comm) {
    ncclResult_t result = api().GroupStart();
    for (int peer = 0; peer < size() && result == ncclSuccess; ++peer) {
      if (send_bytes[peer] > 0) {
        result = api().Send(at(in, send_at[peer]), send_bytes[peer], ncclUint8, peer, comm, stream_);
      }
      if (result == ncclSuccess && recv_bytes[peer] > 0) {
        result = api().Recv(at(out, recv_at[peer]), recv_bytes[peer], ncclUint8, peer, comm, stream_);
      }
    }
    ncclResult_t end = api().GroupEnd();
    return result != ncclSuccess ? result : end;
  });
}

void NcclCommunicator::doReducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                       DataType dtype, ReduceOp op) {
  call("ncclReduceScatter", [&](ncclComm_t comm) {
    return reduceScatterWith(comm, in, out, counts, dtype, ncclOp(dtype, op));
  });
}

void NcclCommunicator::doReducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts,
                                             DataType dtype, double factor) {
  call("ncclReduceScatter (scaled sum)", [&](ncclComm_t comm) {
    ncclRedOp_t op = 0;
    ncclResult_t result = scaledSum(comm, dtype, factor, &op);
    if (result != ncclSuccess) return result;
    result = reduceScatterWith(comm, in, out, counts, dtype, op);
    api().RedOpDestroy(op, comm);
    return result;
  });
}

ncclResult_t NcclCommunicator::reduceScatterWith(ncclComm_t comm, const void* in, void* out,
                                                 const std::vector<size_t>& counts, DataType dtype, ncclRedOp_t op) {
  const ncclDataType_t type = ncclType(dtype);
  if (allEqual(counts)) return api().ReduceScatter(in, out, counts.front(), type, op, comm, stream_);
  // Uneven parts (rows do not divide by the ranks): one reduce to each rank.
  const size_t esize = dtypeSize(dtype);
  const std::vector<size_t> offsets = exclusivePrefixSum(counts);
  ncclResult_t result = api().GroupStart();
  for (int r = 0; r < size() && result == ncclSuccess; ++r) {
    if (counts[r] == 0) continue;
    const char* part = at(in, offsets[r] * esize);
    void* target = r == rank() ? out : const_cast<char*>(part);  // only the root's is written
    result = api().Reduce(part, target, counts[r], type, op, r, comm, stream_);
  }
  ncclResult_t end = api().GroupEnd();
  return result != ncclSuccess ? result : end;
}

}  // namespace hvdlite::transport::nccl
