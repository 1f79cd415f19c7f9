"""`python -m vit_jax.plot`; its usage (--help) is vit_jax/plot.py's docstring."""
from typing import Sequence

from absl import app
from absl import flags

from vit_jax import errors
from vit_jax.inference import curves

FLAGS = flags.FLAGS


def _define_flags() -> None:
  flags.DEFINE_string('out', '', 'PNG file to write; default: WORKDIR/curves.png.')


def main(argv: Sequence[str]) -> None:
  """Plots loss and accuracy against step from WORKDIR/metrics.jsonl."""
  if len(argv) != 2:
    raise app.UsageError('Name one work directory: python -m vit_jax.plot WORKDIR')
  out, skipped = curves.write_curves(argv[1], FLAGS.out)
  print(out)
  if skipped:
    print(f'(left out the last line of {curves.METRICS_FILE}: the run is still '
          'writing it)')


def run() -> None:
  """Console entry point of `python -m vit_jax.plot`."""
  errors.run_command('vit_jax.plot', _define_flags, main, (ValueError, OSError))
