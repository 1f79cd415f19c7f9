"""`python -m vit_jax.main`; its usage (--help) is vit_jax/main.py's docstring."""
import logging as std_logging
import os
import shlex
import sys

from absl import app
from absl import logging
import jax

from vit_jax import errors
from vit_jax.cli import train_flags
from vit_jax.parallel import distributed
from vit_jax.train import loop
from vit_jax.train import preemption
from vit_jax.train import writers

_CONFIG = train_flags.CONFIG
_WORKDIR = train_flags.WORKDIR
_DEBUG = train_flags.DEBUG


class _QuietLibraries(std_logging.Filter):
  """Keeps the libraries' INFO chatter (orbax, TFDS) out of the run log."""

  _NOISY = ('/orbax/', '/tensorflow_datasets/', '/clu/', '/etils/', '/jax/')

  def filter(self, record: std_logging.LogRecord) -> bool:
    if record.levelno >= std_logging.WARNING:
      return True
    return not any(part in record.pathname for part in self._NOISY)


def main(argv) -> None:
  """Starts the distributed runtime, then trains and evaluates."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if _CONFIG.value is None or not _WORKDIR.value:
    raise app.UsageError('Both --config and --workdir are required.')
  distributed.initialize()
  logging.get_absl_handler().addFilter(_QuietLibraries())
  # Only process 0 reports progress; the others speak up for warnings and errors.
  logging.set_verbosity(logging.INFO if jax.process_index() == 0 else logging.WARNING)
  config = _CONFIG.value
  train_flags.expand_home(config)
  try:
    final = loop.train_and_evaluate(config, os.path.expanduser(_WORKDIR.value))
  except preemption.Preempted as e:
    print(f'vit_jax: {e.kind} at step {e.step}: checkpoint saved in {e.directory}; '
          f'resume with: {resume_command(sys.argv)}', file=sys.stderr)
    sys.exit(e.exit_code)
  except KeyboardInterrupt:  # a second Ctrl-C, or one before the first step
    print('vit_jax: aborted (Ctrl-C) without a new checkpoint; resume from the newest '
          f'one, if any, with: {resume_command(sys.argv)}', file=sys.stderr)
    sys.exit(preemption.INTERRUPTED_EXIT_CODE)
  except (ValueError, OSError, loop.NonFiniteError) as e:
    if _DEBUG.value:
      raise
    print(f'vit_jax: error: {e}', file=sys.stderr)
    sys.exit(2)
  logging.info('Done: %s', writers.format_scalars(final))


def resume_command(argv: list[str]) -> str:
  """The command line that resumes this run: the same one, as `python -m vit_jax.main`."""
  return shlex.join(['python', '-m', 'vit_jax.main', *argv[1:]])


def run(rest: list[str]) -> None:
  """Trains with the flags vit_jax/main.py parsed (rest: what the flags left of argv)."""
  errors.list_flags_in_help()
  errors.skip_final_gc()
  app.run(main, flags_parser=lambda _: rest)
