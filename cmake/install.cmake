# install.cmake - what `cmake --install` puts where, and the files that let
# other projects use an installed shoal:
#
#   include/shoal.h
#   lib/libshoal.so -> libshoal.so.0 -> libshoal.so.0.1.0, lib/libshoal.a
#   lib/pkgconfig/shoal.pc          -lshoal (the shared library)
#   lib/pkgconfig/shoal-static.pc   libshoal.a, with malloc forced in
#   lib/cmake/shoal/                find_package(shoal): shoal::shoal,
#                                   shoal::shoal_static
#   bin/shoal-run                   runs a command with libshoal preloaded
#   share/man/man3/shoal.3, man1/shoal-run.1   the manual pages
#
# (lib/ stands for CMAKE_INSTALL_LIBDIR.)  Every installed file finds the
# others by relative paths, so the tree can be installed with any
# --prefix or DESTDIR and moved afterwards.  The same launcher is also
# configured into the build tree (build/shoal-run, next to libshoal.so).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SHOAL_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/shoal"
    CACHE STRING "Where find_package(shoal) files are installed, relative to the prefix")
mark_as_advanced(SHOAL_CMAKE_INSTALL_DIR)

# For in-tree users (add_subdirectory, FetchContent): the names that
# find_package gives.
if(NOT TARGET shoal::shoal)
  add_library(shoal::shoal ALIAS shoal)
  add_library(shoal::shoal_static ALIAS shoal_static)
endif()

# A program linked with libshoal.a that never calls malloc itself (only
# libc or another library does) would not pull the override out of the
# archive and would silently keep glibc's malloc.  Asking the linker for
# malloc makes it take the override, and the rest of shoal with it.
target_link_options(shoal_static INTERFACE "LINKER:--undefined=malloc")

install(FILES include/shoal.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS shoal shoal_static EXPORT shoal-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# ---- find_package(shoal) --------------------------------------------------

install(EXPORT shoal-targets NAMESPACE shoal:: FILE shoal-targets.cmake
        DESTINATION ${SHOAL_CMAKE_INSTALL_DIR})
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/shoal-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/install/shoal-config.cmake
  INSTALL_DESTINATION ${SHOAL_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR)
# 0.x: a different minor version may change the interface.
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/install/shoal-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/install/shoal-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/install/shoal-config-version.cmake
        DESTINATION ${SHOAL_CMAKE_INSTALL_DIR})

# ---- pkg-config ------------------------------------------------------------

# A path as seen from `from` (both relative to the prefix): relative when
# both are inside the prefix, else absolute.
function(shoal_path_from out from to)
  if(IS_ABSOLUTE "${to}" OR IS_ABSOLUTE "${from}")
    if(IS_ABSOLUTE "${to}")
      set(${out} "${to}" PARENT_SCOPE)
    else()
      set(${out} "${CMAKE_INSTALL_PREFIX}/${to}" PARENT_SCOPE)
    endif()
    return()
  endif()
  file(RELATIVE_PATH rel "/prefix/${from}" "/prefix/${to}")
  string(REGEX REPLACE "/+$" "" rel "${rel}")
  if(rel STREQUAL "")
    set(rel ".")
  endif()
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()

set(SHOAL_PKGCONFIG_DIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
# ${pcfiledir} is the directory the .pc file is found in (pkg-config and
# pkgconf both define it): prefix, libdir and includedir follow from it.
shoal_path_from(_pc_prefix "${SHOAL_PKGCONFIG_DIR}" ".")
shoal_path_from(_pc_libdir "." "${CMAKE_INSTALL_LIBDIR}")
shoal_path_from(_pc_incdir "." "${CMAKE_INSTALL_INCLUDEDIR}")
foreach(v _pc_libdir _pc_incdir)
  if(NOT IS_ABSOLUTE "${${v}}")
    set(${v} "\${prefix}/${${v}}")
  endif()
endforeach()
if(IS_ABSOLUTE "${_pc_prefix}")
  set(SHOAL_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  set(SHOAL_PC_PREFIX "\${pcfiledir}/${_pc_prefix}")
endif()
set(SHOAL_PC_LIBDIR "${_pc_libdir}")
set(SHOAL_PC_INCLUDEDIR "${_pc_incdir}")
# glibc 2.34 and later have pthreads in libc; -lpthread is still right
# (an empty library there) and needed on older ones for static links.
set(SHOAL_PC_THREADS "-lpthread")
if(CMAKE_THREAD_LIBS_INIT AND NOT CMAKE_THREAD_LIBS_INIT STREQUAL "-lpthread")
  set(SHOAL_PC_THREADS "${CMAKE_THREAD_LIBS_INIT}")
endif()
foreach(pc shoal shoal-static)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/${pc}.pc.in
                 ${CMAKE_CURRENT_BINARY_DIR}/install/${pc}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/install/${pc}.pc DESTINATION ${SHOAL_PKGCONFIG_DIR})
endforeach()

# ---- manual pages -----------------------------------------------------------

foreach(page shoal.3 shoal-run.1)
  configure_file(${PROJECT_SOURCE_DIR}/man/${page}.in
                 ${CMAKE_CURRENT_BINARY_DIR}/install/${page} @ONLY)
  string(REGEX REPLACE ".*\\." "" _section "${page}")
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/install/${page}
          DESTINATION ${CMAKE_INSTALL_MANDIR}/man${_section})
endforeach()

# ---- shoal-run -------------------------------------------------------------

# The library the launcher preloads: the soname (libshoal.so.0), which a
# runtime-only install has too.
get_target_property(_shoal_soversion shoal SOVERSION)
set(SHOAL_RUN_LIBNAME
    "${CMAKE_SHARED_LIBRARY_PREFIX}shoal${CMAKE_SHARED_LIBRARY_SUFFIX}.${_shoal_soversion}")
# Option names for the launcher's -o check, from the header.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/shoal.h _shoal_opts REGEX "^ *ALLOC_OPTION_[A-Z_]+[ ,=]")
set(SHOAL_RUN_OPTIONS "")
foreach(line IN LISTS _shoal_opts)
  string(REGEX REPLACE "^ *ALLOC_OPTION_([A-Z_]+).*" "\\1" name "${line}")
  if(NOT name MATCHES "_$")
    string(APPEND SHOAL_RUN_OPTIONS " ${name}")
  endif()
endforeach()
string(APPEND SHOAL_RUN_OPTIONS " STATS_FILE PROF_PREFIX")
string(STRIP "${SHOAL_RUN_OPTIONS}" SHOAL_RUN_OPTIONS)

# Installed: bin/ -> lib/.
shoal_path_from(SHOAL_RUN_LIBDIR "${CMAKE_INSTALL_BINDIR}" "${CMAKE_INSTALL_LIBDIR}")
configure_file(${PROJECT_SOURCE_DIR}/scripts/shoal-run.in
               ${CMAKE_CURRENT_BINARY_DIR}/install/shoal-run @ONLY)
install(PROGRAMS ${CMAKE_CURRENT_BINARY_DIR}/install/shoal-run DESTINATION ${CMAKE_INSTALL_BINDIR})

# Build tree: next to the library.
get_target_property(_shoal_outdir shoal LIBRARY_OUTPUT_DIRECTORY)
if(NOT _shoal_outdir)
  set(_shoal_outdir ${CMAKE_CURRENT_BINARY_DIR})
endif()
set(SHOAL_RUN_LIBDIR ".")
configure_file(${PROJECT_SOURCE_DIR}/scripts/shoal-run.in
               ${CMAKE_CURRENT_BINARY_DIR}/build-tree/shoal-run @ONLY)
file(COPY ${CMAKE_CURRENT_BINARY_DIR}/build-tree/shoal-run DESTINATION ${_shoal_outdir}
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                      WORLD_READ WORLD_EXECUTE)
