// A shared library opened at run time (dlopen), so that one hvdlite build runs
// on machines with and without NCCL/CUDA installed.
#pragma once

#include <string>
#include <vector>

namespace hvdlite::transport::cuda {

// Whose symbols a library lends to those opened after it: its own users'
// only (kLocal), or everyone's (kGlobal: libmpi, whose components need it).
enum class SymbolScope { kLocal, kGlobal };

class DynamicLibrary {
 public:
  // Opens the first candidate that loads. A candidate is a path, or a bare
  // file name that the system's search path resolves. Never throws: check
  // loaded(), and failures() for why each candidate was refused.
  explicit DynamicLibrary(const std::vector<std::string>& candidates,
                          SymbolScope scope = SymbolScope::kLocal);
  ~DynamicLibrary();
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  const std::string& path() const { return path_; }  // the candidate that loaded
  // Where the loaded file is (the candidate may be a bare file name).
  std::string location() const;
  // "candidate: reason" for every candidate tried before one loaded (all of
  // them when none did), one per line.
  const std::string& failures() const { return failures_; }

  // The address of `name`, or nullptr when the library does not export it.
  void* symbol(const char* name) const;

 private:
  void* handle_ = nullptr;
  std::string path_;
  std::string failures_;
};

// A candidate that only matches a library already loaded into this process
// (e.g. the libnccl.so.2 PyTorch loaded), so that hvdlite shares it instead
// of mapping a second copy.
std::string alreadyLoaded(const std::string& file_name);

}  // namespace hvdlite::transport::cuda
