"""`python -m vit_jax.list` and the shipped experiment configs found by name."""
import os
import re
import sys

from absl.testing import absltest

from tests import commands
from vit_jax import configs
from vit_jax import models
from vit_jax.cli import listing
from vit_jax.configs import experiments
from vit_jax.data import catalog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ExperimentsTest(absltest.TestCase):

  def test_every_file_in_configs_is_shipped_and_loads(self):
    self.assertEqual(
        experiments.names(),
        sorted(f[:-3] for f in os.listdir(os.path.join(REPO, 'configs'))
               if f.endswith('.py') and not f.startswith('_')))
    for name in experiments.names():
      with self.subTest(name):
        self.assertTrue(experiments.summary(name))
        self.assertIn('model_name', configs.load(experiments.resolve(name)))

  def test_names_and_paths_resolve(self):
    shipped = os.path.join(experiments.directory(), 'vit.py')
    cwd = os.getcwd()
    os.chdir(self.create_tempdir().full_path)  # where configs/vit.py does not exist
    try:
      for spec in ('vit', 'vit.py', 'configs/vit.py', '/nowhere/configs/vit.py'):
        with self.subTest(spec):
          self.assertEqual(experiments.resolve(spec + ':b16,cifar10'),
                           shipped + ':b16,cifar10')
    finally:
      os.chdir(cwd)
    mine = self.create_tempfile('vit.py', 'def get_config(): pass\n').full_path
    self.assertEqual(experiments.resolve(mine), mine)  # a file that exists wins
    with self.assertRaisesRegex(FileNotFoundError, "'quikstart' does not exist and names "
                                "no shipped config; did you mean 'quickstart'"):
      experiments.resolve('quikstart')


class ListTest(absltest.TestCase):

  def test_every_preset_config_and_dataset_is_listed(self):
    lines = '\n'.join(listing.model_lines() + listing.config_lines() +
                      listing.dataset_lines())
    for name in list(models.MODEL_CONFIGS) + experiments.names() + list(catalog.DATASETS):
      self.assertRegex(lines, rf'\n  {re.escape(name)}\b')
    self.assertIn('ViT-B_16 [b16]', lines)
    self.assertRegex(lines, r'R50\+ViT-B_16 \[r50_b16\] +hybrid')
    self.assertRegex(lines, r'mnist5k +10 classes, 4,000 train / 1,000 eval; embedded')
    self.assertRegex(lines, r'imagenet_v2 +1,000 classes, 10,000 eval \(evaluation only')

  def test_cli(self):
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = commands.run([sys.executable, '-m', 'vit_jax.list', 'configs'], env=env, timeout=300,
                        cwd='/')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertEqual(proc.stdout.splitlines(), listing.config_lines())
    proc = commands.run([sys.executable, '-m', 'vit_jax.list', 'modelz'], env=env, timeout=300,
                        cwd='/')
    self.assertEqual((proc.returncode, proc.stderr.strip().splitlines()), (2, [
        "vit_jax.list: error: Unknown section 'modelz'; name any of models, configs, "
        'datasets; see vit_jax.list --help.']))
    # vit_jax.main names shipped configs by name from any directory.
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    proc = commands.run([sys.executable, '-m', 'vit_jax.main', '--config=quikstart',
                         f'--workdir={workdir}'], env=env, timeout=300, cwd='/')
    self.assertEqual(proc.returncode, 2)
    self.assertRegex(proc.stderr.strip(), r"^vit_jax: error: config file 'quikstart' does "
                     r"not exist and names no shipped config; did you mean 'quickstart'")
    self.assertFalse(os.path.exists(workdir))


if __name__ == '__main__':
  absltest.main()
