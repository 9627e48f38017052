#!/bin/sh
# Runs trace files on every Highway target this CPU runs (`kvspec targets`),
# through `kvspec trace --target NAME`: the conformance expectations hold on
# each. Usage: every_target.sh KVSPEC FILE...
kvspec=$1; shift
targets=$("$kvspec" targets | sed -n 's/^runnable: *//p')
[ -n "$targets" ] || { echo "every_target.sh: no runnable targets from '$kvspec targets'"; exit 1; }
for t in $targets; do
  if ! "$kvspec" trace --target "$t" "$@" >/dev/null; then
    echo "every_target.sh: failed on $t; rerun: kvspec trace --target $t FILE"
    exit 1
  fi
  echo "$t: $# traces passed"
done
