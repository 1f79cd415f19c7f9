"""The training command: python -m vit_jax.main --config=configs/FILE.py[:ARGS] --workdir=DIR."""
import logging as std_logging
import os
import re
import shlex
import sys
from typing import Optional

from absl import app
from absl import flags
from absl import logging
import jax
import ml_collections
from ml_collections import config_flags

from vit_jax import errors
from vit_jax.configs import experiments
from vit_jax.configs import original_keys
from vit_jax.parallel import distributed
from vit_jax.train import loop
from vit_jax.train import preemption
from vit_jax.train import writers

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Experiment config file (configs/FILE.py[:ARGS]).',
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory for checkpoints, metrics and params.npz.')
_DEBUG = flags.DEFINE_bool(
    'debug', False, 'Show full tracebacks instead of one-line errors.')


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
  expand_home(config)
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


# Config keys holding local paths; the shell leaves `~` in `--flag=~/x` to us.
PATH_KEYS = ('pretrained_path', 'pretrained_dir', 'data_dir', 'manual_dir')


def expand_home(config: ml_collections.ConfigDict) -> None:
  """Makes `~` in the config's path keys the home directory, as the shell would."""
  for key in PATH_KEYS:
    value = config.get(key)
    if isinstance(value, str) and value.startswith('~'):
      config[key] = os.path.expanduser(value)


def resume_command(argv: list[str]) -> str:
  """The command line that resumes this run: the same one, as `python -m vit_jax.main`."""
  return shlex.join(['python', '-m', 'vit_jax.main', *argv[1:]])


def _one_line(text: str) -> str:
  """Distils a flags/config error (often a nested traceback) into one sentence."""
  hint = re.search(r'Did you mean "([^"]+)" instead of "([^"]+)"', text)
  if hint:
    return (f'unknown config key {hint.group(2)!r}; did you mean '
            f'{hint.group(1)!r}? (configs are locked: keys must exist)')
  missing = re.search(r"No such file or directory: '([^']+)'", text)
  if missing:
    return f'config file {missing.group(1)!r} does not exist.'
  found = re.findall(r'\b[A-Z]\w*Error: (.+)', text)
  cause = found[-1].strip() if found else errors.first_line(text, None)
  bad_value = re.search(r'IllegalFlagValueError: flag (--\S+: .+)', text)
  if bad_value and bad_value.group(1).endswith(cause):
    return bad_value.group(1)  # the same cause, with the flag it came from
  return cause


def shipped_config(argv: list[str]) -> list[str]:
  """argv with `--config=NAME` (or a configs/ path that is not here) naming the shipped file."""
  out = []
  for arg in argv:
    if arg.startswith('--config=') and len(arg) > len('--config='):
      arg = '--config=' + experiments.resolve(arg[len('--config='):])
    out.append(arg)
  return out


def parse_flags(argv: list[str]) -> list[str]:
  """Parses flags; a bad --config/--config.KEY becomes one line, not a traceback."""
  try:
    argv = original_keys.translate(shipped_config(argv))
  except (ValueError, FileNotFoundError) as e:
    print(f'vit_jax: error: {e}', file=sys.stderr)
    sys.exit(2)
  sys.argv = argv  # config_flags finds the --config.KEY overrides in sys.argv itself
  try:
    rest = flags.FLAGS(argv)
    if _CONFIG.value is not None:
      _ = _CONFIG.value.to_dict  # config_flags reports a bad file only on use
    return rest
  except Exception as e:  # pylint: disable=broad-except  (the config file runs user code)
    if '--debug' in argv:
      raise
    syntax = next((x for x in _chain(e) if isinstance(x, SyntaxError)), None)
    if syntax is not None:
      message = (f'config file {syntax.filename} line {syntax.lineno}: '
                 f'{syntax.msg}; fix the Python syntax there.')
    else:
      text = '\n'.join(f'{type(x).__name__}: {x}' for x in _chain(e))
      hinted = 'Did you mean' in text  # config_flags found a close key: name it
      message = (not hinted and _unknown_key(e, argv)) or _one_line(text)
  print(f'vit_jax: error: {message}', file=sys.stderr)
  sys.exit(2)


def _unknown_key(e: BaseException, argv: list[str]) -> Optional[str]:
  """'unknown config key ...' when a --config.KEY override names no key of the config."""
  missing = {x.args[0] for x in _chain(e) if isinstance(x, KeyError) and x.args}
  for arg in argv:
    override = re.match(r'--?config\.([\w.]+)', arg)
    if override and missing & set(override.group(1).split('.')):
      return (f'unknown config key {override.group(1)!r} (configs are locked: '
              'vit_jax/configs/base.py lists every key).')
  return None


def _chain(e: BaseException) -> list[BaseException]:
  """The exception and its causes, outermost first."""
  out = []
  while e is not None and e not in out:
    out.append(e)
    e = e.__cause__ or e.__context__
  return out


def run() -> None:
  """Console entry point of `python -m vit_jax.main`."""
  errors.list_flags_in_help()
  app.run(main, flags_parser=parse_flags)
