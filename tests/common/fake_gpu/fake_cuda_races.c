/* The fake CUDA runtime's race detector, like compute-sanitizer's synccheck:
 * a table of live device allocations (cudaMalloc, cudaMallocAsync), and for
 * every byte range of each the last write and the reads since, as (stream,
 * position) pairs. When an operation is queued, each of its accesses is
 * checked against them with the queueing stream's clock (Note [Vector
 * clocks], fake_cuda_streams.c): a read must be ordered after the last
 * write, a write after the last write and every read since. An unordered
 * pair is a race, recorded with a message that names both operations, their
 * streams, threads and positions, the bytes, and the allocation.
 *
 * Only stream work is tracked: host code that reads or writes fake device
 * memory through a pointer (NumPy over cudaMalloc'd memory, say) is not seen,
 * nor is pinned or pageable host memory. cudaMallocAsync counts as a write
 * on its stream (CUDA: a stream-ordered allocation may be used on any stream
 * ordered after it), cudaFreeAsync as a write over the whole allocation.
 *
 * With FAKE_CUDA_RACE_CHECK=1 in the environment, a process that recorded a
 * race prints them to stderr when it exits and exits with status 97, so
 * every test that runs on the fake fails on a race without code of its own. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

/* One access, as remembered. */
struct acc {
  int sid;
  long pos;
  const char* op;
  char thread[NAME_LEN];
};

/* The bytes [lo, hi) of an allocation, with the same history. */
struct seg {
  size_t lo, hi;
  int has_write, write_is_alloc;
  struct acc write;
  struct acc* reads; /* since that write, the latest per stream, by slot */
  int nreads;
};

struct alloc {
  char* base;
  size_t size;
  const char* how;
  char thread[NAME_LEN];
  struct seg* segs; /* cover [0, size), in order */
  int nsegs;
};

static struct alloc* allocs; /* by base */
static int nallocs;

#define MAX_MESSAGES 64
static char* messages[MAX_MESSAGES];
static int nmessages;
static atomic_long races;

/* ---- the allocation table ---- */
static int first_above(const void* p) { /* index of the first allocation with base > p */
  int lo = 0, hi = nallocs;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if ((const char*)allocs[mid].base <= (const char*)p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static struct alloc* find(const void* p) {
  int i = first_above(p) - 1;
  if (i < 0) return NULL;
  struct alloc* a = &allocs[i];
  return (const char*)p < a->base + (a->size ? a->size : 1) ? a : NULL;
}

int races_is_device(const void* p) { return find(p) != NULL; }

static void fill_acc(struct acc* a, int sid, long pos, const char* op) {
  a->sid = sid;
  a->pos = pos;
  a->op = op;
  thread_name(a->thread);
}

size_t races_size(const void* base) {
  struct alloc* a = find(base);
  return a && a->base == base ? a->size : 0;
}

void races_allocated(void* base, size_t bytes, const char* how, int sid, long pos) {
  int i = first_above(base);
  allocs = realloc(allocs, (nallocs + 1) * sizeof *allocs);
  memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
  ++nallocs;
  struct alloc* a = &allocs[i];
  memset(a, 0, sizeof *a);
  a->base = base;
  a->size = bytes;
  a->how = how;
  thread_name(a->thread);
  a->segs = calloc(1, sizeof *a->segs);
  a->nsegs = 1;
  a->segs[0].hi = bytes ? bytes : 1;
  if (pos) {
    a->segs[0].has_write = a->segs[0].write_is_alloc = 1;
    fill_acc(&a->segs[0].write, sid, pos, how);
  }
}

static void free_segs(struct alloc* a) {
  for (int i = 0; i < a->nsegs; ++i) free(a->segs[i].reads);
  free(a->segs);
}

void races_freed(void* base) {
  struct alloc* a = find(base);
  if (!a || a->base != base) return;
  free_segs(a);
  int i = (int)(a - allocs);
  memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof *allocs);
  --nallocs;
}

/* ---- segments ---- */
/* Makes `at` a segment boundary; returns the index of the segment that starts there. */
static int split(struct alloc* a, size_t at) {
  int i = 0;
  while (i < a->nsegs && a->segs[i].hi <= at) ++i;
  if (i == a->nsegs || a->segs[i].lo == at) return i;
  a->segs = realloc(a->segs, (a->nsegs + 1) * sizeof *a->segs);
  memmove(&a->segs[i + 1], &a->segs[i], (a->nsegs - i) * sizeof *a->segs);
  ++a->nsegs;
  struct seg* left = &a->segs[i];
  struct seg* right = &a->segs[i + 1];
  right->lo = left->hi = at;
  if (left->nreads) {
    right->reads = malloc(left->nreads * sizeof *right->reads);
    memcpy(right->reads, left->reads, left->nreads * sizeof *right->reads);
  }
  return i + 1;
}

static int same_acc(const struct acc* x, const struct acc* y) { return x->sid == y->sid && x->pos == y->pos; }

static int same_history(const struct seg* x, const struct seg* y) {
  if (x->has_write != y->has_write || (x->has_write && !same_acc(&x->write, &y->write))) return 0;
  if (x->nreads != y->nreads) return 0;
  for (int i = 0; i < x->nreads; ++i) {
    if (!same_acc(&x->reads[i], &y->reads[i])) return 0;
  }
  return 1;
}

/* Merges neighbours with the same history in segments [from, to]: a buffer
 * written whole becomes one segment again, which keeps the table small. */
static void coalesce(struct alloc* a, int from, int to) {
  if (from < 1) from = 1;
  if (to > a->nsegs - 1) to = a->nsegs - 1;
  for (int i = to; i >= from; --i) {
    if (!same_history(&a->segs[i - 1], &a->segs[i])) continue;
    a->segs[i - 1].hi = a->segs[i].hi;
    free(a->segs[i].reads);
    memmove(&a->segs[i], &a->segs[i + 1], (a->nsegs - i - 1) * sizeof *a->segs);
    --a->nsegs;
  }
}

static void add_read(struct seg* g, const struct acc* r) {
  int i = 0;
  while (i < g->nreads && g->reads[i].sid < r->sid) ++i;
  if (i < g->nreads && g->reads[i].sid == r->sid) {
    g->reads[i] = *r; /* a later read of the same stream is ordered after the earlier */
    return;
  }
  g->reads = realloc(g->reads, (g->nreads + 1) * sizeof *g->reads);
  memmove(&g->reads[i + 1], &g->reads[i], (g->nreads - i) * sizeof *g->reads);
  g->reads[i] = *r;
  ++g->nreads;
}

/* ---- reporting ---- */
/* An earlier access that a new one is not ordered after, and the bytes. */
struct conflict {
  struct acc earlier;
  int kind; /* 0 write, 1 read, 2 stream-ordered allocation */
  size_t lo, hi;
};

static void note(struct conflict* found, int* n, const struct acc* earlier, int kind, const struct seg* g) {
  for (int i = 0; i < *n; ++i) {
    if (found[i].kind == kind && same_acc(&found[i].earlier, earlier)) {
      if (g->hi > found[i].hi) found[i].hi = g->hi;
      return;
    }
  }
  if (*n == 8) return;
  found[(*n)++] = (struct conflict){*earlier, kind, g->lo, g->hi};
}

static void report(const struct stream* s, const struct acc* now, int write, const struct alloc* a,
                   const struct conflict* c) {
  static const char* earlier_verb[] = {"written", "read", "allocated (stream-ordered)"};
  static const char* earlier_noun[] = {"write", "read", "allocation"};
  const char* verb = !write ? "reads" : strcmp(now->op, "cudaFreeAsync") == 0 ? "frees" : "writes";
  char text[1024];
  snprintf(text, sizeof text,
           "race: %s on %s at position %ld (thread \"%s\") %s [%p+%zu) of a %zu-byte allocation (%s on "
           "thread \"%s\") %s by %s on %s at position %ld (thread \"%s\"), with no event wait or host "
           "synchronize ordering it after that %s",
           now->op, stream_label(s->sid), now->pos, now->thread, verb, (void*)(a->base + c->lo), c->hi - c->lo,
           a->size, a->how, a->thread, earlier_verb[c->kind], c->earlier.op, stream_label(c->earlier.sid),
           c->earlier.pos, c->earlier.thread, earlier_noun[c->kind]);
  atomic_fetch_add(&races, 1);
  if (nmessages < MAX_MESSAGES) messages[nmessages++] = strdup(text);
}

/* ---- checking ---- */
static int ordered(const struct stream* s, const struct acc* earlier) {
  return s->clock.c[earlier->sid] >= earlier->pos;
}

static void check_range(const struct stream* s, const struct acc* now, int write, struct alloc* a, size_t lo,
                        size_t hi) {
  int first = split(a, lo);
  split(a, hi);
  struct conflict found[8];
  int nfound = 0, last = first;
  for (int i = first; i < a->nsegs && a->segs[i].lo < hi; ++i) {
    struct seg* g = &a->segs[i];
    last = i;
    if (g->has_write && !ordered(s, &g->write)) note(found, &nfound, &g->write, g->write_is_alloc ? 2 : 0, g);
    if (write) {
      for (int r = 0; r < g->nreads; ++r) {
        if (!ordered(s, &g->reads[r])) note(found, &nfound, &g->reads[r], 1, g);
      }
      free(g->reads);
      g->reads = NULL;
      g->nreads = 0;
      g->has_write = 1;
      g->write_is_alloc = 0;
      g->write = *now;
    } else {
      add_read(g, now);
    }
  }
  for (int i = 0; i < nfound; ++i) report(s, now, write, a, &found[i]);
  coalesce(a, first, last + 1);
}

void races_check(const struct stream* s, long pos, const struct op* op) {
  for (int i = 0; i < op->nacc; ++i) {
    const struct access* x = &op->acc[i];
    struct acc now;
    fill_acc(&now, s->sid, pos, x->op ? x->op : op->name);
    const char* p = x->p;
    const char* end = p + x->bytes;
    while (p < end) {
      struct alloc* a = find(p);
      if (!a) { /* not device memory here: skip to the next allocation, if any */
        int next = first_above(p);
        if (next == nallocs || allocs[next].base >= end) break;
        p = allocs[next].base;
        continue;
      }
      size_t lo = (size_t)(p - a->base);
      size_t hi = (size_t)(end - a->base) < a->size ? (size_t)(end - a->base) : a->size;
      if (hi > lo) check_range(s, &now, x->write, a, lo, hi);
      p = a->base + (a->size ? a->size : 1);
    }
  }
}

/* ---- for the tests ---- */
long fake_cuda_races(void) { return atomic_load(&races); }

/* Every recorded message (the first MAX_MESSAGES), one per line; valid until the next call. */
const char* fake_cuda_race_report(void) {
  static char* text;
  return join_lines(messages, &nmessages, &text);
}

/* Forgets the races recorded so far (not the accesses). */
void fake_cuda_reset_races(void) {
  pthread_mutex_lock(&fake_mu);
  for (int i = 0; i < nmessages; ++i) free(messages[i]);
  nmessages = 0;
  atomic_store(&races, 0);
  pthread_mutex_unlock(&fake_mu);
}

/* FAKE_CUDA_RACE_CHECK=1: runs as the process exits (exit(), or the end of
 * main). Stream threads may still run, but none holds fake_mu for long
 * (Note [One order lock]); if a thread died holding it the report is read
 * without it rather than hang. _exit skips the other exit handlers. */
__attribute__((destructor)) static void fail_on_races(void) {
  const char* check = getenv("FAKE_CUDA_RACE_CHECK");
  if (!check || strcmp(check, "1") != 0 || atomic_load(&races) == 0) return;
  int locked = 0;
  for (int i = 0; i < 2000 && !(locked = pthread_mutex_trylock(&fake_mu) == 0); ++i) {
    struct timespec t = {0, 1000000};
    nanosleep(&t, NULL);
  }
  fprintf(stderr, "fake CUDA (FAKE_CUDA_RACE_CHECK=1): %ld race(s) in process %d:\n", atomic_load(&races),
          (int)getpid());
  for (int i = 0; i < nmessages; ++i) fprintf(stderr, "%s\n", messages[i]);
  if (atomic_load(&races) > nmessages) fprintf(stderr, "(only the first %d are kept)\n", MAX_MESSAGES);
  fflush(stderr);
  if (locked) pthread_mutex_unlock(&fake_mu);
  _exit(97);
}
