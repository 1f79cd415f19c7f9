r"""Measures the training input pipeline's throughput in images per second, on this host's CPUs.

  python -m vit_jax.perf.data_benchmark --dataset=synthetic/jpeg224 --batch=256 --steps=100

runs the real training pipeline of vit_jax.data.pipeline (read, JPEG crop-decode, inception
crop to 224, flip, batch) and prints images/sec overall and per CPU core, the latter both as
wall-clock rate / cores and as images per CPU-second the process used (all its threads):
the second is the one to scale to another host, and stays right on a busy machine. The default
dataset, synthetic/jpeg224, holds ImageNet-like JPEGs (300..500 px, ~100 KB) and is generated
into --data_dir on first use (about 20 s), so the command needs no download. Any dataset name
of vit_jax.data.sources works, e.g. --dataset=imagenet2012 --data_dir=/path/to/tfds, and
--recipe any pp.train string (e.g. --recipe='pretrain|randaug(2, 9, 0.5)' for RandAugment).
"""
import sys

from absl import flags
import ml_collections

from vit_jax import errors
from vit_jax.configs import base

_DATASET = flags.DEFINE_string('dataset', 'synthetic/jpeg224', 'Dataset name.')
_DATA_DIR = flags.DEFINE_string('data_dir', None, 'TFDS data dir (default: TFDS default).')
_BATCH = flags.DEFINE_integer('batch', 256, 'Images per batch (one process).')
_STEPS = flags.DEFINE_integer('steps', 100, 'Batches timed.')
_WARMUP = flags.DEFINE_integer('warmup', 10, 'Batches run before timing starts.')
_RECIPE = flags.DEFINE_string('recipe', 'pretrain', "pp.train: a recipe ('pretrain', "
                              "'finetune', 'finetune_inception') or any pp string of ops, "
                              "e.g. 'pretrain|randaug(2, 9, 0.5)|erase(0.25)'.")
_CROP = flags.DEFINE_integer('crop', 224, 'Training resolution (pp.crop).')
_SHUFFLE = flags.DEFINE_integer('shuffle_buffer', 50_000, 'config.shuffle_buffer.')
_CACHE = flags.DEFINE_bool('cache', False, 'Keep the training records in memory.')


def config_from_flags() -> ml_collections.ConfigDict:
  """The training config whose input pipeline the flags describe."""
  config = base.get_base_config()
  config.dataset = _DATASET.value
  config.data_dir = _DATA_DIR.value
  config.batch = _BATCH.value
  config.shuffle_buffer = _SHUFFLE.value
  config.cache = _CACHE.value
  config.pp.train = _RECIPE.value
  config.pp.crop = _CROP.value
  config.pp.resize = max(config.pp.resize, _CROP.value)
  return config


if __name__ == '__main__':
  # Its flags are defined above, at import; --help answers before TensorFlow loads.
  errors.exit_on_help(sys.argv)
  from vit_jax.perf import input_throughput  # pylint: disable=g-import-not-at-top
  errors.run_command(
      'vit_jax.perf.data_benchmark', lambda: None,
      lambda argv: input_throughput.report(config_from_flags(), _STEPS.value, _WARMUP.value))
