"""Bad input to the commands beside training: one line, exit status 2, no file of the user's changed.

Every command (convert, export, predict, visualize, fewshot, evaluate, plot, the benchmark
and the memory and checkpoint tools) is fed a mistake a user makes; the run-time config checks
(evaluator options, options of unused objectives) are tested on the trainer itself.
"""
import contextlib
import os
import resource
import shutil
import subprocess
import sys

from absl.testing import absltest
import jax
import numpy as np
import safetensors.numpy

from tests import commands
from tests import test_train
from vit_jax import fileio
from vit_jax.inference import curves
from vit_jax.models import formats
from vit_jax.train import loop
from vit_jax.train import validate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, 'tests', 'testdata', 'interop')
TIMM = os.path.join(FIXTURES, 'timm_vit.safetensors')  # 2 heads, 4x4 patches, 16 px


# Runs `python -m MODULE ARGS...` and then says on stdout whether TensorFlow was loaded.
_PROBE = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
  runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
finally:
  print('tensorflow loaded:', 'tensorflow' in sys.modules)
"""
# The mistakes a TensorFlow command reports before TensorFlow loads (vit_jax/cli/early.py;
# the trainer's: vit_jax/train/precheck.py).
_BEFORE_TENSORFLOW = ('export below a file', 'export over its own checkpoint',
                      'fewshot on an unknown dataset', 'analyze into a path below a file',
                      'evaluate a file that names no dataset',
                      'train from a missing checkpoint', 'train with a mask ratio of 1.5')


def _env() -> dict:
  # TensorFlow's own log level is tests/conftest.py's (warnings and info hidden).
  return dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')



def _damaged_copies(root: str) -> tuple[str, str]:
  """(a copy of the timm fixture with one NaN, one with int8 tensors) in `root`."""
  state = safetensors.numpy.load_file(TIMM)
  nan = dict(state)
  key = sorted(k for k in state if 'blocks.1.attn.qkv.weight' in k)[0]
  nan[key] = state[key].copy()
  nan[key].flat[3] = np.nan
  nan_path = os.path.join(root, 'nan.safetensors')
  safetensors.numpy.save_file(nan, nan_path)
  int_path = os.path.join(root, 'int8.safetensors')
  safetensors.numpy.save_file(
      {k: (v * 100).astype(np.int8) for k, v in state.items()}, int_path)
  return nan_path, int_path


@contextlib.contextmanager
def _unwritable(directory: str):
  """Makes `directory` refuse new files (chmod; as root, the immutable flag), or skips."""
  os.chmod(directory, 0o555)
  immutable = False
  try:
    if os.access(directory, os.W_OK):  # root ignores the mode
      immutable = subprocess.run(['chattr', '+i', directory],
                                 capture_output=True, check=False).returncode == 0
      if not immutable:
        raise absltest.SkipTest('cannot make a directory unwritable here')
    yield
  finally:
    if immutable:
      subprocess.run(['chattr', '-i', directory], check=False)
    os.chmod(directory, 0o755)


class CommandsTest(absltest.TestCase):
  """Each command with a bad input, all started at once (start-up is mostly imports)."""

  def test_every_command_fails_in_one_line_and_changes_nothing(self):
    root = self.create_tempdir().full_path
    user = os.path.join(root, 'user')  # everything the user had before
    os.makedirs(os.path.join(user, 'real'))
    src = os.path.join(user, 'real', 'params.npz')
    formats.write(formats.read(TIMM, num_heads=2).params, src)
    os.symlink(os.path.join(user, 'real'), os.path.join(user, 'link'))
    nan, int8 = _damaged_copies(user)
    afile = os.path.join(user, 'afile')
    with open(afile, 'w') as f:
      f.write('a file, not a directory')
    os.makedirs(os.path.join(user, 'scratch'))
    with open(os.path.join(user, 'scratch', 'notes.txt'), 'w') as f:
      f.write('mine')
    image = os.path.join(REPO, 'vit_jax', 'labels', 'README.md')
    before = commands.digest(user)
    out = os.path.join(root, 'out')
    os.makedirs(out)
    u = lambda *p: os.path.join(user, *p)  # pylint: disable=unnecessary-lambda-assignment
    cases = {
        'train from a missing checkpoint': (
            ['vit_jax.main', '--config=quickstart', f'--workdir={out}/run',
             f'--config.pretrained_path={u("nope.npz")}'],
            f'Checkpoint {u("nope.npz")} does not exist'),
        'train with a mask ratio of 1.5': (
            ['vit_jax.main', '--config=quickstart_ssl:mae', f'--workdir={out}/run',
             '--config.objectives.mae.mask_ratio=1.5'],
            'config.objectives.mae.mask_ratio=1.5 must lie strictly between 0 and 1'),
        'convert to a linked spelling of the source': (
            ['vit_jax.convert', f'--from={src}', f'--to={u("link", "params.npz")}',
             '--drop_head'], 'is the same file as --from='),
        'convert a state dict holding NaN': (
            ['vit_jax.convert', f'--from={nan}', f'--to={out}/nan.npz', '--num_heads=2'],
            'holds NaN or Inf in Transformer/encoderblock_1/'),
        'convert int8 tensors': (
            ['vit_jax.convert', f'--from={int8}', f'--to={out}/int8.npz',
             '--num_heads=2'], 'as int8, where model parameters are floats'),
        'convert without --to': (['vit_jax.convert', f'--from={src}'],
                                 'Flag --to must have a value'),
        'export below a file': (
            ['vit_jax.export', f'--checkpoint={TIMM}', '--num_heads=2',
             '--format=stablehlo', f'--output={afile}/model'],
            f'Cannot write --output={afile}/model: {afile} is a file, not a directory'),
        'export over its own checkpoint': (
            ['vit_jax.export', f'--checkpoint={src}', '--model=ViT-B_16',
             '--format=stablehlo', f'--output={u("link", "..", "real", "params.npz")}'],
            'is the same file as --checkpoint='),
        'predict a NaN checkpoint': (
            ['vit_jax.predict', f'--checkpoint={nan}', '--num_heads=2', image],
            'holds NaN or Inf'),
        'visualize an int8 checkpoint': (
            ['vit_jax.visualize', f'--checkpoint={int8}', '--num_heads=2',
             f'--out={out}/viz', image], 'where model parameters are floats'),
        'visualize into a path below a file': (
            ['vit_jax.visualize', f'--checkpoint={TIMM}', '--num_heads=2',
             f'--out={afile}/figures', image], f'{afile} is a file, not a directory'),
        'fewshot on an unknown dataset': (
            ['vit_jax.fewshot', f'--checkpoint={TIMM}', '--num_heads=2',
             '--datasets=nosuch'], "Unknown dataset 'nosuch'"),
        'analyze into a path below a file': (
            ['vit_jax.analyze', f'--checkpoint={TIMM}', '--num_heads=2',
             '--dataset=mnist5k', f'--out={afile}/analysis'],
            f'{afile} is a file, not a directory'),
        'evaluate a file that names no dataset': (
            ['vit_jax.evaluate', f'--checkpoint={TIMM}', '--num_heads=2'],
            '--dataset is needed'),
        'evaluate on a dataset of another class count': (
            ['vit_jax.evaluate', f'--checkpoint={TIMM}', '--num_heads=2',
             '--dataset=synthetic/16px_3cls_8train_8test', f'--data_dir={out}/tfds'],
            'has 5 outputs, but synthetic/16px_3cls_8train_8test has 3 classes'),
        'plot a file that is no work directory': (
            ['vit_jax.plot', afile], 'is a file, not a work directory'),
        'benchmark JSON below a file': (
            ['vit_jax.perf.benchmark', '--model=testing', f'--json={afile}/b.json'],
            f'{afile} is a file, not a directory'),
        'memory with a bad device count': (
            ['vit_jax.perf.memory', '--devices=one'], '--devices=one: use integers'),
        'checkpoint_verify in a directory of the user': (
            ['vit_jax.perf.checkpoint_verify', f'--dir={u("scratch")}', '--gb=0.001'],
            'exists and is not an empty directory'),
    }
    # The mistakes found before TensorFlow loads run in fresh interpreters (all at once: their
    # start-up is mostly imports), the others forked with the libraries imported.
    procs = {name: subprocess.Popen(
        [sys.executable, '-c', _PROBE] + args, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=_env(), cwd=root)
             for name, (args, _) in cases.items() if name in _BEFORE_TENSORFLOW}
    results = {name: commands.run([sys.executable, '-m'] + args, env=_env(), cwd=root,
                                  timeout=600)
               for name, (args, _) in cases.items() if name not in _BEFORE_TENSORFLOW}
    for name, proc in procs.items():
      printed, err = proc.communicate(timeout=600)
      results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, printed, err)
    for name, result in results.items():
      printed, err = result.stdout, result.stderr
      with self.subTest(name):
        self.assertEqual(result.returncode, 2, f'{name}: {err[-2000:]}')
        lines = err.strip().splitlines()
        self.assertLen(lines, 1, f'{name}: {err[-2000:]}')
        self.assertRegex(lines[0], r'^vit_jax[.\w]*: error: ')
        self.assertIn(cases[name][1], lines[0])
        if name in _BEFORE_TENSORFLOW:
          self.assertIn('tensorflow loaded: False', printed, name)
    self.assertEqual(commands.digest(user), before)
    # Only the evaluation's dataset was prepared (into the data dir it was given).
    self.assertEqual(os.listdir(out), ['tfds'])


class ConvertTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = self.create_tempdir().full_path
    self.real = os.path.join(self.root, 'real')
    os.makedirs(self.real)
    self.src = os.path.join(self.real, 'params.npz')
    formats.write(formats.read(TIMM, num_heads=2).params, self.src)

  def test_any_spelling_of_the_source_is_refused(self):
    os.symlink(self.real, os.path.join(self.root, 'link'))
    os.link(self.src, os.path.join(self.root, 'hard.npz'))
    before = commands.digest(self.root)
    relative = os.path.relpath(self.src)
    spellings = [os.path.join(self.root, 'link', 'params.npz'),
                 os.path.join(self.real, '..', 'real', 'params.npz'),
                 os.path.join(self.root, 'hard.npz'), relative]
    for to in spellings:
      with self.subTest(to):
        with self.assertRaisesRegex(ValueError, 'is the same file as --from'):
          formats.convert(self.src, to, drop_head=True)
    # A transformers directory: its weights file is a file of the source too.
    hf_dir = os.path.join(self.root, 'hf')
    shutil.copytree(os.path.join(FIXTURES, 'hf_classifier'), hf_dir)
    before = commands.digest(self.root)
    with self.assertRaisesRegex(ValueError, 'would replace a file of --from'):
      formats.convert(hf_dir, os.path.join(hf_dir, 'model.safetensors'),
                      model=None, to_format='timm')
    self.assertEqual(commands.digest(self.root), before)

  def test_damaged_tensors_are_refused_on_every_read_path(self):
    nan, int8 = _damaged_copies(self.root)
    for path, message in ((nan, 'NaN or Inf'), (int8, 'stores .* as int8')):
      with self.subTest(path):
        with self.assertRaisesRegex(ValueError, message):
          formats.read(path, num_heads=2)
        with self.assertRaisesRegex(ValueError, message):
          formats.read_params(path, num_heads=2)  # load_pretrained's path

  def test_unwritable_directory_names_the_destination(self):
    locked = os.path.join(self.root, 'locked')
    os.makedirs(locked)
    params = formats.read(self.src).params
    for name in ('x.safetensors', 'x.npz', 'hf_out'):
      to = os.path.join(locked, name)
      with self.subTest(name), _unwritable(locked):
        with self.assertRaises(fileio.WriteError) as caught:
          formats.write(params, to, to_format='hf' if name == 'hf_out' else None)
        self.assertTrue(str(caught.exception).startswith(
            f'Cannot write {to}: permission denied in {locked}'), caught.exception)
        self.assertNotIn('.tmp-', str(caught.exception))
      self.assertEqual(os.listdir(locked), [])

  def test_full_disk_names_the_destination_and_keeps_the_old_file(self):
    to = os.path.join(self.root, 'old.safetensors')
    with open(to, 'wb') as f:
      f.write(b'the previous version')

    def limit_file_size():
      resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    proc = subprocess.run(
        [sys.executable, '-m', 'vit_jax.convert', f'--from={self.src}', f'--to={to}'],
        capture_output=True, text=True, env=_env(), preexec_fn=limit_file_size,
        timeout=300, check=False)
    self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
    self.assertEqual(proc.stderr.strip().splitlines(), [
        f'vit_jax.convert: error: Cannot write {to}: the disk is full or the file '
        'exceeds the size limit (File too large); free space, raise the limit '
        '(ulimit -f) or write somewhere else.'])
    with open(to, 'rb') as f:
      self.assertEqual(f.read(), b'the previous version')
    self.assertEqual(sorted(os.listdir(self.root)), ['old.safetensors', 'real'])


class PlotTest(absltest.TestCase):

  def _workdir(self, text: str) -> str:
    workdir = self.create_tempdir().full_path
    with open(os.path.join(workdir, curves.METRICS_FILE), 'w') as f:
      f.write(text)
    return workdir

  def test_a_line_still_being_written_is_left_out_and_counted(self):
    complete = ''.join(f'{{"step": {s}, "train_loss": {1 / s}}}\n' for s in (1, 2, 3))
    workdir = self._workdir(complete + '{"step": 4, "train_lo')
    records, skipped = curves.read_records(workdir)
    self.assertEqual(([r['step'] for r in records], skipped), ([1, 2, 3], 1))
    out, skipped = curves.write_curves(os.path.join(workdir, curves.METRICS_FILE))
    self.assertEqual((out, skipped), (os.path.join(workdir, 'curves.png'), 1))
    # A finished last line without its newline yet is a record.
    self.assertEqual(curves.read_records(self._workdir(complete.rstrip()))[1], 0)
    # A damaged finished line is damage, not a line in progress.
    with self.assertRaisesRegex(ValueError, 'line 2 is not a metrics record'):
      curves.read_records(self._workdir(complete.replace('"step": 2', 'oops')))


class ConfigCheckTest(absltest.TestCase):
  """Evaluator and objective options are checked before the work directory exists."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.data_dir = os.path.join(absltest.get_default_test_tmpdir(), 'bad_input_tfds')
    cls.mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1),
                                 ('data', 'fsdp'))

  def _config(self, **overrides):
    return test_train.tiny_config(data_dir=self.data_dir, **overrides)

  def test_evaluator_options_fail_before_the_work_directory(self):
    cases = {
        'fewshot dataset': (
            {'evals.fewshot.every': 2, 'evals.fewshot.datasets': ('nosuch',)},
            r"config.evals.fewshot.datasets: Unknown dataset 'nosuch'"),
        'fewshot split': (
            {'evals.fewshot.every': 2,
             'evals.fewshot.datasets': ('mnist5k|train|test[200%:]',)},
            r"config.evals.fewshot.datasets 'mnist5k\|train\|test\[200%:\]': split="),
        'knn dataset': (
            {'evals.knn.every': 2, 'evals.knn.datasets': ('nosuch',)},
            r"config.evals.knn.datasets: Unknown dataset 'nosuch'"),
        'linear probe weight decays': (
            {'evals.linear.every': 2, 'evals.linear.weight_decays': (-1.0,)},
            r'config.evals.linear.weight_decays=\(-1.0,\)'),
        'classification split': (
            {'evals.test.every': 2, 'evals.test.split': 'test[200%:]'},
            r"config.evals.test.split='test\[200%:\]': Bad split .* boundaries"),
        'classification split name': (
            {'evals.test.every': 2, 'evals.test.split': 'tset'},
            r"config.evals.test.split='tset'"),
    }
    for name, (overrides, message) in cases.items():
      with self.subTest(name):
        config = self._config()
        for key, value in overrides.items():
          section, _, field = key.rpartition('.')
          node = config
          for part in section.split('.'):
            node = node[part]
          node[field] = value
        workdir = os.path.join(self.create_tempdir().full_path, 'run')
        with self.assertRaisesRegex(ValueError, message) as caught:
          loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
        self.assertNotIn('\n', str(caught.exception))
        self.assertFalse(os.path.exists(workdir))

  def test_a_chain_that_misses_the_crop_size_fails_before_the_first_step(self):
    config = self._config()
    config.pp.train = 'decode|pad(2)'  # 32x32 digits for a model of pp.crop=28
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    with self.assertRaisesRegex(
        ValueError, r"^config.pp.train='decode\|pad\(2\)' gives 32x32 images of mnist5k, but "
        r'the model takes config.pp.crop=28: put a resize\(28\) or crop op in the chain'):
      loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    self.assertFalse(os.path.exists(workdir))

  def test_options_of_an_unused_objective_are_named(self):
    config = self._config()
    config.objectives.mae.mask_ratio = 0.9
    with self.assertLogs(level='WARNING') as logs:
      validate.validate(config, self.mesh)
    self.assertEqual([r.getMessage() for r in logs.records], [
        "config.objectives.mae.mask_ratio=0.9 is ignored: the run trains objective "
        "'supervised' (set --config.objective=mae to use it)."])

  def test_a_mask_ratio_outside_0_1_fails_before_the_dataset_is_read(self):
    data_dir = self.create_tempdir().full_path  # cifar10 is not there: reading it would fail
    for objective in ('mae', 'masked_patch'):
      config = test_train.tiny_config(objective=objective, dataset='cifar10',
                                      data_dir=data_dir)
      config.objectives[objective].mask_ratio = 1.5
      with self.assertRaisesRegex(
          ValueError, rf'^config.objectives.{objective}.mask_ratio=1.5 must lie strictly '
          'between 0 and 1.$'):
        validate.validate(config, self.mesh)
    self.assertEqual(os.listdir(data_dir), [])

  def test_a_mask_ratio_that_rounds_is_named(self):
    config = self._config(objective='mae')
    config.model.representation_size = 0
    config.objectives.mae.update({'decoder_width': 16, 'decoder_depth': 1,
                                  'decoder_heads': 2, 'decoder_mlp_dim': 32,
                                  'mask_ratio': 0.99})
    with self.assertLogs(level='WARNING') as logs:
      validate.validate(config, self.mesh)
    self.assertIn('config.objectives.mae.mask_ratio=0.99 masks 15 of the 16 patches '
                  'of each image (0.9375 in effect).',
                  [r.getMessage() for r in logs.records])
    # The usual ratios say nothing.
    config.objectives.mae.mask_ratio = 0.75
    with self.assertNoLogs(level='WARNING'):
      validate.validate(config, self.mesh)


if __name__ == '__main__':
  absltest.main()
