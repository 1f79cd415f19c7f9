"""The one entry point: `python -m vit_jax COMMAND [flags]` and the `vit-jax` console script.

Each command is the `python -m vit_jax.X` module it names, run as that module's __main__ (so
both spellings behave alike); the listing reads each module's docstring without importing it,
so `vit-jax` and `vit-jax --help` answer before anything heavy loads.
"""
import ast
import importlib.util
import runpy
import sys
from typing import Optional, Sequence

from vit_jax import errors

PROG = 'vit-jax'

# Command name -> the module `python -m` runs. The order is the listing's.
COMMANDS = {
    'train': 'vit_jax.main',
    'evaluate': 'vit_jax.evaluate',
    'predict': 'vit_jax.predict',
    'fewshot': 'vit_jax.fewshot',
    'analyze': 'vit_jax.analyze',
    'visualize': 'vit_jax.visualize',
    'vtab': 'vit_jax.vtab',
    'convert': 'vit_jax.convert',
    'export': 'vit_jax.export',
    'plot': 'vit_jax.plot',
    'list': 'vit_jax.list',
    'benchmark': 'vit_jax.perf.benchmark',
    'data_benchmark': 'vit_jax.perf.data_benchmark',
    'memory': 'vit_jax.perf.memory',
    'checkpoint_verify': 'vit_jax.perf.checkpoint_verify',
}

# Other projects' command names (timm's train.py / validate.py / inference.py, ...) -> ours.
ALIASES = {'main': 'train', 'validate': 'evaluate', 'eval': 'evaluate', 'inference': 'predict',
           'infer': 'predict', 'linear_probe': 'fewshot', 'knn': 'fewshot', 'onnx': 'export',
           'models': 'list', 'bench': 'benchmark'}

_HELP = ('--help', '-help', '-h', '--helpshort', '-?', '--helpfull', '-helpfull', 'help')


def summary(module: str) -> str:
  """The first line of a command module's docstring, read from its source (no import)."""
  spec = importlib.util.find_spec(module)
  with open(spec.origin, encoding='utf-8') as f:
    doc = ast.get_docstring(ast.parse(f.read())) or ''
  return doc.strip().splitlines()[0] if doc.strip() else ''


def usage() -> str:
  """The listing of every command, one line each."""
  width = max(len(name) for name in COMMANDS)
  lines = [f'usage: {PROG} COMMAND [flags]   (or python -m vit_jax COMMAND [flags])', '',
           'commands:']
  lines += [f'  {name:<{width}}  {summary(module)}' for name, module in COMMANDS.items()]
  lines += ['', f'{PROG} COMMAND --help lists its flags; each command is also '
            'python -m MODULE (train: python -m vit_jax.main).']
  return '\n'.join(lines)


def resolve(word: str) -> str:
  """The module of command `word`; ValueError naming the closest commands otherwise."""
  name = ALIASES.get(word, word)
  if name in COMMANDS:
    return COMMANDS[name]
  if word in COMMANDS.values():  # the module's own name: vit-jax vit_jax.predict
    return word
  hint = errors.did_you_mean(word, list(COMMANDS))
  raise ValueError(f'unknown command {word!r}; ' + (f'{hint} ' if hint else '') +
                   f'{PROG} lists the commands.')


def main(argv: Optional[Sequence[str]] = None) -> None:
  """Runs the command named by argv[1] with the rest of argv as its own command line."""
  argv = list(sys.argv if argv is None else argv)
  if len(argv) < 2 or argv[1] in _HELP:
    print(usage())
    sys.exit(0)
  if argv[1].startswith('-'):
    print(f'{PROG}: error: the command comes first ({PROG} COMMAND {argv[1]} ...); '
          f'{PROG} lists the commands.', file=sys.stderr)
    sys.exit(errors.USER_ERROR)
  try:
    module = resolve(argv[1])
  except ValueError as e:
    print(f'{PROG}: error: {e}', file=sys.stderr)
    sys.exit(errors.USER_ERROR)
  sys.argv = [argv[0], *argv[2:]]
  runpy.run_module(module, run_name='__main__', alter_sys=True)
