#!/usr/bin/env bash
# Runs the VTAB-1k runs of `python -m vit_jax.vtab ARGS...` in parallel on this machine: one
# worker per local GPU (each sees one through CUDA_VISIBLE_DEVICES), or N CPU processes. The
# workers share --workdir and split the runs (--worker=i --num_workers=N); the last one to
# finish writes vtab.json, vtab.md and vtab.png. On several hosts, start the same command on
# each with disjoint --worker ranges of one --num_workers, over a shared --workdir.
#
# Usage: launch/vtab_workers.sh [NUM_WORKERS] -- ARGS...
#   launch/vtab_workers.sh -- --checkpoint=ViT-B_16.npz --workdir=/data/vtab_b16
#   launch/vtab_workers.sh 2 -- --config=vtab:demo --checkpoint=/tmp/vit_quickstart/params.npz \
#       --workdir=/tmp/vtab_demo --tasks=demo --protocol=sweep
# NUM_WORKERS defaults to the number of GPUs nvidia-smi lists (one CPU process if none).
# Environment:
#   PYTHON   interpreter (default python3)
#   LOG_DIR  if set, also writes worker_<i>.log there
# Output lines are prefixed with [w<i>]; exits non-zero if any worker fails (the others
# finish their runs: a failed worker's runs are free again for the next call).
set -euo pipefail

usage() {
  echo "usage: $0 [NUM_WORKERS] -- ARGS... (ARGS go to python -m vit_jax.vtab)" >&2
  exit 2
}

num_workers=""
if [[ $# -ge 1 && "$1" != "--" ]]; then
  num_workers="$1"
  shift
fi
[[ $# -ge 1 && "$1" == "--" ]] || usage
shift
python="${PYTHON:-python3}"

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus="$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l || echo 0)"
fi
if [[ -z "$num_workers" ]]; then
  num_workers=$(( gpus > 0 ? gpus : 1 ))
fi
[[ "$num_workers" =~ ^[1-9][0-9]*$ ]] || {
  echo "$0: NUM_WORKERS must be a positive integer, got '$num_workers'" >&2
  exit 2
}
for arg in "$@"; do
  case "$arg" in
    --worker=*|--num_workers=*)
      echo "$0: pass no $arg: the script gives each worker its index" >&2
      exit 2 ;;
  esac
done
if [[ -n "${LOG_DIR:-}" ]]; then
  mkdir -p "$LOG_DIR"
fi

pids=()
stop_all() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
}
trap 'stop_all; exit 130' INT TERM

for ((i = 0; i < num_workers; i++)); do
  env_args=()
  if (( gpus > 0 )); then
    # Worker i gets GPU i mod the GPUs (several workers per GPU share it).
    env_args=(CUDA_VISIBLE_DEVICES=$(( i % gpus )))
  else
    env_args=(JAX_PLATFORMS=cpu)
  fi
  if [[ -n "${LOG_DIR:-}" ]]; then
    sink=(tee "${LOG_DIR}/worker_${i}.log")
  else
    sink=(cat)
  fi
  (
    env "${env_args[@]}" "$python" -m vit_jax.vtab "$@" --worker="$i" \
        --num_workers="$num_workers" 2>&1 | "${sink[@]}" | sed -u "s/^/[w$i] /"
    exit "${PIPESTATUS[0]}"
  ) &
  pids+=("$!")
done

status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "$0: worker $i failed" >&2
    status=1
  fi
done
exit "$status"
