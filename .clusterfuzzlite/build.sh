#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build of kvspec's fuzz targets.
#
# Inputs (set by the OSS-Fuzz builder image): $CXX, $CXXFLAGS (sanitizer and
# coverage flags, -fsanitize=fuzzer-no-link among them), $LIB_FUZZING_ENGINE
# (what links the fuzzing engine's main, e.g. -fsanitize=fuzzer), $SRC (the
# checkout is $SRC/kvspec) and $OUT. $CC and $CFLAGS are not used: kvspec
# has no C sources. $WORK (scratch objects) is used when set.
#
# Outputs, per target T of KVSPEC_FUZZ_TARGETS in fuzz/CMakeLists.txt:
#   $OUT/T                  the libFuzzer binary
#   $OUT/T_seed_corpus.zip  corpus/T/ and corpus/regressions/T/
#   $OUT/T.dict             fuzz/T.dict
#   $OUT/T.options          [libfuzzer] max_len as fuzz/run uses it
# The core's sources are the kvspec_core list of the top CMakeLists.txt and
# the fuzz support sources KVSPEC_FUZZ_SUPPORT_SOURCES, read from there so
# that new modules and targets follow.
#
# Local test (clang-14 and libFuzzer from Debian; the checkout is /work/main,
# so SRC is its parent and the checkout must be reachable as $SRC/kvspec,
# here through a symbolic link):
#   mkdir -p /tmp/cfl-src && ln -sfn /work/main /tmp/cfl-src/kvspec
#   SRC=/tmp/cfl-src OUT=/tmp/cfl-out WORK=/tmp/cfl-work CC=clang-14 CXX=clang++-14 \
#     CFLAGS="-O1 -g -fsanitize=address,undefined -fsanitize=fuzzer-no-link" \
#     CXXFLAGS="-O1 -g -fsanitize=address,undefined -fsanitize=fuzzer-no-link" \
#     LIB_FUZZING_ENGINE=-fsanitize=fuzzer bash .clusterfuzzlite/build.sh
# Each binary then runs as ClusterFuzzLite runs it:
#   cd /tmp/cfl-out && unzip -oq T_seed_corpus.zip -d seeds-T &&
#   ./T -dict=T.dict -max_total_time=20 seeds-T

# The shebang's -eu does not apply under `bash build.sh` (how OSS-Fuzz
# runs it): set the options here.
set -euo pipefail
: "${SRC:?}" "${OUT:?}" "${CXX:?}" "${LIB_FUZZING_ENGINE:?}"
CXXFLAGS="${CXXFLAGS:-}"
KVSPEC="$SRC/kvspec"
WORKDIR="${WORK:-$(mktemp -d)}/kvspec-build"
mkdir -p "$WORKDIR" "$OUT"

# The words of a CMake command `NAME(... ) `, from its first line up to the
# first `)`, without the first N words (the command's own arguments).
cmake_list() {  # FILE PATTERN SKIP
  awk -v pattern="$2" -v skip="$3" '
    $0 ~ pattern { on = 1 }
    on {
      line = $0
      sub(/#.*/, "", line)
      done = index(line, ")") > 0
      sub(/\).*/, "", line)
      sub(/^.*\(/, "", line)
      n = split(line, words, /[ \t]+/)
      for (i = 1; i <= n; i++) if (words[i] != "" && skipped++ >= skip) print words[i]
      if (done) exit
    }' "$1"
}

mapfile -t core_sources < <(cmake_list "$KVSPEC/CMakeLists.txt" '^add_library\(kvspec_core ' 2)
mapfile -t support_sources < <(cmake_list "$KVSPEC/fuzz/CMakeLists.txt" '^set\(KVSPEC_FUZZ_SUPPORT_SOURCES ' 1)
mapfile -t targets < <(cmake_list "$KVSPEC/fuzz/CMakeLists.txt" '^set\(KVSPEC_FUZZ_TARGETS ' 1)
if [[ ${#core_sources[@]} -eq 0 || ${#targets[@]} -eq 0 ]]; then
  echo "build.sh: could not read the source or target lists from the CMakeLists.txt files" >&2
  exit 1
fi

# As kvspec_options in the top CMakeLists.txt: C++17, every attainable
# Highway target, scalar float arithmetic exactly as written.
flags=(-std=c++17 -I"$KVSPEC" -DHWY_COMPILE_ALL_ATTAINABLE -ffp-contract=off)

objects=()
for source in "${core_sources[@]/#/$KVSPEC/}" "${support_sources[@]/#/$KVSPEC/fuzz/}"; do
  object="$WORKDIR/$(basename "${source%.cc}").o"
  echo "build.sh: compiling ${source#"$KVSPEC"/}"
  # shellcheck disable=SC2086  # CXXFLAGS is a list of flags
  $CXX $CXXFLAGS "${flags[@]}" -c "$source" -o "$object"
  objects+=("$object")
done
rm -f "$WORKDIR/libkvspec_fuzz.a"
ar rcs "$WORKDIR/libkvspec_fuzz.a" "${objects[@]}"

for target in "${targets[@]}"; do
  echo "build.sh: linking $target"
  # shellcheck disable=SC2086
  $CXX $CXXFLAGS "${flags[@]}" "$KVSPEC/fuzz/$target.cc" "$WORKDIR/libkvspec_fuzz.a" \
    $LIB_FUZZING_ENGINE -lhwy -lpthread -o "$OUT/$target"

  # The seeds and the regression inputs, flat (libFuzzer reads the zip's
  # files as one folder); regression inputs get a prefix against clashes.
  stage="$WORKDIR/seeds/$target"
  rm -rf "$stage" "$OUT/${target}_seed_corpus.zip"
  mkdir -p "$stage"
  if [[ -d "$KVSPEC/corpus/$target" ]]; then
    find "$KVSPEC/corpus/$target" -maxdepth 1 -type f -exec cp -t "$stage" {} +
  fi
  if [[ -d "$KVSPEC/corpus/regressions/$target" ]]; then
    for file in "$KVSPEC/corpus/regressions/$target"/*; do
      [[ -f "$file" ]] && cp "$file" "$stage/regression-$(basename "$file")"
    done
  fi
  if [[ -n "$(ls -A "$stage")" ]]; then
    (cd "$stage" && zip -q -r "$OUT/${target}_seed_corpus.zip" .)
  fi
  if [[ -f "$KVSPEC/fuzz/$target.dict" ]]; then
    cp "$KVSPEC/fuzz/$target.dict" "$OUT/$target.dict"
  fi
  case "$target" in
    fuzz_layout_ops) max_len=512 ;;
    *) max_len=4096 ;;
  esac
  printf '[libfuzzer]\nmax_len = %d\n' "$max_len" >"$OUT/$target.options"
done
echo "build.sh: built ${targets[*]} into $OUT"
