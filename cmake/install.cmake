# The CMake package: `cmake --install <build> --prefix <dir>` installs the public headers, the
# static library and a config package, so that other projects use Alloy with
#   find_package(Alloy REQUIRED)  +  target_link_libraries(app PRIVATE Alloy::alloy)
# (examples/cmake-consumer; tested by the ctest test CMakePackage.InstallAndBuildConsumer).
# The library targets that make up Alloy are listed once, in ALLOY_PACKAGE_TARGETS.
option(ALLOY_INSTALL "Install rules of the C++ package (off in the Python wheel's build)" ON)
if(NOT ALLOY_INSTALL)
  return()
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ALLOY_PACKAGE_TARGETS alloy)
set(ALLOY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Alloy)

install(TARGETS ${ALLOY_PACKAGE_TARGETS} EXPORT AlloyTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The NVRTC compile worker, at the path the library was built to look for
# (ALLOY_NVRTC_WORKER_INSTALLED in CMakeLists.txt; elsewhere: $ALLOY_NVRTC_WORKER).
install(TARGETS alloy_nvrtc_worker RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/alloy)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/alloy DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT AlloyTargets NAMESPACE Alloy:: DESTINATION ${ALLOY_CMAKE_DIR})

configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/AlloyConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/AlloyConfig.cmake
                              INSTALL_DESTINATION ${ALLOY_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/AlloyConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/AlloyConfig.cmake ${CMAKE_BINARY_DIR}/AlloyConfigVersion.cmake
        DESTINATION ${ALLOY_CMAKE_DIR})

if(ALLOY_BUILD_TESTS)
  # Installs this build into a scratch prefix, builds examples/cmake-consumer against it with
  # find_package(Alloy) and runs it.
  add_test(NAME CMakePackage.InstallAndBuildConsumer
           COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR}
                   -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
                   -P ${CMAKE_SOURCE_DIR}/cmake/test_package.cmake)
  set_tests_properties(CMakePackage.InstallAndBuildConsumer PROPERTIES
                       ENVIRONMENT "ALLOY_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache" TIMEOUT 600)
endif()
