"""Tests for Park et al.'s layer analyses: hand-made attention maps and feature maps,
the per-layer token extraction, DINO's class-attention maps and `vit_jax.analyze`."""
import json
import os
import sys

from absl.testing import absltest
import numpy as np

from tests import commands
from tests import tiny_trained
from vit_jax.evaluators import features
from vit_jax.inference import analyses
from vit_jax.inference import figures
from vit_jax.inference import load
from vit_jax.parallel import sharding

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRID = (4, 4)
STRIDE = 8


def _distances() -> np.ndarray:
  rows, cols = np.meshgrid(np.arange(4), np.arange(4), indexing='ij')
  centres = np.stack([rows.ravel(), cols.ravel()], -1) * STRIDE
  return np.linalg.norm(centres[:, None] - centres[None], axis=-1)


def _with_class_token(patch_attention: np.ndarray) -> np.ndarray:
  """[..., P, P] patch attention -> [..., P+1, P+1] with a class token taking half."""
  *lead, p, _ = patch_attention.shape
  out = np.zeros((*lead, p + 1, p + 1))
  out[..., 1:, 1:] = 0.5 * patch_attention
  out[..., :, 0] = 0.5   # every query gives half its attention to the class token
  out[..., 0, 1:] = 0.5 / p
  return out


class AttentionMathTest(absltest.TestCase):

  def test_uniform_diagonal_and_local_maps(self):
    p = 16
    uniform = np.full((1, 2, 3, p, p), 1.0 / p)                     # [L, N, H, P, P]
    diagonal = np.broadcast_to(np.eye(p), (1, 2, 3, p, p))
    dist = _distances()
    local = (dist <= STRIDE).astype(np.float64)                      # itself + 4-neighbours
    local = np.broadcast_to(local / local.sum(-1, keepdims=True), (1, 2, 3, p, p))
    for prefix, wrap in ((0, lambda a: a), (1, _with_class_token)):
      # The class token's share is dropped and the patch rows renormalised.
      d_uniform = analyses.mean_attention_distance(wrap(uniform), prefix, GRID, STRIDE)
      np.testing.assert_allclose(d_uniform, np.full((1, 3), dist.mean()), rtol=1e-6)
      np.testing.assert_allclose(
          analyses.mean_attention_distance(wrap(diagonal), prefix, GRID, STRIDE), 0.0,
          atol=1e-9)
      d_local = analyses.mean_attention_distance(wrap(local), prefix, GRID, STRIDE)
      self.assertTrue(np.all((d_local > 0) & (d_local < STRIDE)))
      self.assertTrue(np.all(d_local < d_uniform / 2))
      # NMI: 0 when every query attends alike, 1 when each attends to itself alone.
      np.testing.assert_allclose(analyses.attention_nmi(wrap(uniform), prefix), 0.0,
                                 atol=1e-9)
      np.testing.assert_allclose(analyses.attention_nmi(wrap(diagonal), prefix), 1.0,
                                 rtol=1e-9)
      nmi_local = analyses.attention_nmi(wrap(local), prefix)
      self.assertTrue(np.all((nmi_local > 0.2) & (nmi_local < 1.0)))
    # Every query on the same key: no information, and no 0/0.
    collapsed = np.zeros((1, 1, 1, p, p))
    collapsed[..., 3] = 1.0
    np.testing.assert_allclose(analyses.attention_nmi(collapsed, 0), 0.0, atol=1e-12)

  def test_class_token_attention_maps(self):
    weights = np.full((2, 1, 3, 17, 17), 1.0 / 17)
    weights[-1, 0, 1, 0] = 0.0
    weights[-1, 0, 1, 0, 1 + 5] = 1.0   # head 2's class token looks at patch (1, 1)
    maps = figures.class_token_attention(weights, 1, GRID)
    self.assertEqual(maps.shape, (1, 3, 4, 4))
    np.testing.assert_allclose(maps[0, 0], 1.0)   # uniform: every patch at the max
    self.assertEqual(maps[0, 1, 1, 1], 1.0)
    self.assertEqual(maps[0, 1].sum(), 1.0)


class FourierTest(absltest.TestCase):

  def test_checkerboard_is_high_frequency_and_smooth_maps_are_low(self):
    rows, cols = np.meshgrid(np.arange(8), np.arange(8), indexing='ij')
    checker = np.where((rows + cols) % 2, 1.0, -1.0)
    smooth = 2.0 + np.cos(np.pi * rows / 8) + np.cos(np.pi * cols / 8)
    channels = np.random.default_rng(0).uniform(0.5, 2.0, size=6)

    def tokens(m):  # [layers=1, N=2, T=1+64, D=6] with a class token in front
      t = m.reshape(64, 1) * channels
      return np.broadcast_to(np.concatenate([np.full((1, 6), 99.0), t])[None, None],
                             (1, 2, 65, 6))

    both = np.concatenate([tokens(checker), tokens(smooth)])
    curves = analyses.fourier_log_amplitude(both, 1, (8, 8))
    self.assertEqual(curves.shape, (2, 5))
    np.testing.assert_allclose(curves[:, 0], 0.0)
    np.testing.assert_allclose(analyses.frequencies(8), [0, 0.25, 0.5, 0.75, 1.0])
    # All the checkerboard's energy sits at (pi, pi); it has no DC component.
    self.assertGreater(curves[0, -1], 10.0)
    self.assertLess(curves[1, -1], 0.0)
    self.assertTrue(np.all(np.diff(curves[1][:2]) < 0))
    with self.assertRaisesRegex(ValueError, 'square'):
      analyses.fourier_log_amplitude(both, 1, (4, 16))


class ModelTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir, cls.data_dir = tiny_trained.untrained()
    cls.loaded = load.load_model(None, cls.workdir)

  def test_layer_tokens_end_in_the_models_features(self):
    mesh = sharding.make_mesh({'data': -1, 'fsdp': 1})
    extractor = features.FeatureExtractor(self.loaded.model, mesh, 8)
    images = np.random.default_rng(0).uniform(-1, 1, (5, 28, 28, 3)).astype(np.float32)
    tokens = extractor.layer_tokens(self.loaded.params, images)
    self.assertEqual(tokens.shape, (2, 5, 17, 64))   # blocks, images, 1 + 4x4 tokens, width
    feats, _ = extractor.features(self.loaded.params, [(images, np.zeros(5))])
    # The model's features: the final LayerNorm of the last block's class token.
    norm = self.loaded.params['Transformer']['encoder_norm']
    x = tokens[-1, :, 0]
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(x * norm['scale'] + norm['bias'], feats, atol=1e-4)
    pooled, labels = extractor.layer_features(
        self.loaded.params, [(images[:3], np.arange(3)), (images[3:], np.arange(3, 5))])
    np.testing.assert_allclose(pooled, tokens[:, :, 0], atol=1e-5)
    np.testing.assert_array_equal(labels, np.arange(5))
    np.testing.assert_allclose(features.pool_tokens(tokens, 1, 'patches'),
                               tokens[:, :, 1:].mean(2), atol=1e-6)
    with self.assertRaisesRegex(ValueError, 'class token'):
      features.pool_tokens(tokens, 0, 'token')

  def test_command_writes_figures_and_numbers_or_one_line_errors(self):
    env = dict(os.environ, PYTHONPATH=REPO)
    out = os.path.join(self.create_tempdir().full_path, 'analysis')
    command = [sys.executable, '-m', 'vit_jax.analyze', f'--checkpoint={self.workdir}',
               f'--data_dir={self.data_dir}', f'--out={out}', '--images=8']
    bad = [
        (['--checkpoint=a', '--checkpoint=b', '--probes=knn'], 'given 3 times'),
        (['--dataset=mnist5k|train|nope'], "'nope'"),   # after the checkpoint is read
    ]
    for extra, message in bad:
      proc = commands.run(command + extra, env=env, cwd=REPO, timeout=300)
      self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
      lines = proc.stderr.strip().splitlines()
      self.assertLen(lines, 1, proc.stderr)
      self.assertStartsWith(lines[0], 'vit_jax.analyze: error: ')
      self.assertIn(message, lines[0])
      self.assertFalse(os.path.exists(out))
    proc = commands.run(
        command + [f'--checkpoint={self.workdir}/params.npz', '--label=a', '--label=b',
                   '--dataset=mnist5k|train[:200]|test[:100]', '--probes=knn',
                   '--random_init=1'],
        env=env, cwd=REPO, timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertEqual(sorted(os.listdir(out)), [
        'analysis.json', 'attention_distance.png', 'fourier.png', 'layer_accuracy.png',
        'nmi.png'])
    with open(os.path.join(out, 'analysis.json')) as f:
      result = json.load(f)
    self.assertEqual(set(result['models']), {'a', 'b', 'random init (seed 1)'})
    a = result['models']['a']
    self.assertEqual((a['layers'], a['heads'], a['images'], a['prefix_tokens']),
                     (2, 4, 8, 1))
    self.assertEqual(np.shape(a['attention_distance']), (2, 4))
    self.assertEqual(np.shape(a['nmi']), (2, 4))
    self.assertEqual(np.shape(a['fourier_log_amplitude']), (2, 3))
    self.assertLen(a['knn_top1'], 2)
    self.assertNotIn('linear_top1', a)
    # The same checkpoint twice gives the same numbers.
    b = result['models']['b']
    np.testing.assert_allclose(a['nmi'], b['nmi'], rtol=1e-6)
    self.assertEqual(a['knn_top1'], b['knn_top1'])
    # The control: the same architecture from seed 1, not the checkpoint's (seed 0) weights.
    control = result['models']['random init (seed 1)']
    self.assertEqual((control['random_init'], a['random_init']), (1, None))
    self.assertEqual(np.shape(control['nmi']), (2, 4))
    self.assertGreater(np.abs(np.subtract(control['nmi'], a['nmi'])).max(), 1e-4)


if __name__ == '__main__':
  absltest.main()
