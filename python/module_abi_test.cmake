# ctest python_module_abi: burst._C uses the process's shared C++ runtime and exports nothing but
# its init function (cmake -P; MODULE, NM, READELF). A module that carries or exports C++ symbols
# of its own (libburst's, or libstdc++'s from a static archive) can bind them to another library's
# copy once torch has put libstdc++.so.6 in the global scope: docs/design.md § One C++ runtime
# per process.
execute_process(COMMAND ${READELF} -d ${MODULE} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${MODULE} failed: ${rc}")
endif()
if(NOT dynamic MATCHES "NEEDED[^\n]*\\[libstdc\\+\\+\\.so")
  message(FATAL_ERROR "${MODULE} does not load the shared libstdc++ (it must: one C++ runtime per "
                      "process); its dynamic section:\n${dynamic}")
endif()
execute_process(COMMAND ${NM} -D --defined-only ${MODULE} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${MODULE} failed: ${rc}")
endif()
string(REPLACE "\n" ";" lines "${symbols}")
set(exported)
foreach(line IN LISTS lines)
  # "<address> <type> <name>": every defined dynamic symbol other than the init function and the
  # linker's own section markers (_edata, _end, __bss_start: not code, never interposed).
  if(line MATCHES "^[0-9a-fA-F]* +[A-Za-z] +([^ ]+)$")
    set(name ${CMAKE_MATCH_1})
    if(NOT name MATCHES "^(PyInit__C|_edata|_end|__bss_start|_init|_fini)(@.*)?$")
      list(APPEND exported ${name})
    endif()
  endif()
endforeach()
list(LENGTH exported n)
if(n GREATER 0)
  list(SUBLIST exported 0 10 shown)
  string(REPLACE ";" "\n  " shown "${shown}")
  message(FATAL_ERROR "${MODULE} exports ${n} symbols besides PyInit__C (C++ symbols of libburst or "
                      "of a static libstdc++ that another library's copy can interpose); the first:\n"
                      "  ${shown}")
endif()
message(STATUS "${MODULE}: loads the shared libstdc++ and exports only PyInit__C")
