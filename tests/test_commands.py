"""tests/commands.py: a forked command behaves as `subprocess.run` of the same command line."""
import os
import signal
import subprocess
import sys

from absl.testing import absltest

from tests import commands

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CommandsTest(absltest.TestCase):

  def test_output_exit_code_cwd_and_environment_match_a_subprocess(self):
    env = dict(os.environ, PYTHONPATH=REPO, VITJAX_TEST_MARKER='set by the test')
    cwd = self.create_tempdir().full_path
    for args in (['configs'], ['modelz']):  # exit 0 on stdout, exit 2 on stderr
      cmd = [sys.executable, '-m', 'vit_jax.list', *args]
      forked = commands.run(cmd, env=env, cwd=cwd, timeout=300)
      plain = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                             timeout=300, check=False)
      self.assertEqual((forked.returncode, forked.stdout, forked.stderr),
                       (plain.returncode, plain.stdout, plain.stderr), args)
    # The child sees the command's working directory and environment, not the server's.
    probe = os.path.join(cwd, 'vit_jax_probe.py')
    with open(probe, 'w') as f:
      f.write('import os, sys\nprint(os.getcwd(), os.environ["VITJAX_TEST_MARKER"], sys.argv[1:])\n'
              'sys.exit(3)\n')
    # Every `-m vit_jax...` module is forked, this one from the command's directory too.
    proc = commands.run([sys.executable, '-m', 'vit_jax_probe', 'a b'], env=env, cwd=cwd)
    self.assertEqual((proc.returncode, proc.stdout), (3, f"{cwd} set by the test ['a b']\n"))

  def test_signals_and_timeouts(self):
    started = commands.start([sys.executable, '-m', 'vit_jax.plot', '--help'], cwd=REPO)
    self.assertEqual(started.wait(timeout=300), 0)
    self.assertIn('--out', started.outputs()[0])
    started.close()
    # A long run: killed at the timeout, or by a signal, as a subprocess would be.
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    config = os.path.join(REPO, 'tests', 'tiny_train_config.py')
    cmd = [sys.executable, '-m', 'vit_jax.main', f'--config={config}', f'--workdir={workdir}',
           '--config.total_steps=100000', '--config.log_every=1']
    with self.assertRaises(subprocess.TimeoutExpired):
      commands.run(cmd, timeout=1)
    started = commands.start(cmd, cwd=REPO)
    started.send_signal(signal.SIGKILL)
    self.assertEqual(started.wait(timeout=300), -signal.SIGKILL)
    started.close()
    # A command a failed test left running is stopped before the next one starts.
    left = commands.start(cmd, cwd=REPO)
    proc = commands.run([sys.executable, '-m', 'vit_jax.list', 'modelz'], timeout=300)
    self.assertEqual((left.returncode, proc.returncode), (-signal.SIGKILL, 2))


if __name__ == '__main__':
  absltest.main()
