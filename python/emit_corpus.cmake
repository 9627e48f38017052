# The emitted corpus (corpus/emitted/, docs/python.md): every corpus trace
# (corpus/traces/*.trace and corpus/traces/conformance/*.trace) as
# `kvspec trace --emit --json --reference` prints it (the scalar reference
# kernels: the `expect out` values are the same bits on every machine,
# whichever Highway targets it has), at
# corpus/emitted/<path relative to corpus/traces, .trace replaced by .json>.
# The pure-Python runner reads these when kvspec's C++ is not built.
#
#   cmake -DKVSPEC=build/dev/kvspec -DSOURCE_DIR=. -DMODE=write -P python/emit_corpus.cmake
#   cmake -DKVSPEC=... -DSOURCE_DIR=. -DMODE=check -P python/emit_corpus.cmake
#
# MODE=write regenerates the folder (and removes files of traces that are
# gone); MODE=check fails naming every file that is missing, stale or extra.
# The traces are named relative to SOURCE_DIR, so the "file" field of each
# JSON document is the same on every machine.
if(NOT KVSPEC OR NOT SOURCE_DIR OR NOT MODE)
  message(FATAL_ERROR "usage: -DKVSPEC=... -DSOURCE_DIR=... -DMODE=write|check")
endif()
set(out_dir ${SOURCE_DIR}/corpus/emitted)
file(GLOB traces RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/corpus/traces/*.trace ${SOURCE_DIR}/corpus/traces/conformance/*.trace)
list(SORT traces)
set(expected_files)
set(problems)
foreach(trace IN LISTS traces)
  string(REGEX REPLACE "^corpus/traces/" "" rel ${trace})
  string(REGEX REPLACE "\\.trace$" ".json" rel ${rel})
  set(target ${out_dir}/${rel})
  list(APPEND expected_files ${target})
  execute_process(COMMAND ${KVSPEC} trace --emit --json --reference ${trace}
                  WORKING_DIRECTORY ${SOURCE_DIR}
                  RESULT_VARIABLE status OUTPUT_VARIABLE json ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${trace}: kvspec trace --emit --json --reference exited ${status}:\n${err}")
  endif()
  if(MODE STREQUAL "write")
    file(WRITE ${target} "${json}")
  elseif(NOT EXISTS ${target})
    list(APPEND problems "missing ${target}")
  else()
    file(READ ${target} have)
    if(NOT have STREQUAL json)
      list(APPEND problems "stale ${target}")
    endif()
  endif()
endforeach()
file(GLOB_RECURSE present ${out_dir}/*.json)
foreach(f IN LISTS present)
  list(FIND expected_files ${f} at)
  if(at EQUAL -1)
    if(MODE STREQUAL "write")
      file(REMOVE ${f})
    else()
      list(APPEND problems "extra ${f}")
    endif()
  endif()
endforeach()
list(LENGTH traces count)
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "corpus/emitted is not fresh:\n  ${text}\nregenerate with: "
          "cmake --build --preset dev --target kvspec_emitted")
endif()
message(STATUS "corpus/emitted: ${count} traces ${MODE}")
