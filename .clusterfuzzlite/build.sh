#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build of kvspec's fuzz targets.
#
# Inputs (set by the OSS-Fuzz builder image): $CXX, $CXXFLAGS (sanitizer and
# coverage flags, -fsanitize=fuzzer-no-link among them), $LIB_FUZZING_ENGINE
# (what links the fuzzing engine's main, e.g. -fsanitize=fuzzer), $SRC (the
# checkout is $SRC/kvspec) and $OUT. $CC and $CFLAGS are not used: kvspec
# has no C sources. $WORK (scratch build tree) is used when set.
#
# The build is the project's own CMake build (KVSPEC_FUZZ=ON), so the
# sources and targets are exactly those of fuzz/CMakeLists.txt and
# fuzz/targets.txt; only the flags come from the cluster
# (KVSPEC_FUZZ_SANITIZE=OFF: $CXXFLAGS brings the sanitizers).
#
# Outputs, per target T of fuzz/targets.txt:
#   $OUT/T                  the libFuzzer binary
#   $OUT/T_seed_corpus.zip  corpus/T/ and corpus/regressions/T/
#   $OUT/T.dict             fuzz/T.dict
#   $OUT/T.options          [libfuzzer] max_len, timeout, rss_limit_mb from fuzz/targets.txt
#
# Local test (clang-14 and libFuzzer from Debian), from the checkout:
#   mkdir -p /tmp/cfl-src && ln -sfn "$PWD" /tmp/cfl-src/kvspec
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
KVSPEC="$SRC/kvspec"
built=()
BUILD="${WORK:-$(mktemp -d)}/kvspec-build"
mkdir -p "$BUILD" "$OUT"

cmake -S "$KVSPEC" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_CXX_FLAGS="${CXXFLAGS:-}" \
  -DKVSPEC_FUZZ=ON -DKVSPEC_FUZZ_SANITIZE=OFF -DKVSPEC_FUZZ_ENGINE="$LIB_FUZZING_ENGINE" \
  -DKVSPEC_BUILD_TESTS=OFF -DKVSPEC_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target all_fuzzers

while read -r target max_len timeout rss_limit_mb _; do
  [[ -z "$target" || "$target" == \#* ]] && continue
  echo "build.sh: packaging $target"
  cp "$BUILD/$target" "$OUT/$target"

  # The seeds and the regression inputs, flat (libFuzzer reads the zip's
  # files as one folder); regression inputs get a prefix against clashes.
  stage="$BUILD/seeds/$target"
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
  printf '[libfuzzer]\nmax_len = %d\ntimeout = %d\nrss_limit_mb = %d\n' \
    "$max_len" "${timeout:-30}" "${rss_limit_mb:-2048}" >"$OUT/$target.options"
  built+=("$target")
done <"$KVSPEC/fuzz/targets.txt"
echo "build.sh: built ${built[*]} into $OUT"
