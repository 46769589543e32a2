/* Counts what a rank's shared-memory waits cost in system calls, by
 * interposing (LD_PRELOAD) the libc calls hvdlite's shm Progress makes:
 * sched_yield, syscall(SYS_futex, ...), kill(pid, 0) and the opens of
 * /proc/<pid>/stat its health check reads. Counts are the same on a loaded
 * and a quiet machine for the same sequence of waits, so they compare two
 * builds where wall times cannot. Built and preloaded by bench/wait_counts.py;
 * a process reads them with hvdlite_wait_counts() (ctypes).
 *
 * Yields and futex calls are attributed by their caller: those made from
 * hvdlite::transport::shm::Progress (dladdr of the return address, cached per
 * address) count as shm; the others (tcp, the core's own waits) apart. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>

enum {
  kShmYields,        /* sched_yield from Progress */
  kOtherYields,      /* sched_yield from anywhere else */
  kShmFutexWaits,    /* FUTEX_WAIT from Progress: sleeps entered (or refused: value changed) */
  kShmFutexTimeouts, /* of those, ended by the timeout */
  kShmFutexWakes,    /* FUTEX_WAKE calls from Progress */
  kShmFutexWoken,    /* threads those calls woke */
  kProcReads,        /* opens of /proc/<digits>/stat (health checks) */
  kKillProbes,       /* kill(pid, 0) */
  kSleptUnder50us,   /* FUTEX_WAITs from Progress by how long they slept */
  kSleptUnder200us,
  kSleptUnder1ms,
  kSleptLonger,
  kCount
};

static long long counts[kCount];

void hvdlite_wait_counts(long long* out) {
  for (int i = 0; i < kCount; ++i) out[i] = __atomic_load_n(&counts[i], __ATOMIC_RELAXED);
}

static void bump(int which, long long by) { __atomic_fetch_add(&counts[which], by, __ATOMIC_RELAXED); }

/* Whether the code at `address` belongs to shm::Progress; cached. */
#define kCacheSlots 64
static void* cached_address[kCacheSlots];
static int cached_answer[kCacheSlots];

static int fromProgress(void* address) {
  unsigned slot = (unsigned)(((uintptr_t)address >> 4) % kCacheSlots);
  if (__atomic_load_n(&cached_address[slot], __ATOMIC_ACQUIRE) == address) return cached_answer[slot];
  Dl_info info;
  int answer = dladdr(address, &info) && info.dli_sname && strstr(info.dli_sname, "3shm8Progress") != NULL;
  cached_answer[slot] = answer;
  __atomic_store_n(&cached_address[slot], address, __ATOMIC_RELEASE);
  return answer;
}

int sched_yield(void) {
  bump(fromProgress(__builtin_return_address(0)) ? kShmYields : kOtherYields, 1);
  return (int)syscall(SYS_sched_yield);
}

long syscall(long number, ...) {
  static long (*real)(long, ...) = NULL;
  if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  va_list args;
  va_start(args, number);
  long a[6];
  for (int i = 0; i < 6; ++i) a[i] = va_arg(args, long);
  va_end(args);
  if (number != SYS_futex || !fromProgress(__builtin_return_address(0))) {
    return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
  }
  int op = (int)a[1] & FUTEX_CMD_MASK;
  struct timespec before, after;
  if (op == FUTEX_WAIT) clock_gettime(CLOCK_MONOTONIC, &before);
  long result = real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
  int saved = errno;
  if (op == FUTEX_WAIT) {
    clock_gettime(CLOCK_MONOTONIC, &after);
    long long slept = (after.tv_sec - before.tv_sec) * 1000000000LL + (after.tv_nsec - before.tv_nsec);
    bump(slept < 50000 ? kSleptUnder50us : slept < 200000 ? kSleptUnder200us
         : slept < 1000000 ? kSleptUnder1ms : kSleptLonger, 1);
    bump(kShmFutexWaits, 1);
    if (result == -1 && saved == ETIMEDOUT) bump(kShmFutexTimeouts, 1);
  } else if (op == FUTEX_WAKE) {
    bump(kShmFutexWakes, 1);
    if (result > 0) bump(kShmFutexWoken, result);
  }
  errno = saved;
  return result;
}

int kill(pid_t pid, int signal) {
  static int (*real)(pid_t, int) = NULL;
  if (!real) real = (int (*)(pid_t, int))dlsym(RTLD_NEXT, "kill");
  if (signal == 0) bump(kKillProbes, 1);
  return real(pid, signal);
}

static void countProcStat(const char* path) {
  if (!path || strncmp(path, "/proc/", 6) != 0 || path[6] < '0' || path[6] > '9') return;
  const char* tail = strrchr(path, '/');
  if (tail && strcmp(tail, "/stat") == 0) bump(kProcReads, 1);
}

#define INTERPOSE_OPEN(name)                                              \
  int name(const char* path, int flags, ...) {                           \
    static int (*real)(const char*, int, ...) = NULL;                     \
    if (!real) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, #name); \
    countProcStat(path);                                                  \
    va_list args;                                                         \
    va_start(args, flags);                                                \
    int mode = va_arg(args, int);                                         \
    va_end(args);                                                         \
    return real(path, flags, mode);                                       \
  }
INTERPOSE_OPEN(open)
INTERPOSE_OPEN(open64)

int openat(int dir, const char* path, int flags, ...) {
  static int (*real)(int, const char*, int, ...) = NULL;
  if (!real) real = (int (*)(int, const char*, int, ...))dlsym(RTLD_NEXT, "openat");
  countProcStat(path);
  va_list args;
  va_start(args, flags);
  int mode = va_arg(args, int);
  va_end(args);
  return real(dir, path, flags, mode);
}

#define INTERPOSE_FOPEN(name)                                                  \
  FILE* name(const char* path, const char* mode) {                            \
    static FILE* (*real)(const char*, const char*) = NULL;                    \
    if (!real) real = (FILE * (*)(const char*, const char*)) dlsym(RTLD_NEXT, #name); \
    countProcStat(path);                                                       \
    return real(path, mode);                                                   \
  }
INTERPOSE_FOPEN(fopen)
INTERPOSE_FOPEN(fopen64)
