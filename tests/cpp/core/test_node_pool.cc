// Tests csrc/core/node_pool.h: insertUnique inserts a new key once, finds a
// present one without touching its value, and a kept node it did not use
// goes back to the pool (Note [One look-up for the duplicate check and the
// insert]); names whose hashes collide stay apart.
#include "core/node_pool.h"

#include <string>
#include <unordered_map>

#include "testing.h"

using namespace hvdlite::core;

namespace {

using Map = std::unordered_map<std::string, int>;

// Every name in one bucket: only the key comparison tells them apart.
struct CollidingHash {
  size_t operator()(const std::string&) const { return 0; }
};
using CollidingMap = std::unordered_map<std::string, int, CollidingHash>;

}  // namespace

TEST(insert_unique_inserts_a_new_key_and_finds_a_present_one) {
  Map map;
  NodePool<Map> pool;
  auto [a, inserted] = pool.insertUnique(map, "a");
  CHECK(inserted);
  a->second = 1;
  auto [again, inserted_again] = pool.insertUnique(map, "a");
  CHECK(!inserted_again);
  CHECK(again == a);
  CHECK_EQ(again->second, 1);
  CHECK_EQ(map.size(), size_t{1});
}

TEST(a_kept_node_refused_for_a_present_key_goes_back_to_the_pool) {
  Map map;
  NodePool<Map> pool;
  pool.insertUnique(map, "old").first->second = 7;
  pool.insertUnique(map, "a").first->second = 1;
  pool.keep(pool.extract(map, map.find("old")));  // one spare node, holding 7
  auto [a, inserted] = pool.insertUnique(map, "a");  // takes the spare, gives it back
  CHECK(!inserted);
  CHECK_EQ(a->second, 1);
  auto [b, b_inserted] = pool.insertUnique(map, "b");  // the same spare, renamed
  CHECK(b_inserted);
  CHECK_EQ(b->second, 7);
  CHECK_EQ(b->first, std::string("b"));
  CHECK_EQ(map.size(), size_t{2});
  CHECK(map.find("old") == map.end());
}

TEST(names_with_colliding_hashes_stay_apart) {
  CollidingMap map;
  NodePool<CollidingMap> pool;
  pool.insertUnique(map, "grad.1").first->second = 1;
  pool.insertUnique(map, "grad.2").first->second = 2;
  pool.keep(pool.extract(map, map.find("grad.1")));
  auto [two, two_inserted] = pool.insertUnique(map, "grad.2");
  CHECK(!two_inserted);
  CHECK_EQ(two->second, 2);
  auto [three, three_inserted] = pool.insertUnique(map, "grad.3");  // the kept node, renamed
  CHECK(three_inserted);
  CHECK_EQ(map.size(), size_t{2});
  CHECK_EQ(map.at("grad.2"), 2);
  CHECK(map.count("grad.1") == 0);
  CHECK(map.count("grad.3") == 1);
}

int main() { return RUN_ALL_TESTS(); }
