"""api.h through ctypes, for workers that drive libhvdlite's C API as a
separately compiled binding (the TF kernels, JAX's FFI handler) does: the
request and result structs field for field, and hvdlite_enqueue."""
import ctypes
import os


class Request(ctypes.Structure):
    """api.h's hvdlite_request, field for field."""
    _fields_ = [
        ("op", ctypes.c_int32), ("name", ctypes.c_char_p), ("process_set_id", ctypes.c_int32),
        ("dtype", ctypes.c_int32), ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("ndim", ctypes.c_int32), ("input", ctypes.c_void_p), ("output", ctypes.c_void_p),
        ("reduce_op", ctypes.c_int32), ("prescale", ctypes.c_double),
        ("postscale", ctypes.c_double), ("root_rank", ctypes.c_int32),
        ("splits", ctypes.POINTER(ctypes.c_int64)), ("num_splits", ctypes.c_int32),
        ("device", ctypes.c_int32), ("ready_event", ctypes.c_void_p),
        ("stream", ctypes.c_void_p), ("group", ctypes.c_char_p), ("group_size", ctypes.c_int32),
        ("process_set_ranks", ctypes.POINTER(ctypes.c_int64)),
        ("num_process_set_ranks", ctypes.c_int32), ("removed_process_set_id", ctypes.c_int32),
        ("flags", ctypes.c_uint32), ("call_site_file", ctypes.c_char_p),
        ("call_site_line", ctypes.c_int32), ("call_site_function", ctypes.c_char_p),
        ("output_bytes", ctypes.c_int64)]


class Result(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int32), ("message", ctypes.c_char_p)]  # the prefix we read


DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(Result))
# Pass one to hvdlite_enqueue as ctypes.cast(function, ctypes.c_void_p) (None: no allocator).
ALLOCATE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32)
CALLER_WAITS, OUTPUT_ON_STREAM = 2, 4  # api.h's hvdlite_request_flag


def library(core):
    """libhvdlite, loaded beside hvdlite._core (the same copy), with
    hvdlite_enqueue's signature; checks that Request still matches api.h (a
    copy that falls behind makes the core read past it)."""
    assert ctypes.sizeof(Request) == core.request_size, (ctypes.sizeof(Request), core.request_size)
    lib = ctypes.CDLL(os.path.join(os.path.dirname(core.__file__), "libhvdlite.so"))
    lib.hvdlite_enqueue.argtypes = [ctypes.POINTER(Request), ctypes.c_void_p, DONE,
                                    ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    return lib
