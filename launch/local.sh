#!/usr/bin/env bash
# Runs NUM_PROCESSES processes of `python -m vit_jax.main ARGS...` on this machine, on CPU,
# joined by jax.distributed over localhost: the multi-host code path without a cluster.
#
# Usage: launch/local.sh NUM_PROCESSES -- ARGS...
#   e.g. launch/local.sh 2 -- --config=configs/quickstart.py --workdir=/tmp/qs2
# Environment:
#   DEVICES_PER_PROCESS  simulated CPU devices in each process (default 2)
#   PYTHON               interpreter (default python3)
#   COORDINATOR_PORT     localhost port of the coordinator (default: a free one)
#   LOG_DIR              if set, also writes process_<i>.log there
# Output lines are prefixed with [p<i>]; exits non-zero (and stops the others) if any fails.
set -euo pipefail

usage() {
  echo "usage: $0 NUM_PROCESSES -- ARGS... (ARGS go to python -m vit_jax.main)" >&2
  exit 2
}

[[ $# -ge 2 && "$2" == "--" ]] || usage
num_processes="$1"
shift 2
[[ "$num_processes" =~ ^[1-9][0-9]*$ ]] || {
  echo "$0: NUM_PROCESSES must be a positive integer, got '$num_processes'" >&2
  exit 2
}
devices="${DEVICES_PER_PROCESS:-2}"
[[ "$devices" =~ ^[1-9][0-9]*$ ]] || {
  echo "$0: DEVICES_PER_PROCESS must be a positive integer, got '$devices'" >&2
  exit 2
}
python="${PYTHON:-python3}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ -z "${COORDINATOR_PORT:-}" ]]; then
  # Ask the kernel for a free port; a fixed one would collide with a concurrent run.
  COORDINATOR_PORT="$("$python" -c 'import socket; s = socket.socket(); s.bind(("localhost", 0)); print(s.getsockname()[1])')"
fi
if [[ -n "${LOG_DIR:-}" ]]; then
  mkdir -p "$LOG_DIR"
fi

# Drop any inherited device count so each process gets exactly $devices.
xla_flags="$(echo "${XLA_FLAGS:-}" | sed -E 's/--xla_force_host_platform_device_count=[0-9]+//g')"
xla_flags="${xla_flags} --xla_force_host_platform_device_count=${devices}"

pids=()
declare -A process_of_pid
stop_all() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
}
trap 'stop_all; exit 130' INT TERM

for ((i = 0; i < num_processes; i++)); do
  if [[ -n "${LOG_DIR:-}" ]]; then
    sink=(tee "${LOG_DIR}/process_${i}.log")
  else
    sink=(cat)
  fi
  JAX_PLATFORMS=cpu \
  XLA_FLAGS="$xla_flags" \
  PYTHONPATH="${repo_root}${PYTHONPATH:+:$PYTHONPATH}" \
  VIT_JAX_COORDINATOR="localhost:${COORDINATOR_PORT}" \
  VIT_JAX_NUM_PROCESSES="$num_processes" \
  VIT_JAX_PROCESS_ID="$i" \
    "$python" -m vit_jax.main "$@" \
    > >("${sink[@]}" | sed -u "s/^/[p${i}] /") 2>&1 &
  pids+=("$!")
  process_of_pid[$!]=$i
done

# Poll rather than `wait -n`: the first failure must stop the rest, which would
# otherwise block in a collective until jax's heartbeat timeout.
status=0
remaining=("${pids[@]}")
while ((${#remaining[@]})); do
  still=()
  for idx in "${!remaining[@]}"; do
    pid="${remaining[$idx]}"
    if kill -0 "$pid" 2>/dev/null; then
      still+=("$pid")
      continue
    fi
    rc=0
    wait "$pid" || rc=$?
    if ((rc != 0 && status == 0)); then
      status=$rc
      echo "$0: process ${process_of_pid[$pid]} (pid $pid) exited with status $rc; stopping the others" >&2
      stop_all
    fi
  done
  remaining=("${still[@]+"${still[@]}"}")
  if ((${#remaining[@]})); then
    sleep 1
  fi
done
# Let the log filters flush before returning.
wait
exit "$status"
