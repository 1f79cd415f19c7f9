"""Command line: python -m vit_jax.main --config=configs/FILE.py[:ARGS] --workdir=DIR."""
import logging as std_logging
import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Experiment config file (configs/FILE.py[:ARGS]).',
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory for checkpoints, metrics and params.npz.')
_DEBUG = flags.DEFINE_bool(
    'debug', False, 'Show full tracebacks instead of one-line errors.')


def main(argv) -> None:
  """Starts the distributed runtime, then trains and evaluates."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if _CONFIG.value is None or not _WORKDIR.value:
    raise app.UsageError('Both --config and --workdir are required.')
  # TensorFlow (input pipeline) must leave accelerators to JAX.
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  from vit_jax import distributed  # pylint: disable=g-import-not-at-top
  from vit_jax import train  # pylint: disable=g-import-not-at-top
  distributed.initialize()
  std_logging.getLogger('absl').setLevel(std_logging.INFO)
  logging.set_verbosity(logging.INFO)
  try:
    final = train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except train.Preempted as e:
    logging.warning('%s', e)
    sys.exit(train.PREEMPTED_EXIT_CODE)
  except (ValueError, FileNotFoundError, train.NonFiniteError) as e:
    if _DEBUG.value:
      raise
    print(f'vit_jax: error: {e}', file=sys.stderr)
    sys.exit(2)
  logging.info('Done: %s', final)


if __name__ == '__main__':
  app.run(main)
