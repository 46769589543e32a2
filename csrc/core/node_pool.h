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
// one back, its buffers included. One lookup serves both the duplicate check
// and the insert: callers pass the lower bound they found as the hint. Both
// maps are hash maps now (Note [In-flight entries hashed] in tensor_queue.cc,
// Note [Pending requests hashed] in controller.cc); the pool serves both kinds.
template <typename Map>
class NodePool {
 public:
  using Node = typename Map::node_type;
  static constexpr size_t kMaxSpareNodes = 1024;

  // Inserts `key` at `hint`, which must be map.lower_bound(key) with `key`
  // absent (a hash map ignores it: pass end()). A kept node brings its old mapped value: the caller sets it.
  typename Map::iterator insert(Map& map, typename Map::iterator hint, const typename Map::key_type& key) {
    if (spare_.empty()) return map.emplace_hint(hint, key, typename Map::mapped_type());
    Node node = std::move(spare_.back());
    spare_.pop_back();
    // Reuses the key's buffer; a loop that submits the same name again gets
    // back the node that held it, and comparing costs less than copying.
    if (!(node.key() == key)) node.key() = key;
    return map.insert(hint, std::move(node));
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

}  // namespace hvdlite::core
