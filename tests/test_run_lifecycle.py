"""A run's life through `python -m vit_jax.main`: Ctrl-C, re-runs, failures, paths, keys."""
import os
import re
import signal
import sys
import time
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from tests import commands
from tests import test_train
from tests import tfds_testdata
from tests import tiny_trained
from vit_jax import checkpoint
from vit_jax import models
from vit_jax.configs import original_keys
from vit_jax.inference import load
from vit_jax.models import formats
from vit_jax.models import from_config
from vit_jax.train import loop
from vit_jax.train import optimizers
from vit_jax.train import preemption
from vit_jax.train import resume
from vit_jax.train import writers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_CONFIG = os.path.join(REPO, 'tests', 'tiny_train_config.py')


def _env(**extra):
  return dict(os.environ, PYTHONPATH=REPO, **extra)


def _main_args(workdir, *extra):
  return [sys.executable, '-m', 'vit_jax.main', f'--config={TINY_CONFIG}',
          f'--workdir={workdir}', *extra]


def _interrupt_after_first_step(args, timeout=300):
  """Starts the command, sends Ctrl-C once it logged a step; returns (rc, stderr, first step)."""
  proc = commands.start(args, cwd=REPO, env=_env())
  first = None
  try:
    for line in proc.stderr_lines():
      step = re.search(r'step (\d+)/\d+ \(', line)
      if step:
        first = int(step.group(1))
        proc.send_signal(signal.SIGINT)
        break
    proc.wait(timeout=timeout)
    return proc.returncode, proc.outputs()[1], first
  finally:
    proc.close()


class CtrlCTest(absltest.TestCase):

  def test_first_ctrl_c_is_recorded_and_a_second_aborts(self):
    before = signal.getsignal(signal.SIGINT)
    with preemption.SignalFlag() as stop:
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.1)  # the handler runs in this thread at the next instruction
      self.assertEqual(stop.signum, signal.SIGINT)
      with self.assertRaises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    self.assertIs(signal.getsignal(signal.SIGINT), before)
    self.assertEqual(preemption.Preempted(3, '/w', signal.SIGINT).exit_code, 130)
    self.assertEqual(preemption.Preempted(3, '/w', signal.SIGTERM).exit_code, 143)

  def test_ctrl_c_checkpoints_prints_how_to_resume_and_resume_continues(self):
    workdir = self.create_tempdir().full_path
    # Long enough that Ctrl-C always lands mid-run; logged every step.
    args = _main_args(workdir, '--config.total_steps=5000', '--config.log_every=1',
                      '--config.checkpoint_every=0')
    rc, err, first = _interrupt_after_first_step(args)
    self.assertEqual(rc, 130, err[-3000:])
    self.assertEqual(first, 1, err[-3000:])
    self.assertNotIn('Traceback', err)
    self.assertNotIn('KeyboardInterrupt', err)
    last = err.strip().splitlines()[-1]
    self.assertRegex(last, r'^vit_jax: interrupted at step \d+: checkpoint saved in ')
    self.assertIn(f'resume with: python -m vit_jax.main --config={TINY_CONFIG} '
                  f'--workdir={workdir}', last)
    saved = int(re.search(r'interrupted at step (\d+)', last).group(1))
    self.assertEqual(
        [d for d in os.listdir(os.path.join(workdir, 'checkpoints')) if d.isdigit()],
        [str(saved)])
    self.assertFalse(os.path.exists(os.path.join(workdir, 'params.npz')))
    # The same command resumes after the saved step.
    rc, err, first = _interrupt_after_first_step(args)
    self.assertEqual(rc, 130, err[-3000:])
    self.assertIn(f'Resuming from {workdir}/checkpoints/{saved}.', err)
    self.assertEqual(first, saved + 1, err[-3000:])


def _tree(path):
  """Every file under path with its bytes: what 'nothing changed' compares."""
  out = {}
  for root, dirs, files in os.walk(path):
    for name in dirs + files:
      full = os.path.join(root, name)
      out[os.path.relpath(full, path)] = (
          open(full, 'rb').read() if os.path.isfile(full) else None)
  return out


def _events_files(workdir):
  return [f for f in os.listdir(workdir) if f.startswith('events.out.tfevents')]


class FinishedRunTest(absltest.TestCase):

  def test_rerun_of_a_finished_run_says_so_and_writes_nothing(self):
    workdir = self.create_tempdir().full_path
    with self.assertLogs(level='INFO') as logs:
      first = loop.train_and_evaluate(test_train.tiny_config(), workdir,
                                      devices=jax.devices()[:1])
    # The end's waits on the disk are named (the last line of a finished run).
    self.assertRegex(logs.output[-1], r'Checkpoint 8 on disk after \d+\.\d s; params.npz and '
                     r'the logs written in \d+\.\d s\.$')
    before = _tree(workdir)
    # The config check builds the model and optimizer once; the run uses those (spies: the
    # real functions run).
    build = mock.patch.object(from_config, 'build', wraps=from_config.build)
    make_tx = mock.patch.object(optimizers, 'make', wraps=optimizers.make)
    with self.assertLogs(level='INFO') as logs, build as built, make_tx as made:
      again = loop.train_and_evaluate(test_train.tiny_config(), workdir, devices=jax.devices()[:1])
    self.assertEqual((built.call_count, made.call_count), (1, 1))
    self.assertEqual(again['accuracy_test'], first['accuracy_test'])
    self.assertEqual(again['step'], 8)
    # The last step's train metrics come along from metrics.jsonl.
    last = [r for r in writers.read_metrics(workdir) if r['step'] == 8]
    self.assertEqual(again['train_loss'], last[0]['train_loss'])
    said = '\n'.join(logs.output)
    self.assertIn(f'{workdir} holds a finished run (step 8 of 8', said)
    self.assertIn(f"accuracy_test {first['accuracy_test']:.4f}", said)
    self.assertLen(_events_files(workdir), 1)
    self.assertEqual(_tree(workdir), before)
    # The same through the command line: its config matches the recorded one.
    out = commands.run(_main_args(workdir), cwd=REPO, env=_env(), timeout=300)
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    self.assertIn('holds a finished run (step 8 of 8', out.stderr)
    self.assertEqual(_tree(workdir), before)
    # The hint holds: raising total_steps alone is refused with the same hint, and doing
    # what it says trains on from the finished step.
    self.assertIn(resume.TRAIN_ON, said)
    flags = dict(re.findall(r'--config\.(\w+)(?:=(\S+))?', resume.TRAIN_ON))
    self.assertEqual(flags, {'total_steps': '', 'allow_config_change': 'True'})
    with self.assertRaisesRegex(ValueError, r'written for total_steps=8: ' +
                                re.escape(resume.TRAIN_ON)):
      loop.train_and_evaluate(test_train.tiny_config(total_steps=10), workdir,
                              devices=jax.devices()[:1])
    self.assertEqual(_tree(workdir), before)
    longer = loop.train_and_evaluate(
        test_train.tiny_config(total_steps=10, allow_config_change=True), workdir,
        devices=jax.devices()[:1])
    self.assertEqual(longer['step'], 10)


class FailedStartTest(absltest.TestCase):
  """A run that fails before its first step leaves the disk as it found it."""

  def setUp(self):
    super().setUp()
    # A checkpoint of another width: it fails only once the state is built.
    model = models.get_model('testing', num_classes=10, hidden_size=24,
                             patches={'size': (7, 7)})
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 3)))['params']
    self.misfit = os.path.join(self.create_tempdir().full_path, 'misfit.npz')
    checkpoint.save(params, self.misfit)

  def test_new_workdir_is_removed_with_the_parents_it_made(self):
    root = self.create_tempdir().full_path
    workdir = os.path.join(root, 'runs', 'today', 'run')
    # One line naming the sizes that differ (issue 47), not the parameter names.
    with self.assertRaisesRegex(ValueError, r'misfit.npz is a ViT 24w x \d+L, 7px patches, '
                                r'the model a ViT 16w x \d+L, 7px patches \(width 24 vs 16'):
      loop.train_and_evaluate(test_train.tiny_config(pretrained_path=self.misfit),
                              workdir, devices=jax.devices()[:1])
    self.assertEqual(os.listdir(root), [])

  def test_existing_workdir_is_left_unchanged(self):
    workdir = self.create_tempdir().full_path
    with open(os.path.join(workdir, 'notes.txt'), 'w') as f:
      f.write('mine')
    before = _tree(workdir)
    with self.assertRaisesRegex(ValueError, 'misfit.npz'):
      loop.train_and_evaluate(test_train.tiny_config(pretrained_path=self.misfit),
                              workdir, devices=jax.devices()[:1])
    self.assertEqual(_tree(workdir), before)

  def test_resume_whose_data_fails_leaves_the_run_unchanged(self):
    workdir = self.create_tempdir().full_path
    loop.train_and_evaluate(test_train.tiny_config(total_steps=4), workdir,
                            devices=jax.devices()[:1])
    before = _tree(workdir)
    # A resume with a changed (allowed) config whose dataset cannot be read: the
    # changed config must not be recorded, nor a new events file left.
    c = test_train.tiny_config(total_steps=8, allow_config_change=True)
    failing = mock.patch.object(loop.pipeline, 'make_train_iterator',
                                side_effect=OSError('Could not prepare mnist5k'))
    with failing, self.assertRaisesRegex(OSError, 'Could not prepare'):
      loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
    self.assertEqual(_tree(workdir), before)


class HomeTest(absltest.TestCase):
  """`~` in --workdir and the config's paths is the home directory, not a folder named ~."""

  def test_tilde_in_workdir_pretrained_path_and_data_dir(self):
    home = self.create_tempdir().full_path
    cwd = self.create_tempdir().full_path
    params = from_config.build(test_train.tiny_config(), 10).init(
        jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 3)))['params']
    checkpoint.save(params, os.path.join(home, 'init.npz'))
    # ~/tfds is the session's prepared data: the path is what is tested, not preparation.
    os.symlink(tfds_testdata.data_dir(), os.path.join(home, 'tfds'))
    out = commands.run(
        _main_args('~/run', '--config.pretrained_path=~/init.npz',
                   '--config.data_dir=~/tfds', '--config.total_steps=3',
                   '--config.checkpoint_every=0'),
        cwd=cwd, env=_env(HOME=home), timeout=300)
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    self.assertIn(f'Initialised parameters from {home}/init.npz', out.stderr)
    self.assertTrue(os.path.exists(os.path.join(home, 'run', 'params.npz')))
    self.assertTrue(os.path.isdir(os.path.join(home, 'tfds')))
    self.assertEmpty(os.listdir(cwd))  # no directory literally named '~'


class WorkdirAsCheckpointTest(absltest.TestCase):
  """--checkpoint=WORKDIR reads WORKDIR/params.npz with its config.json."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.params_path, cls.data_dir, _ = tiny_trained.trained()
    cls.workdir = os.path.dirname(cls.params_path)

  def test_resolves_to_params_npz_and_loads_the_same_model(self):
    self.assertEqual(load.resolve_checkpoint(self.workdir), self.params_path)
    self.assertEqual(load.resolve_checkpoint(self.workdir + '/'), self.params_path)
    from_dir = load.load_model(None, self.workdir)
    from_file = load.load_model(None, self.params_path)
    self.assertEqual((from_dir.name, from_dir.resolution, from_dir.num_classes),
                     (from_file.name, from_file.resolution, from_file.num_classes))
    out = os.path.join(self.create_tempdir().full_path, 'copy.npz')
    formats.convert(load.resolve_checkpoint(self.workdir), out)
    self.assertEqual(jax.tree.structure(checkpoint.load(out)),
                     jax.tree.structure(from_file.params))

  def test_unfinished_workdir_is_one_line(self):
    workdir = self.create_tempdir().full_path
    os.mkdir(os.path.join(workdir, 'checkpoints'))
    with open(os.path.join(workdir, 'config.json'), 'w') as f:
      f.write('{}')
    with self.assertRaisesRegex(ValueError, 'without params.npz: its run has not '
                                'finished'):
      load.resolve_checkpoint(workdir)

  def test_predict_cli_with_the_workdir_under_tilde(self):
    image = os.path.join(REPO, 'docs', 'images', 'examples', 'digit_7.png')
    home, name = os.path.split(self.workdir)
    out = commands.run(
        [sys.executable, '-m', 'vit_jax.predict', f'--checkpoint=~/{name}',
         f'--data_dir={self.data_dir}', image],
        cwd=REPO, env=_env(HOME=home), timeout=300)
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    lines = out.stdout.splitlines()
    self.assertEqual(lines[0], image)
    self.assertRegex(lines[1], r'^ +\d+\.\d\d%  \d$')  # mnist5k's names: 0..9


class OriginalKeysTest(absltest.TestCase):
  """The original vision_transformer's config keys: aliases, or one line naming the new key."""

  def _main(self, *extra):
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    out = commands.run(_main_args(workdir, *extra), cwd=REPO, env=_env(), timeout=300)
    self.assertFalse(os.path.exists(workdir))
    return out

  def test_aliases_are_renamed_and_replaced_keys_refused(self):
    self.assertEqual(
        original_keys.translate(['main', '--config.progress_every=5',
                                 '--config.grad_norm_clip', '0.5',
                                 '--config.tfds_data_dir=/d', '--config.tfds_manual_dir=/m',
                                 '--config.batch=8', '--workdir=/w']),
        ['main', '--config.log_every=5', '--config.grad_clip_norm', '0.5',
         '--config.data_dir=/d', '--config.manual_dir=/m', '--config.batch=8',
         '--workdir=/w'])
    with self.assertRaisesRegex(ValueError, 'use --config.optimizers.sgd.accumulator_dtype'):
      original_keys.translate(['main', '--config.optim_dtype=bfloat16'])

  def test_cli_replaced_key_is_one_line_naming_the_new_key(self):
    out = self._main('--config.eval_every=100')
    self.assertEqual(out.returncode, 2, out.stderr[-3000:])
    self.assertEqual(out.stderr.strip().splitlines(), [
        "vit_jax: error: config key 'eval_every' is the original vision_transformer's; "
        'use --config.evals.test.every (the test split; evals.minival.every for the '
        'held-out minival).'])

  def test_cli_alias_reaches_the_new_key(self):
    # A bad value shows which key the alias set, without training.
    out = self._main('--config.grad_norm_clip=abc')
    self.assertEqual(out.returncode, 2, out.stderr[-3000:])
    self.assertEqual(out.stderr.strip().splitlines(), [
        "vit_jax: error: --config.grad_clip_norm=abc: could not convert string to "
        "float: 'abc'"])

  def test_cli_unknown_key_without_a_close_match_is_named(self):
    out = self._main('--config.model.nonsense=1')
    self.assertEqual(out.returncode, 2, out.stderr[-3000:])
    self.assertEqual(out.stderr.strip().splitlines(), [
        "vit_jax: error: unknown config key 'model.nonsense' (configs are locked: "
        'vit_jax/configs/base.py lists every key).'])


class QuietOutputTest(absltest.TestCase):

  def test_log_lines_print_numpy_numbers_as_plain_numbers(self):
    # The Done: line and evaluation lines: not 'np.int64(1000)' or 'np.float32(0.5)'.
    self.assertEqual(
        writers.format_scalars({'accuracy_test': np.float32(0.5),
                                'examples_test': np.int64(1000), 'step': 8}),
        'accuracy_test 0.5000 examples_test 1000 step 8')


if __name__ == '__main__':
  absltest.main()
