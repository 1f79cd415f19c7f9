"""`python -m vit_jax.main`; its usage (--help) is vit_jax/main.py's docstring."""
import logging as std_logging
import os
import shlex
import sys
from typing import Callable

from absl import app
from absl import logging
import jax

from vit_jax import errors
from vit_jax import fileio
from vit_jax.cli import train_flags
from vit_jax.configs import effects
from vit_jax.parallel import distributed
from vit_jax.train import checkpointer
from vit_jax.train import loop
from vit_jax.train import preemption
from vit_jax.train import writers

_CONFIG = train_flags.CONFIG
_WORKDIR = train_flags.WORKDIR
_DEBUG = train_flags.DEBUG


class _QuietLibraries(std_logging.Filter):
  """Keeps the libraries' INFO chatter (orbax, TFDS) out of the run log.

  Their errors about a failed write to the workdir stay out too: the run ends with one
  line that says what happened (loop.WriteFault), not orbax's tracebacks of each thread.
  """

  _NOISY = ('/orbax/', '/tensorflow_datasets/', '/clu/', '/etils/', '/jax/')

  def __init__(self, workdir: str):
    super().__init__()
    self._workdir = workdir
    self._faulted = False  # a write failed: the other writes of that step fail after it

  def filter(self, record: std_logging.LogRecord) -> bool:
    if not any(part in record.pathname for part in self._NOISY):
      return True
    if record.levelno < std_logging.WARNING:
      return False
    error = record.exc_info[1] if record.exc_info else Exception(record.getMessage())
    if fileio.write_fault(error, self._workdir) is not None:
      self._faulted = True
      return False
    return not (self._faulted and checkpointer.HALF_WRITTEN_SUFFIX in str(error))


def _drop_closed_loop_errors(previous: Callable) -> Callable:
  """sys.unraisablehook without tensorstore's 'Event loop is closed' after a failed save.

  When an async checkpoint fails (a full disk), its event loop closes while its other
  writes finish, and each reports that; the failure itself gets one line (WriteFault).
  """
  def hook(unraisable) -> None:
    error = unraisable.exc_value
    if not (isinstance(error, RuntimeError) and str(error) == 'Event loop is closed'):
      previous(unraisable)
  return hook


def main(argv) -> None:
  """Starts the distributed runtime, then trains and evaluates."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if _CONFIG.value is None or not _WORKDIR.value:
    raise app.UsageError('Both --config and --workdir are required.')
  distributed.initialize()
  workdir = os.path.expanduser(_WORKDIR.value)
  sys.unraisablehook = _drop_closed_loop_errors(sys.unraisablehook)  # this process's own
  logging.get_absl_handler().addFilter(_QuietLibraries(workdir))
  # Only process 0 reports progress; the others speak up for warnings and errors.
  logging.set_verbosity(logging.INFO if jax.process_index() == 0 else logging.WARNING)
  config = _CONFIG.value
  train_flags.expand_home(config)
  effects.warn_options_without_effect(config)
  try:
    final = loop.train_and_evaluate(config, workdir)
  except preemption.Preempted as e:
    print(f'vit_jax: {e.kind} at step {e.step}: checkpoint saved in {e.directory}; '
          f'resume with: {resume_command(sys.argv)}', file=sys.stderr)
    sys.exit(e.exit_code)
  except KeyboardInterrupt:  # a second Ctrl-C, or one before the first step
    print('vit_jax: aborted (Ctrl-C) without a new checkpoint; resume from the newest '
          f'one, if any, with: {resume_command(sys.argv)}', file=sys.stderr)
    sys.exit(preemption.INTERRUPTED_EXIT_CODE)
  except loop.WriteFault as e:
    if _DEBUG.value:
      raise
    print(f'vit_jax: error: {e.problem}; once there is room, resume with: '
          f'{resume_command(sys.argv)}', file=sys.stderr)
    sys.exit(errors.USER_ERROR)
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
