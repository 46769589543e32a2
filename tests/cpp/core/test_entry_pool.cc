// Tests csrc/core/entry_pool.cc: a kept entry comes back in its default
// state but for its name, with what it held released (Note [Resetting an entry member by
// member]), taken again first by the thread that kept it, and handed to the
// shared pool when that thread ends (Note [A thread's own kept entries]).
#include "core/entry_pool.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

// Every member away from its default; the callback and the allocator hold
// `held`, the events `event`.
void fillEveryMember(TensorEntry& e, const std::shared_ptr<int>& held, const std::shared_ptr<void>& event) {
  static const CallSite site{"train.py", 7, "step"};
  e.name = "grad/fc1.weight";
  e.op = OpType::kAllgather;
  e.reduce_op = ReduceOp::kMax;
  e.dtype = DataType::kInt64;
  e.shape = {2, 3};
  e.input = &e;
  e.output = &e;
  e.output_bytes = 48;
  e.root_rank = 1;
  e.prescale = 0.5;
  e.postscale = 2.0;
  e.splits = {1, 1};
  e.process_set_id = 3;
  e.device = 0;
  e.ready_event = &e;
  e.stream = &e;
  e.owned_ready_event = event;
  e.done_event = event;
  e.sequence = 9;
  e.group = "group";
  e.group_size = 2;
  e.process_set_ranks = {0, 1};
  e.removed_process_set_id = 2;
  e.call_site = &site;
  e.caller_waits = true;
  e.allocate = [held](const std::vector<int64_t>&) -> void* { return held.get(); };
  e.callback = [held](TensorEntry&, const Status&) {};
  e.output_shape = {4};
  e.received_splits = {1};
  e.result_value = 5;
}

// Default but for the name, which a kept entry keeps (Note [A kept entry's name]).
void checkDefault(const TensorEntry& e) {
  const TensorEntry d{};
  CHECK(e.op == d.op);
  CHECK(e.reduce_op == d.reduce_op);
  CHECK(e.dtype == d.dtype);
  CHECK(e.shape.empty());
  CHECK(e.input == d.input);
  CHECK(e.output == d.output);
  CHECK_EQ(e.output_bytes, d.output_bytes);
  CHECK_EQ(e.root_rank, d.root_rank);
  CHECK(e.prescale == d.prescale);
  CHECK(e.postscale == d.postscale);
  CHECK(e.splits.empty());
  CHECK_EQ(e.process_set_id, d.process_set_id);
  CHECK_EQ(e.device, d.device);
  CHECK(e.ready_event == d.ready_event);
  CHECK(e.stream == d.stream);
  CHECK(!e.owned_ready_event);
  CHECK(!e.done_event);
  CHECK_EQ(e.sequence, d.sequence);
  CHECK(e.group.empty());
  CHECK_EQ(e.group_size, d.group_size);
  CHECK(e.process_set_ranks.empty());
  CHECK_EQ(e.removed_process_set_id, d.removed_process_set_id);
  CHECK(e.call_site == d.call_site);
  CHECK(e.caller_waits == d.caller_waits);
  CHECK(!e.allocate);
  CHECK(!e.callback);
  CHECK(e.output_shape.empty());
  CHECK(e.received_splits.empty());
  CHECK_EQ(e.result_value, d.result_value);
}

}  // namespace

TEST(a_kept_entry_comes_back_default_with_what_it_held_released) {
  auto held = std::make_shared<int>(1);
  auto event = std::make_shared<int>(2);
  std::weak_ptr<int> held_watch = held, event_watch = event;
  std::vector<TensorEntryPtr> done;
  done.push_back(newEntry());
  TensorEntry* kept = done.back().get();
  fillEveryMember(*kept, held, event);
  held.reset();
  event.reset();
  keepEntries(done);
  CHECK(done.empty());
  CHECK(held_watch.expired());  // the callback and allocator were dropped by keepEntries
  CHECK(event_watch.expired());
  TensorEntryPtr again = newEntry();
  CHECK(again.get() == kept);  // this thread's own, taken back first
  checkDefault(*again);
  CHECK_EQ(again->name, std::string("grad/fc1.weight"));
}

TEST(entries_kept_by_a_thread_reach_the_shared_pool_when_it_ends) {
  TensorEntry* kept = nullptr;
  std::thread worker([&] {
    std::vector<TensorEntryPtr> done;
    done.push_back(newEntry());
    kept = done.back().get();
    keepEntries(done);
  });
  worker.join();
  // This thread's own (at most a few) come first, then the shared pool's,
  // latest kept first.
  std::vector<TensorEntryPtr> taken;
  bool found = false;
  for (int i = 0; i < 64 && !found; ++i) {
    taken.push_back(newEntry());
    found = taken.back().get() == kept;
  }
  CHECK(found);
  keepEntries(taken);
}

int main() { return RUN_ALL_TESTS(); }
