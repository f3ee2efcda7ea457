#!/usr/bin/env bash
# The Slurm test of `make test`: on a one-node Slurm that this script sets up and tears down,
# `make slurm-index SHARDS=4` must build the sample corpus into the same kb as `make index`.
# Installs slurm-wlm and munge from Debian when missing (as root), writes a slurm.conf for this
# host into a temporary folder, starts munged (unless one runs), slurmctld and slurmd, submits,
# waits for the jobs, compares every kb table, and stops the daemons it started (by pid).
set -euo pipefail
bin=${BIN:-target/debug}
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if [ "$(id -u)" != 0 ]; then echo "slurm-test: slurm-wlm and munge are missing and this is not root" >&2; exit 1; fi
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  sleep 1
  rm -rf "$work"
}
trap cleanup EXIT
host=$(hostname -s)
mkdir -p "$work/state" "$work/spool"
cat > "$work/slurm.conf" <<CONF
ClusterName=flexstruct-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$(nproc) RealMemory=$(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$work/slurm.conf"
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
  munged --force --pid-file="$work/munged.pid" 2>/dev/null || munged --force
  for _ in $(seq 50); do [ -s "$work/munged.pid" ] && break; sleep 0.1; done
  [ -s "$work/munged.pid" ] && pids+=("$(cat "$work/munged.pid")")
fi
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do [ -s "$work/slurmctld.pid" ] && [ -s "$work/slurmd.pid" ] && break; sleep 0.1; done
pids+=("$(cat "$work/slurmctld.pid")" "$(cat "$work/slurmd.pid")")
for _ in $(seq 100); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.2; done

export FLEXSTRUCT_EMBED__MODEL=hashing-64
echo "slurm-test: single-process build"
make --no-print-directory index CORPUS=data/sample/corpus INDEX="$work/single" >/dev/null 2>&1
echo "slurm-test: make slurm-index SHARDS=4"
make --no-print-directory slurm-index CORPUS=data/sample/corpus INDEX="$work/slurm" SHARDS=4 CPUS=1 MEM=500M | tee "$work/jobs.txt"
merge=$(awk '$1 == "merge" { print $2 }' "$work/jobs.txt")
for _ in $(seq 600); do
  [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
  sleep 0.5
done
state=$(scontrol show job "$merge" 2>/dev/null | grep -o 'JobState=[A-Z]*' || true)
if [ "$state" != "JobState=COMPLETED" ]; then
  echo "slurm-test: the merge job ended as $state" >&2
  tail -n 20 "$work"/slurm/.slurm-logs/*.log "$work/slurmctld.log" >&2 || true
  exit 1
fi
for table in entities hyperedges edges chunks hyperedge_entities clusters cluster_members aliases doc_stats thresholds; do
  q="SELECT * FROM kb.$table"
  if ! diff <("$bin/flexstruct-sql" --index "$work/single" --format csv "$q" | sort) <("$bin/flexstruct-sql" --index "$work/slurm" --format csv "$q" | sort) >/dev/null; then
    echo "slurm-test: kb.$table differs between make index and make slurm-index" >&2
    exit 1
  fi
done
echo "slurm-test: the kb built by 4 Slurm array tasks per stage equals the single-process one"
