"""Tests for vit_jax.visualize: the paper's figures as arrays and PNG files."""
import os
import shutil
import sys
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image
import skimage.data

from tests import commands
from tests import tiny_trained
from vit_jax import models
from vit_jax.inference import figures as visualize
from vit_jax.inference import images as images_lib
from vit_jax.inference import load

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _png_size(path):
  with Image.open(path) as img:
    img.verify()  # a valid, complete PNG
  with Image.open(path) as img:
    return img.format, img.mode, img.size


class MathTest(absltest.TestCase):

  def test_rollout_of_identity_attention_is_uniform(self):
    weights = np.broadcast_to(np.eye(17, dtype=np.float32), (3, 2, 4, 17, 17))
    maps = visualize.attention_rollout(weights, True, (4, 4))
    self.assertEqual(maps.shape, (2, 4, 4))
    # The class token attends only to itself: nothing flows from the patches.
    np.testing.assert_allclose(maps, 0.0)
    uniform = np.full((2, 1, 2, 16, 16), 1 / 16, np.float32)
    np.testing.assert_allclose(visualize.attention_rollout(uniform, False, (4, 4)),
                               1.0, rtol=1e-6)

  def test_rollout_peaks_where_the_token_looks(self):
    weights = np.zeros((2, 1, 1, 17, 17), np.float32)
    weights[:, :, :, :, 6] = 1.0  # everyone attends to patch 5 = grid (1, 1)
    maps = visualize.attention_rollout(weights, True, (4, 4))
    self.assertEqual(np.unravel_index(maps[0].argmax(), (4, 4)), (1, 1))
    self.assertEqual(maps.max(), 1.0)

  def test_posemb_similarity(self):
    posemb = np.random.default_rng(0).normal(size=(1, 10, 8))
    sim = visualize.posemb_similarity(posemb, True, (3, 3))
    self.assertEqual(sim.shape, (3, 3, 3, 3))
    np.testing.assert_allclose(np.diagonal(sim.reshape(9, 9)), 1.0, rtol=1e-6)
    np.testing.assert_allclose(sim.reshape(9, 9), sim.reshape(9, 9).T, atol=1e-6)

  def test_filter_components_are_orthonormal(self):
    kernel = np.random.default_rng(0).normal(size=(4, 4, 3, 64))
    comps = visualize.filter_components(kernel, 28)
    self.assertEqual(comps.shape, (28, 4, 4, 3))
    flat = comps.reshape(28, -1)
    np.testing.assert_allclose(flat @ flat.T, np.eye(28), atol=1e-5)

  def test_mean_attention_distance(self):
    grid, stride = (3, 3), 10
    local = np.broadcast_to(np.eye(10, dtype=np.float32), (2, 1, 3, 10, 10))
    np.testing.assert_allclose(
        visualize.mean_attention_distance(local, True, grid, stride), 0.0)
    # Attending only to the top-left patch: mean distance of patches to it.
    corner = np.zeros((1, 1, 1, 9, 9), np.float32)
    corner[..., 0] = 1.0
    r, c = np.meshgrid(np.arange(3), np.arange(3), indexing='ij')
    expected = np.mean(np.hypot(r, c)) * stride
    np.testing.assert_allclose(
        visualize.mean_attention_distance(corner, False, grid, stride),
        [[expected]], rtol=1e-6)

  def test_colormap_ends(self):
    np.testing.assert_array_equal(visualize.colormap(np.array([-1.0, 1.0])),
                                  [[68, 1, 84], [253, 231, 37]])


class TrainedModelTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.params_path, _, _ = tiny_trained.trained()
    cls.loaded = load.load_model(None, cls.params_path)
    cls.dir = tempfile.mkdtemp(prefix='vit_jax_test_')
    cls.photos = []
    for name in ('chelsea', 'coffee'):
      path = os.path.join(cls.dir, f'{name}.jpg')
      Image.fromarray(getattr(skimage.data, name)()).save(path)
      cls.photos.append(path)


  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir, ignore_errors=True)
    super().tearDownClass()

  def test_summary_images(self):
    images = np.stack([images_lib.load_image(p, 28) for p in self.photos])
    out = visualize.summary_images(self.loaded.model, self.loaded.params, images)
    self.assertEqual(set(out), {'attention_rollout', 'posemb_similarity'})
    # 28 px upscaled 5x to reach 128 px; image, masked image and heat map side by side.
    self.assertEqual(out['attention_rollout'].shape, (2, 140, 420, 3))
    # A 4x4 grid of 4x4 tiles, 8 px per cell, 2 px gaps.
    self.assertEqual(out['posemb_similarity'].shape, (1, 134, 134, 3))
    for value in out.values():
      self.assertEqual(value.dtype, np.uint8)
    # The left half is the input itself.
    np.testing.assert_array_equal(out['attention_rollout'][:, ::5, :140:5],
                                  visualize.to_uint8(images))

  def test_trained_attention_differs_from_uniform(self):
    images = np.stack([images_lib.load_image(p, 28) for p in self.photos])
    weights = visualize.attention_weights(self.loaded.model, self.loaded.params,
                                          images)
    self.assertEqual(weights.shape, (2, 2, 4, 17, 17))
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    distance = visualize.mean_attention_distance(weights, True, (4, 4), 7)
    self.assertEqual(distance.shape, (2, 4))
    self.assertTrue(np.all((distance > 0) & (distance < 28 * np.sqrt(2))))

  def test_cli_writes_pngs_of_the_expected_sizes(self):
    out = os.path.join(self.create_tempdir().full_path, 'figures')
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.visualize', f'--checkpoint={self.params_path}',
         f'--out={out}'] + self.photos,
        env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    expected = {
        # Labelled figures (title, colour bar, caption) at 100 dpi; the rollouts are
        # named after their input files.
        'attention_rollout_chelsea.png': (1000, 380),
        'attention_rollout_coffee.png': (1000, 380),
        # DINO's picture: the input and the class token's attention of 4 heads.
        'class_attention_chelsea.png': (1010, 300),
        'class_attention_coffee.png': (1010, 300),
        'posemb_similarity.png': (560, 500),
        'embedding_filters.png': (600, 420),
        'attention_distance.png': (400, 440),
    }
    self.assertEqual(sorted(os.listdir(out)), sorted(expected))
    for name, size in expected.items():
      self.assertEqual(_png_size(os.path.join(out, name)), ('PNG', 'RGB', size),
                       name)

  def test_rollout_files_are_named_after_the_inputs(self):
    self.assertEqual(
        visualize.rollout_names(['a/cat.jpg', 'b/cat.png', 'my digit.png']),
        ['attention_rollout_cat.png', 'attention_rollout_cat_2.png',
         'attention_rollout_my_digit.png'])

  def test_bad_image_writes_nothing(self):
    out = os.path.join(self.create_tempdir().full_path, 'figures')
    bad = os.path.join(self.dir, 'bad.png')
    with open(bad, 'w') as f:
      f.write('no image')
    with self.assertRaisesRegex(ValueError, f'Cannot read image {bad}'):
      visualize.write_figures(self.loaded, [self.photos[0], bad], out)
    self.assertFalse(os.path.exists(out))
    blocker = os.path.join(self.dir, 'a_file')
    with open(blocker, 'w') as f:
      f.write('x')
    with self.assertRaisesRegex(NotADirectoryError, 'is a file'):
      visualize.write_figures(self.loaded, [], blocker)


class OtherModelsTest(absltest.TestCase):

  def _loaded(self, name, resolution, **overrides):
    model = models.get_model(name, num_classes=5, **overrides)
    params = model.init(jax.random.PRNGKey(0),
                        jnp.zeros((1, resolution, resolution, 3)))['params']
    return load.LoadedModel(name, model, params, resolution)

  def test_mixer_has_filters_only(self):
    loaded = self._loaded('Mixer-B_16', 32, hidden_dim=16, num_blocks=1,
                          tokens_mlp_dim=8, channels_mlp_dim=8)
    images = np.zeros((1, 32, 32, 3), np.float32)
    self.assertEqual(visualize.summary_images(loaded.model, loaded.params, images), {})
    out = self.create_tempdir().full_path
    written = visualize.write_figures(loaded, [], out)
    self.assertEqual([os.path.basename(p) for p in written], ['embedding_filters.png'])
    self.assertEqual(_png_size(written[0])[2], (600, 420))  # the labelled figure
    # 16 filters of 16x16x3: 16 components, 3x upscaled to 48 px, 7 per row.
    grid = visualize.render_filters(visualize.filter_components(
        visualize.embedding_kernel(loaded.model, loaded.params)))
    self.assertEqual(grid.shape, (3 * 48 + 2 * 2, 7 * 48 + 6 * 2, 3))

  def test_hybrid_and_gap_models(self):
    hybrid = models.get_model('R+ViT-Ti_16', num_classes=5, num_layers=1)
    # Shapes suffice here: the grid comes from the ResNet's output, not the patch size.
    shapes = jax.eval_shape(hybrid.init, jax.random.PRNGKey(0),
                            jnp.zeros((1, 64, 64, 3)))['params']
    self.assertEqual(visualize.patch_grid(hybrid, shapes), (2, 2))
    with self.assertRaisesRegex(ValueError, 'Hybrid'):
      visualize.embedding_kernel(hybrid, shapes)
    gap = self._loaded('ViT-S_16-gap-norep', 32, num_layers=1, hidden_size=16,
                       num_heads=2, mlp_dim=16)
    images = np.zeros((2, 32, 32, 3), np.float32)
    maps = visualize.attention_rollout(
        visualize.attention_weights(gap.model, gap.params, images),
        False, visualize.patch_grid(gap.model, gap.params))
    self.assertEqual(maps.shape, (2, 2, 2))
    out = visualize.summary_images(gap.model, gap.params, images)
    self.assertEqual(out['posemb_similarity'].shape, (1, 66, 66, 3))


if __name__ == '__main__':
  absltest.main()
