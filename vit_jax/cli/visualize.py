"""`python -m vit_jax.visualize`; its usage (--help) is vit_jax/visualize.py's docstring."""
from typing import Sequence

from absl import flags
from absl import logging

from vit_jax import errors
from vit_jax.cli import common
from vit_jax.inference import figures
from vit_jax.inference import load

FLAGS = flags.FLAGS


def _define_flags() -> None:
  common.define_checkpoint_flags()
  flags.DEFINE_string('out', None, 'Directory for the PNG files.', required=True)
  flags.DEFINE_integer('resolution', None, "Input resolution; default: the "
                       "checkpoint's.")


def main(argv: Sequence[str]) -> None:
  """Writes the figures of a checkpoint (and of the images named on the command line)."""
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # keep the output to the results
  checkpoint = load.resolve_checkpoint(FLAGS.checkpoint)
  loaded = load.load_model(FLAGS.model, checkpoint, FLAGS.resolution, FLAGS.num_heads)
  for path in figures.write_figures(loaded, argv[1:], FLAGS.out, checkpoint):
    print(path)
  if not argv[1:]:
    logging.info('No images given: attention figures skipped.')


def run() -> None:
  """Console entry point of `python -m vit_jax.visualize`."""
  errors.run_command('vit_jax.visualize', _define_flags, main,
                     (ValueError, OSError, ImportError))
