// Tests csrc/core/rank_device.cc: the GPU a rank takes in each layout a
// cluster may give it (Note [A GPU per rank]) and the message where it has
// none of its own.
#include <string>

#include "core/rank_device.h"
#include "testing.h"

using namespace hvdlite::core;

TEST(one_visible_gpu_is_the_ranks_whatever_its_local_rank) {
  CHECK_EQ(rankDevice(1, 0, 8), 0);
  CHECK_EQ(rankDevice(1, 5, 8), 0);
}

TEST(every_gpu_visible_gives_the_local_ranks_and_spare_gpus_stay_idle) {
  CHECK_EQ(rankDevice(8, 5, 8), 5);
  CHECK_EQ(rankDevice(8, 3, 4), 3);
  CHECK_EQ(rankDevice(4, 0, 1), 0);
}

TEST(fewer_gpus_than_local_ranks_leave_some_rank_none_and_say_why) {
  CHECK_EQ(rankDevice(2, 3, 4), -1);
  CHECK_EQ(rankDevice(2, 0, 4), -1);  // the host's ranks would share: refused alike on each
  CHECK(rankDeviceProblem(8, 5, 5, 8, "").empty());
  std::string why = rankDeviceProblem(2, 7, 3, 4, "0,1");
  for (const char* part : {"rank 7 is local rank 3 of 4", "sees 2 GPUs (0, 1; CUDA_VISIBLE_DEVICES=0,1)",
                           "hvdliterun -H host:2", "HVDLITE_GPU_OPERATIONS=host"}) {
    CHECK(why.find(part) != std::string::npos);
  }
  CHECK(rankDeviceProblem(3, 0, 0, 4, "").find("CUDA_VISIBLE_DEVICES unset") != std::string::npos);
}

int main() { return RUN_ALL_TESTS(); }
