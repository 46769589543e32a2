#include "python/call_sites.h"

// Py_BUILD_CORE exposes the interpreter's own frames (Note [Capturing a call
// site]); only for the versions whose layout is known here.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define HVDLITE_INTERPRETER_FRAMES 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#else
#include <frameobject.h>
#endif

#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "python/bind.h"

namespace py = pybind11;

namespace hvdlite::python {
namespace {

// Note [Capturing a call site]
// Every submission walks the calling thread's Python frames to the first
// one outside hvdlite and the frameworks (torch, TensorFlow, Keras, JAX,
// ...: set_call_site_libraries, from hvdlite/common/call_sites.py), so it
// must cost next to nothing (bench/RESULTS.md: the 4-byte allreduce and the
// 200 x 16 KiB step). Two things would not: the public frame API turns each
// frame into a Python object as it walks (PyFrame_GetBack: ~40 ns a frame),
// and a line number is found by scanning the code's line table. So:
//  - on CPython 3.11 to 3.13 the walk reads the interpreter's own frame
//    records (pycore_frame.h), allocating nothing; elsewhere it uses the
//    public API;
//  - what a code object is (a library's or the user's, its file and
//    function) is decided once and kept on the code object itself
//    (co_extra, PEP 523's per-code storage, freed with it);
//  - the site of each instruction offset that called is interned once
//    (core::CallSiteTable) and remembered on its code object.
// A submission then costs a few pointer reads per frame and one short
// search: ~20 ns on 3.11 with hvdlite's 3 frames in between (measured here).
struct CodeInfo {
  unsigned generation = 0;  // of the library directories it was classified with
  bool library = false;
  std::string file, function;
  std::vector<std::pair<int, const core::CallSite*>> sites;  // by instruction offset
};

Py_ssize_t g_extra_index = -1;             // with the GIL
std::vector<std::string> g_library_dirs;   // with the GIL
unsigned g_generation = 1;                 // bumped when the directories change

void freeInfo(void* info) { delete static_cast<CodeInfo*>(info); }

bool isLibrary(const std::string& file) {
  // Frozen modules are the standard library's importlib and runpy.
  if (file.rfind("<frozen ", 0) == 0) return true;
  for (const auto& dir : g_library_dirs) {
    if (file.size() > dir.size() && file.compare(0, dir.size(), dir) == 0 && file[dir.size()] == '/') {
      return true;
    }
  }
  return false;
}

std::string utf8(PyObject* text) {
  if (!text || !PyUnicode_Check(text)) return {};
  const char* s = PyUnicode_AsUTF8(text);
  if (!s) {
    PyErr_Clear();
    return {};
  }
  return s;
}

CodeInfo* infoFor(PyCodeObject* code) {
  if (g_extra_index < 0) return nullptr;
  void* extra = nullptr;
  if (_PyCode_GetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, &extra) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  auto* info = static_cast<CodeInfo*>(extra);
  if (info && info->generation == g_generation) return info;
  if (!info) {
    info = new CodeInfo();
    if (_PyCode_SetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, info) < 0) {
      PyErr_Clear();
      delete info;
      return nullptr;
    }
    info->file = utf8(code->co_filename);
    PyObject* qualname = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_qualname");
    if (!qualname) PyErr_Clear();
    info->function = qualname ? utf8(qualname) : utf8(code->co_name);
    Py_XDECREF(qualname);
  }
  info->generation = g_generation;
  info->library = info->file.empty() || isLibrary(info->file);
  return info;
}

// The interned site at `offset` (an instruction offset, or where there is
// none, the line) of a code object; line() is called the first time only.
template <typename Line>
const core::CallSite* siteAt(CodeInfo& info, int offset, Line line) {
  for (const auto& [known, site] : info.sites) {
    if (known == offset) return site;
  }
  const core::CallSite* site = session().callSites().intern({info.file, line(), info.function});
  info.sites.emplace_back(offset, site);
  return site;
}

#ifdef HVDLITE_INTERPRETER_FRAMES
const core::CallSite* walk() {
  PyThreadState* thread = PyThreadState_Get();
#if PY_VERSION_HEX >= 0x030D0000
  _PyInterpreterFrame* frame = thread->current_frame;
#else
  _PyInterpreterFrame* frame = thread->cframe->current_frame;
#endif
  for (; frame; frame = frame->previous) {
#if PY_VERSION_HEX >= 0x030C0000
    if (frame->owner == FRAME_OWNED_BY_CSTACK) continue;  // the interpreter's shim frames
#endif
#if PY_VERSION_HEX >= 0x030D0000
    if (!PyCode_Check(frame->f_executable)) continue;
    auto* code = reinterpret_cast<PyCodeObject*>(frame->f_executable);
#else
    PyCodeObject* code = frame->f_code;
#endif
    if (_PyFrame_IsIncomplete(frame)) continue;
    CodeInfo* info = infoFor(code);
    if (!info) return nullptr;
    if (info->library) continue;
    const int lasti = _PyInterpreterFrame_LASTI(frame);
    return siteAt(*info, lasti, [&] { return PyCode_Addr2Line(code, lasti * static_cast<int>(sizeof(_Py_CODEUNIT))); });
  }
  return nullptr;
}
#else
const core::CallSite* walk() {
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  const core::CallSite* site = nullptr;
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    CodeInfo* info = infoFor(code);
    if (!info || !info->library) {
#if PY_VERSION_HEX >= 0x030B0000
      if (info) site = siteAt(*info, PyFrame_GetLasti(frame), [&] { return PyFrame_GetLineNumber(frame); });
#else
      if (info) site = siteAt(*info, PyFrame_GetLineNumber(frame), [&] { return PyFrame_GetLineNumber(frame); });
#endif
      Py_DECREF(code);
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(code);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return site;
}
#endif

}  // namespace

const core::CallSite* captureCallSite() {
  if (!session().callSitesEnabled()) return nullptr;
#ifdef Py_GIL_DISABLED
  // The per-code cache relies on the GIL; a free-threaded build goes without.
  return nullptr;
#else
  return walk();
#endif
}

void bindCallSites(py::module_& m) {
  g_extra_index = _PyEval_RequestCodeExtraIndex(freeInfo);
  // The directories whose code is not the user's program: hvdlite's and the
  // frameworks' (hvdlite/common/call_sites.py). Replaces the earlier ones.
  m.def("set_call_site_libraries", [](std::vector<std::string> dirs) {
    for (auto& dir : dirs) {
      while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    }
    g_library_dirs = std::move(dirs);
    ++g_generation;
  }, py::arg("dirs"));
  m.def("call_sites_enabled", [] { return session().callSitesEnabled(); });
  // (file, line, function) of the innermost frame of the user's program, or None.
  m.def("call_site", []() -> py::object {
    const core::CallSite* site = captureCallSite();
    if (!site) return py::none();
    return py::make_tuple(site->file, site->line, site->function);
  });
}

}  // namespace hvdlite::python
