"""A run's life through `python -m vit_jax.main`: Ctrl-C, re-runs, failures, paths, keys."""
import os
import re
import signal
import subprocess
import sys

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_CONFIG = os.path.join(REPO, 'tests', 'tiny_train_config.py')


def _env(**extra):
  return dict(os.environ, PYTHONPATH=REPO, **extra)


def _main_args(workdir, *extra):
  return [sys.executable, '-m', 'vit_jax.main', f'--config={TINY_CONFIG}',
          f'--workdir={workdir}', *extra]


def _interrupt_after_first_step(args, timeout=300):
  """Starts the command, sends Ctrl-C once it logged a step; returns (rc, stderr, first step)."""
  proc = subprocess.Popen(args, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  lines, first = [], None
  try:
    for line in proc.stderr:
      lines.append(line)
      step = re.search(r'step (\d+)/\d+ \(', line)
      if step:
        first = int(step.group(1))
        proc.send_signal(signal.SIGINT)
        break
    _, rest = proc.communicate(timeout=timeout)
  finally:
    if proc.poll() is None:
      proc.kill()
  return proc.returncode, ''.join(lines) + rest, first


class CtrlCTest(absltest.TestCase):

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


if __name__ == '__main__':
  absltest.main()
