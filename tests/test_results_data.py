"""The measured results in docs/results/*.csv: provenance per row, commands that exist, tables that read them."""
import csv
import glob
import os
import re
import shlex

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, 'docs', 'results')
PROVENANCE = ('command', 'versions', 'machine', 'date')
# A command may start with variables or a wrapper before the program it runs.
_WRAPPERS = ('taskset', '-c', '0')
_DIRECTIVE = re.compile(r'```\{results-table\} (\S+)\n((?::[a-z]+:.*\n)*)```')


def _read(path: str) -> tuple[list[str], list[dict[str, str]]]:
  with open(path, newline='') as f:
    reader = csv.DictReader(f)
    return list(reader.fieldnames or ()), list(reader)


def _module_exists(module: str) -> bool:
  if not module.startswith('vit_jax'):
    return module == 'pytest'
  base = os.path.join(REPO, *module.split('.'))
  return os.path.isfile(base + '.py') or os.path.isfile(os.path.join(base, '__main__.py'))


def _config_exists(value: str) -> bool:
  name = value.split(':', 1)[0]
  if not name.endswith('.py'):
    name = os.path.join('configs', name + '.py')
  return os.path.isfile(os.path.join(REPO, name))


def command_problems(command: str) -> list[str]:
  """What in a results row's command names no module, script or config of the repository."""
  words = shlex.split(command.split(' (')[0].split(' # ')[0])
  while words and ('=' in words[0] and not words[0].startswith('-') or words[0] in _WRAPPERS):
    words.pop(0)
  if not words:
    return ['no program']
  problems = []
  if words[0] == 'python':
    if words[1] == '-m':
      if not _module_exists(words[2]):
        problems.append(f'no module {words[2]}')
      if words[2] == 'pytest':
        problems += [f'no test file {w}' for w in words[3:]
                     if not w.startswith('-') and not os.path.exists(os.path.join(REPO, w.split('::')[0]))]
    elif not os.path.isfile(os.path.join(REPO, words[1])):
      problems.append(f'no script {words[1]}')
  elif words[0] == 'bash':
    if not os.path.isfile(os.path.join(REPO, words[1])):
      problems.append(f'no script {words[1]}')
  else:
    problems.append(f'unknown program {words[0]}')
  for word in words[1:]:
    key, _, value = word.partition('=')
    if key == '--config' and not _config_exists(value):
      problems.append(f'no config {value}')
    if key == '--plan' and not os.path.isfile(os.path.join(REPO, value)):
      problems.append(f'no plan {value}')
  return problems


class ResultsFilesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.files = sorted(glob.glob(os.path.join(RESULTS, '*.csv')))

  def test_every_row_names_its_command_versions_machine_and_date(self):
    self.assertGreaterEqual(len(self.files), 20)
    for path in self.files:
      with self.subTest(os.path.basename(path)):
        header, rows = _read(path)
        self.assertEqual(tuple(header[-4:]), PROVENANCE)
        self.assertEqual(len(header), len(set(header)))
        self.assertNotEmpty(rows)
        for row in rows:
          self.assertNotIn(None, row, 'a row with more cells than the header')
          for key in PROVENANCE:
            self.assertTrue(row[key], f'{key} is empty in {row}')
          self.assertRegex(row['date'], r'^20\d\d-\d\d-\d\d$')

  def test_every_command_names_a_module_script_or_config_that_exists(self):
    for path in self.files:
      for row in _read(path)[1]:
        with self.subTest(f'{os.path.basename(path)}: {row["command"][:60]}'):
          self.assertEqual(command_problems(row['command']), [])

  def test_the_check_catches_a_command_that_does_not_exist(self):
    self.assertEqual(command_problems('python -m vit_jax.nope --x=1'), ['no module vit_jax.nope'])
    self.assertEqual(command_problems('python tools/nope.py'), ['no script tools/nope.py'])
    self.assertEqual(command_problems('python -m pytest tests/test_nope.py -q'), ['no test file tests/test_nope.py'])
    self.assertEqual(command_problems('python -m vit_jax.main --config=configs/nope.py:b16'),
                     ['no config configs/nope.py:b16'])
    self.assertEqual(command_problems('XLA_FLAGS=--a=b python -m vit_jax.perf.benchmark --config=nope'),
                     ['no config nope'])
    self.assertEqual(command_problems("taskset -c 0 python -m vit_jax.perf.benchmark --config=quickstart:short"), [])

  def test_every_file_is_listed_in_the_readme_and_shown_in_the_docs(self):
    with open(os.path.join(RESULTS, 'README.md')) as f:
      readme = f.read()
    shown = set()
    for page in glob.glob(os.path.join(REPO, 'docs', '**', '*.md'), recursive=True):
      with open(page) as f:
        shown.update(m.group(1) for m in _DIRECTIVE.finditer(f.read()))
    for path in self.files:
      name = os.path.basename(path)
      with self.subTest(name):
        self.assertIn(f'`{name}`', readme)
        self.assertIn(name, shown)


class DocsTablesTest(absltest.TestCase):

  def test_every_results_table_names_a_file_its_columns_and_rows_that_exist(self):
    pages = glob.glob(os.path.join(REPO, 'docs', '**', '*.md'), recursive=True)
    found = 0
    for page in pages:
      with open(page) as f:
        text = f.read()
      for match in _DIRECTIVE.finditer(text):
        found += 1
        name, body = match.groups()
        with self.subTest(f'{os.path.relpath(page, REPO)}: {name}'):
          path = os.path.join(RESULTS, name)
          self.assertTrue(os.path.isfile(path))
          header, rows = _read(path)
          options = dict(re.findall(r':([a-z]+): ?(.*)', body))
          columns = [c.strip() for c in options.get('columns', '').split(',') if c.strip()]
          self.assertEqual([c for c in columns if c not in header], [])
          where = [p.split('=', 1) for p in options.get('where', '').split(';') if '=' in p]
          self.assertTrue(any(all(r.get(k) == v for k, v in where) for r in rows), where)
    self.assertGreaterEqual(found, 20)


if __name__ == '__main__':
  absltest.main()
