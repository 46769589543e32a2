#include "core/entry_validation.h"

#include <numeric>

#include "common/errors.h"
#include "core/message.h"

namespace hvdlite::core {
namespace {

[[noreturn]] void reject(const TensorEntry& e, const std::string& why) {
  throw InvalidArgument(std::string(opTypeName(e.op)) + " of '" + e.name + "': " + why);
}

// Adasum (core/adasum.h) has Horovod's limits: allreduce of floating-point
// CPU tensors over the global set, whose size is a power of two.
void checkAdasum(const TensorEntry& e, const ProcessSet& set) {
  const size_t ranks = set.ranks.size();
  if (e.op != OpType::kAllreduce) reject(e, "op=Adasum is supported by allreduce only; use op=Sum or op=Average");
  if (!isFloatingPoint(e.dtype)) {
    reject(e, std::string("Adasum reduces floating-point tensors (float16, bfloat16, float32, float64), not ") +
                  dtypeName(e.dtype));
  }
  if (e.device >= 0) reject(e, "Adasum runs on CPU tensors only in hvdlite; move the tensor to the CPU");
  if (set.id != 0) {
    reject(e, "Adasum runs on the global process set only, not on process set " + std::to_string(set.id) +
                  " " + shapeString({set.ranks.begin(), set.ranks.end()}));
  }
  if ((ranks & (ranks - 1)) != 0) {
    reject(e, "Adasum needs a power-of-two number of ranks (2, 4, 8, ...), but the process set has " +
                  std::to_string(ranks) + "; run with a power-of-two number of ranks or use op=Average");
  }
}

void checkReduceOp(const TensorEntry& e, const ProcessSet& set) {
  if (e.reduce_op == ReduceOp::kAdasum) checkAdasum(e, set);
  if (e.reduce_op == ReduceOp::kBitAnd) reject(e, "bitand is not a user reduce op");
  if (e.dtype == DataType::kBool &&
      (e.reduce_op == ReduceOp::kAverage || e.prescale != 1.0 || e.postscale != 1.0)) {
    reject(e, "bool tensors cannot be averaged or scaled; use op=Sum (logical or), Min or Max");
  }
}

void checkSplits(TensorEntry& e, int set_size) {
  int64_t rows = e.shape.at(0);
  if (e.splits.empty()) {
    if (rows % set_size != 0) {
      reject(e, "the first dimension (" + std::to_string(rows) + ") does not divide evenly among " +
                    std::to_string(set_size) + " ranks; pass splits= to say how many rows go to each rank");
    }
    e.splits.assign(set_size, rows / set_size);
    return;
  }
  if (static_cast<int>(e.splits.size()) != set_size) {
    reject(e, "splits has " + std::to_string(e.splits.size()) + " entries but the process set has " +
                  std::to_string(set_size) + " ranks");
  }
  for (auto s : e.splits) {
    if (s < 0) reject(e, "splits " + shapeString(e.splits) + " has a negative entry");
  }
  int64_t sum = std::accumulate(e.splits.begin(), e.splits.end(), int64_t{0});
  if (sum != rows) {
    reject(e, "splits " + shapeString(e.splits) + " sum to " + std::to_string(sum) +
                  " but the first dimension is " + std::to_string(rows));
  }
}

}  // namespace

void validateEntry(TensorEntry& e, const ProcessSet* set, int global_rank) {
  if (e.name.empty()) throw InvalidArgument(std::string(opTypeName(e.op)) + ": the tensor name is empty");
  if (!set) {
    reject(e, "process set " + std::to_string(e.process_set_id) +
                  " does not exist (it was never added, or was removed)");
  }
  if (!set->isMember()) {
    reject(e, "rank " + std::to_string(global_rank) + " is not a member of process set " +
                  std::to_string(set->id) + " " + shapeString({set->ranks.begin(), set->ranks.end()}));
  }
  for (auto d : e.shape) {
    if (d < 0) reject(e, "shape " + shapeString(e.shape) + " has a negative dimension");
  }
  if (e.device >= 0 && !isTensorCollective(e.op)) {
    reject(e, "is not a tensor collective; pass device=-1");
  }
  bool needs_rows = e.op == OpType::kAllgather || e.op == OpType::kAlltoall ||
                    e.op == OpType::kReducescatter;
  if (needs_rows && e.shape.empty()) reject(e, "needs a tensor with at least one dimension, not a scalar");
  switch (e.op) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      checkReduceOp(e, *set);
      break;
    case OpType::kBroadcast: {
      int root = set->rankOf(e.root_rank);
      if (root < 0) {
        reject(e, "root_rank " + std::to_string(e.root_rank) + " is not a member of process set " +
                      std::to_string(set->id) + " " + shapeString({set->ranks.begin(), set->ranks.end()}));
      }
      e.root_rank = root;
      break;
    }
    case OpType::kAlltoall:
      checkSplits(e, static_cast<int>(set->ranks.size()));
      break;
    case OpType::kJoin:
      // Joined state is kept per process set (Note [Join] in coordinator.cc).
      e.name = kJoinName;
      break;
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
      if (e.process_set_id != 0) reject(e, "must run on the global process set");
      break;
    default:
      break;
  }
  if (e.op == OpType::kAddProcessSet) {
    for (auto r : e.process_set_ranks) {
      if (r < 0 || r >= static_cast<int64_t>(set->ranks.size())) {
        reject(e, "rank " + std::to_string(r) + " is out of range for a job of " +
                      std::to_string(set->ranks.size()) + " ranks");
      }
    }
    if (e.process_set_ranks.empty()) reject(e, "a process set needs at least one rank");
  }
}

}  // namespace hvdlite::core
