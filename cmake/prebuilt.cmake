# The framework libraries that hvdlite would otherwise compile on first use,
# built in advance for the wheel (`make wheel`, tools/wheel/build_wheel.py): the
# TensorFlow op library once per TensorFlow minor version, and the JAX FFI
# handler once, against the oldest jaxlib hvdlite supports. Installed under
# hvdlite/prebuilt/, where hvdlite/common/prebuilt.py picks the one that
# matches the framework it finds at import. Empty lists (the default, and
# `make install`'s editable build) build none: then they are compiled on
# first use, as before.
#
# Note [One wheel, every framework version]
# TensorFlow: the ops are C++ AsyncOpKernels (csrc/tensorflow/) that reach
# TensorFlow's own GPU stream through its C++ device API; TensorFlow's C API
# for kernels cannot (TF_GetStream serves pluggable devices only) and has no
# compatibility promise either. TensorFlow's C++ ABI changes between minor
# versions but not between the patch releases of one, so the wheel carries
# one library per minor version (hvdlite_tf_ops-tf2.21.so), each compiled
# against that minor version's headers and libtensorflow_framework.so.2, and
# NEEDS libtensorflow_framework.so.2 by its soname: TensorFlow has loaded it
# before tf.load_op_library opens ours, so the loader finds it in the process
# and no path to any TensorFlow is recorded (auditwheel repair --exclude
# keeps it out of the wheel).
# JAX: the handler uses only XLA's header-only FFI (xla/ffi/api/), whose
# table of functions is versioned (XLA_FFI_API_MAJOR/MINOR). XLA accepts a
# handler built against an older minor version, and a handler built against
# newer headers may call what an older jaxlib lacks, so one handler built
# against the OLDEST supported jaxlib's headers serves every newer jaxlib
# (hvdlite_jax_ffi-jaxlib0.6.0.so). It links nothing of jaxlib.
#
# HVDLITE_PREBUILT_TENSORFLOW: a list of MINOR=ROOT, ROOT a folder holding
#   include/ and libtensorflow_framework.so.2 (a TensorFlow wheel's tensorflow/).
# HVDLITE_PREBUILT_JAX_FFI: JAXLIB_VERSION=INCLUDE, INCLUDE a jaxlib's
#   include/ (jax.ffi.include_dir()), or empty.
set(HVDLITE_PREBUILT_TENSORFLOW "" CACHE STRING
    "TensorFlow op libraries to prebuild: a list of MINOR=TENSORFLOW_ROOT")
set(HVDLITE_PREBUILT_JAX_FFI "" CACHE STRING
    "The JAX FFI handler to prebuild: JAXLIB_VERSION=FFI_INCLUDE_DIR, or empty")

file(GLOB HVDLITE_TF_SOURCES CONFIGURE_DEPENDS csrc/tensorflow/*.cc)
file(GLOB HVDLITE_JAX_SOURCES CONFIGURE_DEPENDS csrc/jax/*.cc)

# Splits VERSION=PATH into the two variables named.
function(hvdlite_split_entry entry version_var path_var)
  string(FIND "${entry}" "=" at)
  if(at LESS 1)
    message(FATAL_ERROR "hvdlite: '${entry}' is not VERSION=PATH (cmake/prebuilt.cmake)")
  endif()
  string(SUBSTRING "${entry}" 0 ${at} version)
  math(EXPR rest "${at} + 1")
  string(SUBSTRING "${entry}" ${rest} -1 path)
  set(${version_var} "${version}" PARENT_SCOPE)
  set(${path_var} "${path}" PARENT_SCOPE)
endfunction()

# A prebuilt library: a dlopen'ed module that links the core next to it.
function(hvdlite_prebuilt_module target output_name folder)
  target_include_directories(${target} PRIVATE csrc)
  target_link_libraries(${target} PRIVATE hvdlite)
  # hvdlite/prebuilt/<folder>/ -> hvdlite/, where libhvdlite.so lies.
  set_target_properties(${target} PROPERTIES PREFIX "" OUTPUT_NAME "${output_name}"
                        INSTALL_RPATH "$ORIGIN/../..")
  install(TARGETS ${target} LIBRARY DESTINATION hvdlite/prebuilt/${folder})
endfunction()

foreach(entry IN LISTS HVDLITE_PREBUILT_TENSORFLOW)
  hvdlite_split_entry("${entry}" minor root)
  if(NOT EXISTS "${root}/include/tensorflow/core/framework/op_kernel.h" OR
     NOT EXISTS "${root}/libtensorflow_framework.so.2")
    message(FATAL_ERROR "hvdlite: ${root} has no TensorFlow headers (include/) or "
                        "libtensorflow_framework.so.2 for TensorFlow ${minor}; "
                        "tools/wheel/framework_headers.py fetches them")
  endif()
  string(REPLACE "." "_" tag "${minor}")
  add_library(hvdlite_tf_ops_${tag} MODULE ${HVDLITE_TF_SOURCES})
  target_include_directories(hvdlite_tf_ops_${tag} SYSTEM PRIVATE "${root}/include")
  # tf.sysconfig.get_compile_flags() of every TensorFlow since 2.16.
  target_compile_definitions(hvdlite_tf_ops_${tag} PRIVATE _GLIBCXX_USE_CXX11_ABI=1
                             EIGEN_MAX_ALIGN_BYTES=64)
  target_compile_options(hvdlite_tf_ops_${tag} PRIVATE -w)
  # One translation unit: TensorFlow's headers are most of each source's
  # compile time, so parsing them once instead of five times makes a
  # library per minor version cheap (about 7 s of CPU at -O0 instead of 40).
  set_target_properties(hvdlite_tf_ops_${tag} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  target_link_libraries(hvdlite_tf_ops_${tag} PRIVATE "${root}/libtensorflow_framework.so.2")
  hvdlite_prebuilt_module(hvdlite_tf_ops_${tag} "hvdlite_tf_ops-tf${minor}" tensorflow)
endforeach()

if(HVDLITE_PREBUILT_JAX_FFI)
  hvdlite_split_entry("${HVDLITE_PREBUILT_JAX_FFI}" jaxlib_version ffi_include)
  if(NOT EXISTS "${ffi_include}/xla/ffi/api/ffi.h")
    message(FATAL_ERROR "hvdlite: ${ffi_include} has no xla/ffi/api/ffi.h (jaxlib "
                        "${jaxlib_version}'s FFI headers); tools/wheel/framework_headers.py "
                        "fetches them")
  endif()
  add_library(hvdlite_jax_ffi MODULE ${HVDLITE_JAX_SOURCES})
  target_include_directories(hvdlite_jax_ffi SYSTEM PRIVATE "${ffi_include}")
  target_compile_options(hvdlite_jax_ffi PRIVATE -w)
  hvdlite_prebuilt_module(hvdlite_jax_ffi "hvdlite_jax_ffi-jaxlib${jaxlib_version}" jax)
endif()
