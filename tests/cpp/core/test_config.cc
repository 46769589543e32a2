#include "common/errors.h"
#include "core/config.h"
#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::core;

TEST(DefaultsMatchTheDocs) {
  auto c = Config::fromEnvironment({});
  CHECK_EQ(c.size, 1);
  CHECK_EQ(c.fusion_threshold, int64_t{128} * 1024 * 1024);
  CHECK_EQ(c.cache_capacity, int64_t{1024});
  CHECK_EQ(c.stall_warning_s, 60.0);
  CHECK_EQ(c.stall_shutdown_s, 600.0);  // Note [Stall shutdown]
}

TEST(StallShutdownFollowsTheCheckTimeUnlessSetAndZeroDisablesIt) {
  CHECK_EQ(Config::fromEnvironment({{"HVDLITE_STALL_CHECK_TIME_SECONDS", "2"}}).stall_shutdown_s, 20.0);
  CHECK_EQ(Config::fromEnvironment({{"HVDLITE_STALL_CHECK_TIME_SECONDS", "2"},
                                    {"HVDLITE_STALL_SHUTDOWN_TIME_SECONDS", "5"}})
               .stall_shutdown_s,
           5.0);
  CHECK_EQ(Config::fromEnvironment({{"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0"}}).stall_shutdown_s, 0.0);
  CHECK_EQ(Config::fromEnvironment({{"HVDLITE_STALL_CHECK_DISABLE", "1"}}).stall_shutdown_s, 0.0);
}

TEST(DivergenceTimesAndCallSites) {
  auto defaults = Config::fromEnvironment({});
  CHECK_EQ(defaults.divergence_warning_s, 5.0);  // Note [Divergence] in coordinator.cc
  CHECK_EQ(defaults.divergence_shutdown_s, 10.0);
  CHECK(defaults.call_sites);
  auto c = Config::fromEnvironment({{"HVDLITE_DIVERGENCE_CHECK_TIME_SECONDS", "1.5"},
                                    {"HVDLITE_DIVERGENCE_SHUTDOWN_TIME_SECONDS", "0"},
                                    {"HVDLITE_CALL_SITES", "0"}});
  CHECK_EQ(c.divergence_warning_s, 1.5);
  CHECK_EQ(c.divergence_shutdown_s, 0.0);
  CHECK(!c.call_sites);
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_DIVERGENCE_CHECK_TIME_SECONDS", "soon"}}), InvalidArgument,
               "HVDLITE_DIVERGENCE_CHECK_TIME_SECONDS='soon'");
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_CALL_SITES", "maybe"}}), InvalidArgument,
               "HVDLITE_CALL_SITES='maybe' is not a boolean");
}

TEST(HorovodNamesAreAliasesAndHvdliteWins) {
  auto c = Config::fromEnvironment({{"HOROVOD_FUSION_THRESHOLD", "1024"}, {"HOROVOD_CYCLE_TIME", "5"},
                                    {"HVDLITE_CYCLE_TIME", "2"}});
  CHECK_EQ(c.fusion_threshold, int64_t{1024});
  CHECK_EQ(c.cycle_time_ms, 2.0);
}

TEST(HorovodsGlooTimeoutIsTheStartTimeoutUnlessOneIsSet) {
  CHECK_EQ(Config::fromEnvironment({{"HOROVOD_GLOO_TIMEOUT_SECONDS", "7"}}).start_timeout_s, 7.0);
  CHECK_EQ(Config::fromEnvironment({{"HOROVOD_GLOO_TIMEOUT_SECONDS", "7"}, {"HVDLITE_START_TIMEOUT", "9"}})
               .start_timeout_s,
           9.0);
}

TEST(MalformedValueNamesTheVariable) {
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_CACHE_CAPACITY", "lots"}}), InvalidArgument,
               "HVDLITE_CACHE_CAPACITY='lots'");
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_TIMELINE_MARK_CYCLES", "maybe"}}), InvalidArgument,
               "not a boolean");
}

TEST(MultiRankWithoutStoreIsExplained) {
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_SIZE", "2"}, {"HVDLITE_RANK", "1"}}), InvalidArgument,
               "hvdliterun");
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_SIZE", "2"}, {"HVDLITE_RANK", "2"},
                                        {"HVDLITE_STORE_ADDR", "x"}}),
               InvalidArgument, "not below");
}

TEST(EmptyOrMissingSecretIsRefused) {
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_SECRET", ""}}), InvalidArgument, "HVDLITE_SECRET is set but empty");
  CHECK_THROWS(Config::fromEnvironment({{"HOROVOD_SECRET", "  "}}), InvalidArgument, "HOROVOD_SECRET is set but empty");
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_SIZE", "2"}, {"HVDLITE_RANK", "1"}, {"HVDLITE_STORE_ADDR", "x"}}),
               InvalidArgument, "no job secret (HVDLITE_SECRET)");
  auto c = Config::fromEnvironment(
      {{"HVDLITE_SIZE", "2"}, {"HVDLITE_RANK", "1"}, {"HVDLITE_STORE_ADDR", "x"}, {"HVDLITE_SECRET", "s3cret"}});
  CHECK_EQ(c.secret, std::string("s3cret"));
  // One rank meets no one: no secret needed.
  CHECK_EQ(Config::fromEnvironment({}).secret, std::string());
}

TEST(GlooMeansTheBuiltInTransportAndTcpCanBeForced) {
  auto c = Config::fromEnvironment({{"HOROVOD_CPU_OPERATIONS", "GLOO"}});
  CHECK_EQ(c.transport, std::string("auto"));
  auto forced = Config::fromEnvironment({{"HVDLITE_SHM_DISABLE", "1"}});
  CHECK_EQ(forced.transport, std::string("tcp"));
  auto tcp = Config::fromEnvironment({{"HVDLITE_CPU_OPERATIONS", "tcp"}});
  CHECK_EQ(tcp.transport, std::string("tcp"));
}

TEST(AutotuneAndPipelineSettings) {
  auto c = Config::fromEnvironment({});
  CHECK(!c.autotune);
  CHECK_EQ(c.pipeline_chunk, int64_t{-1});  // the transport decides
  auto tuned = Config::fromEnvironment({{"HOROVOD_AUTOTUNE", "1"}, {"HOROVOD_AUTOTUNE_LOG", "t.csv"},
                                        {"HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE", "4"},
                                        {"HVDLITE_PIPELINE_CHUNK", "0"}});
  CHECK(tuned.autotune);
  CHECK_EQ(tuned.autotune_log, std::string("t.csv"));
  CHECK_EQ(tuned.autotune_steps_per_sample, 4);
  CHECK_EQ(tuned.pipeline_chunk, int64_t{0});
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE", "0"}}), InvalidArgument,
               "HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE='0'");
}

TEST(RendezvousRoundComesFromTheElasticDriverOrCountsInits) {
  CHECK_EQ(Config::fromEnvironment({}).rendezvous_round, -1);
  CHECK_EQ(Config::fromEnvironment({{"HVDLITE_RENDEZVOUS_ROUND", "7"}}).rendezvous_round, 7);
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_RENDEZVOUS_ROUND", "-2"}}), InvalidArgument,
               "HVDLITE_RENDEZVOUS_ROUND='-2'");
}

// Only a job that runs everything over MPI needs no rendezvous store.
TEST(MpiControllerAndOperationsAreSelectedAndNeedNoStore) {
  auto c = Config::fromEnvironment({{"HOROVOD_CONTROLLER", "Gloo"}});
  CHECK_EQ(c.controller, std::string("tcp"));
  auto mpi = Config::fromEnvironment({{"HVDLITE_SIZE", "2"}, {"HVDLITE_RANK", "1"},
                                      {"HOROVOD_CPU_OPERATIONS", "MPI"},
                                      {"HOROVOD_CONTROLLER", "mpi"}});
  CHECK_EQ(mpi.transport, std::string("mpi"));
  CHECK_EQ(mpi.controller, std::string("mpi"));
  auto by_default = Config::fromEnvironment(
      {{"HVDLITE_SIZE", "2"}, {"HVDLITE_RANK", "1"}, {"HVDLITE_CPU_OPERATIONS", "mpi"}});
  CHECK_EQ(by_default.controller, std::string("auto"));
  // Data through the built-in transport still needs the store.
  CHECK_THROWS(Config::fromEnvironment({{"HVDLITE_SIZE", "2"}, {"HVDLITE_RANK", "1"},
                                        {"HVDLITE_CONTROLLER", "mpi"}}),
               InvalidArgument, "no rendezvous store");
}

int main() { return RUN_ALL_TESTS(); }
