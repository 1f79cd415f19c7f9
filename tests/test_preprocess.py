"""Tests of the per-example preprocessing ops (vit_jax.data.preprocess)."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from skimage import data as skimage_data
import tensorflow as tf

from vit_jax.configs import base
from tests import tfds_testdata
from vit_jax.data import preprocess


def _pp(**overrides):
  pp = base.get_base_config().pp
  pp.crop, pp.resize = 16, 24
  pp.update(overrides)
  return pp


def _seed(a: int, b: int = 0) -> tf.Tensor:
  return tf.constant([a, b], tf.int64)


class DecodeTest(absltest.TestCase):

  def test_grayscale_png_becomes_rgb(self):
    data = tfds_testdata.image_bytes(np.random.default_rng(0), 'PNG', size=(7, 9), mode='L')
    image = preprocess.decode(tf.constant(data)).numpy()
    self.assertEqual(image.shape, (7, 9, 3))
    self.assertEqual(image.dtype, np.uint8)
    np.testing.assert_array_equal(image[..., 0], image[..., 2])

  def test_jpeg_and_png(self):
    rng = np.random.default_rng(1)
    for fmt in ('JPEG', 'PNG'):
      image = preprocess.decode(tf.constant(tfds_testdata.image_bytes(rng, fmt))).numpy()
      self.assertEqual(image.shape, (20, 24, 3))


class CropTest(parameterized.TestCase):

  @parameterized.parameters('JPEG', 'PNG')
  def test_inception_crop_shape_and_determinism(self, fmt):
    data = tf.constant(tfds_testdata.image_bytes(np.random.default_rng(2), fmt,
                                                 size=(60, 80)))
    a = preprocess.inception_crop(data, _seed(3), 0.05, 16).numpy()
    b = preprocess.inception_crop(data, _seed(3), 0.05, 16).numpy()
    c = preprocess.inception_crop(data, _seed(4), 0.05, 16).numpy()
    self.assertEqual(a.shape, (16, 16, 3))
    np.testing.assert_array_equal(a, b)
    self.assertFalse(np.array_equal(a, c))

  def test_full_area_crop_is_the_whole_image(self):
    # PNG is lossless, so the only difference to a plain resize is none at all.
    data = tf.constant(tfds_testdata.image_bytes(np.random.default_rng(5), 'PNG',
                                                 size=(30, 30)))
    crop = preprocess.inception_crop(data, _seed(0), 1.0, 16).numpy()
    full = tf.image.resize(preprocess.decode(data), [16, 16]).numpy()
    np.testing.assert_allclose(crop, full, atol=1e-4)

  def test_jpeg_crop_window_decodes_like_full_decode(self):
    data = tf.constant(tfds_testdata.image_bytes(np.random.default_rng(6), 'JPEG',
                                                 size=(64, 64)))
    seed = _seed(7)
    begin, size = preprocess._sample_box(tf.image.extract_jpeg_shape(data), seed, 0.3)
    window = preprocess.inception_crop(data, seed, 0.3, 16).numpy()
    reference = tf.image.resize(
        tf.slice(preprocess.decode(data), begin, size), [16, 16]).numpy()
    # Decoding only the window may differ from decoding all by JPEG upsampling at edges.
    self.assertLess(np.abs(window - reference).mean(), 3.0)

  def test_central_crop_takes_the_middle(self):
    image = np.zeros((10, 12, 3), np.uint8)
    image[3:7, 4:8] = 255
    np.testing.assert_array_equal(preprocess.central_crop(tf.constant(image), 4).numpy(),
                                  np.full((4, 4, 3), 255, np.uint8))

  def test_keep_aspect_resizes_the_shorter_side(self):
    out = preprocess.resize(tf.zeros([30, 60, 3], tf.uint8), 10, keep_aspect=True)
    self.assertEqual(out.shape.as_list(), [10, 20, 3])
    out = preprocess.resize(tf.zeros([30, 60, 3], tf.uint8), 10)
    self.assertEqual(out.shape.as_list(), [10, 10, 3])


class RecipeTest(parameterized.TestCase):

  @parameterized.parameters('pretrain', 'finetune', 'finetune_inception')
  def test_train_recipes(self, recipe):
    data = tf.constant(tfds_testdata.image_bytes(np.random.default_rng(8), 'JPEG',
                                                 size=(40, 50)))
    pp = _pp(train=recipe)
    image = preprocess.train_image(data, _seed(1), pp).numpy()
    self.assertEqual(image.shape, (16, 16, 3))
    self.assertEqual(image.dtype, np.uint8)
    np.testing.assert_array_equal(image, preprocess.train_image(data, _seed(1), pp).numpy())

  def test_flip_is_a_mirror_image(self):
    data = tf.constant(tfds_testdata.image_bytes(np.random.default_rng(9), 'PNG',
                                                 size=(16, 16)))
    pp = _pp(train='finetune', resize=16, flip=False)
    plain = preprocess.train_image(data, _seed(0), pp).numpy()
    pp.flip = True
    flipped = [preprocess.train_image(data, _seed(s), pp).numpy() for s in range(8)]
    self.assertTrue(any(np.array_equal(f, plain[:, ::-1]) for f in flipped))
    self.assertTrue(any(np.array_equal(f, plain) for f in flipped))

  def test_pad_shifts_the_image_by_at_most_pad_pixels(self):
    image = np.zeros((16, 16, 3), np.uint8)
    image[7, 9] = 255
    data = tf.io.encode_png(tf.constant(image))
    pp = _pp(train='finetune', resize=16, crop=16, pad=2, flip=False)
    shifts = set()
    for s in range(30):
      out = preprocess.train_image(data, _seed(s), pp).numpy()
      (y,), (x,) = np.nonzero(out[..., 0])  # the one bright pixel, moved
      shifts.add((y - 7, x - 9))
      self.assertEqual(out.sum(), 3 * 255)  # shifted, neither resized nor cut
    self.assertTrue(all(abs(dy) <= 2 and abs(dx) <= 2 for dy, dx in shifts))
    self.assertGreater(len(shifts), 5)

  @parameterized.parameters('central_crop', 'resize')
  def test_eval_recipes(self, recipe):
    image = tf.constant(np.random.default_rng(10).integers(0, 256, (30, 40, 3), np.uint8))
    out = preprocess.eval_uint8(image, _pp(eval=recipe)).numpy()
    self.assertEqual((out.shape, out.dtype), ((16, 16, 3), np.uint8))
    floats = preprocess.eval_image(image, _pp(eval=recipe)).numpy()
    self.assertEqual(floats.dtype, np.float32)
    self.assertBetween(floats.min(), -1.0, 1.0)
    self.assertBetween(floats.max(), -1.0, 1.0)
    np.testing.assert_allclose(floats, out / 127.5 - 1.0, atol=1e-6)

  def test_unknown_recipe_names_the_choices(self):
    with self.assertRaisesRegex(ValueError, 'pp.train=.*pretrain'):
      preprocess.train_image(tf.constant(b''), _seed(0), _pp(train='nope'))
    with self.assertRaisesRegex(ValueError, 'pp.eval=.*central_crop'):
      preprocess.eval_uint8(tf.zeros([4, 4, 3], tf.uint8), _pp(eval='nope'))


def _photo_jpeg(shape=(120, 160)) -> bytes:
  """scikit-image's astronaut photo, downsized and JPEG-encoded."""
  image = tf.image.resize(skimage_data.astronaut(), shape, antialias=True)
  return tf.io.encode_jpeg(tf.cast(tf.round(image), tf.uint8)).numpy()


def _train_image_before_the_registry(data, seed, pp):
  """The if/elif recipe code the named compositions replaced, kept to pin them."""
  crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  if pp.train in ('pretrain', 'finetune_inception'):
    image = preprocess.inception_crop(data, crop_seed, pp.min_area, pp.crop)
  else:
    image = preprocess.resize(preprocess.decode(data), pp.resize, pp.keep_aspect)
    if pp.pad:
      image = tf.pad(image, [[pp.pad, pp.pad], [pp.pad, pp.pad], [0, 0]])
    image = tf.image.stateless_random_crop(image, [pp.crop, pp.crop, 3], crop_seed)
  image = preprocess.to_uint8(image)
  if pp.flip:
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
  return image


class CompositionTest(parameterized.TestCase):
  """The recipes as named compositions of registered ops; pp strings and their errors."""

  @parameterized.product(recipe=('pretrain', 'finetune', 'finetune_inception'),
                         flip=(False, True), pad=(0, 3), keep_aspect=(False, True))
  def test_recipes_equal_the_code_before_the_registry(self, recipe, flip, pad, keep_aspect):
    data = tf.constant(_photo_jpeg())
    pp = _pp(train=recipe, flip=flip, pad=pad, keep_aspect=keep_aspect, min_area=0.08)
    for s in range(3):
      np.testing.assert_array_equal(
          preprocess.train_image(data, _seed(s, 5), pp).numpy(),
          _train_image_before_the_registry(data, _seed(s, 5), pp).numpy())

  def test_eval_recipes_equal_the_code_before_the_registry(self):
    image = preprocess.decode(tf.constant(_photo_jpeg()))
    pp = _pp(eval='central_crop', keep_aspect=True)
    before = preprocess.central_crop(preprocess.resize(image, 24, True), 16)
    np.testing.assert_array_equal(preprocess.eval_uint8(image, pp).numpy(),
                                  preprocess.to_uint8(before).numpy())
    before = preprocess.resize(image, 16)
    np.testing.assert_array_equal(preprocess.eval_uint8(image, _pp(eval='resize')).numpy(),
                                  preprocess.to_uint8(before).numpy())

  def test_a_recipe_is_its_ops_spelled_out(self):
    data = tf.constant(_photo_jpeg())
    pp = _pp(train='finetune', pad=2, flip=True)
    spelled = _pp(train='decode|resize(24, False)|pad(2)|random_crop(16)|flip_lr')
    np.testing.assert_array_equal(preprocess.train_image(data, _seed(4), pp).numpy(),
                                  preprocess.train_image(data, _seed(4), spelled).numpy())
    # Without a decoding op first, the chain decodes the whole image itself.
    np.testing.assert_array_equal(
        preprocess.train_image(data, _seed(4), _pp(train='resize(16)')).numpy(),
        preprocess.to_uint8(preprocess.resize(preprocess.decode(data), 16)).numpy())

  def test_an_op_added_at_the_end_leaves_the_ops_before_it_alone(self):
    data = tf.constant(_photo_jpeg())
    plain = preprocess.train_image(data, _seed(2), _pp(train='pretrain', flip=False))
    flipped = preprocess.train_image(data, _seed(2), _pp(train='pretrain|flip_lr',
                                                         flip=False))
    self.assertTrue(np.array_equal(flipped, plain) or
                    np.array_equal(flipped, plain.numpy()[:, ::-1]))

  def test_mistakes_are_one_line_naming_the_key(self):
    cases = [
        ('train', 'pretrain|no_such_op', r"config.pp.train='pretrain\|no_such_op': "
         r"unknown op 'no_such_op'; known: .*pretrain.*flip_lr"),
        ('train', 'resize(0)', r"op 'resize': size=0 must be a positive integer"),
        ('train', 'random_crop(16, 3)', r"op 'random_crop': too many positional"),
        ('train', 'flip_lr|decode', "op 'decode' decodes image bytes: it can only come "
         'first'),
        ('train', 'pretrain||flip_lr', 'has an empty op'),
        ('train', 'resize(x)', r"op 'resize\(x\)': arguments must be numbers"),
        ('train', 'resize[3]', 'is not NAME or NAME'),
        ('eval', 'central_crop|flip_lr', r"config.pp.eval=.*op 'flip_lr' is random"),
    ]
    for key, text, message in cases:
      pp = _pp(**{key: text})
      chain = preprocess.train_chain if key == 'train' else preprocess.eval_chain
      with self.assertRaisesRegex(ValueError, message) as e:
        chain(pp)
      self.assertNotIn('\n', str(e.exception))


class TargetsTest(absltest.TestCase):

  def test_one_hot_and_smoothing(self):
    y = preprocess.targets(tf.constant(2, tf.int64), 4).numpy()
    np.testing.assert_array_equal(y, [0, 0, 1, 0])
    y = preprocess.targets(tf.constant(2, tf.int64), 4, smoothing=0.2).numpy()
    np.testing.assert_allclose(y, [0.05, 0.05, 0.85, 0.05], rtol=1e-6)
    self.assertAlmostEqual(y.sum(), 1.0, places=6)

  def test_multi_hot(self):
    y = preprocess.targets(tf.constant([0, 3, 3], tf.int64), 5, multi_hot=True).numpy()
    np.testing.assert_array_equal(y, [1, 0, 0, 1, 0])

  def test_mixup_ratio(self):
    ratios = [float(preprocess.mixup_ratio(_seed(s), 0.4)) for s in range(20)]
    self.assertTrue(all(0.0 <= r <= 1.0 for r in ratios))
    self.assertGreater(len(set(ratios)), 10)
    self.assertEqual(ratios[3], float(preprocess.mixup_ratio(_seed(3), 0.4)))


class VtabLabelTest(absltest.TestCase):

  def test_clevr(self):
    objects = {'size': tf.zeros([5], tf.int64),
               'pixel_coords': tf.constant([[0, 0, 9.2], [0, 0, 12.0]], tf.float32)}
    self.assertEqual(int(preprocess.LABEL_FNS['clevr_count']({'objects': objects})), 2)
    # 9.2 lies in (9.0, 9.5]: the fourth bin.
    self.assertEqual(int(preprocess.LABEL_FNS['clevr_distance']({'objects': objects})), 3)

  def test_kitti_distance(self):
    fn = preprocess.LABEL_FNS['kitti_distance']
    near_car = {'objects': {'type': tf.constant([0, 4], tf.int64),
                            'location': tf.constant([[0, 0, 5.0], [0, 0, 1.0]])}}
    no_vehicle = {'objects': {'type': tf.constant([4], tf.int64),
                              'location': tf.constant([[0, 0, 1.0]])}}
    self.assertEqual(int(fn(near_car)), 0)
    self.assertEqual(int(fn(no_vehicle)), 3)

  def test_dsprites_bins(self):
    f = {'label_x_position': tf.constant(31, tf.int64),
         'label_orientation': tf.constant(39, tf.int64)}
    self.assertEqual(int(preprocess.LABEL_FNS['dsprites_location'](f)), 15)
    self.assertEqual(int(preprocess.LABEL_FNS['dsprites_orientation'](f)), 15)


if __name__ == '__main__':
  absltest.main()
