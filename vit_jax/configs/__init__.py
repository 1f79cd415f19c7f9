"""The config schema (base) and the paper's recipes that the experiment files build on.

`load('configs/vit.py:b16,cifar10')` reads an experiment file by path, as
`--config=` does on the command line.
"""
import importlib.util
import os

import ml_collections

from vit_jax.configs import base

get_base_config = base.get_base_config


def load(spec: str) -> ml_collections.ConfigDict:
  """The config of an experiment file 'PATH.py[:ARG]' (get_config(ARG) or get_config())."""
  path, _, arg = spec.partition(':')
  if not os.path.isfile(path):
    raise FileNotFoundError(f'config file {path!r} does not exist.')
  module_spec = importlib.util.spec_from_file_location(
      f'vit_jax_config_{abs(hash(os.path.abspath(path)))}', path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()
