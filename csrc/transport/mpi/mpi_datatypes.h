// hvdlite's element types and reduce ops as MPI datatypes and MPI_Ops.
#pragma once

#include <mpi.h>

#include <map>
#include <utility>

#include "common/types.h"

namespace hvdlite::transport::mpi {

// The MPI datatype that carries `dtype` (float16 and bfloat16 travel as
// MPI_UINT16_T, reduced by hvdlite's own kernels).
MPI_Datatype mpiDatatype(DataType dtype);

// MPI's built-in reductions where MPI has one for the pair; otherwise
// (float16, bfloat16) user-defined MPI_Ops that call common/reduce.h, created
// on first use and freed with this object. Not thread-safe: it belongs to one
// communicator, which the background thread alone uses.
class ReduceOps {
 public:
  ReduceOps() = default;
  ~ReduceOps();
  ReduceOps(const ReduceOps&) = delete;
  ReduceOps& operator=(const ReduceOps&) = delete;

  // op is kSum, kMin, kMax, kProduct or kBitAnd (kAverage is the executor's).
  MPI_Op get(DataType dtype, ReduceOp op);

 private:
  std::map<std::pair<DataType, ReduceOp>, MPI_Op> user_ops_;
};

}  // namespace hvdlite::transport::mpi
