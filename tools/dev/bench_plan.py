r"""Runs a plan of benchmark rows (one process each) within a time budget, for one GPU lease.

  python tools/dev/bench_plan.py --plan=tools/dev/plans/h100_levers.txt --out=$OUT/rows.jsonl \
      --budget_s=500 --common='--steps=10 --repeats=3 --warmup=2 --peak=788'

A plan line is `NAME | XLA_FLAGS | benchmark flags` (`#` starts a comment). Each row runs
`python -m vit_jax.perf.benchmark` in its own process (XLA reads its flags once per
process, and the peak-memory reading is per process), with the row's XLA flags added to
the environment's. A row whose XLA field is `@best` gets the flags of every earlier row
named `lever:...` that beat the row named `base` by more than --keep (the levers that
pay, together). Rows not started within --budget_s are skipped; every finished row is
appended to --out as one JSON line at once, so a lease cut short keeps what it measured.
The last lines printed are a table of every row.

The rows share a JAX compilation cache (--compilation_cache; a fresh directory by
default, `off` for none; JAX_COMPILATION_CACHE_DIR in the environment wins): what an earlier row compiled (the state initialisation, the
same step) loads instead of compiling again, which saves device time; such a row's
compile_s is then the loading time.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Optional


def parse_plan(text: str) -> list[dict]:
  """Plan lines -> [{'name', 'xla', 'flags'}]; ValueError naming a malformed line."""
  rows = []
  for number, line in enumerate(text.splitlines(), 1):
    line = line.split('#', 1)[0].strip()
    if not line:
      continue
    parts = [p.strip() for p in line.split('|')]
    if len(parts) != 3 or not parts[0]:
      raise ValueError(f'plan line {number}: {line!r} is not NAME | XLA_FLAGS | FLAGS.')
    rows.append({'name': parts[0], 'xla': parts[1], 'flags': shlex.split(parts[2])})
  names = [r['name'] for r in rows]
  if len(set(names)) != len(names):
    raise ValueError('plan: row names must be unique.')
  return rows


def winning_flags(done: list[dict], keep: float) -> str:
  """XLA flags of the `lever:` rows that beat `base` by more than `keep` (a fraction)."""
  base = next((r for r in done if r['name'] == 'base' and 'img_s' in r), None)
  if base is None:
    return ''
  return ' '.join(r['xla'] for r in done
                  if r['name'].startswith('lever:') and r['xla'] and 'img_s' in r
                  and r['img_s'] > base['img_s'] * (1 + keep))


def run_row(row: dict, xla: str, common: list[str], timeout: float,
            cache: str = '') -> dict:
  """One benchmark process: its JSON fields, or the reason it gave none."""
  env = dict(os.environ)
  env['XLA_FLAGS'] = ' '.join(f for f in (env.get('XLA_FLAGS', ''), xla) if f)
  if cache:
    env.setdefault('JAX_COMPILATION_CACHE_DIR', cache)
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, 'row.json')
    cmd = [sys.executable, '-m', 'vit_jax.perf.benchmark'] + common + row['flags'] + [
        f'--json={path}']
    t = time.perf_counter()
    try:
      proc = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
      tail, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
      parts = [x.decode(errors='replace') if isinstance(x, bytes) else x or ''
               for x in (e.stdout, e.stderr)]  # bytes even with text=True
      tail, code = ''.join(parts), 'timeout'
    out = {'name': row['name'], 'xla': xla, 'flags': ' '.join(row['flags']),
           'wall_s': round(time.perf_counter() - t, 1)}
    if os.path.exists(path):
      with open(path) as f:
        out.update(json.load(f))
    else:
      last = tail.strip().splitlines()[-1:] or ['']
      out['error'] = f'exit {code}: {last[0]}'
    print(tail, flush=True)
  return out


def _cell(value: Optional[float], fmt: str) -> str:
  return format(value, fmt) if isinstance(value, (int, float)) else '-'


def table(rows: list[dict]) -> str:
  """A plain-text table of the finished rows (img/s, MFU, ratios)."""
  base = next((r for r in rows if r['name'] == 'base' and 'img_s' in r), None)
  lines = [f'{"row":24s} {"img/s":>8s} {"vs base":>7s} {"mfu":>6s} {"ms":>7s} '
           f'{"mem GiB":>7s} {"comp s":>6s} {"timm":>8s} {"ratio":>5s}  xla / error']
  for r in rows:
    rel = r['img_s'] / base['img_s'] if base and 'img_s' in r else None
    timm = r.get('timm', {}).get('img_s') if isinstance(r.get('timm'), dict) else None
    lines.append(
        f'{r["name"]:24s} {_cell(r.get("img_s"), "8.1f")} {_cell(rel, "7.3f")} '
        f'{_cell(r.get("mfu"), "6.3f")} {_cell(r.get("step_ms"), "7.2f")} '
        f'{_cell(r.get("peak_mem_gib"), "7.1f")} {_cell(r.get("compile_s"), "6.1f")} '
        f'{_cell(timm, "8.1f")} {_cell(r.get("ratio_vs_timm"), "5.2f")}  '
        f'{r.get("error") or r.get("xla") or ""}')
  return '\n'.join(lines)


def main(argv: Optional[list[str]] = None) -> int:
  """Runs the plan; 2 for a malformed plan, else 0."""
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--plan', required=True, help='The plan file.')
  p.add_argument('--out', required=True, help='JSON lines, one per finished row.')
  p.add_argument('--budget_s', type=float, default=500, help='Start no row after this.')
  p.add_argument('--row_timeout_s', type=float, default=240, help='Per-row limit.')
  p.add_argument('--keep', type=float, default=0.02,
                 help='A lever pays when it beats base by more than this fraction.')
  p.add_argument('--common', default='', help='Flags given to every row.')
  p.add_argument('--compilation_cache', default='',
                 help='JAX compilation cache the rows share (default: a fresh directory, '
                 'removed at the end; off: none).')
  args = p.parse_args(argv)
  try:
    with open(args.plan) as f:
      rows = parse_plan(f.read())
  except (OSError, ValueError) as e:
    print(f'bench_plan: error: {e}', file=sys.stderr)
    return 2
  cache = args.compilation_cache
  if not cache:
    cache = tempfile.mkdtemp(prefix='bench_plan_cache_')
  try:
    done = _run_rows(rows, args, '' if cache == 'off' else cache)
  finally:
    if not args.compilation_cache:
      shutil.rmtree(cache, ignore_errors=True)
  print(table(done), flush=True)
  return 0


def _run_rows(rows: list[dict], args: argparse.Namespace, cache: str) -> list[dict]:
  """Runs the rows in order within the budget; the finished and skipped rows."""
  start, done = time.perf_counter(), []
  for row in rows:
    elapsed = time.perf_counter() - start
    if elapsed > args.budget_s:
      done.append({'name': row['name'], 'error': f'skipped: budget spent ({elapsed:.0f} s)'})
      continue
    xla = winning_flags(done, args.keep) if row['xla'] == '@best' else row['xla']
    timeout = min(args.row_timeout_s, args.budget_s + 60 - elapsed)
    print(f'bench_plan: row {row["name"]} at {elapsed:.0f} s (XLA_FLAGS+={xla!r})',
          flush=True)
    result = run_row(row, xla, shlex.split(args.common), timeout, cache)
    done.append(result)
    with open(args.out, 'a') as f:
      f.write(json.dumps(result) + '\n')
  return done


if __name__ == '__main__':
  sys.exit(main())
