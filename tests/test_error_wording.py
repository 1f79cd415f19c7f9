"""Errors that name the real problem first: a missing checkpoint, another model's weights in a
work directory, and every mistake of one config argument (issue 46)."""
import os
import sys

from absl.testing import absltest

from tests import commands
from vit_jax import configs
from vit_jax import models
from vit_jax.inference import load
from vit_jax.models import formats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMM = os.path.join(REPO, 'tests', 'testdata', 'interop', 'timm_vit.safetensors')
# The length the issue asks error lines to stay near.
SHORT = 200


def _env() -> dict:
  return dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')



def _one_line(test: absltest.TestCase, proc, prog: str = 'vit_jax') -> str:
  """The single error line of a command that failed with exit status 2."""
  test.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
  lines = [l for l in proc.stderr.strip().splitlines() if l.startswith(f'{prog}: error: ')]
  test.assertLen(lines, 1, proc.stderr[-2000:])
  test.assertNotIn('Traceback', proc.stderr)
  return lines[0]


def _workdir(root: str, **model: object) -> str:
  """A work directory: the quickstart run's config.json beside the timm fixture's weights."""
  workdir = os.path.join(root, 'run')
  os.makedirs(workdir)
  config = configs.load(os.path.join(REPO, 'configs', 'quickstart.py'))
  config.model.update(model)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write(config.to_json_best_effort(indent=2))
  # ViT of width 16, 2 layers, 2 heads, MLP 32, 4x4 patches, a class token.
  formats.write(formats.read(TIMM, num_heads=2).params, os.path.join(workdir, 'params.npz'))
  return workdir


class CheckpointTest(absltest.TestCase):

  def test_a_missing_checkpoint_is_named_before_any_other_question(self):
    root = self.create_tempdir().full_path
    image = os.path.join(REPO, 'README.md')
    extra = {'evaluate': [], 'predict': [image], 'fewshot': [],
             'visualize': ['--out=out', image], 'analyze': ['--out=out']}
    for command, args in extra.items():
      with self.subTest(command):
        proc = commands.run([sys.executable, '-m', f'vit_jax.{command}',
                             '--checkpoint=nope/params.npz', *args], env=_env(), cwd=root,
                            timeout=300)
        self.assertEqual(_one_line(self, proc, f'vit_jax.{command}'),
                         f'vit_jax.{command}: error: Checkpoint nope/params.npz does not '
                         'exist; check the path.')
    self.assertEqual(os.listdir(root), [])

  def test_another_models_weights_name_the_sizes_that_differ(self):
    workdir = _workdir(self.create_tempdir().full_path)
    before = commands.digest(workdir)
    params = os.path.join(workdir, 'params.npz')
    config = os.path.join(workdir, 'config.json')
    want = (f'Checkpoint {params} does not fit the model in {config} (weights vs config: '
            "width 16 vs 96, layers 2 vs 6, heads 2 vs 4, +3 more); pass that run's own "
            'params.npz, or --model.')
    # Every command that builds the model from a work directory goes through load_model.
    for path in (params, workdir):
      with self.assertRaises(ValueError) as caught:
        load.load_model(None, path)
      self.assertEqual(str(caught.exception), want)
    # The command, given the directory relative to where it runs: one short line.
    proc = commands.run([sys.executable, '-m', 'vit_jax.evaluate', '--checkpoint=run'],
                        env=_env(), cwd=os.path.dirname(workdir), timeout=300)
    line = _one_line(self, proc, 'vit_jax.evaluate')
    self.assertEqual(line, 'vit_jax.evaluate: error: ' + want.replace(
        os.path.dirname(workdir) + '/', ''))
    self.assertLess(len(line), SHORT + 20)
    self.assertEqual(commands.digest(workdir), before)

  def test_a_class_token_alone_is_named_not_an_odd_token_count(self):
    # Same sizes as the weights; the run pooled without a class token (17 tokens read as 16+1).
    workdir = _workdir(self.create_tempdir().full_path, hidden_size=16, num_layers=2,
                       num_heads=2, mlp_dim=32, patches={'size': (4, 4)})
    with self.assertRaisesRegex(ValueError, r'\(weights vs config: class token yes vs no\)'):
      load.load_model(None, workdir)

  def test_a_named_model_that_misfits_names_the_sizes(self):
    with self.assertRaisesRegex(
        ValueError, r"^Checkpoint \S+ does not fit model 'ViT-B_16' \(weights vs model: "
        r'width 16 vs 768, layers 2 vs 12, heads 2 vs 12, \+2 more\). Pick the --model'):
      load.load_model('ViT-B_16', os.path.join(_workdir(self.create_tempdir().full_path),
                                               'params.npz'))

  def test_the_weights_own_run_still_loads(self):
    workdir = _workdir(self.create_tempdir().full_path, hidden_size=16, num_layers=2,
                       num_heads=2, mlp_dim=32, patches={'size': (4, 4)}, classifier='token')
    loaded = load.load_model(None, workdir)
    self.assertEqual((loaded.name, loaded.resolution, loaded.num_classes), ('ViT-Ti_16', 16, 5))


def _config_error(spec: str) -> str:
  """The ValueError message of loading configs/SPEC, which must fail."""
  try:
    configs.load(os.path.join(REPO, 'configs', spec))
  except ValueError as e:
    return str(e)
  raise AssertionError(f'{spec} loaded')


class ConfigArgumentTest(absltest.TestCase):

  def test_an_unknown_model_is_the_suggestion_and_where_the_list_is(self):
    self.assertEqual(_config_error('deit.py:s61,mnist5k'),
                     "Unknown model 's61' (did you mean s16 (ViT-S_16)? all: "
                     'python -m vit_jax.list).')
    with self.assertRaises(ValueError) as caught:
      models.get_model_config('ViT-X_16')
    self.assertEqual(str(caught.exception),
                     "Unknown model 'ViT-X_16' (did you mean ViT-S_16, ViT-B_16 or ViT-L_16? "
                     'all: python -m vit_jax.list).')
    with self.assertRaises(ValueError) as caught:
      models.get_model_config('zzz')
    self.assertEqual(str(caught.exception), "Unknown model 'zzz' (all: python -m vit_jax.list).")

  def test_every_mistake_of_one_argument_in_one_message(self):
    self.assertEqual(
        _config_error('augreg_pretrain.py:ViT-X_16,mnist5k,light9'),
        "config argument 'ViT-X_16,mnist5k,light9': 1) unknown model 'ViT-X_16' (did you mean "
        'ViT-S_16, ViT-B_16 or ViT-L_16? all: python -m vit_jax.list); 2) unknown AugReg level '
        "'light9' (did you mean light1 or light2?).")
    three = _config_error('augreg_pretrain.py:S61,mnist5k,light9,reg=abc')
    self.assertRegex(three, r"^config argument 'S61,mnist5k,light9,reg=abc': 1\) unknown "
                     r"model 'S61' \(did you mean s16 \(ViT-S_16\)\?.*; 2\) unknown AugReg "
                     r"level 'light9' .*; 3\) AugReg reg=abc: the paper trains with")
    for spec in ('vit.py:b61,cifar10,lr=0.05', 'augreg.py:B_61-i21k,cifar10,lr=0.05'):
      with self.subTest(spec):
        self.assertRegex(_config_error(spec),
                         r"^config argument '.*': 1\) unknown model .*; 2\) config argument "
                         r"lr='0.05' is not in the cifar10 lr sweep")

  def test_a_dataset_typo_joins_the_other_mistakes_of_the_argument(self):
    self.assertEqual(_config_error('deit.py:s16,mnst5k'),
                     "Unknown dataset 'mnst5k' (did you mean mnist5k or vtab_demo/mnist5k? all: "
                     'python -m vit_jax.list)')
    self.assertEqual(
        _config_error('deit.py:s61,mnst5k'),
        "config argument 's61,mnst5k': 1) unknown model 's61' (did you mean s16 (ViT-S_16)? "
        'all: python -m vit_jax.list); 2) unknown dataset \'mnst5k\' (did you mean mnist5k or '
        'vtab_demo/mnist5k? all: python -m vit_jax.list).')
    for spec in ('vit.py:b16,cifar1o', 'augreg.py:B_16-i21k,cifar1o',
                 'augreg_pretrain.py:s16,cifar1o,light1'):
      with self.subTest(spec):
        self.assertIn("nknown dataset 'cifar1o' (did you mean cifar10", _config_error(spec))

  def test_every_known_mistake_is_one_line_under_200_characters(self):
    root = self.create_tempdir().full_path
    cases = [
        # An unknown key does not hide a mistake of the argument, nor another unknown key.
        (['--config=configs/deit.py:s61,mnist5k', '--config.foo=1'],
         ["2 mistakes: 1) Unknown model 's61' (did you mean s16", "2) unknown config key 'foo'"]),
        (['--config=configs/deit.py:s16,mnist5k', '--config.foo=1', '--config.batchh=3'],
         ["1) unknown config key 'foo'", "2) unknown config key 'batchh' (did you mean batch"]),
        (['--config=configs/deit.py:s61,mnst5k'], ["unknown dataset 'mnst5k'"]),
        (['--config=configs/deit.py:s16,mnist5k', '--config.fooo=2'],
         ["unknown config key 'fooo' (configs are locked"]),
        (['--config=configs/augreg_pretrain.py:ViT-X_16,mnist5k,light9'],
         ["unknown AugReg level 'light9'"]),
    ]
    for args, parts in cases:
      with self.subTest(args):
        proc = commands.run([sys.executable, '-m', 'vit_jax.main', *args,
                             f'--workdir={root}/run'], env=_env(), cwd=REPO, timeout=300)
        line = _one_line(self, proc)
        # Two mistakes, each with its suggestion, as in the test below.
        self.assertLess(len(line), SHORT + 40 if '2)' in line else SHORT, line)
        for part in parts:
          self.assertIn(part, line)
    self.assertEqual(os.listdir(root), [])

  def test_the_command_prints_one_short_line_and_creates_nothing(self):
    root = self.create_tempdir().full_path
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.main',
         '--config=configs/augreg_pretrain.py:ViT-X_16,mnist5k,light9', f'--workdir={root}/run'],
        env=_env(), cwd=REPO, timeout=300)
    line = _one_line(self, proc)
    self.assertIn("unknown model 'ViT-X_16' (did you mean ViT-S_16", line)
    self.assertIn("unknown AugReg level 'light9' (did you mean light1", line)
    self.assertLess(len(line), SHORT + 40)  # two mistakes, each with its suggestion
    self.assertEqual(os.listdir(root), [])
    # The command the message points to lists the models and the short names.
    listing = commands.run([sys.executable, '-m', 'vit_jax.list'], env=_env(), cwd=root,
                           timeout=300)
    self.assertEqual(listing.returncode, 0, listing.stderr[-2000:])
    self.assertRegex(listing.stdout, r'ViT-S_16 \[s16\]')


if __name__ == '__main__':
  absltest.main()
