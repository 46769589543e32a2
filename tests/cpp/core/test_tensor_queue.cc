// Tests csrc/core/tensor_queue.cc: entries in flight by name, a duplicate name
// refused, and the closing drain (Note [No entry after the last drain]): an
// add after it, even from another thread, is refused and the entry stays with
// its caller, so nothing is left in a queue that no cycle will run again.
#include "core/tensor_queue.h"

#include <memory>
#include <thread>

#include "common/errors.h"
#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

TensorEntryPtr entry(const std::string& name) {
  auto e = std::make_unique<TensorEntry>();
  e->name = name;
  return e;
}

}  // namespace

TEST(entries_are_in_flight_until_taken_and_a_duplicate_name_is_refused) {
  TensorQueue queue;
  CHECK(queue.add(entry("a"), 0));
  CHECK(queue.add(entry("b"), 0));
  CHECK_EQ(queue.inFlight(), size_t{2});
  CHECK_THROWS(queue.add(entry("a"), 0), InvalidArgument, "already in progress on rank 0");
  CHECK(queue.take("a") != nullptr);
  CHECK(queue.take("a") == nullptr);
  CHECK_EQ(queue.inFlight(), size_t{1});
}

TEST(a_refused_duplicate_stays_with_its_caller_and_the_queue_goes_on) {
  TensorQueue queue;
  CHECK(queue.add(entry("a"), 0));
  CHECK(queue.add(entry("b"), 0));
  auto first = queue.take("a");  // a kept node now, reused by the next add
  auto duplicate = entry("b");
  CHECK_THROWS(queue.add(std::move(duplicate), 0), InvalidArgument, "'b' is already in progress");
  CHECK(duplicate != nullptr);
  CHECK_EQ(queue.inFlight(), size_t{1});
  CHECK(queue.add(entry("c"), 0));
  CHECK(queue.add(std::move(first), 0));  // "a" again
  CHECK_EQ(queue.inFlight(), size_t{3});
  CHECK_EQ(queue.take("b")->name, std::string("b"));
  CHECK_EQ(queue.take("c")->name, std::string("c"));
  CHECK_EQ(queue.take("a")->name, std::string("a"));
  CHECK_EQ(queue.inFlight(), size_t{0});
}

TEST(the_closing_drain_takes_everything_and_refuses_later_entries) {
  TensorQueue queue;
  CHECK(queue.add(entry("before"), 0));
  auto drained = queue.drainAndClose();
  CHECK_EQ(drained.size(), size_t{1});
  CHECK_EQ(drained[0]->name, std::string("before"));
  auto late = entry("after");
  CHECK(!queue.add(std::move(late), 0));
  // Refused, not taken: the caller still holds it, to fail its submitter.
  CHECK(late != nullptr);
  CHECK_EQ(late->name, std::string("after"));
  CHECK_EQ(queue.inFlight(), size_t{0});
  CHECK(queue.drainAndClose().empty());
}

TEST(an_add_racing_the_closing_drain_is_either_drained_or_refused) {
  // Whichever wins the queue's mutex, every entry ends up in exactly one
  // place: the drain's result or its refused caller's hands.
  for (int round = 0; round < 200; ++round) {
    TensorQueue queue;
    TensorEntryPtr mine = entry("racing");
    bool taken = false;
    std::thread adder([&] { taken = queue.add(std::move(mine), 0); });
    auto drained = queue.drainAndClose();
    adder.join();
    if (taken) {
      // Taken only before the drain, which then returned it.
      CHECK(mine == nullptr);
      CHECK_EQ(drained.size(), size_t{1});
    } else {
      CHECK(mine != nullptr);
      CHECK(drained.empty());
    }
    CHECK(queue.drainAndClose().empty());
  }
}

// Note [Popping new entries without allocating]: one set's new entries come
// out in submission order; another set's stay for its own pop.
TEST(new_entries_pop_per_process_set_in_submission_order) {
  TensorQueue queue;
  auto in_set = [](const std::string& name, int32_t set) {
    auto e = entry(name);
    e->process_set_id = set;
    return e;
  };
  CHECK(queue.add(in_set("a0", 0), 0));
  CHECK(queue.add(in_set("b1", 1), 0));
  CHECK(queue.add(in_set("c0", 0), 0));
  CHECK(queue.add(in_set("d1", 1), 0));
  std::vector<const TensorEntry*> popped;
  queue.popNew(0, popped);
  CHECK_EQ(popped.size(), size_t{2});
  CHECK_EQ(popped[0]->name, std::string("a0"));
  CHECK_EQ(popped[1]->name, std::string("c0"));
  queue.popNew(0, popped);
  CHECK(popped.empty());
  CHECK(queue.add(in_set("e1", 1), 0));
  queue.popNew(1, popped);  // all of them of set 1: the fast path
  CHECK_EQ(popped.size(), size_t{3});
  CHECK_EQ(popped[0]->name, std::string("b1"));
  CHECK_EQ(popped[1]->name, std::string("d1"));
  CHECK_EQ(popped[2]->name, std::string("e1"));
  queue.popNew(1, popped);
  CHECK(popped.empty());
  CHECK_EQ(queue.inFlight(), size_t{5});
}

int main() { return RUN_ALL_TESTS(); }
