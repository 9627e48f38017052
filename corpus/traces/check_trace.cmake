# Checks run by ctest on the trace corpus (see corpus/CMakeLists.txt).
#
#   cmake -DKVSPEC=path/to/kvspec -DMODE=bad  -DFILE=corpus/bad/X.trace -P check_trace.cmake
#   cmake -DKVSPEC=... -DMODE=emit -DFILE=corpus/traces/X.trace -DOUT_DIR=dir -P check_trace.cmake
#   cmake -DKVSPEC=... -DMODE=multi -DFILES="a|b|c" -DEXPECT_EXIT=N -P check_trace.cmake
#
# MODE=bad: FILE's first line is
#     # expect-exit: N expect-stderr: PATTERN
# The run must exit N and standard error must hold a line that starts with
# FILE followed by PATTERN (a fixed string, so it pins the line number, and
# for syntax errors the column). The file name's prefix must agree:
#   fail_*    exit 1, PATTERN `:LINE: expected ...` (a failed expectation;
#             the run finishes the file, so other lines may follow)
#   error_*   exit 1, PATTERN `:LINE: error:` (a refusal; the file stops
#             there, so it is the last line on standard error)
#   syntax_*  exit 2, PATTERN `:LINE:COL:` (found before anything runs: the
#             only line on standard error, and nothing on standard output)
#   limit_*   exit 2, PATTERN `:LINE: limit:` (a memory or work budget hit
#             while running; the file stops there: the last stderr line)
#
# MODE=emit: `kvspec trace --emit FILE` exits 0; its output, fed to
# `kvspec trace -`, exits 0 with nothing on standard error; and emitting
# that output again (`kvspec trace --emit -`) reproduces it exactly.
#
# MODE=multi: one run over several FILES exits EXPECT_EXIT (the largest
# status over the files).
#
# MODE=regression: each of FILES ('|'-separated; none is fine) runs on its
# own (and once more with --target NAME for each `# target: NAME` or
# `# target NAME` comment line naming a target this CPU runs) and must exit 0, or N when its first
# line is
#     # expect-exit: N [expect-stderr: PATTERN]
# (and then standard error must hold a line starting with FILE followed by
# PATTERN, when given). Prints `regressions: N replayed, N passed`.
cmake_minimum_required(VERSION 3.22)

function(fail message)
  message(FATAL_ERROR "${message}")
endfunction()

if(NOT KVSPEC)
  fail("KVSPEC (path to the kvspec command) is not set")
endif()

if(MODE STREQUAL "bad")
  file(STRINGS "${FILE}" first LIMIT_COUNT 1)
  if(NOT first MATCHES "^# expect-exit: ([0-9]+) expect-stderr: (.+)$")
    fail("${FILE}: first line must be `# expect-exit: N expect-stderr: PATTERN`")
  endif()
  set(want_exit "${CMAKE_MATCH_1}")
  set(pattern "${CMAKE_MATCH_2}")
  get_filename_component(name "${FILE}" NAME)
  if(name MATCHES "^fail_")
    set(prefix_exit 1)
    set(shape "^:[0-9]+: expected ")
  elseif(name MATCHES "^error_")
    set(prefix_exit 1)
    set(shape "^:[0-9]+: error:")
  elseif(name MATCHES "^syntax_")
    set(prefix_exit 2)
    set(shape "^:[0-9]+:[0-9]+:")
  elseif(name MATCHES "^limit_")
    set(prefix_exit 2)
    set(shape "^:[0-9]+: limit:")
  else()
    fail("${name}: a bad trace's name starts with fail_, error_, syntax_ or limit_")
  endif()
  if(NOT want_exit STREQUAL prefix_exit)
    fail("${name}: expect-exit ${want_exit} disagrees with its name (exit ${prefix_exit})")
  endif()
  if(NOT pattern MATCHES "${shape}")
    fail("${name}: expect-stderr '${pattern}' does not have the shape of its kind")
  endif()

  execute_process(COMMAND "${KVSPEC}" trace "${FILE}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL want_exit)
    fail("${name}: exit ${rc}, expected ${want_exit}\nstderr:\n${err}")
  endif()
  string(FIND "\n${err}" "\n${FILE}${pattern}" at)
  if(at LESS 0)
    fail("${name}: no stderr line starting with '${FILE}${pattern}'\nstderr:\n${err}")
  endif()
  string(REGEX REPLACE "\n$" "" trimmed "${err}")
  # Messages may hold ';', CMake's list separator: hide it before splitting.
  string(REPLACE ";" "<semicolon>" trimmed "${trimmed}")
  string(REPLACE "\n" ";" lines "${trimmed}")
  list(LENGTH lines count)
  list(GET lines -1 last)
  string(REPLACE "<semicolon>" ";" last "${last}")
  if(name MATCHES "^(error|limit)_")
    string(FIND "${last}" "${FILE}${pattern}" at)
    if(NOT at EQUAL 0)
      fail("${name}: the refusal is not the last stderr line (the file must stop there)\nstderr:\n${err}")
    endif()
  elseif(name MATCHES "^syntax_")
    if(NOT count EQUAL 1 OR NOT out STREQUAL "")
      fail("${name}: a syntax error must be the only output\nstdout:\n${out}\nstderr:\n${err}")
    endif()
  endif()

elseif(MODE STREQUAL "emit")
  get_filename_component(name "${FILE}" NAME)
  file(MAKE_DIRECTORY "${OUT_DIR}")
  set(emitted "${OUT_DIR}/${name}")
  execute_process(COMMAND "${KVSPEC}" trace --emit "${FILE}"
                  RESULT_VARIABLE rc OUTPUT_FILE "${emitted}" ERROR_VARIABLE err)
  if(NOT rc STREQUAL "0")
    fail("${name}: kvspec trace --emit exited ${rc}\n${err}")
  endif()
  execute_process(COMMAND "${KVSPEC}" trace -
                  INPUT_FILE "${emitted}" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "0" OR NOT err STREQUAL "")
    fail("${name}: the emitted trace (${emitted}) run through `kvspec trace -` "
         "exited ${rc}\n${err}")
  endif()
  execute_process(COMMAND "${KVSPEC}" trace --emit -
                  INPUT_FILE "${emitted}" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE again ERROR_VARIABLE err)
  file(READ "${emitted}" first)
  if(NOT rc STREQUAL "0" OR NOT again STREQUAL first)
    file(WRITE "${emitted}.again" "${again}")
    fail("${name}: emitting the emitted trace again (exit ${rc}) does not reproduce it: "
         "compare ${emitted} and ${emitted}.again\n${err}")
  endif()

elseif(MODE STREQUAL "multi")
  string(REPLACE "|" ";" FILES "${FILES}")
  execute_process(COMMAND "${KVSPEC}" trace ${FILES}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${EXPECT_EXIT}")
    fail("kvspec trace over ${FILES}: exit ${rc}, expected ${EXPECT_EXIT}\n${err}")
  endif()

elseif(MODE STREQUAL "regression")
  string(REPLACE "|" ";" FILES "${FILES}")
  set(replayed 0)
  set(passed 0)
  set(failures "")
  foreach(file IN LISTS FILES)
    math(EXPR replayed "${replayed} + 1")
    file(STRINGS "${file}" first LIMIT_COUNT 1)
    set(want_exit 0)
    set(pattern "")
    if(first MATCHES "^# expect-exit: ([0-9]+)( expect-stderr: (.+))?$")
      set(want_exit "${CMAKE_MATCH_1}")
      set(pattern "${CMAKE_MATCH_3}")
    endif()
    # A trace found on one Highway target (a `# target: NAME` comment from
    # the property regression writer, or fuzz/overnight's `# target NAME`)
    # runs on the best target and, when this CPU runs it, on NAME too.
    set(flag_sets "-")
    file(STRINGS "${file}" target_lines REGEX "^# target:? [A-Za-z0-9_]+$")
    foreach(line IN LISTS target_lines)
      string(REGEX REPLACE "^# target:? " "" name "${line}")
      if(NOT DEFINED runnable)
        execute_process(COMMAND "${KVSPEC}" targets OUTPUT_VARIABLE runnable ERROR_QUIET)
      endif()
      if(runnable MATCHES "runnable:[^\n]* ${name}( |\n|$)")
        list(APPEND flag_sets "--target|${name}")
      else()
        message(STATUS "${file}: found on ${name}, which this CPU does not run")
      endif()
    endforeach()
    set(ok TRUE)
    foreach(flags IN LISTS flag_sets)
      set(args "")
      set(on "")
      if(NOT flags STREQUAL "-")
        string(REPLACE "|" ";" args "${flags}")
        string(REPLACE "|" " " on " (${flags})")
      endif()
      execute_process(COMMAND "${KVSPEC}" trace ${args} "${file}"
                      RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
      if(NOT rc STREQUAL want_exit)
        set(ok FALSE)
        string(APPEND failures "${file}${on}: exit ${rc}, expected ${want_exit}\n${err}\n")
      elseif(NOT pattern STREQUAL "")
        string(FIND "\n${err}" "\n${file}${pattern}" at)
        if(at LESS 0)
          set(ok FALSE)
          string(APPEND failures "${file}${on}: no stderr line starting with '${file}${pattern}'\n${err}\n")
        endif()
      endif()
    endforeach()
    if(ok)
      math(EXPR passed "${passed} + 1")
    endif()
  endforeach()
  message(STATUS "regressions: ${replayed} replayed, ${passed} passed")
  if(NOT passed EQUAL replayed)
    fail("${failures}")
  endif()

else()
  fail("MODE must be bad, emit, multi or regression")
endif()
