"""Tests for `python -m vit_jax.perf.benchmark` on CPU with a tiny model."""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp

from vit_jax.perf import benchmark
from vit_jax.models import flops
from vit_jax import models

TINY = ['--model=testing', '--batch=8', '--resolution=32', '--steps=2',
        '--warmup=1', '--repeats=2', '--dtype=float32', '--num_classes=10']
FIELDS = ('model', 'mode', 'batch', 'resolution', 'dtype', 'devices',
          'device_kind', 'jax', 'attention', 'compile_s', 'compiled_mem_gib',
          'xla_gflops_per_image', 'step_ms', 'step_ms_spread', 'img_s',
          'img_s_per_device', 'peak_mem_gib', 'gflops_per_image',
          'tflops_per_device', 'peak_tflops', 'peak_source', 'mfu',
          'mfu_datasheet', 'donated_gib')


def _run(argv):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      res = benchmark.main(argv)
      code = 0
    except SystemExit as e:
      res, code = None, e.code
  return res, out.getvalue(), err.getvalue(), code


class BenchmarkTest(absltest.TestCase):

  def test_train_prints_every_field(self):
    with tempfile.TemporaryDirectory() as d:
      path = os.path.join(d, 'r.json')
      res, out, _, code = _run(TINY + ['--mode=train', '--devices=2',
                                       f'--json={path}'])
      self.assertEqual(code, 0)
      with open(path) as f:
        self.assertEqual(json.load(f)['img_s'], res['img_s'])
    printed = {line.split()[0] for line in out.splitlines()}
    for field in FIELDS + ('optimizer',):
      self.assertIn(field, printed)
    self.assertEqual(res['devices'], 2)
    self.assertGreater(res['img_s'], 0)
    self.assertAlmostEqual(res['img_s'], 8 / (res['step_ms'] / 1e3), places=3)
    self.assertGreater(res['compiled_mem_gib'], 0)
    # MFU is the achieved analytic FLOP rate over the peak it names.
    expected = flops.model_flops_per_image('testing', 32, train=True,
                                           num_classes=10)
    self.assertAlmostEqual(res['gflops_per_image'], expected / 1e9)
    self.assertAlmostEqual(
        res['mfu'], res['img_s_per_device'] * expected / (
            res['peak_tflops'] * 1e12), places=6)
    self.assertIn('measured 512^3 float32 matmul', res['peak_source'])
    # XLA's own count of the whole step is close to 3x forward, plus the
    # optimizer and elementwise work the analytic count leaves out.
    self.assertGreater(res['xla_gflops_per_image'], res['gflops_per_image'])
    self.assertLess(res['xla_gflops_per_image'], 2 * res['gflops_per_image'])

  def test_infer_with_given_peak_and_timm_comparison(self):
    res, out, _, code = _run(TINY + ['--mode=infer', '--devices=1',
                                     '--peak=1.5', '--compare=timm',
                                     '--input=host'])
    self.assertEqual(code, 0)
    self.assertEqual(res['peak_tflops'], 1.5)
    self.assertIn('given 1.5 TFLOP/s', out)
    self.assertAlmostEqual(
        res['gflops_per_image'],
        flops.model_flops_per_image('testing', 32, train=False,
                                    num_classes=10) / 1e9)
    # CPU only: timm reports why it did not run instead of a number.
    self.assertIn('timm', res)
    self.assertRegex(out, r'timm\s+skipped: ')
    self.assertNotIn('ratio_vs_timm', res)

  def test_state_is_donated_to_the_step(self):
    model = models.get_model('testing', num_classes=10)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                            jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32))
    param_bytes = sum(x.size * x.dtype.itemsize
                      for x in jax.tree.leaves(params))
    res, _, _, code = _run(TINY + ['--devices=1', '--optimizer=adam'])
    self.assertEqual(code, 0)
    # Parameters and both Adam moments are updated in place.
    self.assertGreaterEqual(res['donated_gib'] * 2**30, 3 * param_bytes)
    res, _, _, code = _run(TINY + ['--devices=1', '--nodonate'])
    self.assertEqual(code, 0)
    self.assertEqual(res['donated_gib'], 0.0)

  def test_user_errors_are_one_line(self):
    cases = [
        (['--model=ViT-B16'], "Unknown model 'ViT-B16'"),
        (['--devices=8', '--batch=12'], 'not divisible by 8 devices'),
        (['--resolution=30'], 'not divisible by'),
        (['--json=/nonexistent/dir/r.json'], 'directory /nonexistent/dir does not exist'),
        (['--peak=0'], 'must be positive'),
        (['--steps=0'], '--steps=0 must be positive'),
    ]
    for extra, message in cases:
      _, _, err, code = _run(TINY + extra)
      self.assertEqual(code, 2, extra)
      self.assertIn(message, err)
      self.assertEqual(len(err.strip().splitlines()), 1, err)

  def test_command_line_entry_point(self):
    proc = subprocess.run(
        [sys.executable, '-m', 'vit_jax.perf.benchmark', '--model=testing',
         '--batch=4', '--resolution=32', '--steps=1', '--warmup=0',
         '--repeats=1', '--dtype=float32', '--devices=1', '--mode=infer'],
        capture_output=True, text=True, check=False,
        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    self.assertEqual(proc.returncode, 0, proc.stderr[-500:])
    self.assertRegex(proc.stdout, r'img_s\s+\d')
    self.assertRegex(proc.stdout, r'mfu\s+\d')
    # --helpfull works (absl flags) and lists the command's flags.
    proc = subprocess.run([sys.executable, '-m', 'vit_jax.perf.benchmark', '--helpfull'],
                          capture_output=True, text=True, check=False)
    self.assertIn('--profile_dir', proc.stdout)
    self.assertNotIn('Traceback', proc.stderr)


if __name__ == '__main__':
  absltest.main()
