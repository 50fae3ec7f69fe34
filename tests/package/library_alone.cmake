# ctest cpp_library_alone (cmake -P; SOURCE, SCRATCH, CXX, GENERATOR): a top-level configure of
# the source tree where only MPI and OpenMP can be found (CLI11, nlohmann-json, GoogleTest,
# libtorch, pybind11 and Python hidden with CMAKE_DISABLE_FIND_PACKAGE_*) succeeds, says in one
# line per part what it switched off, and defines the library with its install rules but no
# tools, tests, language model or module. Configure only: the library's build is the suite's own.
file(REMOVE_RECURSE ${SCRATCH})
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${SCRATCH} -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX}
          -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON -DCMAKE_DISABLE_FIND_PACKAGE_Python3=ON
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configure with only MPI and OpenMP failed (${rc}):\n${out}\n${err}")
endif()
foreach(line IN ITEMS "CLI11 or nlohmann-json not found" "GoogleTest (libgtest-dev) not found"
                      "python3-dev or pybind11-dev not found")
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "configure did not say '${line}':\n${out}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${SCRATCH} --target help OUTPUT_VARIABLE targets
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT targets MATCHES "burst")
  message(FATAL_ERROR "no target list from the library-only configure:\n${targets}")
endif()
foreach(t IN ITEMS burst_cli burst_bench burst_lm burst_python test_plan dist_attention)
  if(targets MATCHES "(^|[\n ])${t}[:\n ]")
    message(FATAL_ERROR "the library-only configure defines ${t}:\n${targets}")
  endif()
endforeach()
message(STATUS "library alone: configured with only MPI and OpenMP\n${out}")
