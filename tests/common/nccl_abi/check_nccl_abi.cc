// Compares csrc/transport/nccl/nccl_api.h, which declares NCCL's types itself so
// that building hvdlite needs no nccl.h, with a real nccl.h (NCCL >= 2.18).
// Compiled by tests/common/test_nccl_abi.py against stub CUDA headers
// (nccl.h includes cuda_runtime.h); a mismatch fails the compile, naming it,
// and the initializer's values are compared at run time.
#include <nccl.h>

#include <cstddef>
#include <cstdio>

#include "transport/nccl/nccl_api.h"

namespace ours = hvdlite::transport::nccl;

#define SAME_OFFSET(field)                                                                  \
  static_assert(offsetof(ours::ncclConfig_t, field) == offsetof(::ncclConfig_t, field), \
                "ncclConfig_t::" #field " is not where nccl.h has it")
SAME_OFFSET(size);
SAME_OFFSET(magic);
SAME_OFFSET(version);
SAME_OFFSET(blocking);
SAME_OFFSET(cgaClusterSize);
SAME_OFFSET(minCTAs);
SAME_OFFSET(maxCTAs);
SAME_OFFSET(netName);
// Ours is NCCL 2.14's layout, a prefix of every later one: it ends where the
// first field added after 2.14 (splitShare, 2.18) begins.
static_assert(sizeof(ours::ncclConfig_t) == offsetof(::ncclConfig_t, splitShare),
              "ncclConfig_t is not NCCL 2.14's prefix of nccl.h's");
static_assert(sizeof(ours::ncclUniqueId) == sizeof(::ncclUniqueId), "ncclUniqueId size");

#define SAME_VALUE(name) static_assert(static_cast<long>(ours::name) == static_cast<long>(::name), #name)
SAME_VALUE(ncclSuccess);
SAME_VALUE(ncclInProgress);
SAME_VALUE(ncclInt8);
SAME_VALUE(ncclUint8);
SAME_VALUE(ncclInt32);
SAME_VALUE(ncclUint32);
SAME_VALUE(ncclInt64);
SAME_VALUE(ncclUint64);
SAME_VALUE(ncclFloat16);
SAME_VALUE(ncclFloat32);
SAME_VALUE(ncclFloat64);
SAME_VALUE(ncclBfloat16);
SAME_VALUE(ncclSum);
SAME_VALUE(ncclProd);
SAME_VALUE(ncclMax);
SAME_VALUE(ncclMin);
SAME_VALUE(ncclAvg);
SAME_VALUE(ncclScalarDevice);
SAME_VALUE(ncclScalarHostImmediate);

int main() {
  // NCCL_CONFIG_INITIALIZER's semantics: size and version say which layout
  // follows (NCCL reads no field past `size`), magic marks an initialized
  // config, and every option is "undefined" (INT_MIN / NULL) unless set.
  ::ncclConfig_t real = NCCL_CONFIG_INITIALIZER;
  ours::ncclConfig_t mine;
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("MISMATCH %s\n", what);
      ++failures;
    }
  };
  expect(mine.size == sizeof mine, "size is sizeof(ours)");
  expect(mine.magic == real.magic, "magic");
  expect(mine.version >= 21400 && mine.version <= real.version, "version: 2.14 <= ours <= nccl.h's");
  expect(mine.blocking == real.blocking, "blocking undefined");
  expect(mine.cgaClusterSize == real.cgaClusterSize, "cgaClusterSize undefined");
  expect(mine.minCTAs == real.minCTAs, "minCTAs undefined");
  expect(mine.maxCTAs == real.maxCTAs, "maxCTAs undefined");
  expect(mine.netName == real.netName, "netName undefined");
  std::printf("nccl.h %d: sizeof(ncclConfig_t) %zu (ours %zu), magic %#x, version %u (ours %u)\n",
              NCCL_VERSION_CODE, sizeof real, sizeof mine, real.magic, real.version, mine.version);
  if (failures == 0) std::printf("ABI OK\n");
  return failures == 0 ? 0 : 1;
}
