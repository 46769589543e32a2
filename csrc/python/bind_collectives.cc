#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "common/errors.h"
#include "python/bind.h"
#include "python/errors.h"

namespace py = pybind11;

namespace hvdlite::python {
namespace {

// Hands a core-allocated output to NumPy without copying: the array's base
// owns the vector.
py::object toArray(std::unique_ptr<std::vector<uint8_t>> bytes, size_t nbytes) {
  if (!bytes) return py::none();
  auto* raw = bytes.get();
  py::capsule owner(raw, [](void* p) { std::unique_ptr<std::vector<uint8_t>>(static_cast<std::vector<uint8_t>*>(p)); });
  bytes.release();  // now owned by the capsule
  return py::array_t<uint8_t>({static_cast<py::ssize_t>(nbytes)}, {1}, raw->data(), owner);
}

struct DeviceOutput {
  core::DeviceMemory memory;
  size_t nbytes;
  int32_t device;
};

// A buffer's address: an int (a framework tensor's data_ptr()), a NumPy
// array (cheaper than array.ctypes.data, which costs microseconds per call)
// or None.
uintptr_t addressOf(py::handle buffer) {
  if (buffer.is_none()) return 0;
  if (py::isinstance<py::array>(buffer)) {
    return reinterpret_cast<uintptr_t>(py::reinterpret_borrow<py::array>(buffer).data());
  }
  return buffer.cast<uintptr_t>();
}

size_t byteCount(const std::vector<int64_t>& shape, size_t esize) {
  size_t n = esize;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

}  // namespace

void bindCollectives(py::module_& m) {
  m.def(
      "enqueue",
      [](int op, const std::string& name, py::handle input, py::handle output, int dtype,
         std::vector<int64_t> shape, int reduce_op, int root_rank, double prescale, double postscale,
         std::vector<int64_t> splits, int32_t process_set_id, int32_t device, const std::string& group,
         int32_t group_size, std::vector<int64_t> process_set_ranks, uintptr_t ready_event,
         uintptr_t stream, bool wake) {
        auto entry = std::make_unique<core::TensorEntry>();
        entry->op = static_cast<OpType>(op);
        entry->name = name;
        entry->input = reinterpret_cast<const void*>(addressOf(input));
        entry->output = reinterpret_cast<void*>(addressOf(output));
        if (dtype < 0 || dtype >= kNumDataTypes) throw InvalidArgument("unknown dtype code " + std::to_string(dtype));
        entry->dtype = static_cast<DataType>(dtype);
        entry->shape = std::move(shape);
        entry->reduce_op = static_cast<ReduceOp>(reduce_op);
        entry->root_rank = root_rank;
        entry->prescale = prescale;
        entry->postscale = postscale;
        entry->splits = std::move(splits);
        entry->process_set_id = process_set_id;
        entry->device = device;
        entry->ready_event = reinterpret_cast<void*>(ready_event);
        entry->stream = reinterpret_cast<void*>(stream);
        entry->group = group;
        entry->group_size = group_size;
        entry->process_set_ranks = std::move(process_set_ranks);
        return session().enqueue(std::move(entry), wake);
      },
      py::arg("op"), py::arg("name"), py::arg("input") = 0, py::arg("output") = 0,
      py::arg("dtype") = static_cast<int>(DataType::kUInt8), py::arg("shape") = std::vector<int64_t>{},
      py::arg("reduce_op") = 0, py::arg("root_rank") = 0, py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0, py::arg("splits") = std::vector<int64_t>{},
      py::arg("process_set_id") = 0, py::arg("device") = -1, py::arg("group") = "",
      py::arg("group_size") = 0, py::arg("process_set_ranks") = std::vector<int64_t>{},
      py::arg("ready_event") = 0, py::arg("stream") = 0, py::arg("wake") = true);

  // A CUDA output the core allocated: its address, and ownership (cudaFree
  // when the last reference, e.g. a framework tensor's, goes).
  py::class_<DeviceOutput>(m, "DeviceOutput")
      .def_property_readonly("data_ptr", [](const DeviceOutput& o) { return reinterpret_cast<uintptr_t>(o.memory.get()); })
      .def_readonly("nbytes", &DeviceOutput::nbytes)
      .def_readonly("device", &DeviceOutput::device);

  m.def("poll", [](int64_t handle) { return session().poll(handle); });

  // Returns (output bytes as a uint8 array or None, output shape, received splits, value).
  m.def("wait", [](int64_t handle, int dtype) {
    std::shared_ptr<Handle> h;
    {
      py::gil_scoped_release release;
      h = session().wait(handle);
    }
    if (!h->status.ok()) raiseStatus(h->status);
    size_t nbytes = byteCount(h->output_shape, dtypeSize(static_cast<DataType>(dtype)));
    py::object out = h->device_output ? py::cast(DeviceOutput{h->device_output, nbytes, h->device})
                                      : toArray(std::move(h->output), nbytes);
    return py::make_tuple(out, h->output_shape, h->received_splits, h->value);
  }, py::arg("handle"), py::arg("dtype") = 0);
}

}  // namespace hvdlite::python
