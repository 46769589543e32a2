// An api.h request from the keyword arguments of hvdlite._core.enqueue.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

#include "api/api.h"

namespace hvdlite::python {

// The request and the storage its arrays point into (valid while this lives;
// its strings and buffers point into the Python arguments, valid during the call).
struct KeywordRequest {
  hvdlite_request request = hvdlite_request_defaults();
  std::vector<int64_t> shape, splits, process_set_ranks;
};

// Fills `out` from a vectorcall's arguments, which must all be keywords named
// as hvdlite_request's fields (plus wake=). Converts types only: the codes are
// checked by api::buildEntry. Returns false with a Python TypeError set when
// an argument is positional, unknown, missing (op, name) or of the wrong type.
bool parseKeywords(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, KeywordRequest& out);

// The keywords parseKeywords accepts, for enqueue's docstring.
const char* keywordList();

}  // namespace hvdlite::python
