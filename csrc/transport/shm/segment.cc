#include "transport/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/errors.h"
#include "common/hmac.h"

namespace hvdlite::transport::shm {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& name) {
  int saved = errno;
  throw TransportError(detail::concat("shared-memory transport: cannot ", what, " segment /dev/shm",
                                      name, ": ", std::strerror(saved),
                                      ". Free space in /dev/shm, or set HVDLITE_SHM_DISABLE=1 to "
                                      "use TCP between local ranks"));
}

// Job ids come from the launcher or the user; keep only characters that are
// safe in a file name.
std::string sanitized(const std::string& text) {
  std::string out;
  for (char c : text) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
  return out;
}

char* mapShared(int fd, size_t bytes) {
  void* address = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return address == MAP_FAILED ? nullptr : static_cast<char*>(address);
}

}  // namespace

std::string segmentPrefix(const std::string& job_id) { return "/hvdlite-" + sanitized(job_id) + "-"; }

int removeStaleSegments(const std::string& job_id, const std::string& keep) {
  std::string prefix = segmentPrefix(job_id).substr(1);  // entries in /dev/shm have no '/'
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind(prefix, 0) != 0 || (!keep.empty() && name.find(keep) != std::string::npos)) continue;
    if (shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

std::string randomSegmentPart() {
  static const char kHex[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : randomBytes(16)) {
    text += kHex[byte >> 4];
    text += kHex[byte & 15];
  }
  return text;
}

namespace {

// The descriptor of the new segment `name`, or -1 with errno (EEXIST when the
// name is taken).
int createExclusive(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return -1;
  // 0600 regardless of the umask; fchmod on what we opened, never on a name.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int saved = errno;
    close(fd);
    shm_unlink(name.c_str());
    errno = saved;
    fail("size", name);
  }
  return fd;
}

std::string modeText(mode_t mode) {
  char text[8];
  snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

Segment Segment::create(const std::string& name, size_t bytes) {
  int fd = createExclusive(name, bytes);
  if (fd < 0) fail("create", name);
  return mapCreated(name, fd, bytes);
}

Segment Segment::createUnique(const std::string& prefix, size_t bytes,
                              const std::function<std::string()>& random_part) {
  // With 128 random bits a taken name means someone is guessing; a few draws
  // make sure a stuck generator fails instead of looping.
  constexpr int kAttempts = 8;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::string name = prefix + random_part();
    int fd = createExclusive(name, bytes);
    if (fd >= 0) return mapCreated(name, fd, bytes);
    if (errno != EEXIST) fail("create", name);
  }
  throw TransportError(detail::concat(
      "shared-memory transport: all of ", kAttempts, " random names /dev/shm", prefix,
      "<random> existed already; someone is creating files under this job's names. Check who "
      "writes to /dev/shm, or set HVDLITE_SHM_DISABLE=1 to use TCP between local ranks"));
}

Segment Segment::mapCreated(const std::string& name, int fd, size_t bytes) {
  char* data = mapShared(fd, bytes);
  close(fd);
  if (data == nullptr) {
    int saved = errno;
    shm_unlink(name.c_str());
    errno = saved;
    fail("map", name);
  }
  return Segment(name, data, bytes, true);
}

Segment Segment::open(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW, 0600);
  if (fd < 0) fail("open", name);
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    fail("inspect", name);
  }
  if (info.st_uid != geteuid() || (info.st_mode & 077) != 0) {
    close(fd);
    throw TransportError(detail::concat(
        "shared-memory transport: segment /dev/shm", name, " belongs to uid ", info.st_uid,
        " with mode ", modeText(info.st_mode), ", not to this user (uid ", geteuid(),
        ") with mode 0600: someone else created a file under the name this job's rank 0 chose. "
        "Nothing was mapped; check who writes to /dev/shm, or set HVDLITE_SHM_DISABLE=1 to use "
        "TCP between local ranks"));
  }
  if (static_cast<size_t>(info.st_size) < bytes) {
    close(fd);
    errno = EINVAL;
    fail("open (wrong size)", name);
  }
  char* data = mapShared(fd, bytes);
  close(fd);
  if (data == nullptr) fail("map", name);
  return Segment(name, data, bytes, false);
}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

Segment::~Segment() { release(); }

void Segment::unlink() {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
}

void Segment::release() {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
}

}  // namespace hvdlite::transport::shm
