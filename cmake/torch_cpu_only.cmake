# The imported target `torch` made from libtorch's CPU libraries alone (torch_cpu, c10), without
# running its TorchConfig.cmake: included by apps/CMakeLists.txt when BURST_TORCH_CPU_ROOT names a
# libtorch installation. The language model runs on CPUs only, and the TorchConfig.cmake of a
# CUDA build of libtorch (PyTorch's pip wheel, e.g. torch 2.x+cu130) wants the CUDA toolkit at
# configure time (Caffe2Config.cmake -> public/cuda.cmake: FindCUDA or CUDAToolkit, nvcc, a
# try_run against the CUDA headers, cuDNN) and links libtorch_cuda and the CUDA runtime into
# burst-lm. Here: no CUDA toolkit at configure time, and burst-lm links neither libtorch_cuda nor
# the CUDA runtime (what libtorch_cpu itself loads, its RUNPATH finds).
#
# BURST_TORCH_CPU_ROOT: the installation's prefix, holding lib/libtorch_cpu.so and include/torch
# (pip: python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))'; Debian: /usr).
# Sets Torch_FOUND. The C++ ABI (-D_GLIBCXX_USE_CXX11_ABI=0/1) is the one its TorchConfig.cmake
# states (TORCH_CXX_FLAGS), else the compiler's default (1); the libraries the model links beside
# libtorch (none: sentencepiece is in kjv_prepare, another process) need not match it.
set(_root "${BURST_TORCH_CPU_ROOT}")
set(_libdirs "${_root}/lib" "${_root}/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
find_library(BURST_TORCH_CPU_LIB torch_cpu PATHS ${_libdirs} NO_DEFAULT_PATH)
find_library(BURST_C10_LIB c10 PATHS ${_libdirs} NO_DEFAULT_PATH)
find_path(BURST_TORCH_INCLUDE_DIR torch/csrc/autograd/autograd.h PATHS "${_root}/include" NO_DEFAULT_PATH)
find_file(BURST_TORCH_CONFIG TorchConfig.cmake
          PATHS "${_root}/share/cmake/Torch" "${_root}/lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/Torch" NO_DEFAULT_PATH)
if(NOT BURST_TORCH_CPU_LIB OR NOT BURST_C10_LIB OR NOT BURST_TORCH_INCLUDE_DIR)
  message(STATUS "burst: BURST_TORCH_CPU_ROOT=${_root} holds no libtorch (want lib/libtorch_cpu.so, "
                 "lib/libc10.so, include/torch): torch_cpu=${BURST_TORCH_CPU_LIB} c10=${BURST_C10_LIB} "
                 "include=${BURST_TORCH_INCLUDE_DIR}")
  set(Torch_FOUND FALSE)
  return()
endif()
set(_abi "")
if(BURST_TORCH_CONFIG)
  file(STRINGS "${BURST_TORCH_CONFIG}" _abi_line REGEX "_GLIBCXX_USE_CXX11_ABI=[01]")
  string(REGEX MATCH "_GLIBCXX_USE_CXX11_ABI=[01]" _abi "${_abi_line}")
endif()
if(_abi STREQUAL "_GLIBCXX_USE_CXX11_ABI=0")
  message(FATAL_ERROR "burst: the libtorch at ${_root} uses the pre-C++11 std::string ABI "
                      "(${BURST_TORCH_CONFIG}), the rest of burst the C++11 one: their std::string "
                      "interfaces would not link. Use a libtorch built with _GLIBCXX_USE_CXX11_ABI=1 "
                      "(PyTorch's pip wheels since torch 2.7, Debian's libtorch-dev).")
endif()
add_library(torch INTERFACE IMPORTED GLOBAL)
# Imported: its include directories are SYSTEM for consumers (no warnings from libtorch headers).
target_include_directories(torch INTERFACE "${BURST_TORCH_INCLUDE_DIR}"
                                           "${BURST_TORCH_INCLUDE_DIR}/torch/csrc/api/include")
target_link_libraries(torch INTERFACE "${BURST_TORCH_CPU_LIB}" "${BURST_C10_LIB}")
# The linker does not check libtorch_cpu's own undefined symbols against its dependencies (a CUDA
# wheel's names CUDA libraries under site-packages/nvidia/, which its RUNPATH finds at run time
# but the linker may not); burst's own undefined symbols are still errors.
target_link_options(torch INTERFACE "LINKER:--allow-shlib-undefined")
if(_abi)
  target_compile_definitions(torch INTERFACE ${_abi})
endif()
set(Torch_FOUND TRUE)
if(NOT _abi)
  set(_abi "the compiler's default ABI")
endif()
set(_config "${BURST_TORCH_CONFIG}")
if(NOT _config)
  set(_config "none")
endif()
message(STATUS "burst: libtorch CPU only: ${BURST_TORCH_CPU_LIB}, ${BURST_C10_LIB}; ${_abi} "
               "(TorchConfig.cmake: ${_config})")
