# ctest cpp_package (cmake -P; BUILD, SOURCE, SCRATCH, CXX, GENERATOR, LIBDIR):
# 1. `cmake --install BUILD --prefix SCRATCH/prefix` (the C++ package);
# 2. the installed CLI prints its version and finds its cluster presets relative to its binary;
# 3. a consumer project finds the package (find_package(burst CONFIG)), links burst::burst,
#    builds and runs;
# 4. the same consumer built with plain c++ and `pkg-config --cflags --libs burst`;
# 5. a project embedding the source tree with add_subdirectory defines only the library.
file(REMOVE_RECURSE ${SCRATCH})
set(prefix ${SCRATCH}/prefix)
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})
foreach(f include/burst/burst.h include/burst/version.h ${LIBDIR}/libburst.a
          ${LIBDIR}/cmake/burst/burstConfig.cmake ${LIBDIR}/pkgconfig/burst.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${prefix}/${f}")
  endif()
endforeach()
if(EXISTS ${prefix}/bin/burst)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
  run("installed burst --version" ${prefix}/bin/burst --version)
  message(STATUS "${out}")
  # A preset name (not a path) resolves only through <prefix>/share/burst/clusters.
  run("installed burst simulate" ${prefix}/bin/burst simulate --cluster cpu_this_machine --seq 4096 --format jsonl)
  if(NOT out MATCHES "\"strategy\"")
    message(FATAL_ERROR "installed burst simulate printed no estimate:\n${out}")
  endif()
endif()

run("consumer configure" ${CMAKE_COMMAND} -S ${SOURCE}/tests/package/consumer -B ${SCRATCH}/consumer
    -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run("consumer build" ${CMAKE_COMMAND} --build ${SCRATCH}/consumer)
run("consumer run" ${SCRATCH}/consumer/consumer)
message(STATUS "${out}")

find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
  run("pkg-config burst" ${PKG_CONFIG} --cflags --libs burst)
  separate_arguments(pc_flags UNIX_COMMAND "${out}")
  run("pkg-config consumer build" ${CXX} ${SOURCE}/tests/package/consumer/main.cc ${pc_flags}
      -o ${SCRATCH}/consumer_pc)
  run("pkg-config consumer run" ${SCRATCH}/consumer_pc)
  message(STATUS "pkg-config: ${out}")
else()
  message(STATUS "pkg-config not installed: burst.pc installed but not exercised")
endif()

run("embed configure" ${CMAKE_COMMAND} -S ${SOURCE}/tests/package/embed -B ${SCRATCH}/embed -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DBURST_SOURCE_DIR=${SOURCE})
message(STATUS "embed: only burst::burst defined")
