"""`python -m vit_jax.predict`; its usage (--help) is vit_jax/predict.py's docstring."""
from typing import Optional, Sequence

from absl import app
from absl import flags
from absl import logging

from vit_jax import errors
from vit_jax.cli import common
from vit_jax.inference import labels as labels_lib
from vit_jax.inference import load
from vit_jax.inference import predict

FLAGS = flags.FLAGS


def _define_flags() -> None:
  common.define_checkpoint_flags()
  flags.DEFINE_string('labels', None, 'imagenet1k | imagenet21k | a dataset name '
                      '(as in config.dataset); default: the dataset of the config.json '
                      'beside the checkpoint, else by the number of outputs.')
  flags.DEFINE_integer('resolution', None, 'Input resolution; default: the '
                       "checkpoint's.")
  flags.DEFINE_enum('activation', 'auto', ['auto', 'softmax', 'sigmoid'],
                    'auto: sigmoid for imagenet21k (multi-label heads), else softmax.')
  flags.DEFINE_integer('top', 5, 'How many classes to print per image.')
  flags.DEFINE_string('data_dir', None, 'TFDS data dir for --labels=DATASET.')


def main(argv: Sequence[str]) -> None:
  """Prints the top classes of every image named on the command line."""
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # keep the output to the results
  paths = argv[1:]
  if not paths:
    raise app.UsageError('Name at least one image file.')
  path = load.resolve_checkpoint(FLAGS.checkpoint)
  loaded = load.load_model(FLAGS.model, path, FLAGS.resolution, FLAGS.num_heads)
  labels, names = _class_names(path, loaded.num_classes)
  activation = FLAGS.activation
  if activation == 'auto':
    activation = 'sigmoid' if labels == 'imagenet21k' else 'softmax'
  results = predict.predict_files(loaded, paths, names, activation, FLAGS.top)
  for path, best in zip(paths, results):
    print(path)
    for name, prob in best:
      print(f'  {prob:7.2%}  {name}')


def _class_names(checkpoint: str, num_classes: int) -> tuple[Optional[str], list[str]]:
  """(label set, names): --labels, else the training run's dataset, else by size."""
  if FLAGS.labels:
    return FLAGS.labels, labels_lib.load_label_names(FLAGS.labels, FLAGS.data_dir)
  names = labels_lib.transformers_label_names(checkpoint, num_classes)
  if names:
    return 'id2label', names
  trained_on = load.workdir_dataset(checkpoint)
  if trained_on:
    dataset, data_dir = trained_on
    try:
      names = labels_lib.load_label_names(dataset, FLAGS.data_dir or data_dir)
    except (ValueError, OSError, RuntimeError) as e:
      logging.warning('No class names from %s (%s); printing class indices.',
                      load.workdir_config_path(checkpoint), e)
      names = []
    if len(names) == num_classes:
      return dataset, names
  labels = labels_lib.default_labels(num_classes)
  if labels:
    return labels, labels_lib.load_label_names(labels, FLAGS.data_dir)
  return None, [f'class {i}' for i in range(num_classes)]


def run() -> None:
  """Console entry point of `python -m vit_jax.predict`."""
  errors.run_command('vit_jax.predict', _define_flags, main, (ValueError, OSError))
