# ctest CMakePackage.InstallAndBuildConsumer: cmake --install into a scratch prefix, then configure,
# build and run examples/cmake-consumer against it (find_package(Alloy), Alloy::alloy).
# Arguments: -DBUILD_DIR=<alloy build> -DSOURCE_DIR=<alloy source> -DCXX_COMPILER=<c++>
set(work ${BUILD_DIR}/package-test)
file(REMOVE_RECURSE ${work}/prefix)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${work}/prefix)
set(launcher "")
if(DEFINED ENV{CMAKE_CXX_COMPILER_LAUNCHER})
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=$ENV{CMAKE_CXX_COMPILER_LAUNCHER})
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/cmake-consumer -B ${work}/build
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX_COMPILER} ${launcher}
    -DCMAKE_PREFIX_PATH=${work}/prefix -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
run(${CMAKE_COMMAND} --build ${work}/build)
run(${work}/build/alloy_consumer)
