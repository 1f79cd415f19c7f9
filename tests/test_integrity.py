"""Runs that never lose work: damaged checkpoints, changed configs on resume, bad inputs.

Faults are injected into real orbax checkpoints written by the real trainer (a tiny ViT
on mnist5k), then the same run is started again.
"""
import json
import math
import os
import shutil
import sys
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image

from tests import commands
from tests import test_train
from tests import tiny_trained
from vit_jax import rundir
from vit_jax.perf import checkpoint_verify
from vit_jax.train import checkpointer
from vit_jax.train import integrity
from vit_jax.train import loop
from vit_jax.train import resume

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tiny_config = test_train.tiny_config


def _snapshot(directory: str) -> dict[str, int]:
  """Every file below `directory` with its size."""
  out = {}
  for root, _, files in os.walk(directory):
    for f in files:
      path = os.path.join(root, f)
      out[os.path.relpath(path, directory)] = os.path.getsize(path)
  return out


def _data_file(step_dir: str) -> str:
  """The largest array data file of a checkpoint step."""
  files = [os.path.join(root, f) for root, _, fs in os.walk(step_dir) for f in fs
           if os.path.basename(root) == 'd']
  return max(files, key=os.path.getsize)


def _truncate(step_dir: str) -> None:
  path = _data_file(step_dir)
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)


def _flip_64_bytes(step_dir: str) -> None:
  path = _data_file(step_dir)
  with open(path, 'r+b') as f:
    data = bytearray(f.read())
    start = len(data) // 3
    for i in range(start, start + 64):
      data[i] ^= 0xFF
    f.seek(0)
    f.write(data)


def _damage_metadata(step_dir: str) -> None:
  with open(os.path.join(step_dir, 'default', '_METADATA'), 'w') as f:
    f.write('{"tree_metadata": ')


class CheckpointFaultTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp(prefix='vit_jax_integrity_')
    cls.reference_dir = tiny_trained.eight_steps()  # steps 4 and 8; copied, never changed

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def _copy(self) -> str:
    """A copy of the reference workdir without its params.npz: a run to resume."""
    workdir = tempfile.mkdtemp(dir=self.tmp)
    os.rmdir(workdir)
    shutil.copytree(self.reference_dir, workdir)
    os.remove(os.path.join(workdir, rundir.PARAMS_FILE))
    return workdir

  def test_every_step_carries_a_manifest_that_verifies(self):
    step_dir = os.path.join(self.reference_dir, 'checkpoints', '8')
    manifest = json.load(open(os.path.join(step_dir, integrity.MANIFEST)))
    self.assertEqual(set(manifest['files']),
                     set(_snapshot(step_dir)) - {integrity.MANIFEST})
    self.assertIsNone(integrity.verify(step_dir))

  def _assert_falls_back(self, damage, reason: str, kind: str, **overrides):
    workdir = self._copy()
    damage(os.path.join(workdir, 'checkpoints', '8'))
    with self.assertLogs(level='WARNING') as logs:
      loop.train_and_evaluate(tiny_config(**overrides), workdir, devices=jax.devices()[:1])
    named = [r for r in logs.output if 'checkpoints/8 is damaged' in r]
    self.assertLen(named, 1, logs.output)
    self.assertRegex(named[0], reason)
    self.assertIn('resuming from step 4', named[0])
    moved = os.listdir(os.path.join(workdir, checkpointer.CORRUPT_DIR))
    self.assertEqual(moved, [f'8-{kind}'])  # kept on disk, not deleted
    # Resumed from step 4 and trained again to 8: the same parameters, bit for bit.
    test_train.assert_trees_equal(self, test_train.final_params(workdir),
                                  test_train.final_params(self.reference_dir))
    self.assertIsNone(integrity.verify(os.path.join(workdir, 'checkpoints', '8')))

  def test_truncated_data_file_falls_back_to_the_previous_step(self):
    self._assert_falls_back(_truncate, r'has \d+ bytes, \d+ were written', 'size')

  def test_flipped_bytes_fall_back_to_the_previous_step(self):
    self._assert_falls_back(_flip_64_bytes, 'fails its CRC32 check', 'checksum')

  def test_damaged_metadata_falls_back_to_the_previous_step(self):
    self._assert_falls_back(_damage_metadata, '_METADATA has', 'size')

  def test_without_verification_a_failed_restore_still_falls_back(self):
    self._assert_falls_back(_damage_metadata, 'unreadable metadata', 'metadata',
                            checkpoint_verify=False)

  def test_no_good_checkpoint_is_one_error_and_changes_nothing(self):
    workdir = self._copy()
    _truncate(os.path.join(workdir, 'checkpoints', '8'))
    _flip_64_bytes(os.path.join(workdir, 'checkpoints', '4'))
    before = _snapshot(workdir)
    with self.assertRaisesRegex(
        checkpointer.NoGoodCheckpointError,
        r'No checkpoint in \S+ is intact: 8 \(.*bytes.*\); 4 \(.*CRC32.*\)\. Nothing was '
        'changed'):
      loop.train_and_evaluate(tiny_config(), workdir, devices=jax.devices()[:1])
    self.assertEqual(_snapshot(workdir), before)

  def test_step_without_manifest_restores_with_one_warning(self):
    workdir = self._copy()
    for step in ('4', '8'):  # as written before manifests existed
      os.remove(os.path.join(workdir, 'checkpoints', step, integrity.MANIFEST))
    with self.assertLogs(level='WARNING') as logs:
      loop.train_and_evaluate(tiny_config(), workdir, devices=jax.devices()[:1])
    self.assertLen([r for r in logs.output if 'no checksum manifest' in r], 1)
    test_train.assert_trees_equal(self, test_train.final_params(workdir),
                                  test_train.final_params(self.reference_dir))

  def test_step_holding_nan_is_moved_aside_by_name(self):
    workdir = tempfile.mkdtemp(dir=self.tmp)
    good = {'params': {'w': np.ones(4, np.float32)}, 'step': np.int32(1)}
    bad = {'params': {'w': np.array([1, np.nan, 1, 1], np.float32)},
           'step': np.int32(2)}
    writer = checkpointer.StateCheckpointer(workdir, keep=3, async_save=False)
    writer.save(1, good)
    writer.save(2, bad)  # a valid file of a NaN state: its manifest verifies
    writer.close()
    reader = checkpointer.StateCheckpointer(workdir, keep=3)
    abstract = {'params': {'w': jax.ShapeDtypeStruct((4,), jnp.float32)},
                'step': jax.ShapeDtypeStruct((), jnp.int32)}
    with self.assertLogs(level='WARNING') as logs:
      state, step = reader.restore_latest(abstract)
    reader.close()
    self.assertEqual(step, 1)
    np.testing.assert_array_equal(state['params']['w'], good['params']['w'])
    self.assertRegex(logs.output[0], r'checkpoints/2 is damaged \(params/w holds NaN '
                     r'or Inf\)')
    self.assertEqual(os.listdir(os.path.join(workdir, checkpointer.CORRUPT_DIR)),
                     ['2-nonfinite'])

  def test_non_finite_leaf_is_named(self):
    tree = {'params': {'head': {'kernel': jnp.ones((2, 2)),
                                'bias': jnp.array([0.0, jnp.inf])}},
            'step': jnp.array(3)}
    self.assertEqual(integrity.non_finite_leaf(tree), 'params/head/bias')
    tree['params']['head']['bias'] = jnp.zeros(2)
    self.assertIsNone(integrity.non_finite_leaf(tree))

  def test_verification_cost_is_measured(self):
    costs = checkpoint_verify.measure(os.path.join(self.tmp, 'cost'), gb=0.01)
    self.assertBetween(costs['gb'], 0.005, 0.02)
    for key in ('manifest', 'verify_warm', 'verify_cold', 'restore_warm'):
      self.assertGreater(costs[f'{key}_s_per_gb'], 0.0)

  # Resuming with a changed config.

  def test_changed_batch_is_refused_and_changes_nothing(self):
    workdir = self._copy()
    before = _snapshot(workdir)
    with self.assertRaisesRegex(
        ValueError, r'these fields change the training math: batch: 16 -> 32\. .*'
        'allow_config_change=True'):
      loop.train_and_evaluate(tiny_config(batch=32), workdir, devices=jax.devices()[:1])
    self.assertEqual(_snapshot(workdir), before)

  def test_changed_log_every_is_accepted_and_recorded(self):
    workdir = self._copy()
    loop.train_and_evaluate(tiny_config(log_every=4), workdir, devices=jax.devices()[:1])
    history = [json.loads(line) for line in
               open(os.path.join(workdir, resume.HISTORY_FILE))]
    self.assertEqual([(h['step'], h['changes'], h['math']) for h in history],
                     [(8, {'log_every': [2, 4]}, [])])
    config = json.load(open(os.path.join(workdir, 'config.json')))
    self.assertEqual(config['log_every'], 4)

  def test_allowed_math_change_is_logged_and_appended_to_the_history(self):
    workdir = self._copy()
    with self.assertLogs(level='WARNING') as logs:
      loop.train_and_evaluate(tiny_config(batch=32, allow_config_change=True),
                              workdir, devices=jax.devices()[:1])
    self.assertTrue(any('batch: 16 -> 32' in r for r in logs.output), logs.output)
    loop.train_and_evaluate(tiny_config(batch=32, allow_config_change=True,
                                        log_every=4), workdir, devices=jax.devices()[:1])
    history = [json.loads(line) for line in
               open(os.path.join(workdir, resume.HISTORY_FILE))]
    self.assertEqual([h['changes'] for h in history],
                     [{'batch': [16, 32]}, {'log_every': [2, 4]}])
    self.assertEqual(history[0]['math'], ['batch'])

  def test_another_model_is_a_mismatch_not_a_damaged_checkpoint(self):
    workdir = self._copy()
    c = tiny_config(allow_config_change=True)
    c.model.hidden_size = 32
    before = _snapshot(workdir)
    with self.assertRaisesRegex(checkpointer.CheckpointMismatchError,
                                r'checkpoints/8 does not fit this model and optimizer'):
      loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
    self.assertEqual(_snapshot(workdir), before)  # nothing moved aside

  def test_which_fields_change_the_math(self):
    for key in ('batch', 'accum_steps', 'seed', 'model.hidden_size', 'pp.crop',
                'optimizers.adam.b2', 'base_lr', 'data_shards', 'a_future_knob'):
      self.assertTrue(resume.changes_math(key), key)
    for key in ('log_every', 'checkpoint_every', 'evals.test.every', 'data_dir',
                'keep_checkpoints', 'checkpoint_verify', 'mesh.data'):
      self.assertFalse(resume.changes_math(key), key)


class BadInputTest(absltest.TestCase):

  def test_config_errors_leave_no_workdir(self):
    parent = self.create_tempdir().full_path
    cases = [(dict(base_lr=math.nan), 'config.base_lr=nan must be a finite number'),
             (dict(end_lr=math.inf), 'config.end_lr=inf must be a finite number'),
             (dict(model_name='ViT-Q_16'), 'ViT-Q_16'),
             (dict(dataset='no_such_set'), 'no_such_set'),
             (dict(batch=18), 'config.batch=18'),
             (dict(pp=dict(crop=-3)), r'config.pp.crop=-3 must be a positive'),
             (dict(pp=dict(train='finetune|no_such_op')), "unknown op 'no_such_op'"),
             (dict(pp=dict(eval='resize(28, keep=1)')), "op 'resize': got an unexpected"),
             (dict(pp=dict(train='finetune|randaug(2, 40)')),
              r'magnitude=40 is out of range \[0, 30\]'),
             (dict(layer_decay=1.5), r'config.layer_decay=1.5 must be in \(0, 1\]')]
    for overrides, message in cases:
      workdir = os.path.join(parent, 'run')
      with self.assertRaisesRegex(ValueError, message):
        loop.train_and_evaluate(tiny_config(**overrides), workdir, devices=jax.devices()[:1])
      self.assertFalse(os.path.exists(workdir), overrides)

  def test_image_folder_of_corrupt_files_is_one_error_without_network_advice(self):
    root = self.create_tempdir().full_path
    for cls in ('a', 'b'):
      os.makedirs(os.path.join(root, 'train', cls))
      for i in range(2):
        with open(os.path.join(root, 'train', cls, f'{i}.png'), 'wb') as f:
          f.write(b'\x89PNG\r\n\x1a\n no image')
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    c = tiny_config(dataset=f'folder:{root}', eval_split='',
                    data_dir=self.create_tempdir().full_path)
    with self.assertRaisesRegex(ValueError, 'No readable image in .*train: all 4 '
                                'files are unreadable') as e:
      loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
    self.assertNotIn('where the network reaches', str(e.exception))
    self.assertFalse(os.path.exists(workdir))


class CommandLineTest(absltest.TestCase):
  """Exit status 2 and one line on stderr, through python -m vit_jax.main."""

  def _main(self, *args):
    env = dict(os.environ, PYTHONPATH=REPO)
    out = commands.run([sys.executable, '-m', 'vit_jax.main', *args], cwd=REPO, env=env,
                       timeout=300)
    self.assertEqual(out.returncode, 2, out.stderr[-3000:])
    errors = [line for line in out.stderr.splitlines() if 'vit_jax: error:' in line]
    self.assertLen(errors, 1, out.stderr[-3000:])
    for noise in ('Traceback', 'Event loop is closed', 'Exception ignored'):
      self.assertNotIn(noise, out.stderr)
    return errors[0]

  def test_config_file_with_a_syntax_error(self):
    config = self.create_tempfile('broken.py', 'def get_config(:\n  pass\n')
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    line = self._main(f'--config={config.full_path}', f'--workdir={workdir}')
    self.assertIn(f'config file {config.full_path} line 1: invalid syntax', line)
    self.assertFalse(os.path.exists(workdir))

  def test_resume_with_another_model_and_a_workdir_as_pretrained_path(self):
    workdir = self.create_tempdir().full_path
    loop.train_and_evaluate(tiny_config(total_steps=2, warmup_steps=1,
                                        checkpoint_every=0), workdir, devices=jax.devices()[:1])
    config = os.path.join(REPO, 'tests', 'tiny_train_config.py')
    line = self._main(f'--config={config}', f'--workdir={workdir}',
                      '--config.total_steps=2', '--config.warmup_steps=1',
                      '--config.model.hidden_size=32',
                      '--config.allow_config_change=True')
    self.assertIn('does not fit this model and optimizer', line)
    fresh = os.path.join(self.create_tempdir().full_path, 'run')
    line = self._main(f'--config={config}', f'--workdir={fresh}',
                      f'--config.pretrained_path={workdir}')
    self.assertIn(f'{workdir} is a vit_jax work directory', line)
    self.assertFalse(os.path.exists(fresh))

  def test_unknown_augmentation_op(self):
    config = os.path.join(REPO, 'tests', 'tiny_train_config.py')
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    line = self._main(f'--config={config}', f'--workdir={workdir}',
                      '--config.pp.train=finetune|randaugment(2, 9)')
    self.assertIn("config.pp.train='finetune|randaugment(2, 9)': unknown op 'randaugment'",
                  line)
    self.assertFalse(os.path.exists(workdir))


if __name__ == '__main__':
  absltest.main()
