#!/usr/bin/env bash
# A one-node Slurm on this machine, for `make slurm-test` and `make bench-slurm`. Sourced; then
# `start_local_slurm` installs slurm-wlm and munge from Debian when missing (as root), writes a
# slurm.conf for this host into $work (a temporary folder the caller made), starts munged (unless
# one runs), slurmctld and slurmd, remembers their pids and exports SLURM_CONF; `stop_local_slurm`
# stops what it started and removes $work.
start_local_slurm() {

  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    if [ "$(id -u)" != 0 ]; then echo "slurm: slurm-wlm and munge are missing and this is not root" >&2; exit 1; fi
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
  fi
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
}

stop_local_slurm() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  sleep 1
  rm -rf "$work"
}
