"""End-to-end trainer tests on the embedded mnist5k digits with a tiny ViT."""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from absl.testing import absltest
import jax
import numpy as np

from tests import commands
from tests import tfds_testdata
from tests.tiny_train_config import tiny_config  # also test_train.tiny_config in other tests
from vit_jax import checkpoint
from vit_jax import configs
from vit_jax import rundir
from vit_jax.data import sources
from vit_jax.models import from_config
from vit_jax.models import flops
from vit_jax.train import loop
from vit_jax.train import preemption
from vit_jax.train import timing
from vit_jax.train import writers as metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def final_params(workdir):
  return checkpoint.load(os.path.join(workdir, rundir.PARAMS_FILE))


def assert_trees_equal(test, a, b):
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  test.assertEqual(len(la), len(lb))
  for x, y in zip(la, lb):
    np.testing.assert_array_equal(x, y)


class TrainTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.reference_dir = os.path.join(tempfile.mkdtemp(), 'reference')
    # peak_tflops 0: the benchmark's rule, a matmul measured at start.
    cls.reference = loop.train_and_evaluate(tiny_config(peak_tflops=0.0), cls.reference_dir,
                                            devices=jax.devices()[:1])

  def test_run_writes_everything(self):
    self.assertEqual(self.reference['examples_test'], 200)
    self.assertBetween(self.reference['accuracy_test'], 0.0, 1.0)
    records = metrics.read_metrics(self.reference_dir)
    train_records = [r for r in records if 'train_loss' in r]
    self.assertEqual([r['step'] for r in train_records], [2, 4, 6, 8])
    for name in ('train_loss', 'learning_rate', 'grad_norm', 'img_sec_core',
                 'mfu'):
      self.assertIn(name, train_records[-1])
    self.assertGreater(train_records[-1]['mfu'], 0.0)
    # One peak, resolved once, behind every window's mfu.
    per_image = flops.model_flops_per_image(
        from_config.build(tiny_config(), 10), 28,
        train=True)
    peaks = [r['img_sec_core'] * per_image / r['mfu'] for r in train_records
             if 'mfu' in r]
    self.assertLen(peaks, 4)
    np.testing.assert_allclose(peaks, peaks[0], rtol=1e-5)
    self.assertIn('accuracy_test', records[-1])
    self.assertIn('loss_test', records[-1])
    files = os.listdir(self.reference_dir)
    self.assertIn('params.npz', files)
    self.assertIn('config.json', files)
    self.assertTrue(any(f.startswith('events.out.tfevents') for f in files))
    # keep_checkpoints=3: steps 4 and 8.
    self.assertEqual(
        sorted(os.listdir(os.path.join(self.reference_dir, 'checkpoints'))),
        ['4', '8'])

  def test_sigterm_saves_and_resume_is_exact(self):
    workdir = self.create_tempdir().full_path
    ckpt4 = os.path.join(workdir, 'checkpoints', '4')

    def send_sigterm():
      while not os.path.exists(ckpt4):
        time.sleep(0.01)
      os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send_sigterm, daemon=True).start()
    with self.assertRaisesRegex(preemption.Preempted, 'Preempted at step'):
      loop.train_and_evaluate(tiny_config(), workdir, devices=jax.devices()[:1])
    self.assertFalse(os.path.exists(os.path.join(workdir, 'params.npz')))
    saved = sorted(int(s) for s in os.listdir(os.path.join(workdir,
                                                           'checkpoints'))
                   if s.isdigit())
    self.assertGreaterEqual(saved[-1], 4)
    loop.train_and_evaluate(tiny_config(), workdir, devices=jax.devices()[:1])
    assert_trees_equal(self, final_params(workdir),
                       final_params(self.reference_dir))

  def test_kill9_then_restart_is_exact(self):
    workdir = self.create_tempdir().full_path
    config = os.path.join(REPO, 'tests', 'tiny_train_config.py')
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = commands.start([sys.executable, '-m', 'vit_jax.main', f'--config={config}',
                           f'--workdir={workdir}'], cwd=REPO, env=env)
    ckpt_dir = os.path.join(workdir, 'checkpoints')
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
      if os.path.isdir(ckpt_dir) and any(
          s.isdigit() for s in os.listdir(ckpt_dir)):
        break
      time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.close()
    loop.train_and_evaluate(tiny_config(), workdir, devices=jax.devices()[:1])
    assert_trees_equal(self, final_params(workdir),
                       final_params(self.reference_dir))

  def test_one_vs_four_devices(self):
    # SGD: Adam would amplify float-summation noise in near-zero gradients.
    results = []
    for n in (1, 4):
      workdir = self.create_tempdir().full_path
      loop.train_and_evaluate(
          tiny_config(optimizer='sgd', base_lr=0.1, checkpoint_every=0),
          workdir, devices=jax.devices()[:n])
      results.append((final_params(workdir), metrics.read_metrics(workdir)))
    (p1, m1), (p4, m4) = results
    l1 = [r['train_loss'] for r in m1 if 'train_loss' in r]
    l4 = [r['train_loss'] for r in m4 if 'train_loss' in r]
    np.testing.assert_allclose(l1, l4, rtol=1e-5)
    for x, y in zip(jax.tree.leaves(p1), jax.tree.leaves(p4)):
      np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)

  def test_finetune_exported_npz_new_resolution_and_head(self):
    workdir = self.create_tempdir().full_path
    c = tiny_config(dataset='digits', eval_split='', pretrained_path=os.path.join(
        self.reference_dir, 'params.npz'), total_steps=4, checkpoint_every=0,
                    optimizer='sgd', base_lr=0.01)
    c.pp.resize = 40
    c.pp.crop = 35
    result = loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
    self.assertEqual(result['examples_test'],
                     sources.get_dataset_info(c).num_eval)
    params = final_params(workdir)
    ref = final_params(self.reference_dir)
    self.assertEqual(
        params['Transformer']['posembed_input']['pos_embedding'].shape,
        (1, 26, 16))
    self.assertEqual(params['head']['kernel'].shape, (16, 10))
    # The pretrained body was used: the embedding moved little from it.
    delta = np.abs(params['embedding']['kernel'] -
                   ref['embedding']['kernel']).max()
    self.assertLess(delta, 0.05)

  def test_nan_stops_and_keeps_last_good_checkpoint(self):
    workdir = self.create_tempdir().full_path
    c = tiny_config(base_lr=1e30, optimizer='sgd', warmup_steps=0,
                    grad_clip_norm=0.0, total_steps=12)
    with self.assertRaisesRegex(loop.NonFiniteError, r'at step \d+'):
      loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
    self.assertFalse(os.path.exists(os.path.join(workdir, 'params.npz')))


class NumericsTest(absltest.TestCase):

  def test_bfloat16_loss_curve_tracks_float32_on_the_quickstart(self):
    losses = {}
    for dtype in ('float32', 'bfloat16'):
      # ':short' has neither warps nor drop path: a curve that falls within 60 steps.
      c = configs.load(os.path.join(REPO, 'configs', 'quickstart.py:short'))
      # One of the quickstart's blocks: a run costs its compiles, not its steps (2 blocks:
      # 40 s of CPU for both runs, 1 block: 28 s; both fall by 16% with a 5-step warm-up).
      c.update(dict(total_steps=60, warmup_steps=5, log_every=10,
                    checkpoint_every=0, batch=64, data_dir=tfds_testdata.data_dir()))
      c.model.num_layers = 1
      # A class token without label smoothing falls clearly within 60 steps; the
      # quickstart's pooled, smoothed head needs a few hundred.
      c.model.classifier = 'token'
      c.pp.label_smoothing = 0.0
      c.evals.test.every = -1  # the curve is the train loss: no evaluation to compile
      c.model.dtype = dtype
      c.peak_tflops = 1.0  # a given MFU peak: no matmuls timed at start
      workdir = self.create_tempdir().full_path
      loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
      losses[dtype] = [r['train_loss'] for r in metrics.read_metrics(workdir)
                       if 'train_loss' in r]
    f32, bf16 = np.array(losses['float32']), np.array(losses['bfloat16'])
    self.assertLen(f32, 6)
    self.assertLess(f32[-1], 0.85 * f32[0])  # a learning curve, not a plateau
    np.testing.assert_allclose(bf16, f32, rtol=0.02)


class StepTimerTest(absltest.TestCase):

  def test_pauses_are_left_out_and_windows_restart(self):
    now = [0.0]
    timer = timing.StepTimer(clock=lambda: now[0])
    timer.start()
    for _ in range(4):
      now[0] += 0.5
      timer.step()
    timer.pause()
    now[0] += 30.0  # evaluation / checkpoint
    timer.resume()
    now[0] += 1.0
    timer.step()
    self.assertEqual(timer.window(), (5, 3.0))
    now[0] += 2.0
    timer.step()
    self.assertEqual(timer.window(), (1, 2.0))
    timer.pause()
    now[0] += 5.0
    self.assertEqual(timer.window(), (0, 0.0))  # paused: nothing counted


class CommandLineTest(absltest.TestCase):

  def test_runs_from_another_directory_with_the_config_by_path(self):
    elsewhere = self.create_tempdir().full_path
    workdir = os.path.join(elsewhere, 'run')
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    # A fresh interpreter (not tests/commands.py): the package is found from anywhere.
    out = subprocess.run(
        [sys.executable, '-m', 'vit_jax.main',
         f'--config={os.path.join(REPO, "configs", "quickstart.py")}',
         f'--workdir={workdir}', '--config.total_steps=4', '--config.warmup_steps=1',
         '--config.batch=16', '--config.eval_split=test[:200]', '--config.batch_eval=200',
         '--config.log_every=2', '--config.model.num_layers=1',
         f'--config.data_dir={tfds_testdata.data_dir()}'],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertIn('accuracy_test', metrics.read_metrics(workdir)[-1])
    self.assertTrue(os.path.exists(os.path.join(workdir, rundir.PARAMS_FILE)))


class ErrorTest(absltest.TestCase):

  def _main(self, *args):
    env = dict(os.environ, PYTHONPATH=REPO)
    return commands.run([sys.executable, '-m', 'vit_jax.main', *args], cwd=REPO, env=env,
                        timeout=120)

  def test_unknown_config_key(self):
    out = self._main('--config=configs/quickstart.py', '--workdir=/tmp/x',
                     '--config.bacth=3')
    self.assertNotEqual(out.returncode, 0)
    self.assertIn("unknown config key 'bacth'; did you mean 'batch'?",
                  out.stderr)
    self.assertNotIn('Traceback', out.stderr)
    out = self._main('--config=configs/missing.py', '--workdir=/tmp/x')
    self.assertIn("config file 'configs/missing.py' does not exist",
                  out.stderr)
    self.assertNotIn('Traceback', out.stderr)

  def test_missing_pretrained_file(self):
    workdir = self.create_tempdir().full_path
    out = self._main(f'--config={REPO}/tests/tiny_train_config.py',
                     f'--workdir={workdir}',
                     '--config.pretrained_path=/nonexistent/ViT-B_16.npz')
    self.assertEqual(out.returncode, 2, out.stderr)
    self.assertIn('/nonexistent/ViT-B_16.npz', out.stderr)
    self.assertNotIn('Traceback', out.stderr)
    self.assertFalse(os.path.exists(os.path.join(workdir, 'params.npz')))

  def test_indivisible_batch(self):
    with self.assertRaisesRegex(ValueError, r'config.batch=18 / accum_steps=1'):
      loop.train_and_evaluate(tiny_config(batch=18),
                               self.create_tempdir().full_path)
    with self.assertRaisesRegex(ValueError, 'accum_steps=3'):
      loop.train_and_evaluate(tiny_config(accum_steps=3),
                               self.create_tempdir().full_path)

  def test_negative_peak(self):
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    with self.assertRaisesRegex(ValueError, r'config.peak_tflops=-1.0 must'):
      loop.train_and_evaluate(tiny_config(peak_tflops=-1.0), workdir, devices=jax.devices()[:1])
    self.assertFalse(os.path.exists(workdir))

  def test_unwritable_workdir(self):
    blocker = self.create_tempfile().full_path  # a file where a dir should be
    with self.assertRaisesRegex(ValueError, 'is not writable'):
      loop.train_and_evaluate(tiny_config(), os.path.join(blocker, 'run'),
                              devices=jax.devices()[:1])

  def test_checkpoint_that_does_not_fit(self):
    workdir = self.create_tempdir().full_path
    loop.train_and_evaluate(tiny_config(total_steps=4), workdir, devices=jax.devices()[:1])
    before = sorted(os.listdir(os.path.join(workdir, 'checkpoints')))
    c = tiny_config(total_steps=8)
    c.model.hidden_size = 32
    with self.assertRaisesRegex(ValueError, 'model.hidden_size: 16 -> 32'):
      loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
    c.allow_config_change = True
    with self.assertRaisesRegex(ValueError, 'does not fit this model'):
      loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
    self.assertEqual(sorted(os.listdir(os.path.join(workdir, 'checkpoints'))),
                     before)


if __name__ == '__main__':
  absltest.main()
