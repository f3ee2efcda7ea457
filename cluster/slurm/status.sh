#!/usr/bin/env bash
# `make slurm-status INDEX=…`: the Slurm chain of INDEX — its queued and running jobs (squeue),
# how its finished ones ended (sacct, where the cluster keeps accounting) — then
# flexstruct-status: what the next run of each stage would do.
#
# Usage: cluster/slurm/status.sh INDEX
# Environment: BIN [target/debug] folder of the binaries, CONFIG [none] pipeline configuration.
set -uo pipefail
index=${1:?usage: $0 INDEX}
bin=${BIN:-target/debug}
case "$index" in
  *://*) ;;
  *) index=$(cd "$index" && pwd) ;;
esac
. "$(dirname "$0")/chain.sh"
tag=$(chain_tag "$index")
echo "Slurm jobs of $index (named fs-<stage>@$tag):"
queued=$(squeue -h -o '%j' 2>/dev/null | grep -c "@$tag\$")
if [ "$queued" -gt 0 ]; then
  squeue -o '%.18i %.40j %.9T %.10M %.20R' 2>/dev/null | awk -v tag="@$tag" 'NR == 1 || substr($2, length($2) - length(tag) + 1) == tag'
else
  echo "  none queued or running"
fi
if sacct -n -X -o JobID -S now-1days >/dev/null 2>&1; then
  echo "finished in the last 7 days (sacct):"
  sacct -X -S now-7days -o JobID%18,JobName%40,State%12,ExitCode,Elapsed 2>/dev/null \
    | awk -v tag="@$tag" 'NR <= 2 || substr($2, length($2) - length(tag) + 1) == tag'
else
  echo "  (no accounting on this cluster: sacct cannot say how finished jobs ended; their logs are in the LOGS folder)"
fi
echo
config=()
[ -n "${CONFIG:-}" ] && config=(--config "$CONFIG")
"$bin/flexstruct-status" --index "$index" "${config[@]}"
