"""Tests for multi-process start: settings, cluster detection, and real localhost runs."""
from absl.testing import absltest
from absl.testing import parameterized

from vit_jax import distributed

_SLURM_STEP = {'SLURM_JOB_ID': '123', 'SLURM_STEP_NODELIST': 'node[001-002]',
               'SLURM_NTASKS': '16', 'SLURM_PROCID': '3', 'SLURM_LOCALID': '3'}


class SettingsTest(parameterized.TestCase):
  """Single-process decisions and one-line errors; none of these starts jax.distributed."""

  def test_no_settings_is_a_single_process(self):
    self.assertEqual(distributed.initialize(environ={}), 'single')

  def test_one_process_needs_no_runtime(self):
    env = {'VIT_JAX_COORDINATOR': 'localhost:1234', 'VIT_JAX_NUM_PROCESSES': '1',
           'VIT_JAX_PROCESS_ID': '0'}
    self.assertEqual(distributed.initialize(environ=env), 'single')

  def test_off_wins_over_cluster(self):
    env = {**_SLURM_STEP, 'VIT_JAX_DISTRIBUTED': 'off'}
    self.assertEqual(distributed.initialize(environ=env), 'single')

  @parameterized.parameters(
      ({'VIT_JAX_COORDINATOR': 'localhost:1234'},
       r"\['VIT_JAX_NUM_PROCESSES', 'VIT_JAX_PROCESS_ID'\] missing"),
      ({'VIT_JAX_COORDINATOR': 'localhost', 'VIT_JAX_NUM_PROCESSES': '2',
        'VIT_JAX_PROCESS_ID': '0'}, "VIT_JAX_COORDINATOR='localhost': use host:port"),
      ({'VIT_JAX_COORDINATOR': 'h:1', 'VIT_JAX_NUM_PROCESSES': 'two',
        'VIT_JAX_PROCESS_ID': '0'}, "VIT_JAX_NUM_PROCESSES='two' is not an integer"),
      ({'VIT_JAX_COORDINATOR': 'h:1', 'VIT_JAX_NUM_PROCESSES': '2',
        'VIT_JAX_PROCESS_ID': '2'}, r'VIT_JAX_PROCESS_ID=2: must be in \[0, 2\)'),
      ({'VIT_JAX_COORDINATOR': 'h:1', 'VIT_JAX_NUM_PROCESSES': '0',
        'VIT_JAX_PROCESS_ID': '0'}, 'VIT_JAX_NUM_PROCESSES=0: must be at least 1'),
      ({'VIT_JAX_DISTRIBUTED': 'yes'}, "VIT_JAX_DISTRIBUTED='yes' is unknown"),
      ({'VIT_JAX_LOCAL_DEVICE_IDS': '0;1'}, 'use comma-separated integers'),
  )
  def test_errors(self, env, message):
    with self.assertRaisesRegex(ValueError, message):
      distributed.initialize(environ=env)

  def test_arguments_win_over_environment(self):
    env = {'VIT_JAX_COORDINATOR': 'h:1', 'VIT_JAX_NUM_PROCESSES': '4',
           'VIT_JAX_PROCESS_ID': '3'}
    self.assertEqual(distributed.initialize(num_processes=1, process_id=0, environ=env),
                     'single')

  def test_detect_cluster(self):
    self.assertEqual(distributed.detect_cluster(_SLURM_STEP), 'slurm')
    # A lone sbatch shell or a one-task step is a single process.
    self.assertIsNone(distributed.detect_cluster({**_SLURM_STEP, 'SLURM_NTASKS': '1'}))
    self.assertIsNone(distributed.detect_cluster(
        {k: v for k, v in _SLURM_STEP.items() if k != 'SLURM_STEP_NODELIST'}))
    self.assertEqual(distributed.detect_cluster(
        {'OMPI_MCA_orte_hnp_uri': '1.0;tcp://10.0.0.1:1', 'OMPI_COMM_WORLD_SIZE': '4'}),
                     'ompi')
    self.assertIsNone(distributed.detect_cluster({}))


if __name__ == '__main__':
  absltest.main()
