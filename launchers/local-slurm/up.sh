#!/usr/bin/env bash
# Bring up a single-node SLURM cluster on 127.0.0.1, without any init system, for tests and
# laptops. Idempotent: a second call with the daemons alive only waits for the node to be idle.
#
#   eval "$(launchers/local-slurm/up.sh)"   # exports SLURM_CONF and puts bin/sacct on PATH
#   srun hostname; sbatch --wrap 'echo hi'
#   launchers/local-slurm/down.sh
#
# Environment: LOCAL_SLURM_DIR (state dir, default /tmp/local-slurm), LOCAL_SLURM_PARTITION
# (default "debug"), LOCAL_SLURM_TIMEOUT (seconds to wait for the node, default 60).
# Needs root (apt-get, munge user) on Debian/Ubuntu: Debian 12 ships slurm 22.05.
# Exit codes: 0 ready, 1 node never became idle, 2 packages missing and not root, 3 apt-get failed.
set -euo pipefail

DIR="${LOCAL_SLURM_DIR:-/tmp/local-slurm}"
PARTITION="${LOCAL_SLURM_PARTITION:-debug}"
TIMEOUT="${LOCAL_SLURM_TIMEOUT:-60}"
CONF="$DIR/slurm.conf"

log() { echo "[local-slurm] $*" >&2; }

alive() { # alive PIDFILE: the pid in PIDFILE is a live process
  [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

# 1. Packages, only when missing (the apt index is refreshed only if an install is needed).
need=()
for pair in slurmctld:slurmctld slurmd:slurmd sinfo:slurm-client munged:munge; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing packages: ${need[*]}; run as root or: sudo apt-get install ${need[*]}"
    exit 2
  fi
  log "installing ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq >/dev/null &&
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null; }; then
    log "apt-get could not install ${need[*]} (no package mirror reachable?)"
    exit 3
  fi
fi

mkdir -p "$DIR"/{state,spool,log,run}
chmod 755 "$DIR"

# 2. munge: reuse a working munged (a login node's own), else a key if missing and our munged
#    on the default socket, as the munge user, with its PID recorded for down.sh.
if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  alive "$DIR/run/munged.pid" || log "using the munged already running"
else
  if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile=/etc/munge/munge.key --force
    else
      dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    fi
  fi
  mkdir -p /var/lib/munge /var/log/munge /run/munge
  chown munge:munge /etc/munge/munge.key /var/lib/munge /var/log/munge /run/munge "$DIR/run"
  chmod 400 /etc/munge/munge.key
  chmod 700 /var/lib/munge /var/log/munge
  chmod 755 /run/munge "$DIR/run"
  touch "$DIR/log/munged.log"
  chown munge:munge "$DIR/log/munged.log"
  log "starting munged"
  su -s /bin/sh munge -c "munged --force --pid-file='$DIR/run/munged.pid' \
    --log-file='$DIR/log/munged.log'"
  for _ in $(seq 50); do
    munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
fi

# 3. slurm.conf, rewritten each time (cheap, and picks up a changed core count or memory).
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
cat >"$CONF.tmp" <<CONF
# Written by launchers/local-slurm/up.sh: a single-node cluster on 127.0.0.1.
ClusterName=local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=3600
Waittime=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
mv "$CONF.tmp" "$CONF"
export SLURM_CONF="$CONF"

# 4. Daemons. slurmd is named localhost (-N): this machine's hostname differs.
if ! alive "$DIR/run/slurmctld.pid"; then
  log "starting slurmctld"
  slurmctld -f "$CONF"
fi
if ! alive "$DIR/run/slurmd.pid"; then
  log "starting slurmd"
  slurmd -f "$CONF" -N localhost
fi

# 5. Wait for the node to be idle.
start=$SECONDS
state=""
while ((SECONDS - start < TIMEOUT)); do
  state=$(sinfo -h -n localhost -o %t 2>/dev/null | head -n1 || true)
  case "$state" in
  idle | mix | alloc) break ;;
  down* | drain* | inval*) scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 0.5
done
if [[ ! "$state" =~ ^(idle|mix|alloc) ]]; then
  log "node not idle after ${TIMEOUT}s (state '${state}'); logs in $DIR/log"
  tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
  exit 1
fi
log "ready in $((SECONDS - start))s: node localhost $state, partition $PARTITION"
# For the caller: eval "$(launchers/local-slurm/up.sh)". bin/ holds the sacct stand-in that
# submitit needs on a cluster without an accounting database.
echo "export SLURM_CONF=$CONF"
echo "export PATH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bin:\$PATH"
