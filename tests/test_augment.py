"""The augmentation ops (vit_jax.data.randaug, vit_jax.data.augment) on real photos.

Photos are scikit-image's (astronaut, coffee, chelsea). Each op: shape, dtype and range,
the same output for the same seed, the identity at magnitude 0 where the op has one, and
equality with PIL for the geometric and colour operations.
"""
from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from PIL import Image
from PIL import ImageEnhance
from PIL import ImageOps
from skimage import data as skimage_data
import tensorflow as tf

from vit_jax.configs import base
from vit_jax.data import augment
from vit_jax.data import preprocess
from vit_jax.data import randaug


def _photo(name: str = 'astronaut', size: int = 96) -> np.ndarray:
  """A scikit-image photo, resized to [size, size, 3] uint8."""
  image = tf.image.resize(getattr(skimage_data, name)(), [size, size], antialias=True)
  return tf.cast(tf.round(image), tf.uint8).numpy()


def _seed(a: int) -> tf.Tensor:
  return tf.constant([a, 11], tf.int64)


def _pp(train: str):
  pp = base.get_base_config().pp
  pp.crop, pp.resize, pp.train = 64, 72, train
  return pp


def _jpeg(image: np.ndarray) -> tf.Tensor:
  return tf.io.encode_jpeg(tf.constant(image))


_FILL = (128, 128, 128)


class OperationTest(parameterized.TestCase):
  """The 14 RandAugment operations one by one, against PIL."""

  def setUp(self):
    super().setUp()
    self.image = _photo('coffee')
    self.pil = Image.fromarray(self.image)

  def _close(self, ours, pil, atol=0, equal_fraction=1.0):
    ours, pil = np.asarray(ours).astype(int), np.asarray(pil).astype(int)
    self.assertEqual(ours.shape, pil.shape)
    self.assertLessEqual(np.abs(ours - pil).max(), atol)
    self.assertGreaterEqual(np.mean(ours == pil), equal_fraction)

  def test_lookup_ops_equal_pil(self):
    x = tf.constant(self.image)
    self._close(randaug.autocontrast(x), ImageOps.autocontrast(self.pil))
    self._close(randaug.equalize(x), ImageOps.equalize(self.pil))
    self._close(randaug.solarize(x, 100), ImageOps.solarize(self.pil, 100))
    self._close(randaug.posterize(x, 3), ImageOps.posterize(self.pil, 3))

  @parameterized.parameters(0.3, 1.7)
  def test_enhance_ops_equal_pil_within_rounding(self, factor):
    x = tf.constant(self.image)
    for ours, pil in ((randaug.color, ImageEnhance.Color),
                      (randaug.contrast, ImageEnhance.Contrast),
                      (randaug.brightness, ImageEnhance.Brightness),
                      (randaug.sharpness, ImageEnhance.Sharpness)):
      # Equal but for float rounding at a few truncation boundaries.
      self._close(ours(x, factor), pil(self.pil).enhance(factor), atol=1,
                  equal_fraction=0.99)

  def test_geometric_ops_equal_pil(self):
    x = tf.constant(self.image)

    def pil_affine(matrix):
      return self.pil.transform(self.pil.size, Image.AFFINE, matrix,
                                resample=Image.NEAREST, fillcolor=_FILL)
    self._close(randaug.translate_x(x, 13.0), pil_affine((1, 0, 13, 0, 1, 0)))
    self._close(randaug.translate_y(x, -9.0), pil_affine((1, 0, 0, 0, 1, -9)))
    self._close(randaug.shear_y(x, -0.2), pil_affine((1, 0, 0, -0.2, 1, 0)))
    # PIL samples at pixel centres, TF at corners: a few nearest-neighbour ties differ.
    self._close(randaug.shear_x(x, 0.2), pil_affine((1, 0.2, 0, 0, 1, 0)), atol=255,
                equal_fraction=0.98)
    self._close(randaug.rotate(x, 20.0),
                self.pil.rotate(20, resample=Image.NEAREST, fillcolor=_FILL), atol=255,
                equal_fraction=0.99)

  def test_every_op_is_the_identity_at_magnitude_0_except_the_three_without_one(self):
    x = tf.constant(self.image)
    for index, name in enumerate(randaug.OPS):
      for sign in (-1.0, 1.0):
        out = randaug.apply_op(x, tf.constant(index), tf.constant(0.0), tf.constant(sign))
        self.assertEqual((out.shape, out.dtype), (x.shape, tf.uint8))
        if name not in ('AutoContrast', 'Equalize'):
          np.testing.assert_array_equal(out, self.image, err_msg=name)

  def test_magnitude_10_changes_every_op_with_a_magnitude(self):
    x = tf.constant(self.image)
    for index, name in enumerate(randaug.OPS):
      out = randaug.apply_op(x, tf.constant(index), tf.constant(10.0), tf.constant(1.0))
      if name != 'Identity':
        self.assertFalse(np.array_equal(out, self.image), name)


class RandAugmentTest(parameterized.TestCase):

  def test_shape_dtype_determinism_on_photos(self):
    fn = randaug.randaug(2, 9, 0.5)
    for name in ('astronaut', 'coffee', 'chelsea'):
      image = tf.constant(_photo(name))
      outs = [fn(image, _seed(s)).numpy() for s in range(6)]
      for out in outs:
        self.assertEqual((out.shape, out.dtype), ((96, 96, 3), np.uint8))
      np.testing.assert_array_equal(outs[0], fn(image, _seed(0)).numpy())
      self.assertGreater(len({o.tobytes() for o in outs}), 2)  # seeds differ

  def test_magnitude_0_without_noise_is_the_identity_or_a_histogram_op(self):
    fn = randaug.randaug(1, 0, prob=1.0)
    image = _photo()
    allowed = [image, randaug.autocontrast(image).numpy(), randaug.equalize(image).numpy()]
    for s in range(12):
      out = fn(tf.constant(image), _seed(s)).numpy()
      self.assertTrue(any(np.array_equal(out, a) for a in allowed))

  def test_prob_0_is_the_identity_and_float_input_is_rounded(self):
    image = _photo()
    out = randaug.randaug(3, 10, prob=0.0)(tf.constant(image, tf.float32), _seed(1))
    np.testing.assert_array_equal(out, image)

  def test_in_the_pipeline_after_the_recipe(self):
    data = _jpeg(_photo(size=128))
    pp = _pp('pretrain|randaug(2, 9, 0.5)')
    a = preprocess.train_image(data, _seed(3), pp).numpy()
    self.assertEqual((a.shape, a.dtype), ((64, 64, 3), np.uint8))
    np.testing.assert_array_equal(a, preprocess.train_image(data, _seed(3), pp).numpy())

  @parameterized.parameters(
      ('randaug(2, 31)', r'magnitude=31 is out of range \[0, 30\]'),
      ('randaug(2, -1)', r'magnitude=-1 is out of range'),
      ('randaug(-2, 9)', 'num_layers=-2 must be an integer >= 0'),
      ('randaug(2, 9, mstd=-0.5)', 'mstd=-0.5 must be >= 0'),
      ('randaug(2, 9, prob=2)', r'prob=2 must be in \[0, 1\]'),
      ('erase(1.5)', r'prob=1.5 must be in \[0, 1\]'),
      ('erase(0.25, 0.5, 0.1)', 'need 0 < min_area <= max_area <= 1'),
      ('color_jitter(1.5)', r'brightness=1.5 must be in \[0, 1\)'),
      ('blur(0.5, 2.0, 1.0)', 'need 0 < sigma_min <= sigma_max'),
      ('solarize(0.2, 300)', r'threshold=300 must be in \[0, 256\]'),
      ('random_affine(10, 1.5)', r'translate=1.5 must be a number or two numbers in \[0, 1\]'),
      ('random_affine(10, 0, (1.1, 0.9))', r'scale=\(1.1, 0.9\) must be \(min, max\)'),
      ('random_affine(10, interpolation="cubic")', "interpolation='cubic' must be"),
      ('blur("x")', "op 'blur': an argument has the wrong type .*; signature blur\\(prob"),
      ('random_affine("10")', "op 'random_affine': an argument has the wrong type"),
  )
  def test_bad_arguments_are_one_line(self, op, message):
    with self.assertRaisesRegex(ValueError, "config.pp.train='pretrain\\|" + r'.*' + message):
      preprocess.train_chain(_pp('pretrain|' + op))


class PhotometricTest(parameterized.TestCase):

  @parameterized.parameters('color_jitter', 'grayscale(0.5)', 'solarize(0.5)',
                            'blur(0.5)', 'erase(0.5)')
  def test_shape_dtype_range_determinism(self, op):
    fn = preprocess.train_chain(_pp('resize(64)|' + op))
    for name in ('astronaut', 'chelsea'):
      enc = preprocess.pp_registry.Encoded(_jpeg(_photo(name)))
      outs = [fn(enc, _seed(s)).numpy() for s in range(8)]
      for out in outs:
        self.assertEqual((out.shape, out.dtype), ((64, 64, 3), np.uint8))
      np.testing.assert_array_equal(outs[1], fn(enc, _seed(1)).numpy())
      self.assertGreater(len({o.tobytes() for o in outs}), 1)

  def test_prob_0_is_the_identity(self):
    image = tf.constant(_photo())
    for fn in (augment.color_jitter(prob=0.0), augment.grayscale(0.0),
               augment.solarize(0.0), augment.blur(0.0), augment.erase(0.0)):
      np.testing.assert_array_equal(fn(image, _seed(0)), image)
    warp = augment.random_affine(30, 0.2, prob=0.0)  # a batch op
    np.testing.assert_array_equal(warp(image[None], _seed(0))[0], image)

  def test_grayscale_equals_pil_luma(self):
    image = _photo('chelsea')
    out = augment.grayscale(1.0)(tf.constant(image), _seed(0)).numpy()
    np.testing.assert_array_equal(out[..., 0], out[..., 2])
    luma = np.asarray(Image.fromarray(image).convert('L')).astype(int)
    self.assertLessEqual(np.abs(out[..., 0].astype(int) - luma).max(), 1)

  def test_solarize_inverts_above_the_threshold(self):
    image = _photo()
    out = augment.solarize(1.0, 128)(tf.constant(image), _seed(0)).numpy()
    np.testing.assert_array_equal(out, np.where(image < 128, image, 255 - image))

  def test_blur_keeps_the_mean_and_lowers_the_detail(self):
    image = _photo()
    out = augment.blur(1.0, 1.5, 1.5)(tf.constant(image), _seed(0)).numpy().astype(float)
    self.assertAlmostEqual(out.mean(), image.mean(), delta=1.0)
    detail = lambda x: np.abs(np.diff(x, axis=1)).mean()
    self.assertLess(detail(out), 0.7 * detail(image.astype(float)))

  def test_erase_replaces_one_box_of_noise(self):
    image = np.full((64, 64, 3), 10, np.uint8)
    for s in range(10):
      out = augment.erase(1.0)(tf.constant(image), _seed(s)).numpy()
      changed = np.any(out != image, axis=-1)
      rows, cols = np.nonzero(changed)
      self.assertGreater(changed.sum(), 0.01 * 64 * 64)
      box = changed[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
      self.assertGreater(box.mean(), 0.9)  # one rectangle (noise may hit 10 by chance)
      self.assertLessEqual(box.size, 64 * 64 / 3 + 64)
      self.assertBetween(out[changed].mean(), 100, 155)


class AffineTest(parameterized.TestCase):

  def _digit(self) -> np.ndarray:
    image = np.zeros((28, 28, 1), np.uint8)
    image[5:10, 3:20] = 200
    image[10:25, 15:18] = 255
    return image

  def test_the_map_rotates_counter_clockwise_and_shifts_by_whole_pixels(self):
    image = tf.constant(self._digit())
    rot = randaug.affine(image, augment.inverse_affine(90.0, 0, 0, 1.0, 0.0, 28, 28), 0)
    np.testing.assert_array_equal(rot[..., 0], np.rot90(self._digit()[..., 0]))
    shift = randaug.affine(image, augment.inverse_affine(0.0, 3, -2, 1.0, 0.0, 28, 28), 0)
    np.testing.assert_array_equal(shift, np.roll(self._digit(), (-2, 3), (0, 1)))

  def test_no_range_is_the_identity_and_scale_2_quadruples_the_ink(self):
    images = tf.constant(np.stack([self._digit()] * 3))
    for interpolation in ('nearest', 'bilinear'):
      same = augment.random_affine(interpolation=interpolation)(images, _seed(3))
      np.testing.assert_array_equal(same, images)
    square = np.zeros((1, 28, 28, 1), np.uint8)
    square[0, 11:17, 11:17] = 255  # centred: twice its size still fits
    big = augment.random_affine(scale=(2.0, 2.0))(tf.constant(square), _seed(3)).numpy()
    self.assertBetween((big > 0).sum() / (square > 0).sum(), 3.5, 4.5)

  def test_a_vertical_shift_draws_whole_pixels_up_to_the_fraction_per_row(self):
    image = self._digit()  # ink in rows 5..24: a shift of up to 3 rows keeps all of it
    first = np.nonzero(image[..., 0].any(axis=1))[0][0]
    moves = set()
    for s in range(3):
      out = augment.random_affine(translate=(0.0, 0.1))(
          tf.constant(np.stack([image] * 8)), _seed(s)).numpy()
      for row in out:  # each row its own draw
        moved = np.nonzero(row[..., 0].any(axis=1))[0][0] - first
        self.assertLessEqual(abs(moved), 3)  # 0.1 of 28 pixels, rounded
        np.testing.assert_array_equal(row, np.roll(image, moved, axis=0))
        moves.add(moved)
    self.assertGreater(len(moves), 2)

  def test_a_batch_op_is_seeded_shaped_and_applied_with_prob(self):
    images = tf.constant(np.stack([_photo(size=64)] * 16))
    fn = augment.random_affine(15, 0.1, (0.9, 1.1), 5, prob=0.5)
    out = fn(images, _seed(1)).numpy()
    self.assertEqual((out.shape, out.dtype), ((16, 64, 64, 3), np.uint8))
    np.testing.assert_array_equal(out, fn(images, _seed(1)))
    self.assertFalse(np.array_equal(out, fn(images, _seed(2))))
    kept = [np.array_equal(o, images[0]) for o in out]
    self.assertBetween(sum(kept), 2, 14)  # prob 0.5 per row
    self.assertGreater(len({o.tobytes() for o, k in zip(out, kept) if not k}), 1)

  def test_a_block_draws_from_its_own_seed_alone(self):
    seeds = tf.constant([[1, 2], [3, 4], [5, 6]], tf.int64)
    both = preprocess.pp_registry.block_uniform(seeds, 4, 6).numpy()
    self.assertEqual(both.shape, (6, 12))
    np.testing.assert_array_equal(
        both[:, 4:8], preprocess.pp_registry.block_uniform(seeds[1:2], 4, 6))
    images = tf.constant(np.stack([_photo(size=32)] * 6))
    warp = augment.random_affine(20, 0.1, (0.8, 1.2), 10)
    whole = warp(images, seeds[:2]).numpy()
    np.testing.assert_array_equal(whole[3:], warp(images[3:], seeds[1]))

  @parameterized.parameters(
      ('pretrain|random_affine(10)|flip_lr', "op 'flip_lr' comes after the batch op "
       "'random_affine': batch ops work on whole batches, after every per-example op"),
      ('pretrain|random_affine(10)|random_affine(5)', None),
  )
  def test_batch_ops_come_last(self, train, message):
    if message is None:
      example, batch_ops = preprocess.train_chains(_pp(train))
      self.assertIsNotNone(batch_ops)
    else:
      with self.assertRaisesRegex(ValueError, "config.pp.train='pretrain.*" + message):
        preprocess.train_chains(_pp(train))

  def test_batch_ops_are_refused_where_images_come_one_at_a_time(self):
    with self.assertRaisesRegex(ValueError, "op 'random_affine' works on whole batches"):
      preprocess.pp_registry.build('resize(28)|random_affine(10)', _pp('pretrain'))
    pp = _pp('pretrain')
    pp.eval = 'random_affine(10)'
    with self.assertRaisesRegex(ValueError, "config.pp.eval=.*op 'random_affine' is random"):
      preprocess.eval_chain(pp)


if __name__ == '__main__':
  absltest.main()
