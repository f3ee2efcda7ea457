#!/usr/bin/env bash
# `make bench-s3`: what committing a kb costs on object storage. On a local S3 server (moto, as
# for `make s3-test`), each corpus is built into s3://… by flexstruct-index, then merged again
# ROUNDS times with something new to commit each time (approximate indexes of another number of
# lists: four new objects); prints each merge's wall time and the time its commit took (the
# record written, the objects of earlier kbs removed), and the medians. hashing-64 embeddings.
#
# Usage: cluster/s3/bench.sh CORPUS... (environment: ROUNDS [5], BIN)
set -euo pipefail
bin=$(cd "${BIN:-target/debug}" && pwd)
rounds=${ROUNDS:-5}
[ $# -gt 0 ] || { echo "usage: $0 CORPUS..." >&2; exit 2; }
. cluster/s3/local.sh
work=$(mktemp -d)
trap stop_local_s3 EXIT
start_local_s3
export FLEXSTRUCT_EMBED__MODEL=hashing-64
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for corpus in "$@"; do
  name=$(basename "$(dirname "$corpus")")/$(basename "$corpus")
  index="s3://$bucket/$(printf '%s' "$name" | tr -c 'A-Za-z0-9' _)"
  "$bin/flexstruct-index" --index "$index" --corpus "$corpus" --quiet 2>"$work/index.log" \
    || { tail -n 20 "$work/index.log" >&2; exit 1; }
  walls=() commits=()
  for round in $(seq "$rounds"); do
    start=$(date +%s.%N)
    FLEXSTRUCT_ANN__MIN_ROWS=1 FLEXSTRUCT_ANN__LISTS=$((round + 1)) \
      "$bin/flexstruct-merge" --index "$index" 2>"$work/merge.log" || { tail -n 20 "$work/merge.log" >&2; exit 1; }
    walls+=("$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.2f", a - b }')")
    ms=$(grep -o 'committed kb generation [0-9]* in [0-9]* ms' "$work/merge.log" | awk '{ print $(NF - 1) }')
    [ -n "$ms" ] || { cat "$work/merge.log" >&2; echo "bench-s3: the merge committed nothing" >&2; exit 1; }
    commits+=("$ms")
  done
  wall=$(printf '%s\n' "${walls[@]}" | median)
  commit=$(printf '%s\n' "${commits[@]}" | median)
  printf '%-32s merge median %.2f s (%s)  commit median %s ms (%s)  %.1f %% of the merge\n' "$name" "$wall" \
    "${walls[*]}" "$commit" "${commits[*]}" "$(awk -v c="$commit" -v w="$wall" 'BEGIN { print c / 10 / w }')"
done
