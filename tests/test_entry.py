"""The one entry point (python -m vit_jax, vit-jax), the trainer's usage lines, --print_config.

Commands run as subprocesses (their modules define flags); the probe reports which heavy
libraries a command had imported when it answered, which is what "answers in seconds" means.
"""
import json
import os
import subprocess
import sys

from absl.testing import absltest
import yaml

from vit_jax.cli import commands as entry
from vit_jax.cli import config_text
from vit_jax.configs import base

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ('tensorflow', 'flax', 'jax', 'optax', 'orbax')

# Runs a module as `python -m` would, then reports its exit code and the heavy libraries loaded.
_PROBE = r'''
import json, runpy, sys
module, args = sys.argv[1], sys.argv[2:]
sys.argv = [module, *args]
code = 0
try:
  runpy.run_module(module, run_name='__main__', alter_sys=True)
except SystemExit as e:
  code = e.code
heavy = %r
print(json.dumps({'code': code, 'loaded': sorted(m for m in heavy if m in sys.modules)}),
      file=sys.__stdout__)
''' % (HEAVY,)


def env() -> dict:
  return dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')


def probe(module: str, *args: str) -> tuple[dict, str]:
  """(exit code and heavy libraries loaded, stderr) of `python -m module args`."""
  out = subprocess.run([sys.executable, '-c', _PROBE, module, *args], capture_output=True,
                       text=True, env=env(), cwd=REPO, timeout=300, check=False)
  return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def run(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', *args], capture_output=True, text=True, env=env(),
                        cwd=REPO, timeout=300, check=False)


class EntryPointTest(absltest.TestCase):

  def test_listing_names_every_command_once_and_loads_nothing_heavy(self):
    for args in ((), ('--help',)):
      result, _ = probe('vit_jax', *args)
      self.assertEqual(result, {'code': 0, 'loaded': []})
    out = run('vit_jax', '--help')
    lines = [l.split() for l in out.stdout.splitlines() if l.startswith('  ')]
    self.assertEqual([l[0] for l in lines], list(entry.COMMANDS))
    self.assertTrue(all(len(l) > 3 for l in lines), out.stdout)  # each with its summary

  def test_every_command_module_exists(self):
    for module in entry.COMMANDS.values():
      self.assertTrue(entry.summary(module), module)

  def test_subcommand_is_the_module(self):
    # The same help text either way, and the module's docstring heads it.
    via_entry = run('vit_jax', 'list', '--help')
    direct = run('vit_jax.list', '--help')
    self.assertEqual(via_entry.returncode, 0, via_entry.stderr)
    self.assertEqual(via_entry.stdout, direct.stdout)

  def test_unknown_and_foreign_command_names(self):
    out = run('vit_jax', 'trian')
    self.assertEqual(out.returncode, 2)
    self.assertEqual(out.stderr.strip(), "vit-jax: error: unknown command 'trian'; did you "
                     'mean train? vit-jax lists the commands.')
    self.assertEqual(entry.resolve('validate'), 'vit_jax.evaluate')
    self.assertEqual(entry.resolve('vit_jax.predict'), 'vit_jax.predict')
    out = run('vit_jax', '--config=quickstart')
    self.assertEqual(out.returncode, 2)
    self.assertIn('the command comes first', out.stderr)

  def test_python_m_vit_jax_train_is_the_train_command(self):
    result, err = probe('vit_jax.train', '--config=quickstart')
    self.assertEqual(result['code'], 2)
    self.assertEqual(err.strip().splitlines(), ['vit_jax: error: --workdir is needed: the '
                     'directory for the checkpoints, metrics and params.npz, e.g. '
                     '--workdir=/tmp/vit_run.'])

  def test_console_script_is_declared(self):
    with open(os.path.join(REPO, 'setup.py')) as f:
      self.assertIn("'vit-jax=vit_jax.cli.commands:main'", f.read())


class TrainUsageTest(absltest.TestCase):

  def test_missing_flags_are_one_line_before_anything_heavy(self):
    for args, says in ((('--config=quickstart',), '--workdir is needed'),
                       (('--workdir=/tmp/never_made',), '--config is needed')):
      result, err = probe('vit_jax.main', *args)
      self.assertEqual(result['code'], 2)
      self.assertLen(err.strip().splitlines(), 1)
      self.assertIn(says, err)
      self.assertNotIn('tensorflow', result['loaded'])
    self.assertFalse(os.path.exists('/tmp/never_made'))

  def test_help_loads_neither_tensorflow_nor_orbax(self):
    # The config schema derives its model and objective sections from the families' and
    # objectives' declarations (vit_jax/configs/base.py), so jax, flax and optax load with
    # it (about a second); the data and checkpoint libraries do not.
    result, _ = probe('vit_jax.main', '--help')
    self.assertEqual(result['code'], 0)
    self.assertEqual([m for m in result['loaded'] if m in ('tensorflow', 'orbax')], [])

  def test_other_trainers_flags_point_to_the_config_keys(self):
    for flag, says in (('--epochs=3', 'did you mean --config.total_steps=3? (a number of '
                        'steps, not epochs)'),
                       ('--output=/tmp/o', 'did you mean --workdir=/tmp/o?')):
      out = run('vit_jax.main', '--config=quickstart', '--workdir=/tmp/never_made', flag)
      self.assertEqual(out.returncode, 2)
      self.assertEqual(out.stderr.strip(), f'vit_jax: error: unknown flag {flag}; {says}')
    config = base.get_base_config()
    for name, key in (('batch', 'batch'), ('lr', 'base_lr'), ('model', 'model_name'),
                      ('batch-size', 'batch'), ('dtype', 'model.dtype'),
                      ('mask_ratio', None),  # two objectives have one: no guess
                      ('frobnicate', None)):
      self.assertEqual(config_text.config_key_for_flag(name, config), key, name)


def flag_value(value) -> str:
  """A YAML value as --config.KEY=VALUE takes it (lists as Python literals)."""
  return repr(value) if isinstance(value, list) else str(value)


def leaves(tree: dict, prefix: str = '') -> dict:
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(leaves(value, f'{prefix}{key}.'))
    else:
      out[f'{prefix}{key}'] = value
  return out


class PrintConfigTest(absltest.TestCase):

  def test_plain_yaml_that_round_trips_through_flags(self):
    changed = ['--config.batch=32', "--config.evals.fewshot.datasets=['digits', 'mnist5k']",
               '--config.evals.fewshot.shots=[1, 5]', '--config.base_lr=0.01',
               '--config.model.dtype=bfloat16']
    out = run('vit_jax.main', '--config=quickstart', '--print_config', *changed)
    self.assertEqual(out.returncode, 0, out.stderr)
    self.assertNotIn('!!', out.stdout)
    self.assertNotIn('&id', out.stdout)
    printed = yaml.safe_load(out.stdout)
    self.assertEqual(printed['evals']['fewshot']['datasets'], ['digits', 'mnist5k'])
    # Every value pasted back as a flag onto the plain config gives the same config.
    pasted = [f'--config.{key}={flag_value(value)}'
              for key, value in leaves(printed).items() if value is not None]
    again = run('vit_jax.main', '--config=quickstart', '--print_config', *pasted)
    self.assertEqual(again.returncode, 0, again.stderr)
    self.assertEqual(again.stdout, out.stdout)


if __name__ == '__main__':
  absltest.main()
