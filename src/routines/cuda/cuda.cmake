# The CUDA backend: cuda:float32 / cuda:float16 routines (cuDNN conv2, cuBLAS /
# cuBLASLt dense and matmul, our own kernels), host<->device transfer adapts
# and on-device casts, device memory and CUDA-graph hooks for the executor.
#
#   SOFTNEURO_CUDA=AUTO (default)  built when nvcc, the CUDA toolkit, cuBLAS(Lt)
#                                  and cuDNN are found, silently skipped otherwise
#   SOFTNEURO_CUDA=ON              required: configuring fails when one is missing
#   SOFTNEURO_CUDA=OFF             never built
#
# Linking: the CUDA runtime is linked statically (it only needs the driver,
# libcuda.so.1, which it opens at run time), and cuBLAS, cuBLASLt and cuDNN
# are opened with dlopen on first use (src/routines/cuda/cuda_libs.cpp). So
# libsoftneuro built with the backend still loads, and runs its CPU routines,
# on machines without a GPU, a driver, or the CUDA libraries; the CUDA
# routines then answer supports() with the reason. Their headers are only
# needed here, at build time.
#
# Architectures: CMAKE_CUDA_ARCHITECTURES defaults to "80-real;90": sm_80 code
# (runs on every 8.x GPU: A100, RTX 30xx, Jetson Orin sm_87, Ada sm_89), sm_90
# code and compute_90 PTX (H100/H200, and JIT for newer GPUs). Override with
# -DCMAKE_CUDA_ARCHITECTURES=... (each one adds nvcc time: compiles are slow).

set(SOFTNEURO_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when found), ON (required) or OFF")
set_property(CACHE SOFTNEURO_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${SOFTNEURO_CUDA}" _sn_cuda_mode)

set(SOFTNEURO_HAVE_CUDA OFF)
set(_sn_cuda_missing "")
if(NOT _sn_cuda_mode STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)  # (skips its search when CMAKE_CUDA_COMPILER is given)
  if(NOT CMAKE_CUDA_COMPILER OR (IS_ABSOLUTE "${CMAKE_CUDA_COMPILER}" AND NOT EXISTS "${CMAKE_CUDA_COMPILER}"))
    list(APPEND _sn_cuda_missing "nvcc")
  else()
    find_package(CUDAToolkit QUIET)
    if(NOT CUDAToolkit_FOUND)
      list(APPEND _sn_cuda_missing "the CUDA toolkit")
    else()
      find_path(SOFTNEURO_CUBLAS_INCLUDE_DIR cublasLt.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
      find_path(SOFTNEURO_CUDNN_INCLUDE_DIR cudnn.h
        HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{CUDNN_ROOT}/include $ENV{CUDNN_PATH}/include
        PATHS /usr/include /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu)
      find_library(SOFTNEURO_CUDNN_LIBRARY cudnn
        HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{CUDNN_ROOT}/lib $ENV{CUDNN_ROOT}/lib64 $ENV{CUDNN_PATH}/lib)
      if(NOT TARGET CUDA::cudart_static)
        list(APPEND _sn_cuda_missing "the static CUDA runtime (libcudart_static.a)")
      endif()
      if(NOT TARGET CUDA::cublas OR NOT TARGET CUDA::cublasLt OR NOT SOFTNEURO_CUBLAS_INCLUDE_DIR)
        list(APPEND _sn_cuda_missing "cuBLAS/cuBLASLt")
      endif()
      if(NOT SOFTNEURO_CUDNN_INCLUDE_DIR OR NOT SOFTNEURO_CUDNN_LIBRARY)
        list(APPEND _sn_cuda_missing "cuDNN (cudnn.h, libcudnn)")
      endif()
    endif()
  endif()
  if(_sn_cuda_missing)
    list(JOIN _sn_cuda_missing ", " _sn_cuda_missing)
    if(_sn_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "SOFTNEURO_CUDA=ON but the CUDA backend cannot be built: missing ${_sn_cuda_missing}")
    endif()
    message(STATUS "CUDA backend: not built (missing ${_sn_cuda_missing})")
  else()
    set(SOFTNEURO_HAVE_CUDA ON)
  endif()
endif()

if(SOFTNEURO_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
  endif()
  enable_language(CUDA)
  # The oldest architecture built: a device below it cannot run our kernels.
  set(_sn_min_arch 1000)
  foreach(a IN LISTS CMAKE_CUDA_ARCHITECTURES)
    string(REGEX MATCH "^[0-9]+" n "${a}")
    # (not `if(n AND ...)`: under CMP0012 a variable holding "80" tests false there,
    # which left 1000 and refused every GPU at run time)
    if(n MATCHES "^[0-9]+$" AND n LESS _sn_min_arch)
      set(_sn_min_arch ${n})
    endif()
  endforeach()
  if(_sn_min_arch EQUAL 1000)
    message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES='${CMAKE_CUDA_ARCHITECTURES}' names no numbered architecture")
  endif()
  file(STRINGS ${SOFTNEURO_CUDNN_INCLUDE_DIR}/cudnn_version.h _sn_cudnn_major REGEX "^#define CUDNN_MAJOR [0-9]+")
  string(REGEX MATCH "[0-9]+" _sn_cudnn_major "${_sn_cudnn_major}")
  message(STATUS "CUDA backend: built (CUDA ${CUDAToolkit_VERSION}, cuDNN ${_sn_cudnn_major}, "
                 "architectures ${CMAKE_CUDA_ARCHITECTURES})")

  # Our kernels, compiled by nvcc in their own object library: the library's
  # -Wall/-Wextra (and sanitizer flags) are host-compiler options nvcc refuses.
  add_library(softneuro_cuda_kernels OBJECT
    ${CMAKE_CURRENT_LIST_DIR}/kernels.cu
    ${CMAKE_CURRENT_LIST_DIR}/transfer_kernels.cu)
  set_target_properties(softneuro_cuda_kernels PROPERTIES COMPILE_OPTIONS "")
  softneuro_component(softneuro_cuda_kernels core routines)
  set_target_properties(softneuro_cuda_kernels PROPERTIES
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_RUNTIME_LIBRARY Static
    CUDA_SEPARABLE_COMPILATION OFF)
  target_compile_options(softneuro_cuda_kernels PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall --expt-relaxed-constexpr>)

  add_library(softneuro_cuda OBJECT
    ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cuda_libs.cpp
    ${CMAKE_CURRENT_LIST_DIR}/kernels.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cudnn.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cublas.cpp
    ${CMAKE_CURRENT_LIST_DIR}/transfer.cpp)
  softneuro_component(softneuro_cuda core routines)
  target_include_directories(softneuro_cuda SYSTEM PRIVATE
    ${CUDAToolkit_INCLUDE_DIRS} ${SOFTNEURO_CUBLAS_INCLUDE_DIR} ${SOFTNEURO_CUDNN_INCLUDE_DIR})
  target_compile_definitions(softneuro_cuda PRIVATE
    SOFTNEURO_CUDA_MIN_ARCH=${_sn_min_arch}
    SOFTNEURO_CUDA_LIBDIR="${CUDAToolkit_LIBRARY_DIR}")
  target_link_libraries(softneuro_cuda PRIVATE fmt::fmt)
  target_sources(softneuro PRIVATE $<TARGET_OBJECTS:softneuro_cuda> $<TARGET_OBJECTS:softneuro_cuda_kernels>)
  # The runtime statically; cuBLAS, cuBLASLt and cuDNN are dlopen-ed (see above).
  target_link_libraries(softneuro PRIVATE CUDA::cudart_static ${CMAKE_DL_LIBS})

  # cuda_bench: cuDNN algorithms per conv shape, and a net's batch-1 latency with and without CUDA graphs.
  add_executable(cuda_bench ${PROJECT_SOURCE_DIR}/bench/cuda_bench.cpp)
  target_include_directories(cuda_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(cuda_bench PRIVATE softneuro softneuro_tune fmt::fmt)

  # Tests: one executable on the suite's Catch2 main; without a usable GPU it exits 77, which CTest reports as skipped.
  if(BUILD_TESTING)
    find_package(Catch2 REQUIRED)
    add_executable(softneuro_cuda_tests
      ${PROJECT_SOURCE_DIR}/tests/cuda/device_gate.cpp
      ${PROJECT_SOURCE_DIR}/tests/cuda/cuda_harness.cpp
      ${PROJECT_SOURCE_DIR}/tests/cuda/test_cuda_routines.cpp
      ${PROJECT_SOURCE_DIR}/tests/cuda/test_cuda_transfer.cpp
      ${PROJECT_SOURCE_DIR}/tests/cuda/test_cuda_net.cpp
      ${PROJECT_SOURCE_DIR}/tests/cuda/test_cuda_generated.cpp
      ${PROJECT_SOURCE_DIR}/tests/support/generated_cases.cpp
      ${PROJECT_SOURCE_DIR}/tests/support/run_layer.cpp
      ${PROJECT_SOURCE_DIR}/tests/support/graphs.cpp)
    add_dependencies(softneuro_cuda_tests dnn_schema)
    target_include_directories(softneuro_cuda_tests PRIVATE
      ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests ${DNN_GEN_DIR})
    target_link_libraries(softneuro_cuda_tests PRIVATE softneuro softneuro_tune fmt::fmt catch2_main)
    foreach(part routines transfer net)
      add_test(NAME cuda_${part} COMMAND softneuro_cuda_tests "[${part}]")
      set_tests_properties(cuda_${part} PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda)
    endforeach()
  endif()
endif()
