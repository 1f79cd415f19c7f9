"""ReaL label sets of an eval split, from a real.json file: how its entries meet the images.

Images whose `file_name` names an ImageNet validation file (ILSVRC2012_val_<N>) get entry
N-1, whatever the split's order or slice (TFDS shuffles imagenet2012's records when it
prepares them; an image folder sorts them by class); any other split is matched by position,
its n-th image in file order getting entry n. vit_jax.data.pipeline builds the eval pass;
the file itself is read and checked by vit_jax.data.real_labels (no TensorFlow).
"""
from typing import Optional

import tensorflow as tf
import tensorflow_datasets as tfds

from vit_jax.data import real_labels
from vit_jax.data import sources


def _first_file_name(builder, split: str) -> str:
  """The file_name feature of the split's first image ('' without one)."""
  if 'file_name' not in builder.info.features:
    return ''
  image_keys = {k: tfds.decode.SkipDecoding() for k, f in builder.info.features.items()
                if isinstance(f, tfds.features.Image)}
  first = builder.as_dataset(split=split, shuffle_files=False, decoders=image_keys).take(1)
  for ex in first.as_numpy_iterator():
    return ex['file_name'].decode('utf-8', 'replace')
  return ''


def _by_file_name(builder, split: str, n: int, labels: list, path: str) -> bool:
  """Whether ReaL entries meet the split's images by ImageNet file name (else by position).

  One-line error when the file's length does not fit the way they meet.
  """
  if real_labels.IMAGENET_VAL_NAME.search(_first_file_name(builder, split)):
    real_labels.check_length(labels, path, 'the ImageNet validation set (its images are '
                             'matched by file name)', real_labels.IMAGENET_VAL_SIZE)
    return True
  real_labels.check_length(labels, path, f'{builder.name} split {split!r}', n)
  return False


def check(config, label_key: str, path: str, split: Optional[str] = None) -> None:
  """One-line errors for a ReaL file that cannot label this eval split, if it is prepared.

  Checked again when the pass is built; this runs before anything is trained.
  """
  labels = real_labels.read(path)
  spec = sources.resolve(config.dataset, label_key)
  builder = sources.make_builder(spec, config.get('data_dir'))
  if not sources.is_prepared(builder):
    return  # A download: it is prepared (and checked) when the evaluator is built.
  info = sources.info_from_builder(config, spec, builder, train=False)
  real_labels.check_classes(labels, path, info.num_classes)
  split = split or info.eval_split
  _by_file_name(builder, split, sources.split_size(builder, split), labels, path)


def rows(builder, split: str, n: int, path: str, num_classes: int):
  """Returns (record, index) -> the ReaL label ids of the image, padded with -1.

  Images named as ImageNet validation files get their file's entry; other splits are
  matched by position (vit_jax.data.real_labels).
  """
  labels = real_labels.read(path)
  real_labels.check_classes(labels, path, num_classes)
  table = tf.constant(real_labels.padded(labels))
  if _by_file_name(builder, split, n, labels, path):
    features = builder.info.features
    skip = {k: tfds.decode.SkipDecoding() for k, f in features.items()
            if isinstance(f, tfds.features.Image)}

    def by_name(record, index):
      del index
      name = features.deserialize_example(record, decoders=skip)['file_name']
      number = tf.strings.regex_replace(name, r'^.*ILSVRC2012_val_(\d{8}).*$', r'\1')
      return tf.gather(table, tf.strings.to_number(number, tf.int64) - 1)
    return by_name
  return lambda record, index: tf.gather(table, tf.maximum(index, 0))
