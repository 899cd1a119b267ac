#!/usr/bin/env bash
# Stop exactly the daemons launchers/local-slurm/up.sh started, by the PIDs it recorded (slurmd,
# slurmctld, then munged). Safe to call twice, or when nothing is running. The state dir is kept
# (logs for debugging); pass --purge to remove it.
set -uo pipefail

DIR="${LOCAL_SLURM_DIR:-/tmp/local-slurm}"

stop() { # stop NAME: TERM the pid in $DIR/run/NAME.pid, wait up to 10 s, then KILL
  local name=$1 file="$DIR/run/$1.pid" pid
  [[ -s "$file" ]] || return 0
  pid=$(cat "$file")
  # Only signal the pid if it is still the daemon we started (pids are reused).
  if kill -0 "$pid" 2>/dev/null && grep -q "$name" "/proc/$pid/comm" 2>/dev/null; then
    echo "[local-slurm] stopping $name ($pid)" >&2
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$file"
}

# Cancel this cluster's jobs first so no job step outlives its slurmd.
if [[ -s "$DIR/slurm.conf" ]] && [[ -s "$DIR/run/slurmctld.pid" ]] &&
  kill -0 "$(cat "$DIR/run/slurmctld.pid")" 2>/dev/null; then
  jobs=$(SLURM_CONF="$DIR/slurm.conf" timeout 10 squeue -h -o %A 2>/dev/null | tr '\n' ' ')
  if [[ -n "${jobs// /}" ]]; then
    echo "[local-slurm] cancelling jobs $jobs" >&2
    # shellcheck disable=SC2086
    SLURM_CONF="$DIR/slurm.conf" timeout 10 scancel $jobs 2>/dev/null
    for _ in $(seq 50); do
      [[ -z "$(SLURM_CONF="$DIR/slurm.conf" timeout 5 squeue -h -t R,CG -o %A 2>/dev/null)" ]] && break
      sleep 0.2
    done
  fi
fi
stop slurmd
stop slurmctld
stop munged
if [[ "${1:-}" == "--purge" ]]; then
  rm -rf "$DIR"
fi
exit 0
