# Detects the optional parts of weightcast (CUDA, NCCL, UCX, libtorch).
#
# Each part has a cache variable WEIGHTCAST_WITH_<PART> set to AUTO (default: use it when it
# is found), ON (it must be found: configure fails loudly otherwise) or OFF (never use it).
# The outcome lands in WEIGHTCAST_HAVE_<PART> (0/1) for the generated weightcast/config.h.

function(weightcast_optional_part part found reason)
  set(mode "${WEIGHTCAST_WITH_${part}}")
  if(mode STREQUAL "OFF")
    set(WEIGHTCAST_HAVE_${part} 0 PARENT_SCOPE)
    message(STATUS "weightcast: ${part} disabled (WEIGHTCAST_WITH_${part}=OFF)")
  elseif(found)
    set(WEIGHTCAST_HAVE_${part} 1 PARENT_SCOPE)
    message(STATUS "weightcast: ${part} found")
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR
      "weightcast: WEIGHTCAST_WITH_${part}=ON but ${part} is missing: ${reason}. "
      "Install it (see cmake/install_deps.sh) or configure with -DWEIGHTCAST_WITH_${part}=AUTO.")
  else()
    set(WEIGHTCAST_HAVE_${part} 0 PARENT_SCOPE)
    message(STATUS "weightcast: ${part} not found (${reason}); building without it")
  endif()
endfunction()

foreach(part CUDA NCCL UCX TORCH)
  set(WEIGHTCAST_WITH_${part} AUTO CACHE STRING "Use ${part}: AUTO, ON or OFF")
  set_property(CACHE WEIGHTCAST_WITH_${part} PROPERTY STRINGS AUTO ON OFF)
  if(NOT WEIGHTCAST_WITH_${part} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "WEIGHTCAST_WITH_${part} must be AUTO, ON or OFF, not '${WEIGHTCAST_WITH_${part}}'")
  endif()
endforeach()

# CUDA: the toolkit (nvcc + runtime). A GPU is not needed to build.
set(_cuda_found FALSE)
if(NOT WEIGHTCAST_WITH_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  set(_cuda_found ${CUDAToolkit_FOUND})
endif()
weightcast_optional_part(CUDA "${_cuda_found}" "no CUDA toolkit under CUDAToolkit_ROOT or /usr/local/cuda")

# NCCL: header and library, from the CUDA toolkit tree or the system.
set(_nccl_found FALSE)
if(NOT WEIGHTCAST_WITH_NCCL STREQUAL "OFF")
  find_path(WEIGHTCAST_NCCL_INCLUDE_DIR nccl.h HINTS /usr/local/cuda/include ${CUDAToolkit_INCLUDE_DIRS})
  find_library(WEIGHTCAST_NCCL_LIBRARY nccl HINTS /usr/local/cuda/lib64 ${CUDAToolkit_LIBRARY_DIR})
  if(WEIGHTCAST_NCCL_INCLUDE_DIR AND WEIGHTCAST_NCCL_LIBRARY AND _cuda_found)
    set(_nccl_found TRUE)
  endif()
endif()
weightcast_optional_part(NCCL "${_nccl_found}" "nccl.h/libnccl not found next to the CUDA toolkit")

# UCX: through pkg-config (libucx-dev ships ucx.pc).
set(_ucx_found FALSE)
if(NOT WEIGHTCAST_WITH_UCX STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(WEIGHTCAST_UCX QUIET IMPORTED_TARGET ucx)
    set(_ucx_found ${WEIGHTCAST_UCX_FOUND})
  endif()
endif()
weightcast_optional_part(UCX "${_ucx_found}" "pkg-config cannot find 'ucx' (apt-get install libucx-dev)")

# libtorch: Debian's libtorch-dev installs TorchConfig.cmake.
set(_torch_found FALSE)
if(NOT WEIGHTCAST_WITH_TORCH STREQUAL "OFF")
  find_package(Torch QUIET)
  set(_torch_found ${Torch_FOUND})
endif()
weightcast_optional_part(TORCH "${_torch_found}" "find_package(Torch) failed (apt-get install libtorch-dev)")
