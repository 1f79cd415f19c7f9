"""Tests for .npz checkpoint interop: layout, round trips, fine-tune loading, errors."""
import os
import tempfile
from unittest import mock
import zipfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import checkpoint
from vit_jax import fileio
from vit_jax import models
from vit_jax.models.formats import npz

# A hybrid small enough to build in a test: root + one unit of width 32.
_HYBRID = dict(resnet={'num_layers': (1,), 'width_factor': 0.5}, num_layers=1)


def _random_params(model, resolution: int, seed: int = 0,
                   width: int = 0) -> dict:
  """Random params with the model's tree (no compile: eval_shape + numpy)."""
  shape = (1, resolution, width or resolution, 3)
  abstract = jax.eval_shape(
      model.init, jax.random.PRNGKey(0),
      jax.ShapeDtypeStruct(shape, jnp.float32))['params']
  rng = np.random.default_rng(seed)
  return jax.tree.map(
      lambda s: rng.normal(0, 0.1, s.shape).astype(np.float32), abstract)


def _flat(tree) -> dict:
  return npz.flatten(tree)


def _logits(model, params, images):
  return np.asarray(jax.jit(lambda p, x: model.apply({'params': p}, x))(
      params, images))


def _images(resolution: int, width: int = 0, batch: int = 2) -> np.ndarray:
  rng = np.random.default_rng(7)
  return rng.uniform(-1, 1, (batch, resolution, width or resolution, 3)).astype(
      np.float32)


def _to_published(flat: dict, gn_4d: bool) -> dict:
  """Our Linen names -> the old published layout, written independently."""
  block_names = {'LayerNorm_0': 'LayerNorm_0',
                 'MultiHeadDotProductAttention_0': 'MultiHeadDotProductAttention_1',
                 'LayerNorm_1': 'LayerNorm_2', 'MlpBlock_0': 'MlpBlock_3'}
  out = {}
  for key, value in flat.items():
    parts = key.split('/')
    if len(parts) > 3 and parts[1].startswith('encoderblock_'):
      parts[2] = block_names[parts[2]]
    if (gn_4d and len(parts) > 1 and parts[-2].startswith('gn') and
        parts[-1] in ('scale', 'bias')):
      value = value.reshape(1, 1, 1, -1)
    out['/'.join(parts)] = value
  return out


class CheckpointTestCase(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # tempfile, not create_tempdir: absl flags are unparsed under pytest.
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    self.dir = tmp.name

  def path(self, name: str) -> str:
    return os.path.join(self.dir, name)

  def assertTreesEqual(self, a, b):
    fa, fb = _flat(a), _flat(b)
    self.assertEqual(sorted(fa), sorted(fb))
    for k in fa:
      np.testing.assert_array_equal(np.asarray(fa[k]), np.asarray(fb[k]), k)

  def assertOneLineError(self, exc_type, regex, fn, *args, **kwargs):
    with self.assertRaisesRegex(exc_type, regex) as cm:
      fn(*args, **kwargs)
    self.assertNotIn('\n', str(cm.exception))
    return cm.exception


class SaveLoadTest(CheckpointTestCase):

  def test_round_trip_vit_logits(self):
    model = models.get_model('testing', num_classes=5)
    params = _random_params(model, 32)
    checkpoint.save(params, self.path('p.npz'))
    loaded = checkpoint.load(self.path('p.npz'))
    self.assertTreesEqual(loaded, params)
    images = _images(32)
    np.testing.assert_array_equal(_logits(model, loaded, images),
                                  _logits(model, params, images))

  def test_saved_file_uses_published_names(self):
    model = models.get_model('testing', num_classes=5)
    checkpoint.save(_random_params(model, 32), self.path('p.npz'))
    with np.load(self.path('p.npz')) as f:
      keys = set(f.files)
    block = 'Transformer/encoderblock_0/'
    for name in ('LayerNorm_0/scale', 'MultiHeadDotProductAttention_1/query/kernel',
                 'LayerNorm_2/bias', 'MlpBlock_3/Dense_1/kernel'):
      self.assertIn(block + name, keys)
    self.assertFalse(any('MultiHeadDotProductAttention_0' in k or
                         'MlpBlock_0' in k for k in keys))
    self.assertIn('Transformer/posembed_input/pos_embedding', keys)
    self.assertEqual(os.listdir(self.dir), ['p.npz'])  # no temp file left

  def test_round_trip_hybrid_and_mixer(self):
    for name, overrides in (('R+ViT-Ti_16', _HYBRID),
                            ('Mixer-B_16', dict(num_blocks=2, hidden_dim=16,
                                                tokens_mlp_dim=8,
                                                channels_mlp_dim=32))):
      with self.subTest(name):
        params = _random_params(
            models.get_model(name, num_classes=3, **overrides), 32)
        checkpoint.save(params, self.path(f'{name}.npz'))
        self.assertTreesEqual(checkpoint.load(self.path(f'{name}.npz')), params)

  def test_save_accepts_jax_and_bfloat16_arrays(self):
    params = {'head': {'kernel': jnp.ones((2, 3), jnp.bfloat16),
                       'bias': jnp.zeros((3,))}}
    checkpoint.save(params, self.path('p.npz'))
    loaded = checkpoint.load(self.path('p.npz'))
    self.assertEqual(loaded['head']['kernel'].dtype, np.float32)
    np.testing.assert_array_equal(loaded['head']['kernel'], np.ones((2, 3)))

  def test_published_layout_loads(self):
    model = models.get_model('R+ViT-Ti_16', num_classes=4, **_HYBRID)
    params = _random_params(model, 32)
    published = _to_published(_flat(params), gn_4d=True)
    self.assertEqual(published['gn_root/scale'].shape, (1, 1, 1, 32))
    self.assertIn('Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel',
                  published)
    np.savez(self.path('old.npz'), **published)
    loaded = checkpoint.load(self.path('old.npz'))
    self.assertTreesEqual(loaded, params)
    images = _images(32)
    np.testing.assert_array_equal(_logits(model, loaded, images),
                                  _logits(model, params, images))

  def test_linen_named_file_loads(self):
    params = _random_params(models.get_model('testing', num_classes=5), 32)
    np.savez(self.path('linen.npz'), **_flat(params))  # AugReg-style names
    self.assertTreesEqual(checkpoint.load(self.path('linen.npz')), params)

  def test_remote_code_path(self):
    # gs:// needs a network; the remote branch (whole-file reads, write to a temporary
    # object and rename over the target, all through etils.epath) runs on local files.
    params = _random_params(models.get_model('testing', num_classes=5), 32)
    path = self.path('remote.npz')
    with mock.patch.object(fileio, 'is_remote', return_value=True):
      checkpoint.save(params, path)
      self.assertTreesEqual(checkpoint.load(path), params)
      self.assertOneLineError(FileNotFoundError, 'credentials', checkpoint.load,
                              self.path('nope.npz'))
    leftovers = [f for f in os.listdir(self.dir) if '.tmp' in f]
    self.assertEmpty(leftovers)


class InterpolatePosembTest(absltest.TestCase):

  def test_same_grid_is_identity(self):
    posemb = np.random.default_rng(0).normal(size=(1, 17, 4)).astype(np.float32)
    np.testing.assert_array_equal(
        checkpoint.interpolate_posemb(posemb, 17, has_class_token=True), posemb)
    np.testing.assert_array_equal(
        checkpoint.interpolate_posemb(posemb[:, 1:], (4, 4), False),
        posemb[:, 1:])

  def test_linear_ramp_stays_linear_and_token_kept(self):
    old, new = (3, 5), (5, 9)  # non-square on both sides
    i, j = np.meshgrid(np.arange(old[0]), np.arange(old[1]), indexing='ij')
    ramp = np.stack([2.0 * i + 0.5 * j, -i + 3.0 * j + 1.0], -1)
    posemb = np.concatenate([np.full((1, 1, 2), 42.0),
                             ramp.reshape(1, -1, 2)], 1).astype(np.float32)
    out = checkpoint.interpolate_posemb(posemb, new, True, old_grid=old)
    self.assertEqual(out.shape, (1, 1 + new[0] * new[1], 2))
    np.testing.assert_array_equal(out[0, 0], [42.0, 42.0])
    # Corners map onto corners: new index k sits at k * (old - 1) / (new - 1).
    ni, nj = np.meshgrid(np.arange(new[0]) * (old[0] - 1) / (new[0] - 1),
                         np.arange(new[1]) * (old[1] - 1) / (new[1] - 1),
                         indexing='ij')
    expected = np.stack([2.0 * ni + 0.5 * nj, -ni + 3.0 * nj + 1.0], -1)
    np.testing.assert_allclose(out[0, 1:].reshape(*new, 2), expected,
                               atol=1e-5)

  def test_token_count_shape_and_grid_agree(self):
    posemb = np.random.default_rng(1).normal(size=(1, 5, 3)).astype(np.float32)
    by_count = checkpoint.interpolate_posemb(posemb, 10, True)
    by_shape = checkpoint.interpolate_posemb(posemb, (1, 10, 3), True)
    by_grid = checkpoint.interpolate_posemb(posemb, (3, 3), True)
    np.testing.assert_array_equal(by_count, by_shape)
    np.testing.assert_array_equal(by_count, by_grid)

  def test_grid_that_cannot_be_interpolated(self):
    posemb = np.zeros((1, 13, 4), np.float32)  # 12 patch tokens + class token
    with self.assertRaisesRegex(ValueError, '12 patch tokens, not a square'):
      checkpoint.interpolate_posemb(posemb, 17, True)
    with self.assertRaisesRegex(ValueError, '7 patch tokens'):
      checkpoint.interpolate_posemb(np.zeros((1, 17, 4)), 8, True)
    with self.assertRaisesRegex(ValueError, r'grid \(2, 5\) holds 10 tokens'):
      checkpoint.interpolate_posemb(posemb, 17, True, old_grid=(2, 5))
    with self.assertRaisesRegex(ValueError, r'shape \(1, tokens, width\)'):
      checkpoint.interpolate_posemb(np.zeros((13, 4)), 17, True)
    self.assertEqual(
        checkpoint.interpolate_posemb(posemb, 17, True, old_grid=(3, 4)).shape,
        (1, 17, 4))


class LoadPretrainedTest(CheckpointTestCase):

  def _pretrain(self, name='testing', resolution=32, **overrides) -> dict:
    model = models.get_model(name, num_classes=5, **overrides)
    params = _random_params(model, resolution)
    checkpoint.save(params, self.path('pre.npz'))
    return params

  def _init(self, name='testing', resolution=48, num_classes=3, width=0,
            **overrides):
    model = models.get_model(name, num_classes=num_classes, **overrides)
    init = _random_params(model, resolution, seed=1, width=width)
    init['head'] = jax.tree.map(np.zeros_like, init['head'])
    return model, init

  def test_new_resolution_and_classes(self):
    pre = self._pretrain(representation_size=8)
    model, init = self._init()
    params = checkpoint.load_pretrained(
        pretrained_path=self.path('pre.npz'), init_params=init,
        model_config=models.get_model_config('testing'))
    self.assertNotIn('pre_logits', params)  # dropped: new model has none
    np.testing.assert_array_equal(params['head']['kernel'], np.zeros((10, 3)))
    np.testing.assert_array_equal(params['cls'], pre['cls'])
    np.testing.assert_array_equal(
        params['Transformer']['encoderblock_0']['MlpBlock_0']['Dense_0']['kernel'],
        pre['Transformer']['encoderblock_0']['MlpBlock_0']['Dense_0']['kernel'])
    posemb = params['Transformer']['posembed_input']['pos_embedding']
    old = pre['Transformer']['posembed_input']['pos_embedding']
    self.assertEqual(posemb.shape, (1, 10, 10))
    np.testing.assert_array_equal(posemb[:, 0], old[:, 0])
    np.testing.assert_array_equal(  # corners of a 2x2 -> 3x3 resize
        posemb[0, [1, 3, 7, 9]], old[0, [1, 2, 3, 4]])
    self.assertEqual(jax.tree.structure(params), jax.tree.structure(init))
    self.assertEqual(_logits(model, params, _images(48)).shape, (2, 3))

  def test_keeps_pre_logits_of_same_width(self):
    pre = self._pretrain(representation_size=8)
    _, init = self._init(resolution=32, representation_size=8)
    params = checkpoint.load_pretrained(
        pretrained_path=self.path('pre.npz'), init_params=init,
        model_config=models.get_model_config('testing'))
    np.testing.assert_array_equal(params['pre_logits']['kernel'],
                                  pre['pre_logits']['kernel'])
    np.testing.assert_array_equal(params['head']['bias'], np.zeros(3))

  def test_non_square_grid_and_gap_model(self):
    self._pretrain('ViT-S_16-gap-norep', num_layers=1, hidden_size=12,
                   num_heads=2, mlp_dim=8)
    model, init = self._init('ViT-S_16-gap-norep', resolution=32, width=48,
                             num_layers=1, hidden_size=12, num_heads=2,
                             mlp_dim=8)
    load = lambda **kw: checkpoint.load_pretrained(  # noqa: E731
        pretrained_path=self.path('pre.npz'), init_params=init,
        model_config=models.get_model_config('ViT-S_16-gap-norep'), **kw)
    self.assertOneLineError(ValueError, '6 patch tokens, not a square grid',
                            load)
    params = load(grid=(2, 3))
    self.assertEqual(
        params['Transformer']['posembed_input']['pos_embedding'].shape,
        (1, 6, 12))
    self.assertEqual(_logits(model, params, _images(32, 48)).shape, (2, 3))

  def test_shape_mismatch_names_key_and_shapes(self):
    self._pretrain()
    _, init = self._init(resolution=32, hidden_size=12)
    # Another model's weights: one line naming the sizes, not the keys (issue 47).
    self.assertOneLineError(
        ValueError, r'pre.npz is a ViT 10w x 1L, \d+px patches, the model a ViT 12w x 1L, '
        r'\d+px patches \(width 10 vs 12.*\); set --config.model_name',
        checkpoint.load_pretrained, pretrained_path=self.path('pre.npz'),
        init_params=init, model_config=models.get_model_config('testing'))

  def test_missing_and_unexpected_keys(self):
    self._pretrain()
    _, init = self._init(resolution=32, num_layers=2)
    kwargs = dict(pretrained_path=self.path('pre.npz'), init_params=init,
                  model_config=models.get_model_config('testing'))
    self.assertOneLineError(
        ValueError, r'pre.npz is a ViT 10w x 1L, .*\(layers 1 vs 2\)',
        checkpoint.load_pretrained, **kwargs)
    with self.assertLogs(level='WARNING') as logs:
      params = checkpoint.load_pretrained(strict=False, **kwargs)
    self.assertIn('16 parameters not in', ''.join(logs.output))
    np.testing.assert_array_equal(
        params['Transformer']['encoderblock_1']['LayerNorm_0']['scale'],
        init['Transformer']['encoderblock_1']['LayerNorm_0']['scale'])

    self._pretrain(num_layers=2)
    _, init = self._init(resolution=32)
    self.assertOneLineError(
        ValueError, r'is a ViT 10w x 2L, .*\(layers 2 vs 1\)',
        checkpoint.load_pretrained, pretrained_path=self.path('pre.npz'),
        init_params=init, model_config=models.get_model_config('testing'))


class BadInputTest(CheckpointTestCase):

  def _write(self, name: str, data: bytes) -> str:
    with open(self.path(name), 'wb') as f:
      f.write(data)
    return self.path(name)

  def assertLoadFails(self, path, exc_type, regex):
    before = open(path, 'rb').read() if os.path.isfile(path) else None
    e = self.assertOneLineError(exc_type, regex, checkpoint.load, path)
    self.assertIn(path, str(e))
    if before is not None:
      self.assertEqual(open(path, 'rb').read(), before)

  def test_missing_file_and_directory(self):
    self.assertLoadFails(self.path('nope.npz'), FileNotFoundError,
                         'does not exist')
    self.assertLoadFails(self.dir, IsADirectoryError, 'is a directory')

  def test_not_an_npz(self):
    self.assertLoadFails(self._write('a.npz', b'hello world, not a zip'),
                         ValueError, 'not a zip archive, not an .npz')
    self.assertLoadFails(self._write('e.npz', b''), ValueError, 'is empty')
    np.save(self.path('x.npy'), np.zeros(3))
    self.assertLoadFails(self.path('x.npy'), ValueError, 'single .npy array')
    self.assertLoadFails(self._write('p.pkl', b'\x80\x04\x95abc'), ValueError,
                         'pickle')

  def test_truncated_and_corrupt(self):
    params = _random_params(models.get_model('testing', num_classes=5), 32)
    checkpoint.save(params, self.path('good.npz'))
    data = open(self.path('good.npz'), 'rb').read()
    self.assertLoadFails(self._write('half.npz', data[:len(data) // 2]),
                         ValueError, 'truncated or corrupt')
    # Damage array bytes in the middle: the zip CRC check must catch it.
    middle = len(data) // 2
    corrupt = data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 64]) + (
        data[middle + 64:])
    self.assertLoadFails(self._write('bad.npz', corrupt), ValueError,
                         'truncated or corrupt')

  def test_pickled_objects_are_refused(self):
    np.savez(self.path('obj.npz'), a=np.zeros(2),
             b=np.array([{'x': 1}], dtype=object))
    self.assertLoadFails(self.path('obj.npz'), ValueError,
                         "pickled Python objects in key 'b'")

  def test_empty_and_non_numeric_npz(self):
    with zipfile.ZipFile(self.path('empty.npz'), 'w'):
      pass
    self.assertLoadFails(self.path('empty.npz'), ValueError, 'holds no arrays')
    np.savez(self.path('str.npz'), a=np.array(['x']))
    self.assertLoadFails(self.path('str.npz'), ValueError,
                         "key 'a' has dtype <U1")

  def test_conflicting_keys(self):
    np.savez(self.path('c.npz'), **{'a': np.zeros(1), 'a/b': np.zeros(1)})
    self.assertLoadFails(self.path('c.npz'), ValueError,
                         "both an array 'a' and arrays below it")

  def test_failed_save_leaves_existing_file_untouched(self):
    params = _random_params(models.get_model('testing', num_classes=5), 32)
    checkpoint.save(params, self.path('p.npz'))
    before = open(self.path('p.npz'), 'rb').read()
    bad = dict(params, extra={'x': object()})
    self.assertOneLineError(TypeError, "'extra/x'", checkpoint.save, bad,
                            self.path('p.npz'))
    self.assertOneLineError(ValueError, "pass variables\\['params'\\]",
                            checkpoint.save, {'params': params},
                            self.path('p.npz'))
    self.assertEqual(open(self.path('p.npz'), 'rb').read(), before)
    self.assertEqual(os.listdir(self.dir), ['p.npz'])

  def test_save_to_missing_directory(self):
    path = os.path.join(self.dir, 'no', 'such', 'p.npz')
    self.assertOneLineError(FileNotFoundError, 'does not exist; create it',
                            checkpoint.save, {'a': np.zeros(1)}, path)
    self.assertEqual(os.listdir(self.dir), [])


if __name__ == '__main__':
  absltest.main()
