"""Imports a script of tools/ as a module (tools/ is no package), for the tests of its functions."""
import importlib.util
import os
import types

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tools')


def load(name: str) -> types.ModuleType:
  """tools/<name>.py (or tools/dev/<name>.py), executed as a module named `name`."""
  path = os.path.join(TOOLS, name + '.py')
  if not os.path.exists(path):
    path = os.path.join(TOOLS, 'dev', name + '.py')
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
