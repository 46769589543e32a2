#include <pybind11/stl.h>

#include <algorithm>

#include "api/maintenance.h"
#include "python/bind.h"

namespace py = pybind11;

namespace hvdlite::python {

void bindRuntime(py::module_& m) {
  m.def(
      "init",
      [](const std::map<std::string, std::string>& env, const std::vector<std::vector<int>>& sets,
         int64_t mpi_comm) {
        py::gil_scoped_release release;
        session().init(env, sets, mpi_comm);
      },
      py::arg("env"), py::arg("process_sets"), py::arg("mpi_comm") = -1);
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    session().shutdown();
  });
  m.def("is_initialized", [] { return session().initialized(); });
  // Note [Solo collectives] in api/solo.h (hvdlite/common/late_joiners.py).
  m.def("begin_solo", [](std::string who, std::string why_harmless, std::string refusal) {
    session().solo().begin(std::move(who), std::move(why_harmless), std::move(refusal));
  }, py::arg("who"), py::arg("why_harmless"), py::arg("refusal"));
  m.def("end_solo", [] { session().solo().end(); });
  m.def("is_solo", [] { return session().solo().active(); });
  // For the launcher (api/maintenance.h).
  m.def("remove_job_segments", &api::removeJobSegments, py::arg("job_id"), py::arg("keep") = "");
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
  m.def("tuned_parameters", [] {
    const auto p = session().runtime()->tunedParameters();
    py::dict d;
    d["fusion_threshold"] = p.fusion_threshold;
    d["cycle_time_ms"] = p.cycle_time_ms;
    d["final"] = p.final;
    return d;
  });
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    session().runtime()->startTimeline(path, mark_cycles);
  });
  m.def("stop_timeline", [] { session().runtime()->stopTimeline(); });
  m.def("process_set_ids", [] { return session().runtime()->processSetIds(); });
  m.def("process_set_ranks", [](int32_t id) { return session().runtime()->processSetRanks(id); });
  m.def("process_set_transport", [](int32_t id) { return session().runtime()->processSetTransport(id); });
  m.def("transports", &api::builtTransports);
  m.def("mpi_built", [] {
    auto names = api::builtTransports();
    return std::find(names.begin(), names.end(), "mpi") != names.end();
  });
  m.def("mpi_threads_supported", &api::mpiThreadsSupported);
  // (data transport, controller) of the running runtime, as configured.
  m.def("selected_transports", [] {
    const auto& config = session().runtime()->config();
    return std::make_pair(config.transport, config.controller);
  });
  m.def("nccl_version", [](const std::map<std::string, std::string>& env) {
    py::gil_scoped_release release;  // loading the library may take a while
    return api::ncclVersion(env);
  }, py::arg("env"));
  // The MPI the core uses, or would use with `env`: a dict
  // (hvdlite.common.basics.mpi_libraries).
  m.def("mpi_libraries", [](const std::map<std::string, std::string>& env) {
    transport::mpi::MpiLibraryReport r;
    {
      py::gil_scoped_release release;
      r = api::mpiLibraries(env);
    }
    py::dict d;
    d["plugins"] = r.plugins;
    d["library"] = r.library;
    d["version"] = r.version;
    d["family"] = r.family;
    d["plugin"] = r.plugin;
    d["error"] = r.error;
    return d;
  }, py::arg("env"));
  // The CUDA libraries in use (the running runtime's), or that the core would
  // use with `env` (before init): a dict (hvdlite.common.basics.gpu_libraries).
  m.def("gpu_libraries", [](const std::map<std::string, std::string>& env) {
    transport::GpuLibraryReport r;
    {
      py::gil_scoped_release release;
      r = session().initialized() ? session().runtime()->gpuLibraries() : api::gpuLibraries(env);
    }
    auto text = [](const std::string& s) { return s.empty() ? py::object(py::none()) : py::object(py::str(s)); };
    py::dict d;
    d["gpu_operations"] = r.operations;
    d["cuda_runtime"] = text(r.cuda_runtime);
    d["cuda_runtime_version"] = r.cuda_runtime_version;
    d["cuda_driver_version"] = r.cuda_driver_version;
    d["batched_copies"] = r.batched_copies;
    d["nccl"] = text(r.nccl);
    d["nccl_version"] = r.nccl_version;
    d["error"] = text(r.error);
    return d;
  }, py::arg("env"));
}

}  // namespace hvdlite::python
