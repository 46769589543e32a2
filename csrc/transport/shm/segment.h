// One POSIX shared-memory segment mapped into this process (RAII), and the
// naming rules that let survivors, the launcher and a later init() find and
// remove what a crashed job left in /dev/shm.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace hvdlite::transport::shm {

// Note [Segment lifetime]
// A segment lives in /dev/shm only between its creation by the set's rank 0
// and the moment every member has mapped it (a few milliseconds at init):
// rank 0 then unlinks the name, and the memory goes away with the last
// mapping, whether its process exits cleanly or crashes. For the window in
// between, names start with segmentPrefix(job id), so that
//   - a later init() of the same job removes those of earlier rounds
//     (removeStaleSegments), and
//   - the launcher removes every one of its job when the job ends
//     (hvdlite/runner, same prefix).
std::string segmentPrefix(const std::string& job_id);

// Note [Segment names]
// Another user of the host may create files in /dev/shm too, and where it
// lacks the sticky bit may also remove ours. A name they can predict lets
// them take it first (a job that must create exactly that name cannot start)
// or slip in a segment of their own that our ranks would map. So the set's
// rank 0 creates the segment under segmentPrefix + round + 128 random bits,
// with O_CREAT|O_EXCL and mode 0600 (a name that exists already, however
// unlikely, is skipped for a fresh random one, never removed or opened), and
// tells the other members the name over the set's authenticated TCP links
// (Note [Mesh handshake]). A member opens only a segment that fstat shows is
// ours (our uid, no group or other access): a stranger's file under that name
// is refused with a clear error, never mapped.

// Removes /dev/shm entries named segmentPrefix(job_id)* that do not contain
// `keep` (the current round's tag; "" removes all of the job's). Returns how
// many it removed.
int removeStaleSegments(const std::string& job_id, const std::string& keep);

// 32 hex digits from the system's CSPRNG.
std::string randomSegmentPart();

class Segment {
 public:
  // Creates the segment `name` of `bytes` bytes (O_EXCL, 0600) and maps it.
  // Throws TransportError with the name and errno text when the system
  // refuses (e.g. /dev/shm full, or the name exists).
  static Segment create(const std::string& name, size_t bytes);
  // Creates prefix + random_part() as create() does, drawing a new random
  // part while the name exists already (Note [Segment names]).
  static Segment createUnique(const std::string& prefix, size_t bytes,
                              const std::function<std::string()>& random_part = randomSegmentPart);
  // Maps an existing segment after checking that it is ours (Note [Segment
  // names]) and at least `bytes` long; TransportError otherwise.
  static Segment open(const std::string& name, size_t bytes);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Removes the name; the mapping stays valid (Note [Segment lifetime]).
  void unlink();

  char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  Segment(std::string name, char* data, size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}
  // Maps the segment create() just made on `fd` (and closes fd).
  static Segment mapCreated(const std::string& name, int fd, size_t bytes);
  void release();

  std::string name_;
  char* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;  // created it, so unlinks it if nobody did
};

}  // namespace hvdlite::transport::shm
