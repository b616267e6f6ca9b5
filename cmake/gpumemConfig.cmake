# SPDX-License-Identifier: MIT
# gpumem's CMake package, installed by `make install` into
# PREFIX/share/gpumem/cmake/. find_package(gpumem) gives the INTERFACE target
# gpumem::gpumem: the include directory, and the thread library that the host
# shim (GPUMEM_IMPLEMENTATION) uses. The root CMakeLists.txt defines the same
# target for add_subdirectory and FetchContent.
#
# Relocatable: the prefix is found from this file's own place, so a copied or
# DESTDIR-staged install works without being rewritten.
get_filename_component(_gpumem_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET gpumem::gpumem)
  add_library(gpumem::gpumem INTERFACE IMPORTED)
  set_target_properties(gpumem::gpumem PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_gpumem_prefix}/include")
  # FindThreads needs C or C++ enabled; a CUDA-only project links it itself.
  get_property(_gpumem_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
  if("C" IN_LIST _gpumem_langs OR "CXX" IN_LIST _gpumem_langs)
    include(CMakeFindDependencyMacro)
    find_dependency(Threads)
    set_property(TARGET gpumem::gpumem APPEND PROPERTY INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
endif()
unset(_gpumem_prefix)
unset(_gpumem_langs)
