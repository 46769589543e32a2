#include "transport/nccl/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "common/errors.h"
#include "common/half.h"
#include "common/prefix_sum.h"
#include "transport/cuda/gpu_identity.h"

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
    case DataType::kInt16:
    case DataType::kUInt16:
      break;
  }
  // Horovod refuses these on NCCL too; allgather, broadcast and alltoall move
  // bytes (ncclUint8) and take every dtype.
  throw InvalidArgument(std::string("NCCL has no ") + dtypeName(dtype) +
                        " type to reduce with (it reduces uint8, int8, int32, int64, float16, bfloat16, "
                        "float32, float64 and bool)");
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

NcclCommunicator::~NcclCommunicator() {
  // Note [Failing, not hanging]: never ncclCommDestroy unless every member
  // agreed in close() that all work finished; it waits for the GPU and, on
  // one node, for the other ranks.
  if (!finished_) abort();
}

// Note [Calls against abort]
// The watchdog must be able to abort NCCL while the background thread is
// inside an NCCL call that waits for a peer (creation, a group end, a
// blocking communicator's enqueue): ncclCommAbort is what unblocks it. So no
// lock is held across NCCL calls. Instead each call counts itself in
// in_flight_ and then checks aborted(); abort() sets aborted first, then
// waits briefly for the count to reach 0 and aborts regardless after that
// (a call blocked in NCCL returns once the communicator is aborted). Both
// are sequentially consistent, so a call either saw the abort and did not
// touch the communicator, or abort() saw it counted and gave it time to
// leave before freeing the communicator.
template <typename Fn>
bool NcclCommunicator::withComm(Fn&& fn) {
  struct Count {
    std::atomic<int>& n;
    explicit Count(std::atomic<int>& count) : n(count) { n.fetch_add(1); }
    ~Count() { n.fetch_sub(1); }
  } count(in_flight_);
  if (aborted()) return false;
  fn(comm_.load());
  return true;
}

template <typename Fn>
void NcclCommunicator::call(const char* what, Fn&& fn) {
  ncclResult_t result = ncclSuccess;
  if (!withComm([&](ncclComm_t comm) { result = fn(comm); })) {
    throw TransportError(what + (" on " + where()) + ": NCCL was aborted after an earlier failure");
  }
  if (result != ncclSuccess) settle(result, what);
}

void NcclCommunicator::settle(ncclResult_t result, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSeconds());
  auto pause = std::chrono::microseconds(20);
  while (result == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw Timeout(what + (" on " + where()) + " did not finish within " + std::to_string(timeoutSeconds()) +
                    " s (HVDLITE_NCCL_TIMEOUT_SECONDS): a peer probably died or never reached it");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
    if (!withComm([&](ncclComm_t comm) { api().CommGetAsyncError(comm, &result); })) {
      throw TransportError(what + (" on " + where()) + ": NCCL was aborted after a failure");
    }
  }
  checkNccl(api(), result, what + (" on " + where()));
}

void NcclCommunicator::requireOwnGpus(int device) {
  // Every member learns every member's identity: gathered by set rank 0,
  // which sends them all back as one message.
  std::vector<std::string> gathered = cpu().gather(cuda::identifyGpu(cuda(), device).encode(), 0);
  std::string all = cuda::joinIdentities(gathered);
  cpu().broadcastMessage(all, 0);
  std::vector<cuda::GpuIdentity> gpus = cuda::splitIdentities(all);
  if (gpus.size() != static_cast<size_t>(size())) {
    throw TransportError("set rank 0 sent the GPU identities of " + std::to_string(gpus.size()) + " ranks, not " +
                         std::to_string(size()));
  }
  std::vector<int> ranks(size());
  for (int r = 0; r < size(); ++r) ranks[r] = globalRank(r);
  std::string problem = cuda::sharedGpuProblem(gpus, ranks);
  if (!problem.empty()) throw TransportError(problem);
}

void NcclCommunicator::bind(int device) {
  nccl_ = load_();
  requireOwnGpus(device);
  ncclUniqueId id{};
  if (rank() == 0) checkNccl(api(), api().GetUniqueId(&id), "ncclGetUniqueId");
  std::string message(id.internal, sizeof id.internal);
  cpu().broadcastMessage(message, 0);
  HVD_CHECK(message.size() == sizeof id.internal, "NCCL unique id of ", message.size(), " bytes");
  std::memcpy(id.internal, message.data(), sizeof id.internal);
  const std::string what = "creating the NCCL communicator (ncclCommInitRank" +
                           std::string(api().CommInitRankConfig ? "Config" : "") + ", set rank " +
                           std::to_string(rank()) + " of " + std::to_string(size()) + ")";
  call(what.c_str(), [&](ncclComm_t) {
    ncclResult_t result;
    ncclComm_t created = nullptr;
    if (api().CommInitRankConfig) {
      ncclConfig_t config;
      config.blocking = 0;  // returns at once; settle() polls with a deadline
      result = api().CommInitRankConfig(&created, size(), id, rank(), &config);
    } else {
      result = api().CommInitRank(&created, size(), id, rank());
    }
    comm_.store(created);
    return result;
  });
}

std::string NcclCommunicator::backendError() {
  ncclResult_t error = ncclSuccess;
  withComm([&](ncclComm_t comm) {
    if (comm) api().CommGetAsyncError(comm, &error);
  });
  if (error == ncclSuccess || error == ncclInProgress) return {};
  return "NCCL reported an asynchronous error on " + where() + ": NCCL error " + std::to_string(error) + " (" +
         api().GetErrorString(error) + "); set NCCL_DEBUG=WARN for NCCL's own explanation";
}

void NcclCommunicator::abortBackend() {
  // aborted() is already true: no new call touches comm_ (Note [Calls against abort]).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ncclComm_t comm = comm_.exchange(nullptr);
  if (comm && nccl_) api().CommAbort(comm);
}

void NcclCommunicator::closeBackend(bool everyone_ok) {
  if (!comm_) return;
  if (!everyone_ok) {
    abort();
    return;
  }
  try {
    destroyScaledSums();
    // Finalize flushes this rank's operations (non-blocking: polled under
    // the timeout); destroy after it is local, where a bare destroy would
    // wait for the other ranks of the node.
    if (api().CommFinalize) call("ncclCommFinalize", [&](ncclComm_t comm) { return api().CommFinalize(comm); });
    ncclResult_t result = api().CommDestroy(comm_.exchange(nullptr));
    finished_ = true;
    checkNccl(api(), result, "ncclCommDestroy on " + where());
  } catch (const std::exception&) {
    abort();  // whatever is left of it
  }
}

void NcclCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  call("ncclAllReduce", [&](ncclComm_t comm) {
    return api().AllReduce(data, data, count, ncclType(dtype), ncclOp(dtype, op), comm, stream());
  });
}

// Note [Scaled-sum operators]
// Average (the optimizer's default) and any pre/postscale are one NCCL
// premultiplied sum (Note [Scaling on the device] in core/device_executor.cc)
// whose operator holds the factor. Creating and destroying it around every
// call costs two more NCCL calls per batch (and, on a non-blocking
// communicator, two more settles), so each (dtype, factor) gets one operator
// for the communicator's life: a training job uses one or two (1/size per
// dtype). A job that varies the factor each step (a scale that follows the
// loss) would fill the table, so past kMaxScaledSums it is emptied and
// starts over. Destroying is allowed once every call using the operator was
// enqueued, which call() has waited for; closeBackend() destroys them before
// the communicator; an abort frees them with it.
namespace {
constexpr size_t kMaxScaledSums = 32;
}  // namespace

ncclRedOp_t NcclCommunicator::scaledSum(DataType dtype, double factor) {
  auto key = std::make_pair(dtype, factor);
  auto found = scaled_sums_.find(key);
  if (found != scaled_sums_.end()) return found->second;
  if (scaled_sums_.size() >= kMaxScaledSums) destroyScaledSums();
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
  ncclRedOp_t op = 0;
  call("ncclRedOpCreatePreMulSum", [&](ncclComm_t comm) {
    return api().RedOpCreatePreMulSum(&op, scalar, ncclType(dtype), ncclScalarHostImmediate, comm);
  });
  scaled_sums_.emplace(key, op);
  return op;
}

void NcclCommunicator::destroyScaledSums() {
  auto sums = std::move(scaled_sums_);
  scaled_sums_.clear();
  for (const auto& [key, op] : sums) {
    call("ncclRedOpDestroy", [&, op = op](ncclComm_t comm) { return api().RedOpDestroy(op, comm); });
  }
}

// Note [One-rank scaled sums]
// NCCL before 2.29.7 runs a premultiplied sum on a 1-rank communicator (a
// job or a host of one rank; hvdlite's scaled sums) with a kernel that leaves
// the last elements of a count it cannot split evenly unwritten
// (NVIDIA/nccl#1950, found by PyTorch users and, here, by
// tests/gpu/device_check.sh on an H100/H200: the last 3 of 1,000,003
// doubles unscaled). Its blocks are min(32, ceil(bytes / 16 KiB)), each
// taking floor(count / blocks) elements rounded up to 16 bytes; a count
// whose bytes are a multiple of 16 KiB splits exactly, and one under 16 KiB
// runs in one block. So there, such a sum runs as two calls: the largest
// multiple of 16 KiB, then the rest. tests/common/fake_gpu/fake_nccl.c
// reproduces the bug for versions before 2.29.7.
std::vector<std::pair<size_t, size_t>> NcclCommunicator::scaledPieces(size_t count, size_t esize) const {
  constexpr size_t kBlockBytes = 16 << 10;
  if (size() > 1 || nccl_->version() >= kOneRankScaledSumFixed || count * esize <= kBlockBytes) {
    return {{0, count}};
  }
  const size_t head = count * esize / kBlockBytes * kBlockBytes / esize;
  std::vector<std::pair<size_t, size_t>> pieces{{0, head}};
  if (head < count) pieces.push_back({head, count - head});
  return pieces;
}

void NcclCommunicator::doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) {
  const size_t esize = dtypeSize(dtype);
  const ncclRedOp_t op = scaledSum(dtype, factor);
  for (auto [first, n] : scaledPieces(count, esize)) {
    call("ncclAllReduce (scaled sum)", [&](ncclComm_t comm) {
      return api().AllReduce(at(data, first * esize), at(data, first * esize), n, ncclType(dtype), op, comm,
                             stream());
    });
  }
}

void NcclCommunicator::doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  const int me = rank();
  if (allEqual(bytes_per_rank)) {
    size_t each = bytes_per_rank.front();
    call("ncclAllGather", [&](ncclComm_t comm) { return api().AllGather(in, out, each, ncclUint8, comm, stream()); });
    return;
  }
  // Uneven contributions: every rank broadcasts its part, in one group.
  const std::vector<size_t> offsets = exclusivePrefixSum(bytes_per_rank);
  call("ncclBroadcast (allgather of uneven parts)", [&](ncclComm_t comm) {
    ncclResult_t result = api().GroupStart();
    for (int r = 0; r < size() && result == ncclSuccess; ++r) {
      if (bytes_per_rank[r] == 0) continue;
      const void* send = r == me ? in : at(out, offsets[r]);
      result = api().Broadcast(send, at(out, offsets[r]), bytes_per_rank[r], ncclUint8, r, comm, stream());
    }
    ncclResult_t end = api().GroupEnd();
    return result != ncclSuccess ? result : end;
  });
}

void NcclCommunicator::doBroadcast(void* data, size_t bytes, int root) {
  call("ncclBroadcast", [&](ncclComm_t comm) {
    return api().Broadcast(data, data, bytes, ncclUint8, root, comm, stream());
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
        result = api().Send(at(in, send_at[peer]), send_bytes[peer], ncclUint8, peer, comm, stream());
      }
      if (result == ncclSuccess && recv_bytes[peer] > 0) {
        result = api().Recv(at(out, recv_at[peer]), recv_bytes[peer], ncclUint8, peer, comm, stream());
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
  const size_t esize = dtypeSize(dtype);
  const ncclRedOp_t op = scaledSum(dtype, factor);
  if (size() > 1) {
    call("ncclReduceScatter (scaled sum)", [&](ncclComm_t comm) {
      return reduceScatterWith(comm, in, out, counts, dtype, op);
    });
    return;
  }
  for (auto [first, n] : scaledPieces(counts.front(), esize)) {  // Note [One-rank scaled sums]
    call("ncclReduceScatter (scaled sum)", [&](ncclComm_t comm) {
      return api().ReduceScatter(at(in, first * esize), at(out, first * esize), n, ncclType(dtype), op, comm,
                                 stream());
    });
  }
}

ncclResult_t NcclCommunicator::reduceScatterWith(ncclComm_t comm, const void* in, void* out,
                                                 const std::vector<size_t>& counts, DataType dtype, ncclRedOp_t op) {
  const ncclDataType_t type = ncclType(dtype);
  if (allEqual(counts)) return api().ReduceScatter(in, out, counts.front(), type, op, comm, stream());
  // Uneven parts (rows do not divide by the ranks): one reduce to each rank.
  const size_t esize = dtypeSize(dtype);
  const std::vector<size_t> offsets = exclusivePrefixSum(counts);
  ncclResult_t result = api().GroupStart();
  for (int r = 0; r < size() && result == ncclSuccess; ++r) {
    if (counts[r] == 0) continue;
    const char* part = at(in, offsets[r] * esize);
    void* target = r == rank() ? out : const_cast<char*>(part);  // only the root's is written
    result = api().Reduce(part, target, counts[r], type, op, r, comm, stream());
  }
  ncclResult_t end = api().GroupEnd();
  return result != ncclSuccess ? result : end;
}

}  // namespace hvdlite::transport::nccl
