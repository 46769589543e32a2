#pragma once

#include <pybind11/pybind11.h>

#include "api/session.h"

namespace hvdlite::python {

// The process's one Session (its Runtime, the one way in) lives in
// libhvdlite, so that the TensorFlow op library and JAX's handler share it.
using api::Handle;
using api::session;

void bindRuntime(pybind11::module_& m);      // init, shutdown, topology, timeline, process sets
void bindCollectives(pybind11::module_& m);  // enqueue, poll, wait
void bindTorchCalls(pybind11::module_& m);   // tensor_call, set_torch_types (torch_one_call.cc)
void bindHandleTable(pybind11::module_& m);  // set_handle_table, synchronize_handle (handle_table.cc)
void bindCodes(pybind11::module_& m);        // api.h's codes: op_types, reduce_ops, data_types
void registerFastEntryType(pybind11::module_& m);  // hvdlite._codes.FastEntry (codes/fast_entry.cc)

}  // namespace hvdlite::python
