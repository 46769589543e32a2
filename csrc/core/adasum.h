// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive
// Summation", MLSys 2021): an allreduce that adds gradients where they are
// orthogonal and averages them where they are parallel, so that a larger job
// can keep the learning rate of a smaller one. Two vectors combine as
//   a' = (1 - a·b / (2|a|²)) a + (1 - a·b / (2|b|²)) b,
// tensor by tensor, and the ranks combine pairwise up a binary tree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/types.h"
#include "transport/communicator.h"

namespace hvdlite::core {

class Adasum {
 public:
  // Reduces the tensors of a fused batch in place over comm's ranks. `data`
  // holds bounds.back() elements of dtype (float16, bfloat16, float32 or
  // float64); tensor i is elements [bounds[i], bounds[i+1]) and gets its own
  // dot product and norms. comm.size() must be a power of two. Every rank
  // calls it with the same dtype and bounds, and ends with bitwise-identical
  // values. Blocks like any collective; not thread-safe (one per executor).
  void allreduce(void* data, DataType dtype, const std::vector<size_t>& bounds,
                 transport::Communicator& comm);

 private:
  std::vector<uint8_t> received_;  // the partner's half; kept between batches
  std::vector<double> sums_, gathered_;  // per-tensor dot products and norms
};

// The pairwise combination above on one tensor's worth of sums: the
// coefficients of the left and the right vector, given a·b, |a|² and |b|².
// A vector with |v|² below 1e-8 keeps coefficient 1 (as Horovod does), so
// combining with zeros (a joined rank) leaves the other vector unchanged.
struct AdasumCoefficients {
  double left = 1.0, right = 1.0;
};
AdasumCoefficients adasumCoefficients(double dot, double left_norm2, double right_norm2);

}  // namespace hvdlite::core
