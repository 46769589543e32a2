#include "transport/nccl/nccl_communicator.h"

#include <cstring>

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

void* DeviceBuffer::reserve(const CudaApi& cuda, size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_ && data_) return data_;
  checkCuda(cuda, cuda.StreamSynchronize(stream), "waiting for the NCCL stream before growing a buffer");
  release();
  cuda_ = &cuda;
  checkCuda(cuda, cuda.Malloc(&data_, std::max<size_t>(bytes, 1)),
            ("allocating a " + std::to_string(bytes) + "-byte device fusion buffer").c_str());
  bytes_ = bytes;
  return data_;
}

void DeviceBuffer::release() {
  if (data_) cuda_->Free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

NcclCommunicator::~NcclCommunicator() {
  if (!libs_) return;
  // ncclCommDestroy waits for the work queued on it; the buffers (members)
  // are freed after this body, cudaFree waiting for the rest.
  if (comm_) api().CommDestroy(comm_);
  if (event_) cuda().EventDestroy(event_);
  if (stream_) cuda().StreamDestroy(stream_);
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

void NcclCommunicator::create(int device) {
  libs_ = load_();
  checkCuda(cuda(), cuda().SetDevice(device), ("cudaSetDevice(" + std::to_string(device) + ")").c_str());
  ncclUniqueId id{};
  if (rank() == 0) checkNccl(api(), api().GetUniqueId(&id), "ncclGetUniqueId");
  std::string message(id.internal, sizeof id.internal);
  cpu_.broadcastMessage(message, 0);
  HVD_CHECK(message.size() == sizeof id.internal, "NCCL unique id of ", message.size(), " bytes");
  std::memcpy(id.internal, message.data(), sizeof id.internal);
  checkCuda(cuda(), cuda().StreamCreateWithFlags(&stream_, kCudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  checkCuda(cuda(), cuda().EventCreateWithFlags(&event_, kCudaEventDisableTiming), "cudaEventCreateWithFlags");
  checkNccl(api(), api().CommInitRank(&comm_, size(), id, rank()),
            ("ncclCommInitRank (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ")").c_str());
  device_ = device;
}

void NcclCommunicator::waitFor(void* ready_event, void* stream) {
  auto event = static_cast<cudaEvent_t>(ready_event);
  if (!event) {
    checkCuda(cuda(), cuda().EventRecord(event_, static_cast<cudaStream_t>(stream)),
              "recording the framework stream's ready event");
    event = event_;
  }
  checkCuda(cuda(), cuda().StreamWaitEvent(stream_, event, 0), "waiting for the framework's ready event");
}

void NcclCommunicator::signalDone(void* stream) {
  checkCuda(cuda(), cuda().EventRecord(event_, stream_), "recording the NCCL done event");
  checkCuda(cuda(), cuda().StreamWaitEvent(static_cast<cudaStream_t>(stream), event_, 0),
            "making the framework's stream wait for NCCL");
}

void* NcclCommunicator::reserve(size_t bytes, int slot) {
  HVD_CHECK(slot == 0 || slot == 1, "device buffer slot ", slot);
  return buffers_[slot].reserve(cuda(), bytes, stream_);
}

void NcclCommunicator::copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  checkCuda(cuda(), cuda().MemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
}

void NcclCommunicator::copyToHost(void* host, const void* device, size_t bytes) {
  checkCuda(cuda(), cuda().MemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
            "copying to the host");
  checkCuda(cuda(), cuda().StreamSynchronize(stream_), "waiting for a copy to the host");
}

void NcclCommunicator::copyFromHost(void* device, const void* host, size_t bytes) {
  checkCuda(cuda(), cuda().MemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_),
            "copying from the host");
  // The host buffer may be reused as soon as we return.
  checkCuda(cuda(), cuda().StreamSynchronize(stream_), "waiting for a copy from the host");
}

void NcclCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  checkNccl(api(), api().AllReduce(data, data, count, ncclType(dtype), ncclOp(dtype, op), comm_, stream_),
            "ncclAllReduce");
}

ncclRedOp_t NcclCommunicator::scaledSum(DataType dtype, double factor) {
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
  checkNccl(api(), api().RedOpCreatePreMulSum(&op, scalar, ncclType(dtype), ncclScalarHostImmediate, comm_),
            "ncclRedOpCreatePreMulSum");
  return op;
}

void NcclCommunicator::doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) {
  ncclRedOp_t op = scaledSum(dtype, factor);
  ncclResult_t result = api().AllReduce(data, data, count, ncclType(dtype), op, comm_, stream_);
  // NCCL allows destroying an operator once the call that uses it returned.
  api().RedOpDestroy(op, comm_);
  checkNccl(api(), result, "ncclAllReduce (scaled sum)");
}

void NcclCommunicator::doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  const int me = rank();
  if (allEqual(bytes_per_rank)) {
    size_t each = bytes_per_rank.front();
    checkNccl(api(), api().AllGather(in, out, each, ncclUint8, comm_, stream_), "ncclAllGather");
    return;
  }
  // Uneven contributions: every rank broadcasts its part, in one group.
  const std::vector<size_t> offsets = exclusivePrefixSum(bytes_per_rank);
  checkNccl(api(), api().GroupStart(), "ncclGroupStart");
  ncclResult_t result = ncclSuccess;
  for (int r = 0; r < size() && result == ncclSuccess; ++r) {
    if (bytes_per_rank[r] == 0) continue;
    const void* send = r == me ? in : at(out, offsets[r]);
    result = api().Broadcast(send, at(out, offsets[r]), bytes_per_rank[r], ncclUint8, r, comm_, stream_);
  }
  ncclResult_t end = api().GroupEnd();
  checkNccl(api(), result, "ncclBroadcast (allgather of uneven parts)");
  checkNccl(api(), end, "ncclGroupEnd (allgather)");
}

void NcclCommunicator::doBroadcast(void* data, size_t bytes, int root) {
  checkNccl(api(), api().Broadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
}

void NcclCommunicator::doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                   const std::vector<size_t>& recv_bytes) {
  const std::vector<size_t> send_at = exclusivePrefixSum(send_bytes);
  const std::vector<size_t> recv_at = exclusivePrefixSum(recv_bytes);
  checkNccl(api(), api().GroupStart(), "ncclGroupStart");
  ncclResult_t result = ncclSuccess;
  for (int peer = 0; peer < size() && result == ncclSuccess; ++peer) {
    if (send_bytes[peer] > 0) {
      result = api().Send(at(in, send_at[peer]), send_bytes[peer], ncclUint8, peer, comm_, stream_);
    }
    if (result == ncclSuccess && recv_bytes[peer] > 0) {
      result = api().Recv(at(out, recv_at[peer]), recv_bytes[peer], ncclUint8, peer, comm_, stream_);
    }
  }
  ncclResult_t end = api().GroupEnd();
  checkNccl(api(), result, "ncclSend/ncclRecv (alltoall)");
  checkNccl(api(), end, "ncclGroupEnd (alltoall)");
}

void NcclCommunicator::doReducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                       DataType dtype, ReduceOp op) {
  reduceScatterWith(in, out, counts, dtype, ncclOp(dtype, op));
}

void NcclCommunicator::doReducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts,
                                             DataType dtype, double factor) {
  ncclRedOp_t op = scaledSum(dtype, factor);
  try {
    reduceScatterWith(in, out, counts, dtype, op);
  } catch (...) {
    api().RedOpDestroy(op, comm_);
    throw;
  }
  api().RedOpDestroy(op, comm_);
}

void NcclCommunicator::reduceScatterWith(const void* in, void* out, const std::vector<size_t>& counts,
                                         DataType dtype, ncclRedOp_t op) {
  const ncclDataType_t type = ncclType(dtype);
  if (allEqual(counts)) {
    checkNccl(api(), api().ReduceScatter(in, out, counts.front(), type, op, comm_, stream_),
              "ncclReduceScatter");
    return;
  }
  // Uneven parts (rows do not divide by the ranks): one reduce to each rank.
  const size_t esize = dtypeSize(dtype);
  const std::vector<size_t> offsets = exclusivePrefixSum(counts);
  checkNccl(api(), api().GroupStart(), "ncclGroupStart");
  ncclResult_t result = ncclSuccess;
  for (int r = 0; r < size() && result == ncclSuccess; ++r) {
    if (counts[r] == 0) continue;
    const char* part = at(in, offsets[r] * esize);
    void* target = r == rank() ? out : const_cast<char*>(part);  // only the root's is written
    result = api().Reduce(part, target, counts[r], type, op, r, comm_, stream_);
  }
  ncclResult_t end = api().GroupEnd();
  checkNccl(api(), result, "ncclReduce (reducescatter of uneven parts)");
  checkNccl(api(), end, "ncclGroupEnd (reducescatter)");
}

}  // namespace hvdlite::transport::nccl
