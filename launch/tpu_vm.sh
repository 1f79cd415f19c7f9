#!/usr/bin/env bash
# Runs vit_jax on a Cloud TPU VM or a multi-host pod slice: one `python -m vit_jax.main`
# per TPU worker, joined by jax.distributed (configured automatically on TPU VMs).
#
# Usage: launch/tpu_vm.sh COMMAND [-- MAIN_ARGS...]
#   create        create the TPU VM / pod slice
#   setup         copy this checkout to every worker and pip install it with jax[tpu]
#   run -- ARGS   run `python3 -m vit_jax.main ARGS` on all workers, wait for all;
#                 each worker tees its output to ~/vit_jax_run.log
#   logs          copy every worker's ~/vit_jax_run.log to $LOG_DIR/worker_<i>.log
#   ssh           open a shell on worker 0
#   delete        delete the TPU VM / pod slice
#   all -- ARGS   create, setup, run, logs; then delete if DELETE_AFTER=1
#
# Environment (TPU_NAME and ZONE required):
#   TPU_NAME, ZONE, PROJECT (default: gcloud's configured project)
#   ACCELERATOR_TYPE  default v4-8 (single host); e.g. v4-32, v5p-64, v5litepod-16, v6e-16
#   RUNTIME_VERSION   default tpu-ubuntu2204-base (v4); v2-alpha-tpuv5 (v5p),
#                     v2-alpha-tpuv5-lite (v5e), v2-alpha-tpuv6e (v6e)
#   SPOT=1            create a Spot TPU
#   REMOTE_DIR        checkout location on the workers (default vit_jax, under $HOME)
#   LOG_DIR           local log directory (default tpu_logs/$TPU_NAME)
#   DELETE_AFTER=1    with `all`: delete the TPU when the run ends (also on failure)
#
# Multi-host runs need a --workdir every worker can write to, e.g. gs://BUCKET/DIR:
# orbax writes each host's checkpoint shards there and process 0 writes the metrics.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
command="$1"
shift
main_args=()
if [[ $# -gt 0 ]]; then
  [[ "$1" == "--" ]] || usage
  shift
  main_args=("$@")
fi

: "${TPU_NAME:?set TPU_NAME to the name of the TPU VM}"
: "${ZONE:?set ZONE, e.g. us-central2-b}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-8}"
RUNTIME_VERSION="${RUNTIME_VERSION:-tpu-ubuntu2204-base}"
REMOTE_DIR="${REMOTE_DIR:-vit_jax}"
LOG_DIR="${LOG_DIR:-tpu_logs/${TPU_NAME}}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

gcloud_tpu=(gcloud compute tpus tpu-vm)
where=(--zone="$ZONE")
if [[ -n "${PROJECT:-}" ]]; then
  where+=(--project="$PROJECT")
fi

on_workers() {  # on_workers WORKER COMMAND: run a shell command on one worker or 'all'
  "${gcloud_tpu[@]}" ssh "$TPU_NAME" "${where[@]}" --worker="$1" --command="$2"
}

num_workers() {
  "${gcloud_tpu[@]}" describe "$TPU_NAME" "${where[@]}" \
    --format='value(networkEndpoints[].ipAddress)' | tr ';' '\n' | grep -c .
}

create() {
  local extra=()
  if [[ "${SPOT:-0}" == 1 ]]; then
    extra+=(--spot)
  fi
  "${gcloud_tpu[@]}" create "$TPU_NAME" "${where[@]}" \
    --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" "${extra[@]}"
}

setup() {
  local archive
  archive="$(mktemp -t vit_jax.XXXXXX.tar.gz)"
  # The working tree as it is (uncommitted edits included), without VCS data or run outputs.
  tar -czf "$archive" -C "$repo_root" --exclude-vcs --exclude=./workdirs \
    --exclude=./tpu_logs --exclude='*.egg-info' --exclude=__pycache__ .
  "${gcloud_tpu[@]}" scp "$archive" "$TPU_NAME:vit_jax.tar.gz" "${where[@]}" --worker=all
  rm -f "$archive"
  on_workers all "set -e; rm -rf ~/${REMOTE_DIR}; mkdir -p ~/${REMOTE_DIR}; \
tar -xzf ~/vit_jax.tar.gz -C ~/${REMOTE_DIR}; \
python3 -m pip install -q -U pip; \
python3 -m pip install -q -e ~/${REMOTE_DIR}'[tpu]'; \
python3 -c 'import jax; print(jax.process_index(), jax.local_device_count(), jax.devices()[0].device_kind)'"
}

run() {
  [[ ${#main_args[@]} -gt 0 ]] || {
    echo "$0 run: give the vit_jax.main arguments after --, e.g." \
      "run -- --config=configs/quickstart.py --workdir=gs://BUCKET/quickstart" >&2
    exit 2
  }
  local quoted
  quoted="$(printf '%q ' "${main_args[@]}")"
  on_workers all "set -o pipefail; cd ~/${REMOTE_DIR} && \
python3 -m vit_jax.main ${quoted} 2>&1 | tee ~/vit_jax_run.log"
}

logs() {
  local n i
  n="$(num_workers)"
  mkdir -p "$LOG_DIR"
  for ((i = 0; i < n; i++)); do
    "${gcloud_tpu[@]}" scp "$TPU_NAME:vit_jax_run.log" "$LOG_DIR/worker_${i}.log" \
      "${where[@]}" --worker="$i" || echo "$0: no log on worker $i" >&2
  done
  echo "logs of $n workers in $LOG_DIR"
}

delete() {
  "${gcloud_tpu[@]}" delete "$TPU_NAME" "${where[@]}" --quiet
}

case "$command" in
  create) create ;;
  setup) setup ;;
  run) run ;;
  logs) logs ;;
  ssh) "${gcloud_tpu[@]}" ssh "$TPU_NAME" "${where[@]}" --worker=0 ;;
  delete) delete ;;
  all)
    if [[ "${DELETE_AFTER:-0}" == 1 ]]; then
      # Idle TPUs cost money: delete even when a step fails.
      trap 'logs || true; delete' EXIT
    fi
    create
    setup
    run
    if [[ "${DELETE_AFTER:-0}" != 1 ]]; then
      logs
    fi
    ;;
  *) usage ;;
esac
