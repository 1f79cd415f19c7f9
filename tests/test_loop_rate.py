"""tools/loop_rate.py: the step fed by the pipeline, on one batch, and the pipeline alone."""
import os
import sys

from absl.testing import absltest

from tests import commands
from tests import tfds_testdata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LoopRateTest(absltest.TestCase):

  def test_windows_medians_and_the_pipelines_cost_per_example(self):
    tfds_testdata.data_dir()  # the tiny config reads the session's prepared mnist5k
    out = commands.run(
        [sys.executable, os.path.join(REPO, 'tools', 'loop_rate.py'),
         '--config=' + os.path.join(REPO, 'tests', 'tiny_train_config.py'),
         '--steps=2', '--windows=1', '--pipeline_batches=3', '--pp_train=decode|random_crop(28)'],
        env={**os.environ, 'PYTHONPATH': REPO}, timeout=300)
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertRegex(out.stdout, r'window 1: fed by the pipeline \d+ img/s, one fixed batch \d+')
    self.assertRegex(out.stdout, r'median: fed \d+ img/s, fixed batch \d+ img/s \(\d\.\d{3}x\)')
    self.assertRegex(out.stdout, r"pipeline alone \d+ img/s, \d+\.\d us of process CPU per "
                                 r"example \(pp.train='decode\|random_crop\(28\)'\)")


if __name__ == '__main__':
  absltest.main()
