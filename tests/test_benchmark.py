"""Tests for `python -m vit_jax.perf.benchmark` on CPU with a tiny model."""
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest
import jax
import jax.numpy as jnp

from tests import commands
from vit_jax.perf import benchmark
from vit_jax.perf import timm_peer
from vit_jax.models import flops
from vit_jax.models import from_config
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
    self.assertIn('best of 256^3, 512^3, 1024^3 float32 matmuls', res['peak_source'])
    self.assertLessEqual(res['mfu'], 1.0)
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
    # Without torch in this Python, timm reports why it did not run instead of a number.
    self.assertIn('timm', res)
    if 'img_s' not in res['timm']:
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

  def test_dino_step_on_multi_crop_views(self):
    res, out, err, code = _run(
        ['--model=testing', '--objective=dino', '--batch=4', '--resolution=32',
         '--local_crops=2', '--local_crop=16', '--steps=1', '--warmup=1', '--repeats=1',
         '--dtype=float32', '--devices=1',
         '--objective_options=out_dim=32,hidden_dim=16,bottleneck_dim=8'])
    self.assertEqual(code, 0, err)
    self.assertEqual(res['views'], '2 x 32px + 2 x 16px')
    self.assertIn('views', {line.split()[0] for line in out.splitlines()})
    args = benchmark.parse_args(['--model=testing', '--objective=dino', '--batch=2',
                                 '--resolution=32', '--local_crops=2', '--local_crop=16'])
    config = benchmark.make_config(args)
    self.assertEqual(benchmark.settle(args, config).views, (2, 2, 16))
    batch = benchmark._batch(benchmark.settle(args, config), 0)
    self.assertEqual(batch['image'].shape, (2, 2, 32, 32, 3))
    self.assertEqual(batch['local'].shape, (2, 2, 16, 16, 3))
    # Every view is counted: more than two global images' worth, less than four.
    one = flops.model_flops_per_image('testing', 32, train=True, num_classes=10)
    self.assertGreater(res['gflops_per_image'] * 1e9, 2 * one)
    self.assertLess(res['gflops_per_image'] * 1e9, 4 * one)
    self.assertLess(res['xla_gflops_per_image'], 1.5 * res['gflops_per_image'])
    _, _, err, code = _run(['--model=testing', '--objective=dino', '--compare=timm'])
    self.assertEqual(code, 2)
    self.assertIn('--compare=timm times a supervised step', err)

  def test_command_line_entry_point(self):
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.perf.benchmark', '--model=testing',
         '--batch=4', '--resolution=32', '--steps=1', '--warmup=0',
         '--repeats=1', '--dtype=float32', '--devices=1', '--mode=infer'],
        # No JAX_PLATFORMS: jax probes every backend, as on a user's machine.
        env={k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'})
    self.assertEqual(proc.returncode, 0, proc.stderr[-500:])
    # Only the benchmark's own progress lines: not jax's INFO line about a missing TPU.
    for line in proc.stderr.splitlines():
      self.assertStartsWith(line, 'vit_jax.perf.benchmark: ')
    self.assertRegex(proc.stdout, r'img_s\s+\d')
    self.assertRegex(proc.stdout, r'mfu\s+\d')
    # --helpfull works (absl flags) and lists the command's flags.
    proc = subprocess.run([sys.executable, '-m', 'vit_jax.perf.benchmark', '--helpfull'],
                          capture_output=True, text=True, check=False)
    self.assertIn('--profile_dir', proc.stdout)
    self.assertNotIn('Traceback', proc.stderr)

# A config file as users write them: imports only vit_jax, sets its own recipe.
_TINY_CONFIG = textwrap.dedent("""\
    from vit_jax import configs

    def get_config():
      c = configs.get_base_config()
      c.model_name = 'testing'
      c.model.patches = {'size': (7, 7)}
      c.model.hidden_size = 16
      c.model.mlp_dim = 32
      c.model.classifier = 'gap'
      c.model.dtype = 'float32'
      c.dataset = 'mnist5k'
      c.pp.crop = 28
      c.batch = 16
      c.optimizer = 'sgd'
      c.grad_clip_norm = 0.5
      return c
    """)


class ConfigBenchmarkTest(absltest.TestCase):

  def test_config_gives_the_step_and_flags_override_it(self):
    path = os.path.join(self.create_tempdir().full_path, 'tiny.py')
    with open(path, 'w') as f:
      f.write(_TINY_CONFIG)
    res, out, err, code = _run([f'--config={path}', '--batch=4', '--steps=1',
                                '--warmup=0', '--repeats=1', '--devices=1'])
    self.assertEqual(code, 0, err)
    # The config's resolution, optimizer and model (width 16, patch 7, gap); the batch flag.
    self.assertEqual((res['batch'], res['resolution'], res['optimizer']), (4, 28, 'sgd'))
    self.assertEqual(res['config'], path)
    args = benchmark.parse_args([f'--config={path}'])
    config = benchmark.make_config(args)
    model = from_config.build(config, 10)
    self.assertEqual(model.hidden_size, 16)
    self.assertAlmostEqual(res['gflops_per_image'] * 1e9,
                           flops.model_flops_per_image(model, 28, train=True))
    self.assertLessEqual(res['mfu'], 1.0)
    self.assertIn('compiled in', err)  # progress lines on stderr
    self.assertIn('window 1/1:', err)
    printed = {line.split()[0] for line in out.splitlines()}
    self.assertIn('config', printed)

  def test_shipped_config_name_and_its_classes(self):
    args = benchmark.parse_args(['--config=quickstart', '--batch=32', '--dtype=float32'])
    config = benchmark.make_config(args)
    settled = benchmark.settle(args, config)
    self.assertEqual(settled.batch, 32)            # named on the command line
    self.assertEqual(settled.dtype, 'float32')
    self.assertEqual(settled.resolution, 28)       # the quickstart's pp.crop
    self.assertEqual(settled.num_classes, 10)      # mnist5k, from the catalog
    self.assertEqual((settled.optimizer, settled.clip), ('adam', 1.0))
    self.assertEqual(config.model.hidden_size, 96)
    self.assertEqual(config.model.classifier, 'gap')
    # Flags not named keep the config's values, not the flags' defaults.
    self.assertNotEqual(settled.resolution, benchmark.parse_args([]).resolution)
    _, _, err, code = _run(['--config=quikstart'])
    self.assertEqual(code, 2)
    self.assertIn("did you mean 'quickstart'", err)
    self.assertEqual(len(err.strip().splitlines()), 1, err)


class TimmPeerTest(absltest.TestCase):

  def test_dimensions_map_to_timm(self):
    gap = models.get_model('testing', num_classes=10, hidden_size=96, mlp_dim=384,
                           patches={'size': (7, 7)}, classifier='gap',
                           transformer={'num_layers': 6, 'num_heads': 4, 'mlp_dim': 384,
                                        'dropout_rate': 0.0,
                                        'attention_dropout_rate': 0.0})
    kw = timm_peer.timm_kwargs(gap, 28)
    self.assertEqual(
        {k: kw[k] for k in ('img_size', 'patch_size', 'embed_dim', 'depth', 'num_heads',
                            'num_classes', 'class_token', 'global_pool', 'fc_norm')},
        {'img_size': 28, 'patch_size': 7, 'embed_dim': 96, 'depth': 6, 'num_heads': 4,
         'num_classes': 10, 'class_token': False, 'global_pool': 'avg', 'fc_norm': False})
    self.assertEqual(int(kw['embed_dim'] * kw['mlp_ratio']), 384)  # timm's MLP width
    self.assertEqual((kw['act_layer'], kw['norm_eps']), ('gelu_tanh', 1e-6))
    json.dumps(kw)  # passed to the torch process as JSON
    token = models.get_model('ViT-B_16', num_classes=1000, num_registers=4,
                             layer_scale=1e-5, qk_norm=True)
    kw = timm_peer.timm_kwargs(token, 224)
    self.assertEqual((kw['class_token'], kw['global_pool'], kw['reg_tokens'],
                      kw['init_values'], kw['qk_norm'], kw['depth'], kw['num_heads']),
                     (True, 'token', 4, 1e-5, True, 12, 12))
    self.assertEqual(int(kw['embed_dim'] * kw['mlp_ratio']), 3072)
    for model, message in (
        (models.get_model('ViT-B_16', num_classes=10, representation_size=768),
         'no pre-logits'),
        (models.get_model('R50+ViT-B_16', num_classes=10), 'ResNet hybrid'),
        (models.get_model('Mixer-B_16', num_classes=10), 'plain ViT')):
      with self.assertRaisesRegex(ValueError, message):
        timm_peer.timm_kwargs(model, 224)
    if importlib.util.find_spec('timm') is None:
      return  # CI has no torch; tools/bench_timm.py builds it where torch exists
    sys.path.insert(0, os.path.dirname(timm_peer.SCRIPT))
    import bench_timm  # pylint: disable=g-import-not-at-top
    variables = jax.eval_shape(gap.init, jax.random.PRNGKey(0),
                               jax.ShapeDtypeStruct((1, 28, 28, 3), jnp.float32))
    ours = sum(x.size for x in jax.tree.leaves(variables))
    theirs = sum(p.numel() for p in bench_timm.build(timm_peer.timm_kwargs(gap, 28))
                 .parameters())
    self.assertEqual(ours, theirs)


if __name__ == '__main__':
  absltest.main()
