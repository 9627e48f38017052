# The installed package works for a consumer (run by ctest: install.consumer).
#   cmake -DBUILD_DIR=... -DPREFIX=... -DEXAMPLE=... -DCXX=... -DHEADERS=a;b -P install_check.cmake
# 1. cmake --install BUILD_DIR --prefix PREFIX (a fresh PREFIX);
# 2. every installed header compiles on its own (-fsyntax-only, against
#    PREFIX/include only);
# 3. EXAMPLE is configured with find_package(kvspec) from PREFIX, built,
#    and run (it must exit 0).
cmake_minimum_required(VERSION 3.22)
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGV}")
    message(FATAL_ERROR "failed (${rc}): ${command}\n${out}\n${err}")
  endif()
endfunction()

file(REMOVE_RECURSE ${PREFIX})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})

set(count 0)
foreach(header IN LISTS HEADERS)
  set(installed ${PREFIX}/include/kvspec/${header})
  if(NOT EXISTS ${installed})
    message(FATAL_ERROR "not installed: ${header}")
  endif()
  set(unit ${PREFIX}/header-check.cc)
  file(WRITE ${unit} "#include <kvspec/${header}>\n")
  run(${CXX} -std=c++17 -fsyntax-only -Wall -Wextra -Werror
      -I${PREFIX}/include ${unit})
  math(EXPR count "${count} + 1")
endforeach()
message(STATUS "${count} installed headers compile on their own")

set(build ${PREFIX}/consumer-build)
run(${CMAKE_COMMAND} -S ${EXAMPLE} -B ${build} -DCMAKE_PREFIX_PATH=${PREFIX}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${build} -j 2)
run(${build}/consumer)
message(STATUS "the example consumer built against the installed package and ran")
