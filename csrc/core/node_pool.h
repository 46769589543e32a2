// Nodes of a std::map kept for reuse (Note [Map nodes kept for reuse]).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace hvdlite::core {

// Note [Map nodes kept for reuse]
// Every tensor of a step passes through two maps keyed by its name, the
// queue's in-flight entries and the controller's pending requests: inserted
// at submission, removed when its response comes or it runs. Allocating a
// node (and, in a pending request, its name's and shape's buffers) per tensor
// and freeing it again cost a fifth of those maps' work in a step of 200
// small allreduces (callgrind). So each map keeps the nodes it removed, up to
// kMaxSpareNodes (a step's worth; more are freed), and the next insert takes
// one back, its buffers included (a loop that submits the same name again
// gets back the node that held it, and comparing costs less than copying).
// One look-up serves both the duplicate check and the insert (Note [One
// look-up for the duplicate check and the insert]). Both
// maps are hash maps now (Note [In-flight entries hashed] in tensor_queue.cc,
// Note [Pending requests hashed] in controller.cc); the pool serves both kinds.
template <typename Map>
class NodePool {
 public:
  using Node = typename Map::node_type;
  static constexpr size_t kMaxSpareNodes = 1024;

  // Inserts `key` unless the map holds it: {where it is, whether inserted}.
  // One hash and one bucket search where find() then insert() took two
  // (Note [One look-up for the duplicate check and the insert]). An inserted
  // kept node brings its old mapped value: the caller sets it.
  std::pair<typename Map::iterator, bool> insertUnique(Map& map, const typename Map::key_type& key) {
    if (spare_.empty()) return map.try_emplace(key);
    Node node = std::move(spare_.back());
    spare_.pop_back();
    if (!(node.key() == key)) node.key() = key;
    auto placed = map.insert(std::move(node));
    if (!placed.inserted) keep(std::move(placed.node));  // back to the pool, unused
    return {placed.position, placed.inserted};
  }

  // Removes `it` from `map`; the node is kept once the caller is done with
  // its value (keep()).
  Node extract(Map& map, typename Map::iterator it) { return map.extract(it); }
  void keep(Node node) {
    if (spare_.size() < kMaxSpareNodes) spare_.push_back(std::move(node));
  }

 private:
  std::vector<Node> spare_;
};

// Note [One look-up for the duplicate check and the insert]
// Both maps hash a tensor's name at its submission: the queue to refuse a
// name already in flight, the controller to find the pending request a
// resubmitted name may still have. find() and then insert() hashed it and
// searched its bucket twice; std::unordered_map's insert(node) does both
// once and hands the node back when the key is there (a kept node goes back
// to the pool). libstdc++ finds a key in a map of up to 20 strings by
// comparing them without hashing, so a lone synchronous call saves only the
// second search (42 instructions of the numpy allreduce_'s ~7,240,
// callgrind, 1 process); a large step's maps are past that size and
// save a hash too, twice a tensor.

}  // namespace hvdlite::core
