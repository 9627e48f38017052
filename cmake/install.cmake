# `cmake --install`: the library's headers and static libraries, the
# `kvspec` command, and a CMake package so that a consumer writes
#   find_package(kvspec REQUIRED)
#   target_link_libraries(app PRIVATE kvspec::kvspec)   # or kvspec::core, ...
# and includes <kvspec/core/layout.h> and so on: headers go to
# <prefix>/include/kvspec/{base,kernels,core,core/codec,trace,runner}/ and
# the targets add <prefix>/include to the include path. Only public headers
# are installed: the *_internal.h, *-inl.h and test headers stay in the tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(kvspec_install_include ${CMAKE_INSTALL_INCLUDEDIR}/kvspec)

# The public headers of each folder.
set(kvspec_public_headers
  base/kind.h base/kv_type.h base/layer_config.h base/status.h
  kernels/aligned_vector.h kernels/attention.h kernels/conv1d.h kernels/gated_delta.h
  kernels/kv_blocks.h kernels/kv_view.h kernels/mask.h kernels/quantize.h kernels/thread_pool.h
  core/batch.h core/cache.h core/invariants.h core/kv_cache.h core/layout.h
  core/mask_builder.h core/ssm_cache.h
  core/codec/codec.h
  trace/program.h trace/values.h trace/json.h
  runner/runner.h)
foreach(header IN LISTS kvspec_public_headers)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${header} DESTINATION ${kvspec_install_include}/${dir})
endforeach()

# kvspec::kvspec: everything a consumer needs (the runner and all below it).
add_library(kvspec_all INTERFACE)
target_link_libraries(kvspec_all INTERFACE kvspec_runner)
set_target_properties(kvspec_all PROPERTIES EXPORT_NAME kvspec)
add_library(kvspec::kvspec ALIAS kvspec_all)

set(kvspec_library_targets kvspec_base kvspec_kernels kvspec_core kvspec_codec kvspec_trace
    kvspec_runner)
foreach(target IN LISTS kvspec_library_targets)
  string(REGEX REPLACE "^kvspec_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  target_include_directories(${target} INTERFACE
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()
set_target_properties(kvspec_options PROPERTIES EXPORT_NAME options)  # empty outside the build
install(TARGETS ${kvspec_library_targets} kvspec_all kvspec_options
        EXPORT kvspecTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kvspec RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT kvspecTargets NAMESPACE kvspec::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvspec)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kvspecConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/kvspecConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvspec)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kvspecConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kvspecConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/kvspecConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvspec)

if(KVSPEC_BUILD_TESTS)
  # ctest (label install): install into the build tree, build and run the
  # example consumer against that installed package, and compile every
  # installed header on its own.
  add_test(NAME install.consumer
           COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR}
                   -DPREFIX=${CMAKE_BINARY_DIR}/install-test
                   -DEXAMPLE=${PROJECT_SOURCE_DIR}/examples/consumer
                   -DCXX=${CMAKE_CXX_COMPILER}
                   "-DHEADERS=${kvspec_public_headers}"
                   -P ${CMAKE_CURRENT_LIST_DIR}/install_check.cmake)
  set_tests_properties(install.consumer PROPERTIES LABELS install TIMEOUT 600
                       RUN_SERIAL TRUE)
endif()
