// One POSIX shared-memory segment mapped into this process (RAII), and the
// naming rules that let survivors, the launcher and a later init() find and
// remove what a crashed job left in /dev/shm.
#pragma once

#include <cstddef>
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

// Removes /dev/shm entries named segmentPrefix(job_id)* that do not contain
// `keep` (the current round's tag; "" removes all of the job's). Returns how
// many it removed.
int removeStaleSegments(const std::string& job_id, const std::string& keep);

class Segment {
 public:
  // Creates (replacing a leftover of the same name) or opens the named
  // segment of `bytes` bytes and maps it. Throws TransportError with the
  // name and errno text when the system refuses (e.g. /dev/shm full).
  static Segment create(const std::string& name, size_t bytes);
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
  void release();

  std::string name_;
  char* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;  // created it, so unlinks it if nobody did
};

}  // namespace hvdlite::transport::shm
