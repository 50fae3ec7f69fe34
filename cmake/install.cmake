# Install rules (BURST_INSTALL, ON at top level): `cmake --install <build> [--prefix P]` puts
#   include/burst/*.h (+ the generated version.h), lib/libburst.a, lib/cmake/burst/ (package config,
#   target burst::burst), lib/pkgconfig/burst.pc, and with BURST_BUILD_TOOLS bin/burst + share/burst/ (cluster presets,
#   report.py; the CLI finds them relative to its own binary: <bin>/../share/burst), and with the
#   language model bin/burst-lm.
# The Python module is the separate component `python`, installed only when asked
# (`cmake --install <build> --component python`, python/CMakeLists.txt).
include(CMakePackageConfigHelpers)
set(BURST_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/burst)

install(TARGETS burst EXPORT burstTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/burst ${PROJECT_BINARY_DIR}/include/burst
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT burstTargets NAMESPACE burst:: DESTINATION ${BURST_CMAKE_INSTALL_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/burstConfig.cmake.in
  ${PROJECT_BINARY_DIR}/burstConfig.cmake INSTALL_DESTINATION ${BURST_CMAKE_INSTALL_DIR})
# 0.x: minor versions may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/burstConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/burstConfig.cmake ${PROJECT_BINARY_DIR}/burstConfigVersion.cmake
        DESTINATION ${BURST_CMAKE_INSTALL_DIR})

# pkg-config: <libdir>/pkgconfig/burst.pc (`pkg-config --cflags --libs burst`). MPI comes through
# Debian's mpi-cxx.pc (Open MPI or MPICH, whichever alternative is installed).
set(BURST_PC_MPI mpi-cxx)
file(RELATIVE_PATH BURST_PC_UP /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
configure_file(${PROJECT_SOURCE_DIR}/cmake/burst.pc.in ${PROJECT_BINARY_DIR}/burst.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/burst.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(TARGET burst_cli)
  install(TARGETS burst_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(FILES ${BURST_SHARE_FILES} DESTINATION ${CMAKE_INSTALL_DATADIR}/burst/clusters)
  install(FILES ${PROJECT_SOURCE_DIR}/scripts/report.py DESTINATION ${CMAKE_INSTALL_DATADIR}/burst)
endif()
if(TARGET burst_lm_cli)   # beside bin/burst: `burst train|eval|generate` exec it from there
  install(TARGETS burst_lm_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
