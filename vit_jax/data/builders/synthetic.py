"""`synthetic`: random images of a configured size and class count, for benchmarks and tests.

Every class has its own random low-frequency colour pattern; an image is its class pattern
plus per-pixel uniform noise, so a model can learn the labels (a training smoke test sees the loss
fall) while the data costs nothing to ship. Generation is seeded by the config and the
example index, so a prepared dataset is identical on every machine.

Named configs (`synthetic/<name>`):
  small    (default) 32x32 PNG, 10 classes, 1,024 train / 256 test.
  jpeg224  ImageNet-like JPEGs (quality 90, 300..500 px per side, ~100 KB each),
           1,000 classes, 2,048 train / 512 test: the input of the throughput benchmark.
Any other config is spelled `<size>px_<classes>cls[_<n>train][_<n>test][_jpeg]`,
e.g. `synthetic/64px_5cls_200train_40test`.
"""
import dataclasses
import re

from etils import epath
import numpy as np
from PIL import Image
import tensorflow_datasets as tfds

from vit_jax.data.builders.encode import encode

_NAME_RE = re.compile(
    r'^(?P<size>\d+)px_(?P<classes>\d+)cls(?:_(?P<train>\d+)train)?'
    r'(?:_(?P<test>\d+)test)?(?P<jpeg>_jpeg)?$')


@dataclasses.dataclass(eq=False)
class SyntheticConfig(tfds.core.BuilderConfig):
  """What `synthetic` generates; `image_size` 0 means a random 300..500 px per side."""
  image_size: int = 32
  num_classes: int = 10
  num_train: int = 1024
  num_test: int = 256
  encoding: str = 'png'  # 'png' | 'jpeg'


def config_from_name(name: str) -> SyntheticConfig:
  """Returns the named config, or parses `<size>px_<classes>cls[_<n>train][_<n>test][_jpeg]`."""
  for config in Synthetic.BUILDER_CONFIGS:
    if config.name == name:
      return config
  m = _NAME_RE.match(name)
  if not m:
    known = ', '.join(c.name for c in Synthetic.BUILDER_CONFIGS)
    raise ValueError(
        f'Unknown synthetic config {name!r}: use one of {known} or '
        '<size>px_<classes>cls[_<n>train][_<n>test][_jpeg], e.g. 64px_5cls_200train')
  size, classes = int(m['size']), int(m['classes'])
  num_train = int(m['train'] or 1024)
  num_test = int(m['test'] or 256)
  if size < 1 or classes < 1 or num_train < 1 or num_test < 1:
    raise ValueError(f'synthetic/{name}: size, classes and example counts must be >= 1')
  return SyntheticConfig(
      name=name, version='1.0.0', image_size=size, num_classes=classes,
      num_train=num_train, num_test=num_test,
      encoding='jpeg' if m['jpeg'] else 'png',
      description=f'{size}px, {classes} classes, {num_train} train / {num_test} test')


def _class_pattern(config: SyntheticConfig, label: int) -> np.ndarray:
  """Returns a float [4, 4, 3] colour pattern in [0, 255] fixed per class."""
  rng = np.random.default_rng([config.num_classes, label])
  return rng.uniform(0, 255, size=(4, 4, 3))


def make_image(config: SyntheticConfig, split_id: int, index: int) -> tuple[np.ndarray, int]:
  """Returns (uint8 [H, W, 3] image, label) of example `index` of a split, deterministically."""
  rng = np.random.default_rng([config.image_size, config.num_classes, split_id, index])
  label = int(rng.integers(config.num_classes))
  if config.image_size > 0:
    height = width = config.image_size
  else:
    height, width = (int(v) for v in rng.integers(300, 501, size=2))
  pattern = Image.fromarray(_class_pattern(config, label).astype(np.uint8))
  base = np.asarray(pattern.resize((width, height), Image.BILINEAR), np.int16)
  # Uniform integer noise: statistically like Gaussian noise for a JPEG encoder, 3x cheaper.
  noise = rng.integers(-40, 41, size=(height, width, 3), dtype=np.int16)
  return np.clip(base + noise, 0, 255).astype(np.uint8), label


class Synthetic(tfds.core.GeneratorBasedBuilder):
  """Random class-patterned images; the config sets size, classes, counts and encoding."""

  name = 'synthetic'
  # TFDS derives code_path through importlib_resources, absent from some installs.
  code_path = epath.Path(__file__)
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Class patterns plus Gaussian noise.'}
  BUILDER_CONFIGS = [
      SyntheticConfig(name='small', version='1.0.0',
                      description='32x32 PNG, 10 classes, 1,024 train / 256 test'),
      SyntheticConfig(name='jpeg224', version='1.0.0', image_size=0,
                      num_classes=1000, num_train=2048, num_test=512, encoding='jpeg',
                      description='ImageNet-like JPEGs, 300..500 px, 1,000 classes'),
  ]
  DEFAULT_CONFIG_NAME = 'small'

  def _info(self) -> tfds.core.DatasetInfo:
    config = self.builder_config
    shape = (None, None, 3) if config.image_size == 0 else (
        config.image_size, config.image_size, 3)
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=shape, encoding_format=config.encoding),
            'label': tfds.features.ClassLabel(num_classes=config.num_classes),
        }),
        supervised_keys=('image', 'label'),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Generated, nothing to download.
    config = self.builder_config
    return {'train': self._generate_examples(0, config.num_train),
            'test': self._generate_examples(1, config.num_test)}

  def _generate_examples(self, split_id, count):
    config = self.builder_config
    for index in range(count):
      image, label = make_image(config, split_id, index)
      yield index, {'image': encode(image, config.encoding), 'label': label}
