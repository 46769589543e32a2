#include "transport/mpi/mpi_datatypes.h"

#include <string>

#include "common/errors.h"
#include "common/reduce.h"
#include "transport/mpi/mpi_library.h"

namespace hvdlite::transport::mpi {
namespace {

// MPI_Op_create takes a plain function, so the (dtype, op) pair is baked in
// by a template, one instance per pair that needs hvdlite's kernels.
template <DataType kDtype, ReduceOp kOp>
void reduceWithKernel(void* in, void* inout, int* count, MPI_Datatype*) {
  reduceInto(inout, in, static_cast<size_t>(*count), kDtype, kOp);
}

template <DataType kDtype>
MPI_User_function* kernelFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return reduceWithKernel<kDtype, ReduceOp::kSum>;
    case ReduceOp::kMin: return reduceWithKernel<kDtype, ReduceOp::kMin>;
    case ReduceOp::kMax: return reduceWithKernel<kDtype, ReduceOp::kMax>;
    case ReduceOp::kProduct: return reduceWithKernel<kDtype, ReduceOp::kProduct>;
    case ReduceOp::kBitAnd: return reduceWithKernel<kDtype, ReduceOp::kBitAnd>;
    default: return nullptr;
  }
}

MPI_User_function* kernelFor(DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat16: return kernelFor<DataType::kFloat16>(op);
    case DataType::kBFloat16: return kernelFor<DataType::kBFloat16>(op);
    default: return nullptr;
  }
}

// MPI's own op for the pair, or MPI_OP_NULL where hvdlite's kernel is needed.
MPI_Op builtinOp(DataType dtype, ReduceOp op) {
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) return MPI_OP_NULL;
  if (dtype == DataType::kBool) {
    // As in common/reduce.h: sum and max are OR, min and product are AND.
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMax: return MPI_LOR;
      case ReduceOp::kMin:
      case ReduceOp::kProduct:
      case ReduceOp::kBitAnd: return MPI_LAND;
      default: return MPI_OP_NULL;
    }
  }
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    case ReduceOp::kBitAnd: return isFloatingPoint(dtype) ? MPI_OP_NULL : MPI_BAND;
    default: return MPI_OP_NULL;
  }
}

}  // namespace

MPI_Datatype mpiDatatype(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kBool: return MPI_C_BOOL;
    case DataType::kInt16: return MPI_INT16_T;
    case DataType::kUInt16: return MPI_UINT16_T;
  }
  throw InvalidArgument("the MPI transport has no datatype for hvdlite dtype " +
                        std::to_string(static_cast<int>(dtype)));
}

ReduceOps::~ReduceOps() {
  if (mpiFinalized()) return;
  for (auto& [key, op] : user_ops_) MPI_Op_free(&op);
}

MPI_Op ReduceOps::get(DataType dtype, ReduceOp op) {
  MPI_Op builtin = builtinOp(dtype, op);
  if (builtin != MPI_OP_NULL) return builtin;
  auto key = std::make_pair(dtype, op);
  auto it = user_ops_.find(key);
  if (it != user_ops_.end()) return it->second;
  MPI_User_function* kernel = kernelFor(dtype, op);
  if (!kernel) {
    throw InvalidArgument(std::string("the MPI transport cannot reduce ") + dtypeName(dtype) +
                          " with " + reduceOpName(op));
  }
  MPI_Op created;
  check(MPI_Op_create(kernel, /*commute=*/1, &created), "MPI_Op_create");
  user_ops_[key] = created;
  return created;
}

}  // namespace hvdlite::transport::mpi
