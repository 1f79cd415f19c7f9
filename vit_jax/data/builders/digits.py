"""`digits`: scikit-learn's 1,797 8x8 handwritten digits (UCI optdigits test set).

Pixel values 0..16 are scaled to uint8 0..255 (round(v * 255 / 16)). The rows are roughly
balanced in every prefix, so the split is positional: the first 1,437 rows are `train`
(141..146 per class) and the last 360 rows are `test` (33..37 per class).
"""
from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from vit_jax.data.builders.encode import encode

NUM_CLASSES = 10
NUM_TRAIN = 1437


def load_arrays() -> tuple[np.ndarray, np.ndarray]:
  """Returns (images uint8 [1797, 8, 8, 1], labels int64 [1797]) from scikit-learn."""
  try:
    from sklearn import datasets as sk_datasets  # pylint: disable=g-import-not-at-top
  except ModuleNotFoundError as e:
    raise ModuleNotFoundError(
        'digits needs scikit-learn, which ships the images: pip install scikit-learn'
    ) from e
  bunch = sk_datasets.load_digits()
  images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
  return images, bunch.target.astype(np.int64)


class Digits(tfds.core.GeneratorBasedBuilder):
  """scikit-learn's 8x8 digits: 1,437 train / 360 test."""

  name = 'digits'
  # TFDS derives code_path through importlib_resources, absent from some installs.
  code_path = epath.Path(__file__)
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'First 1,437 rows train, last 360 test.'}

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=(8, 8, 1)),
            'label': tfds.features.ClassLabel(
                names=[str(i) for i in range(NUM_CLASSES)]),
        }),
        supervised_keys=('image', 'label'),
        homepage='https://scikit-learn.org/stable/datasets/toy_dataset.html',
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download: the data ships inside scikit-learn.
    images, labels = load_arrays()
    rows = np.arange(len(labels))
    return {'train': self._generate_examples(images, labels, rows[:NUM_TRAIN]),
            'test': self._generate_examples(images, labels, rows[NUM_TRAIN:])}

  def _generate_examples(self, images, labels, rows):
    for row in rows:
      yield int(row), {'image': encode(images[row]), 'label': int(labels[row])}
