"""The experiment configs shipped with the package, found by path or by name.

A clone has them in `configs/`; a plain `pip install` ships the same files as the package
`vit_jax.experiment_configs`. `--config=configs/quickstart.py`, `--config=quickstart.py` and
`--config=quickstart` all name the shipped file when no such file exists where the command
runs, so the README's commands work from any directory after any install.
"""
import difflib
import importlib.util
import os
from typing import Optional

import vit_jax

_PACKAGE = 'vit_jax.experiment_configs'


def directory() -> Optional[str]:
  """The folder of the shipped experiment configs, or None where the install lacks them."""
  try:
    spec = importlib.util.find_spec(_PACKAGE)
  except ImportError:
    spec = None
  if spec is not None and spec.submodule_search_locations:
    return list(spec.submodule_search_locations)[0]
  # Run from a source tree without installing (PYTHONPATH=REPO): REPO/configs.
  beside = os.path.join(os.path.dirname(os.path.dirname(vit_jax.__file__)), 'configs')
  return beside if os.path.isfile(os.path.join(beside, 'quickstart.py')) else None


def names() -> list[str]:
  """The shipped experiment configs, e.g. ['augreg', 'quickstart', 'vit', ...]."""
  folder = directory()
  if folder is None:
    return []
  return sorted(f[:-3] for f in os.listdir(folder)
                if f.endswith('.py') and not f.startswith('_'))


def summary(name: str) -> str:
  """The first line of a shipped config's docstring."""
  with open(os.path.join(directory(), f'{name}.py'), encoding='utf-8') as f:
    for line in f:
      text = line.strip().strip('"').strip()
      if text:
        return text
  return ''


def resolve(spec: str) -> str:
  """'PATH.py[:ARG]' as given when PATH exists, else the shipped config of that name."""
  path, colon, arg = spec.partition(':')
  if os.path.exists(path):
    return spec
  name = os.path.basename(path)
  name = name[:-3] if name.endswith('.py') else name
  if name in names():
    return os.path.join(directory(), f'{name}.py') + colon + arg
  close = difflib.get_close_matches(name, names(), n=3, cutoff=0.6)
  hint = f'; did you mean {", ".join(map(repr, close))}?' if close else ''
  shipped = ', '.join(names()) or 'none in this install'
  raise FileNotFoundError(f'config file {path!r} does not exist and names no shipped '
                          f'config{hint} (shipped: {shipped}).')
