"""A disk that fills (or a file-size limit, ulimit -f) while a run writes: one line, nothing lost.

Each case starts from a copy of a finished 8-step run (checkpoints 4 and 8, params.npz: the
session's, tests/tiny_trained.py), most as if stopped after checkpoint 4 (checkpoint 8 and
params.npz removed), and checks the one line (cause, the intact checkpoint, the command that
resumes), exit code 2, that the files already there are as they were, that no half-written
checkpoint is left, and that the same command resumes once there is room.
"""
import errno
import json
import os
import resource
import shutil
import subprocess
import sys

from absl.testing import absltest

from tests import commands
from tests import tiny_trained
from vit_jax import fileio

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_CONFIG = os.path.join(REPO, 'tests', 'tiny_train_config.py')
# Below the checkpoint's and params.npz's largest files (20-35 kB), above the logs and config.
_FSIZE = 20_000


def _env():
  return dict(os.environ, PYTHONPATH=REPO)


def _main(workdir, *extra, fsize=None):
  return commands.run([sys.executable, '-m', 'vit_jax.main', f'--config={TINY_CONFIG}',
                       f'--workdir={workdir}', *extra], cwd=REPO, env=_env(), fsize=fsize,
                      timeout=600)


class WriteFaultTest(absltest.TestCase):

  def test_the_cause_is_found_behind_the_libraries_errors(self):
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), '/w/metrics.jsonl')
    self.assertEqual(fileio.write_fault(full, '/w'), 'the disk is full')
    # orbax's tensorstore error keeps the errno in its text; TensorFlow's only the words.
    orbax = ValueError('OUT_OF_RANGE: Error writing "opt_state" in OCDBT database at local '
                       "file \"/w/checkpoints/6.orbax-checkpoint-tmp/\" [os_error_code='27']")
    self.assertEqual(fileio.write_fault(orbax, '/w'), 'a file-size limit was reached (ulimit -f)')
    try:
      try:
        raise OSError(errno.EDQUOT, 'quota')
      except OSError as e:
        raise RuntimeError('Failed to finalize writing of split "train"') from e
    except RuntimeError as e:
      self.assertEqual(fileio.write_fault(e, '/w'), 'the disk quota is used up')
    # Refused rights count only under the directory written to; other errors never.
    denied = PermissionError(errno.EACCES, 'Permission denied', '/data/images/1.jpg')
    self.assertIsNone(fileio.write_fault(denied, '/w'))
    denied.filename = '/w/config.json'
    self.assertEqual(fileio.write_fault(denied, '/w'), 'permission denied')
    self.assertIsNone(fileio.write_fault(ValueError('bad shape'), '/w'))
    # An error raised `from None` has said what to say about the disk already.
    try:
      try:
        raise full
      except OSError:
        raise ValueError('Could not prepare mnist5k: the disk is full') from None
    except ValueError as e:
      self.assertIsNone(fileio.write_fault(e, '/w'))

  def test_a_failed_append_leaves_no_half_line(self):
    path = os.path.join(self.create_tempdir().full_path, 'metrics.jsonl')
    fileio.append_whole(path, '{"step": 2}\n')
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))  # Python ignores SIGXFSZ
    try:
      with self.assertRaises(OSError) as caught:
        fileio.append_whole(path, '{"step": 4, "train_loss": 2.3}\n')
    finally:
      resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    self.assertEqual(caught.exception.errno, errno.EFBIG)
    with open(path) as f:
      self.assertEqual(f.read(), '{"step": 2}\n')


class DiskFaultTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.base = tiny_trained.eight_steps()  # the run of TINY_CONFIG; copied, never changed

  def _copy_of_base(self, parent=None, stopped_at_4=True):
    workdir = os.path.join(parent or self.create_tempdir().full_path, 'run')
    shutil.copytree(self.base, workdir)
    if stopped_at_4:
      shutil.rmtree(os.path.join(workdir, 'checkpoints', '8'))
      os.remove(os.path.join(workdir, 'params.npz'))
    return workdir

  def _assert_one_line(self, result, workdir, cause, kept='checkpoint 4 is intact'):
    self.assertEqual(result.returncode, 2, result.stderr[-3000:])
    for noise in ('Traceback', 'Event loop is closed', 'OUT_OF_RANGE', 'RESOURCE_EXHAUSTED'):
      self.assertNotIn(noise, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    self.assertEqual(
        last, f'vit_jax: error: Could not write to {workdir}: {cause}; {kept} and nothing '
        'half-written is left; once there is room, resume with: python -m vit_jax.main '
        f'--config={TINY_CONFIG} --workdir={workdir}')

  def _assert_kept(self, workdir, before):
    """The checkpoints and params.npz as they were; metrics.jsonl only appended to, whole lines."""
    after = commands.digest(workdir)
    for name, digest in before.items():
      if name.startswith('checkpoints/') or name == 'params.npz':
        self.assertEqual(after.get(name), digest, name)
    self.assertEqual(sorted(os.listdir(os.path.join(workdir, 'checkpoints'))),
                     sorted({n.split('/')[1] for n in before if n.startswith('checkpoints/')}))
    self.assertFalse([n for n in os.listdir(workdir) if n.startswith('.tmp-')])
    with open(os.path.join(self.base, 'metrics.jsonl')) as f:
      old = f.read()
    with open(os.path.join(workdir, 'metrics.jsonl')) as f:
      new = f.read()
    self.assertTrue(new.startswith(old))
    for line in new.splitlines():
      json.loads(line)

  def _assert_resumes(self, workdir):
    result = _main(workdir)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertIn(f'Resuming from {workdir}/checkpoints/4.', result.stderr)
    self.assertIn('8', os.listdir(os.path.join(workdir, 'checkpoints')))

  def test_file_size_limit_during_a_checkpoint(self):
    workdir = self._copy_of_base()
    before = commands.digest(workdir)
    result = _main(workdir, fsize=_FSIZE)
    self._assert_one_line(result, workdir, 'a file-size limit was reached (ulimit -f)')
    self._assert_kept(workdir, before)
    self._assert_resumes(workdir)

  def test_file_size_limit_while_writing_params_npz(self):
    # A run stopped after its last checkpoint: only params.npz is left to write.
    workdir = self._copy_of_base(stopped_at_4=False)
    os.remove(os.path.join(workdir, 'params.npz'))
    before = commands.digest(workdir)
    result = _main(workdir, fsize=_FSIZE)
    self._assert_one_line(result, workdir, 'a file-size limit was reached (ulimit -f)',
                          kept='checkpoint 8 is intact')
    self._assert_kept(workdir, before)
    self.assertFalse(os.path.exists(os.path.join(workdir, 'params.npz')))
    result = _main(workdir)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertTrue(os.path.exists(os.path.join(workdir, 'params.npz')))

  def test_file_size_limit_while_preparing_a_dataset(self):
    data_dir = self.create_tempdir().full_path
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    result = _main(workdir, f'--config.data_dir={data_dir}', fsize=_FSIZE)
    self.assertEqual(result.returncode, 2, result.stderr[-3000:])
    self.assertNotIn('Traceback', result.stderr)
    self.assertRegex(result.stderr.strip().splitlines()[-1],
                     rf'^vit_jax: error: Could not prepare mnist5k into {data_dir}: a '
                     r'file-size limit was reached \(ulimit -f\); make room there')
    self.assertFalse(os.path.exists(workdir))
    left = [d for d, _, _ in os.walk(data_dir) if 'incomplete' in d]
    self.assertEqual(left, [])

  def test_full_disk_during_a_checkpoint(self):
    if os.geteuid() != 0:
      self.skipTest('mounting a small tmpfs needs root')
    staged = self._copy_of_base()
    used_kb = int(subprocess.run(['du', '-sk', staged], capture_output=True, text=True,
                                 check=True).stdout.split()[0])
    mount = self.create_tempdir().full_path
    # Room for the run stopped at step 4 and its logs, not for checkpoint 8.
    mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={used_kb + 48}k', 'tmpfs',
                              mount], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
      self.skipTest(f'no tmpfs here: {mounted.stderr.strip()}')
    self.addCleanup(subprocess.run, ['umount', '-l', mount], check=False)
    workdir = os.path.join(mount, 'run')
    shutil.copytree(staged, workdir)
    before = commands.digest(workdir)
    result = _main(workdir)
    self._assert_one_line(result, workdir, 'the disk is full')
    self._assert_kept(workdir, before)  # resuming is test_file_size_limit_during_a_checkpoint's


if __name__ == '__main__':
  absltest.main()
