# ctest python_install: installs the python component under a scratch DESTDIR and imports the
# installed package from a directory outside the build tree (cmake -P; BUILD, PYTHON, SCRATCH).
file(REMOVE_RECURSE ${SCRATCH})
execute_process(COMMAND ${CMAKE_COMMAND} -E env DESTDIR=${SCRATCH}
                        ${CMAKE_COMMAND} --install ${BUILD} --component python
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install --component python failed: ${rc}")
endif()
file(GLOB_RECURSE init ${SCRATCH}/*__init__.py)
list(FILTER init INCLUDE REGEX "/burst/__init__.py$")
list(LENGTH init n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one installed burst/__init__.py under ${SCRATCH}, found: ${init}")
endif()
get_filename_component(pkg ${init} DIRECTORY)
get_filename_component(site ${pkg} DIRECTORY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${site}
                        ${PYTHON} -c "import burst, numpy as np; assert burst.__file__.startswith('${site}'), burst.__file__; q = np.ones((1, 4, 2, 8), np.float32); assert np.allclose(burst.attn_func(q, q, q, causal=True), 1.0); print('installed burst OK at', burst.__file__)"
                WORKING_DIRECTORY ${SCRATCH}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "importing the installed package failed: ${rc}")
endif()
