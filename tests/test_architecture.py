"""The package's layout rules (docs/architecture.md), checked on the source itself."""
import ast
import os

from absl.testing import absltest

from vit_jax import errors

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       'vit_jax')
# Stages in data-flow order: each may import only itself and the ones before it.
# configs follows train: the config schema is assembled from what the stages declare
# (e.g. each objective's options, from its factory in vit_jax.train.objectives).
STAGES = ('errors', 'fileio', 'rundir', 'option_rules', 'models', 'parallel', 'data',
          'inference', 'serving', 'evaluators', 'train', 'configs', 'perf', 'cli')
# vit_jax.checkpoint is the public face of the models stage's checkpoint formats.
ALIASES = {'checkpoint': 'models'}
# Top-level modules outside the stages: the package and the command entry points.
ENTRY = {'__init__': (), '__main__': ('cli',), 'main': ('cli',), 'predict': ('cli',),
         'visualize': ('cli',), 'fewshot': ('cli',), 'convert': ('cli',),
         'export': ('cli',), 'plot': ('cli',), 'evaluate': ('cli',), 'list': ('cli',),
         'analyze': ('cli',), 'vtab': ('cli',)}


def _stage(module: str) -> str:
  stage = module.split('.')[1] if '.' in module else '__init__'
  return ALIASES.get(stage, stage)


def _modules() -> dict[str, str]:
  out = {}
  for root, _, files in os.walk(PACKAGE):
    for f in files:
      if f.endswith('.py'):
        path = os.path.join(root, f)
        name = os.path.relpath(path[:-3], os.path.dirname(PACKAGE)).replace(os.sep, '.')
        out[name.removesuffix('.__init__')] = path
  return out


def _imports(path: str, modules: dict[str, str]) -> list[tuple[str, bool]]:
  """(imported vit_jax module, inside a function) for every import of the file."""
  tree = ast.parse(open(path, encoding='utf-8').read())
  local = {id(n) for fn in ast.walk(tree)
           if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
           for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
  out = []
  for n in ast.walk(tree):
    if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith('vit_jax'):
      names = [f'{n.module}.{a.name}' for a in n.names]
    elif isinstance(n, ast.Import):
      names = [a.name for a in n.names if a.name.startswith('vit_jax')]
    else:
      continue
    for name in names:
      while name not in modules:
        name = name.rpartition('.')[0]
      out.append((name, id(n) in local))
  return out


class LayoutTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.modules = _modules()
    self.graph = {m: _imports(p, self.modules) for m, p in self.modules.items()}

  def test_no_function_local_imports_of_the_package(self):
    local = [(m, t) for m, edges in self.graph.items() for t, inside in edges if inside]
    self.assertEmpty(local)

  def test_stages_import_only_earlier_stages(self):
    for module, edges in self.graph.items():
      stage = _stage(module)
      for target, _ in edges:
        other = _stage(target)
        if other == stage or other == '__init__':
          continue
        if stage in ENTRY:
          self.assertIn(other, ENTRY[stage], f'{module} imports {target}')
        else:
          self.assertIn(stage, STAGES, module)
          self.assertIn(other, STAGES, f'{module} imports {target}')
          self.assertLess(STAGES.index(other), STAGES.index(stage),
                          f'{module} (stage {stage}) imports {target} (stage {other})')

  def test_no_import_cycles(self):
    graph = {m: {t for t, _ in edges if t != m} for m, edges in self.graph.items()}
    state = {}

    def visit(m, path):
      state[m] = 'open'
      for t in graph[m]:
        if state.get(t) == 'open':
          self.fail(' -> '.join(path[path.index(t):] + [t]))
        if t not in state:
          visit(t, path + [t])
      state[m] = 'done'

    for m in graph:
      if m not in state:
        visit(m, [m])


class FirstLineTest(absltest.TestCase):
  """vit_jax.errors.first_line: what every one-line error quotes of its cause."""

  def test_first_line_of_a_message_type_name_when_empty_and_the_limit(self):
    self.assertEqual(errors.first_line(OSError('  disk full\n  at line 3\n')), 'disk full')
    self.assertEqual(errors.first_line(KeyError()), 'KeyError')
    self.assertEqual(errors.first_line(ValueError('x' * 300)), 'x' * 200)
    self.assertEqual(errors.first_line(ValueError('x' * 300), None), 'x' * 300)
    self.assertEqual(errors.first_line('one\ntwo', 2), 'on')


if __name__ == '__main__':
  absltest.main()
