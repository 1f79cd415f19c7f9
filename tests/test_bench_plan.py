"""Tests for tools/dev/bench_plan.py, the runner of a GPU lease's benchmark rows."""
import contextlib
import gzip
import io
import json
import os
import shlex
import subprocess
import sys
from unittest import mock

from absl.testing import absltest

from tests import tool_modules
from vit_jax.perf import benchmark
from vit_jax.perf import profiling

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool():
  return tool_modules.load('bench_plan')


class BenchPlanTest(absltest.TestCase):

  def test_plan_lines_and_their_errors(self):
    tool = _tool()
    rows = tool.parse_plan('# a comment\n\nbase | | --batch=8  # why\n'
                           'lever:x | --xla_a=1 --xla_b=2 | --batch=8 --clip=0\n')
    self.assertEqual(rows, [
        {'name': 'base', 'xla': '', 'flags': ['--batch=8']},
        {'name': 'lever:x', 'xla': '--xla_a=1 --xla_b=2',
         'flags': ['--batch=8', '--clip=0']}])
    with self.assertRaisesRegex(ValueError, 'plan line 2:.*NAME \\| XLA_FLAGS \\| FLAGS'):
      tool.parse_plan('a | | --x\nb | --y\n')
    with self.assertRaisesRegex(ValueError, 'unique'):
      tool.parse_plan('a | | --x\na | | --y\n')

  def test_shipped_plans_are_benchmark_command_lines(self):
    tool = _tool()
    names = sorted(os.listdir(os.path.join(REPO, 'tools', 'dev', 'plans')))
    self.assertIn('h100_levers.txt', names)
    for name in names:
      with open(os.path.join(REPO, 'tools', 'dev', 'plans', name)) as f:
        rows = tool.parse_plan(f.read())
      self.assertIn('base', [r['name'] for r in rows])
      for row in rows:  # an unknown or malformed flag raises here
        benchmark.parse_args(row['flags'])

  def test_best_row_takes_the_levers_that_pay(self):
    tool = _tool()
    done = [{'name': 'base', 'img_s': 100.0},
            {'name': 'lever:a', 'xla': '--a', 'img_s': 103.0},
            {'name': 'lever:b', 'xla': '--b', 'img_s': 101.0},
            {'name': 'lever:c', 'xla': '--c', 'error': 'exit 1'},
            {'name': 'other', 'xla': '--d', 'img_s': 150.0}]
    self.assertEqual(tool.winning_flags(done, 0.02), '--a')
    self.assertEqual(tool.winning_flags(done, 0.0), '--a --b')
    self.assertEqual(tool.winning_flags(done[1:], 0.0), '')
    table = tool.table(done)
    self.assertRegex(table, r'lever:a\s+103\.0\s+1\.030')
    self.assertIn('exit 1', table)

  def test_rows_run_and_the_budget_skips_the_rest(self):
    tool = _tool()
    tmp = self.create_tempdir().full_path
    plan, out = os.path.join(tmp, 'plan.txt'), os.path.join(tmp, 'rows.jsonl')
    with open(plan, 'w') as f:
      f.write('base | | --model=testing --batch=8 --devices=1 --resolution=32 '
              '--dtype=float32\n'
              'best | @best | --model=testing --batch=4\n')
    printed = io.StringIO()
    cache = os.path.join(tmp, 'cache')
    cwd = os.getcwd()
    os.chdir(REPO)  # the rows run `python -m vit_jax.perf.benchmark`
    try:
      with contextlib.redirect_stdout(printed), mock.patch.dict(
          os.environ, {'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0'}):
        os.environ.pop('JAX_COMPILATION_CACHE_DIR', None)  # the suite's own cache
        code = tool.main([f'--plan={plan}', f'--out={out}', '--budget_s=1',
                          f'--compilation_cache={cache}',
                          '--common=' + shlex.join(['--steps=1', '--repeats=1',
                                                    '--warmup=0', '--peak=1'])])
    finally:
      os.chdir(cwd)
    self.assertNotEmpty(os.listdir(cache))  # what later rows would load
    self.assertEqual(code, 0)
    with open(out) as f:
      rows = [json.loads(line) for line in f]
    self.assertEqual([r['name'] for r in rows], ['base'])
    self.assertNotIn('error', rows[0], printed.getvalue()[-2000:])
    self.assertEqual((rows[0]['batch'], rows[0]['model']), (8, 'testing'))
    self.assertGreater(rows[0]['img_s'], 0)
    self.assertRegex(printed.getvalue(), r'best\s.*skipped: budget spent')
    self.assertEqual(tool.main([f'--plan={plan}.missing', f'--out={out}']), 2)


class GpuLeaseScriptTest(absltest.TestCase):

  def test_plan_and_profile_files_land_in_out(self):
    tmp = self.create_tempdir().full_path
    plan, out, prof = (os.path.join(tmp, n) for n in ('plan.txt', 'out', 'tinyprof'))
    with open(plan, 'w') as f:
      f.write(f'base | | --model=testing --batch=8 --devices=1 --resolution=32 '
              f'--dtype=float32 --profile_dir={prof} --profile_steps=1\n')
    env = dict(os.environ, OUT=out, CURVE_TIMEOUT_S='0', PLAN_BUDGET_S='60',
               COMMON='--steps=1 --repeats=1 --warmup=0 --peak=1',
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ['PATH'])
    proc = subprocess.run(['bash', os.path.join(REPO, 'tools', 'dev', 'gpu_lease.sh'), plan],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    with open(os.path.join(out, 'rows.jsonl')) as f:
      row, = [json.loads(line) for line in f]
    self.assertGreater(row['img_s'], 0, row)
    self.assertTrue(os.path.exists(os.path.join(out, 'versions.txt')))
    with gzip.open(os.path.join(out, 'tinyprof.step_hlo.txt.gz'), 'rt') as f:
      again = profiling.summarize(os.path.join(out, 'tinyprof.trace.json.gz'), 1,
                                  hlo_text=f.read())
    self.assertGreater(again['total_ms'], 0)


if __name__ == '__main__':
  absltest.main()
