# Run by CTest (tests/package/CMakeLists.txt): install BUILD_DIR into WORK_DIR/prefix, build the
# consumer project against that prefix alone, run it. Any failing step fails the test.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(config_args "")
if(CONFIG)
  set(config_args --config ${CONFIG})
endif()

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " line)
    message(FATAL_ERROR "package test: '${line}' failed (${rc})")
  endif()
endfunction()

step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} ${config_args})
foreach(required include/vramkit/config.hpp include/vramkit/mr/pool_resource.hpp)
  if(NOT EXISTS ${prefix}/${required})
    message(FATAL_ERROR "package test: ${required} was not installed")
  endif()
endforeach()

set(build_type RelWithDebInfo)
if(CONFIG)
  set(build_type ${CONFIG})
endif()
# The consumer sees the prefix only: no package registry, no build tree.
step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer-build -G ${GENERATOR}
  -DCMAKE_BUILD_TYPE=${build_type}
  -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
  -DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}
  "-DCMAKE_CXX_FLAGS=${FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${FLAGS}"
  -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build ${config_args})
execute_process(COMMAND ${WORK_DIR}/consumer-build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer: ok")
  message(FATAL_ERROR "package test: the consumer failed (${rc})")
endif()
