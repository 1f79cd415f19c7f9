"""Self-supervised pre-training through the trainer: sharded, resumed, exported, fine-tuned."""
import contextlib
import io
import os
import shutil
import sys
import tempfile

from absl.testing import absltest
import jax
import numpy as np

from tests import commands
from tests import tfds_testdata
from tests.test_train import assert_trees_equal
from tests.test_train import final_params
from tests.test_train import tiny_config
from vit_jax import checkpoint
from vit_jax import configs
from vit_jax.inference import figures
from vit_jax.inference import load
from vit_jax.perf import benchmark
from vit_jax.train import loop
from vit_jax.train import resume
from vit_jax.train import writers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ssl_config(objective, **overrides):
  """The trainer tests' tiny ViT with a self-supervised objective (no evaluation)."""
  c = tiny_config(objective=objective, **overrides)
  c.model.dropout_rate = 0.0
  c.objectives.mae.update({'decoder_width': 32, 'decoder_depth': 1,
                           'decoder_heads': 2, 'decoder_mlp_dim': 64})
  c.evals.test.every = -1
  return c


class MaeTrainingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir = os.path.join(tempfile.mkdtemp(), 'mae')
    # FSDP over 2 devices, bf16 compute, two micro-batches, few-shot during training.
    c = ssl_config('mae', sharding='fsdp', fsdp_min_size=1, accum_steps=2)
    c.mesh.update({'data': 1, 'fsdp': 2})
    c.model.dtype = 'bfloat16'
    c.evals.fewshot.update({'every': 4, 'shots': (5,), 'seeds': 1})
    cls.result = loop.train_and_evaluate(c, cls.workdir, devices=jax.devices()[:2])

  def test_metrics_and_fewshot(self):
    records = writers.read_metrics(self.workdir)
    losses = [r['train_loss'] for r in records if 'train_loss' in r]
    self.assertLen(losses, 4)
    self.assertTrue(all(np.isfinite(losses)))
    self.assertIn('fewshot/mnist5k_5shot', self.result)
    self.assertEqual(sum('fewshot/mnist5k_5shot' in r for r in records), 2)  # 4 and 8

  def test_exports_the_vit_and_the_decoder_beside_it(self):
    params = final_params(self.workdir)
    self.assertEqual(sorted(params), ['Transformer', 'cls', 'embedding', 'head'])
    decoder = checkpoint.load(os.path.join(self.workdir, 'mae_params.npz'))
    self.assertIn('mask_token', decoder)
    # The exported ViT is what load_model builds from the workdir's config.json.
    loaded = load.load_model(None, os.path.join(self.workdir, 'params.npz'))
    self.assertEqual(loaded.resolution, 28)

  def test_fine_tune_the_exported_encoder(self):
    workdir = os.path.join(self.create_tempdir().full_path, 'ft')
    result = loop.train_and_evaluate(
        tiny_config(total_steps=2, warmup_steps=1, pretrained_path=os.path.join(
            self.workdir, 'params.npz')), workdir, devices=jax.devices()[:1])
    self.assertIn('accuracy_test', result)
    start = final_params(self.workdir)
    tuned = final_params(workdir)
    # Started from the encoder: two small steps stay close to it, far from a new init.
    diff = np.abs(tuned['Transformer']['encoder_norm']['scale'] -
                  start['Transformer']['encoder_norm']['scale']).max()
    self.assertLess(diff, 0.05)

  def test_visualize_draws_reconstructions(self):
    out = self.create_tempdir().full_path
    loaded = load.load_model(None, os.path.join(self.workdir, 'params.npz'))
    digit = os.path.join(REPO, 'docs', 'images', 'examples', 'digit_7.png')
    written = figures.write_figures(loaded, [digit], out,
                                    os.path.join(self.workdir, 'params.npz'))
    self.assertIn(os.path.join(out, 'mae_reconstruction.png'), written)

  def test_fewshot_random_init_baseline(self):
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.fewshot',
         f'--checkpoint={os.path.join(self.workdir, "params.npz")}', '--shots=2',
         '--seeds=1', '--random_init=0', f'--data_dir={tfds_testdata.data_dir()}'],
        env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertRegex(proc.stdout, r'fewshot/mnist5k_2shot: 0\.\d{4}')
    loaded = load.load_model(None, os.path.join(self.workdir, 'params.npz'))
    fresh = load.reinitialized(loaded, 0)
    self.assertFalse(np.allclose(fresh.params['Transformer']['encoder_norm']['bias'],
                                 loaded.params['Transformer']['encoder_norm']['bias']))


class MaskedPatchTrainingTest(absltest.TestCase):

  def test_resume_is_exact(self):
    base = self.create_tempdir().full_path
    full = os.path.join(base, 'full')
    c = ssl_config('masked_patch', total_steps=4, checkpoint_every=2)
    loop.train_and_evaluate(c, full, devices=jax.devices()[:1])
    records = writers.read_metrics(full)
    self.assertTrue(all(0 <= r['masked_patch_accuracy'] <= 1
                        for r in records if 'train_loss' in r))
    # The same run cut after step 2: its workdir as it was then, resumed.
    cut = os.path.join(base, 'cut')
    shutil.copytree(full, cut)
    shutil.rmtree(os.path.join(cut, 'checkpoints', '4'))
    for name in ('params.npz', 'masked_patch_params.npz'):
      os.remove(os.path.join(cut, name))
    loop.train_and_evaluate(c, cut, devices=jax.devices()[:1])
    assert_trees_equal(self, final_params(cut), final_params(full))
    assert_trees_equal(
        self, checkpoint.load(os.path.join(cut, 'masked_patch_params.npz')),
        checkpoint.load(os.path.join(full, 'masked_patch_params.npz')))

  def test_resume_compares_only_the_objective_in_use(self):
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    c = ssl_config('masked_patch', total_steps=2, warmup_steps=1)
    loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
    unused = ssl_config('masked_patch', total_steps=2, warmup_steps=1)
    unused.objectives.mae.mask_ratio = 0.5  # another objective's option: no change
    self.assertEqual(resume.compare(unused, workdir).fields, {})
    used = ssl_config('masked_patch', total_steps=2, warmup_steps=1)
    used.objectives.masked_patch.mask_ratio = 0.4
    with self.assertRaisesRegex(ValueError, r'objectives\.masked_patch\.mask_ratio: '
                                r'0\.5 -> 0\.4'):
      resume.check(used, workdir)

  def test_one_class_folder_without_labels(self):
    root = tfds_testdata.tempdir(self, 'photos')
    tfds_testdata.make_image_folder(root, {'train': {'all': 16}, 'test': {'all': 2}})
    c = ssl_config('masked_patch', dataset=f'folder:{root}', eval_split='',
                   data_dir=tfds_testdata.tempdir(self), total_steps=2, warmup_steps=1,
                   data_shards=2, batch=8, pp=dict(tiny_config().pp, resize=28))
    result = loop.train_and_evaluate(c, os.path.join(root, 'run'), devices=jax.devices()[:1])
    self.assertEqual(result['step'], 2)


class BadInputTest(absltest.TestCase):

  def _refused(self, config, pattern):
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    with self.assertRaisesRegex(ValueError, pattern):
      loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    self.assertFalse(os.path.exists(workdir))  # nothing created

  def test_errors_before_anything_is_created(self):
    self._refused(ssl_config('simclr'), "objective='simclr' is unknown; use one of "
                  'supervised, masked_patch, mae')
    c = ssl_config('mae')
    c.objectives.mae.mask_ratio = 1.0
    self._refused(c, r'mask_ratio=1.0 must lie strictly between 0 and 1')
    c = ssl_config('masked_patch')
    c.objectives.masked_patch.mask_ratio = 0.0
    self._refused(c, r'mask_ratio=0.0 must lie strictly between 0 and 1')
    c = configs.get_base_config()
    c.update(model_name='Mixer-B_16', objective='mae', dataset='mnist5k', batch=16,
             batch_eval=16, data_dir=tfds_testdata.data_dir())
    self._refused(c, r"objective='mae' needs a ViT \(patch tokens\); MlpMixer has none")

  def test_command_line_is_one_line(self):
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.main',
         f'--config={os.path.join(REPO, "configs", "quickstart_ssl.py")}:mae',
         f'--workdir={workdir}', '--config.objectives.mae.mask_ratio=1.5',
         f'--config.data_dir={tfds_testdata.data_dir()}'],
        env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
    self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
    self.assertNotIn('Traceback', proc.stderr)
    self.assertRegex(proc.stderr, r'vit_jax: error: .*mask_ratio=1.5 must lie')
    self.assertFalse(os.path.exists(workdir))


class RecipeTest(absltest.TestCase):
  """The self-supervised configs against the papers' numbers, written out here."""

  def _config(self, name):
    return configs.load(os.path.join(REPO, 'configs', name))

  def test_masked_patch_recipe(self):
    c = self._config('pretrain_masked_patch.py:b16,imagenet2012')
    self.assertEqual(c.model_name, 'ViT-B_16')
    self.assertEqual(c.objective, 'masked_patch')
    self.assertEqual(dict(c.objectives.masked_patch), {
        'mask_ratio': 0.5, 'replace_mask': 0.8, 'replace_random': 0.1,
        'target': 'mean_color', 'bits': 3, 'downsized': 4})
    self.assertEqual((c.optimizer, c.optimizers.adam.b1, c.optimizers.adam.b2),
                     ('adam', 0.9, 0.999))
    self.assertEqual((c.base_lr, c.warmup_steps, c.decay_type, c.batch, c.total_steps),
                     (2e-4, 10_000, 'cosine', 4096, 1_000_000))
    self.assertEqual((c.pp.crop, c.evals.fewshot.datasets), (224, ('imagenet2012',)))

  def test_mae_recipe(self):
    c = self._config('pretrain_mae.py:l16,imagenet2012')
    self.assertEqual(c.model_name, 'ViT-L_16')
    self.assertEqual(dict(c.objectives.mae), {
        'mask_ratio': 0.75, 'decoder_width': 512, 'decoder_depth': 8,
        'decoder_heads': 16, 'decoder_mlp_dim': 2048, 'posemb': 'sincos2d',
        'norm_pix_loss': True})
    self.assertEqual((c.optimizers.adam.b1, c.optimizers.adam.b2, c.weight_decay),
                     (0.9, 0.95, 0.05))
    self.assertAlmostEqual(c.base_lr, 1.5e-4 * 4096 / 256)
    steps_per_epoch = 1_281_167 // 4096  # ImageNet-1k's training images
    self.assertEqual((c.warmup_steps, c.total_steps),
                     (40 * steps_per_epoch, 800 * steps_per_epoch))
    self.assertEqual((c.decay_type, c.pp.train, c.pp.min_area, c.pp.flip),
                     ('cosine', 'pretrain', 0.2, True))

  def test_labels_not_needed_by_the_config(self):
    c = self._config('pretrain_mae.py:b16,folder:/data/photos')
    self.assertEqual(c.dataset, 'folder:/data/photos')
    self.assertEqual(c.evals.test.every, -1)


class BenchmarkTest(absltest.TestCase):

  def test_mae_step_is_timed_with_its_own_flops(self):
    args = ['--model=testing', '--batch=4', '--resolution=32', '--num_classes=10',
            '--steps=1', '--repeats=1', '--warmup=1', '--devices=1', '--peak=1']
    mae_options = ('--objective_options=decoder_width=8,decoder_depth=1,'
                   'decoder_heads=2,decoder_mlp_dim=16,posemb=learn')
    with contextlib.redirect_stdout(io.StringIO()):
      results = {'supervised': benchmark.main(args),
                 'mae': benchmark.main(args + ['--objective=mae', mae_options])}
    self.assertEqual(results['mae']['objective'], 'mae')
    self.assertGreater(results['mae']['img_s'], 0)
    self.assertNotEqual(results['mae']['gflops_per_image'],
                        results['supervised']['gflops_per_image'])


if __name__ == '__main__':
  absltest.main()
