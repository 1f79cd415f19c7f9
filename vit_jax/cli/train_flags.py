"""The training command's flags: definitions, parsing, --help and --print_config.

Light (no TensorFlow): vit_jax/main.py parses the command line with it before the trainer's
modules load, so --help, --print_config and a mistake in the flags or the config answer
in about a second.
"""
import os
import re
import sys
from typing import Optional

from absl import flags
import ml_collections
from ml_collections import config_flags

from vit_jax import configs
from vit_jax import errors
from vit_jax.cli import config_text
from vit_jax.configs import base
from vit_jax.configs import experiments
from vit_jax.configs import original_keys
from vit_jax.parallel import host_memory

CONFIG = config_flags.DEFINE_config_file(
    'config', None, "Experiment config: a shipped config's name (listed above) or a file "
    '(configs/FILE.py), with :ARGS for its get_config(ARGS).', lock_config=True)
WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory for checkpoints, metrics and params.npz.')
DEBUG = flags.DEFINE_bool(
    'debug', False, 'Show full tracebacks instead of one-line errors.')
PRINT_CONFIG = flags.DEFINE_bool(
    'print_config', False, 'Print the resolved config (the file with every --config.KEY '
    'override applied) and exit without training; --workdir is not needed.')


def retain_host_memory() -> bool:
  """On a CPU-only run, keeps XLA's freed temporaries on the heap (vit_jax.parallel.host_memory)."""
  return host_memory.retain_on_cpu()


def configs_help() -> str:
  """The shipped configs with their summaries, for --help."""
  names = experiments.names()
  width = max((len(n) for n in names), default=0)
  lines = [f'  {n:<{width}}  {experiments.summary(n)}' for n in names]
  return 'Shipped configs (--config=NAME[:ARGS]):\n' + '\n'.join(lines)


def exit_on_help(argv: list[str]) -> None:
  """Prints the training command's help and exits 0 when argv asks for it."""
  errors.exit_on_help(argv, extra=configs_help() if experiments.names() else '')


def exit_on_print_config() -> None:
  """With --print_config, prints the parsed config (overrides applied) and exits 0."""
  if not PRINT_CONFIG.value:
    return
  if CONFIG.value is None:
    print('vit_jax: error: --print_config needs --config; see python -m vit_jax.main '
          '--help.', file=sys.stderr)
    sys.exit(errors.USER_ERROR)
  config = CONFIG.value
  expand_home(config)
  print(config_text.to_yaml(config), end='')
  sys.exit(0)


def exit_on_missing(prog: str = 'vit_jax') -> None:
  """A missing --config or --workdir: one line and exit status 2 (not absl's whole usage)."""
  if CONFIG.value is None:
    message = ('--config is needed, e.g. --config=quickstart (python -m vit_jax.list configs '
               'lists the shipped ones).')
  elif not WORKDIR.value:
    message = ('--workdir is needed: the directory for the checkpoints, metrics and '
               'params.npz, e.g. --workdir=/tmp/vit_run.')
  else:
    return
  print(f'{prog}: error: {message}', file=sys.stderr)
  sys.exit(errors.USER_ERROR)


# Config keys holding local paths; the shell leaves `~` in `--flag=~/x` to us.
PATH_KEYS = ('pretrained_path', 'pretrained_dir', 'data_dir', 'manual_dir')


def expand_home(config: ml_collections.ConfigDict) -> None:
  """Makes `~` in the config's path keys the home directory, as the shell would."""
  for key in PATH_KEYS:
    value = config.get(key)
    if isinstance(value, str) and value.startswith('~'):
      config[key] = os.path.expanduser(value)


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
    if CONFIG.value is not None:
      _ = CONFIG.value.to_dict  # config_flags reports a bad file only on use
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
      message = (_unknown_flag(e, argv) or (not hinted and _unknown_key(e, argv)) or
                 _one_line(text))
      message = _with_unknown_keys(message, argv)
  print(f'vit_jax: error: {message}', file=sys.stderr)
  sys.exit(2)


def _unknown_flag(e: BaseException, argv: list[str]) -> Optional[str]:
  """'unknown flag --batch=64; did you mean --config.batch=64?' for another trainer's habit."""
  unknown = next((x for x in _chain(e) if isinstance(x, flags.UnrecognizedFlagError)), None)
  if unknown is None:
    return None
  name = unknown.flagname
  given = next((a for a in argv if re.match(rf'--?{re.escape(name)}(=|$)', a)), f'--{name}')
  value = given.partition('=')[2]
  if name in ('output', 'output_dir', 'out'):
    return f'unknown flag {given}; did you mean --workdir={value or "DIR"}?'
  key = config_text.config_key_for_flag(name, base.get_base_config())
  if key is None:
    return (f'unknown flag {given}; config keys are set as --config.KEY=VALUE '
            '(vit_jax/configs/base.py lists every key).')
  note = (' (a number of steps, not epochs)' if name in ('epochs', 'warmup_epochs') else '')
  return f'unknown flag {given}; did you mean --config.{key}={value or "VALUE"}?{note}'


def _unknown_key(e: BaseException, argv: list[str]) -> Optional[str]:
  """'unknown config key ...' when a --config.KEY override names no key of the config."""
  missing = {x.args[0] for x in _chain(e) if isinstance(x, KeyError) and x.args}
  for arg in argv:
    override = re.match(r'--?config\.([\w.]+)', arg)
    if override and missing & set(override.group(1).split('.')):
      return f'unknown config key {override.group(1)!r}{_LOCKED}.'
  return None


_LOCKED = ' (configs are locked: vit_jax/configs/base.py lists every key)'


def _with_unknown_keys(message: str, argv: list[str]) -> str:
  """`message` plus every other --config.KEY override that names no key of the config.

  The keys are the config file's (without overrides), or the base config's where the
  file itself fails; so one mistake does not hide the others until the next try.
  """
  spec = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), '')
  try:
    known = set(config_text.dotted_keys(configs.load(spec), sections=True))
  except Exception:  # pylint: disable=broad-except  (the mistake `message` reports)
    known = set(config_text.dotted_keys(base.get_base_config(), sections=True))
  others = []
  for arg in argv:
    override = re.match(r'--?config\.([\w.]+)', arg)
    if not override or override.group(1) in known or repr(override.group(1)) in message:
      continue
    hint = errors.did_you_mean(override.group(1), sorted(known))
    others.append(f'unknown config key {override.group(1)!r}' + (f' ({hint})' if hint else ''))
  if not others:
    return message
  problems = [message.replace(_LOCKED, '').rstrip('.'), *others]
  return (f'{len(problems)} mistakes: ' + '; '.join(
      f'{i}) {p}' for i, p in enumerate(problems, 1)) + _LOCKED + '.')


def _chain(e: BaseException) -> list[BaseException]:
  """The exception and its causes, outermost first."""
  out = []
  while e is not None and e not in out:
    out.append(e)
    e = e.__cause__ or e.__context__
  return out
