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

int main() { return RUN_ALL_TESTS(); }
