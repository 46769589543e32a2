#include <pybind11/stl.h>

#include "core/config.h"
#include "python/bind.h"
#include "transport/device_communicator.h"

namespace py = pybind11;

namespace hvdlite::python {

void bindRuntime(py::module_& m) {
  m.def(
      "init",
      [](const std::map<std::string, std::string>& env, const std::vector<std::vector<int>>& sets) {
        py::gil_scoped_release release;
        session().init(env, sets);
      },
      py::arg("env"), py::arg("process_sets"));
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    session().shutdown();
  });
  m.def("is_initialized", [] { return session().initialized(); });
  m.def("topology", [] {
    const auto t = session().runtime()->topology();  // a copy: shutdown may follow
    py::dict d;
    d["rank"] = t.rank;
    d["size"] = t.size;
    d["local_rank"] = t.local_rank;
    d["local_size"] = t.local_size;
    d["cross_rank"] = t.cross_rank;
    d["cross_size"] = t.cross_size;
    d["is_homogeneous"] = t.homogeneous;
    return d;
  });
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    session().runtime()->startTimeline(path, mark_cycles);
  });
  m.def("stop_timeline", [] { session().runtime()->stopTimeline(); });
  m.def("process_set_ids", [] { return session().runtime()->processSetIds(); });
  m.def("process_set_ranks", [](int32_t id) { return session().runtime()->processSetRanks(id); });
  m.def("transports", [] { return std::vector<std::string>{"tcp"}; });
  m.def("mpi_built", [] { return false; });
  // NCCL's version if libnccl.so.2 loads where the core would look for it
  // (HVDLITE_NCCL_LIBRARY, HVDLITE_GPU_LIBRARY_PATH, the system), else 0.
  m.def("nccl_version", [](const std::map<std::string, std::string>& env) {
    std::map<std::string, std::string> gpu_only;  // the rest may not parse before init
    for (const auto& [key, value] : env) {
      if (key.find("NCCL_LIBRARY") != std::string::npos || key.find("CUDART_LIBRARY") != std::string::npos ||
          key.find("GPU_LIBRARY_PATH") != std::string::npos) {
        gpu_only[key] = value;
      }
    }
    auto config = core::Config::fromEnvironment(gpu_only);
    py::gil_scoped_release release;
    return transport::ncclVersion({config.nccl_library, config.cudart_library, config.gpu_library_path});
  }, py::arg("env"));
}

}  // namespace hvdlite::python
