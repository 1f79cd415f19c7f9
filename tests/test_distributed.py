"""Tests for multi-process start: settings, cluster detection, and real localhost runs."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from tests import tfds_testdata
from vit_jax import checkpoint
from vit_jax import configs
from vit_jax import rundir
from vit_jax.train import checkpointer
from vit_jax.train import loop
from vit_jax.parallel import distributed

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The quickstart, one encoder block deep, 6 steps; constant rate after warm-up so that a
# run resumed at step 3 follows the same schedule as an uninterrupted one; a given MFU peak
# (no matmuls timed at start).
RUN = {'model.num_layers': 1, 'peak_tflops': 1.0, 'total_steps': 6, 'warmup_steps': 2,
       'decay_type': 'constant', 'log_every': 1, 'checkpoint_every': 3,
       'evals.test.every': 0, 'eval_split': 'test[:200]'}
RUN_ARGS = ('--config=configs/quickstart.py', *(f'--config.{k}={v}' for k, v in RUN.items()))

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

  def test_late_start_names_the_function_to_call_first(self):
    env = {'VIT_JAX_COORDINATOR': 'h:1', 'VIT_JAX_NUM_PROCESSES': '2',
           'VIT_JAX_PROCESS_ID': '0'}
    late = RuntimeError('jax.distributed.initialize() must be called before any JAX '
                        'computations are executed.')
    # jax.config stays as it is: other tests in this process run on it.
    with mock.patch.object(jax.distributed, 'initialize', side_effect=late), \
         mock.patch.object(jax.config, 'update'), \
         self.assertRaisesRegex(RuntimeError, r'^vit_jax\.parallel\.distributed\.'
                                r'initialize\(\) must run before'):
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


def _launch(num_processes: int, devices_per_process: int, workdir: str) -> str:
  """Runs the quickstart through launch/local.sh; returns its log, fails with its tail."""
  # launch/local.sh sets the device count and keeps the suite's other XLA flags; the
  # processes share the suite's compilation cache (tests/conftest.py).
  env = {k: v for k, v in os.environ.items() if not k.startswith('VIT_JAX_')}
  env.update(PYTHON=sys.executable, DEVICES_PER_PROCESS=str(devices_per_process))
  result = subprocess.run(
      ['bash', os.path.join(REPO, 'launch', 'local.sh'), str(num_processes), '--',
       *RUN_ARGS, f'--workdir={workdir}',
       # The session's prepared digits, not the user's ~/tensorflow_datasets.
       f'--config.data_dir={tfds_testdata.data_dir()}'],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
  if result.returncode:
    raise AssertionError(f'{num_processes}x{devices_per_process} run failed '
                         f'({result.returncode}):\n{result.stdout[-4000:]}\n'
                         f'{result.stderr[-4000:]}')
  return result.stdout + result.stderr


def _train_here(workdir: str) -> None:
  """The same run (or its resumption) in this process, on 4 of its CPU devices."""
  c = configs.load(os.path.join(REPO, 'configs', 'quickstart.py'))
  c.update_from_flattened_dict({**RUN, 'data_dir': tfds_testdata.data_dir()})
  loop.train_and_evaluate(c, workdir, devices=jax.devices()[:4])


def _losses(workdir: str) -> dict[int, float]:
  """train_loss by step from metrics.jsonl (the last write of a step wins)."""
  losses = {}
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    for line in f:
      record = json.loads(line)
      if 'train_loss' in record:
        losses[record['step']] = record['train_loss']
  return losses


def _leaf(tree, path):
  """The leaf of a nested dict at a key path."""
  for key in path:
    tree = tree[key.key]
  return tree


def _copy_checkpoint(src_workdir: str, step: int, dst_workdir: str) -> None:
  """Starts a workdir from one checkpoint of another run."""
  src = os.path.join(src_workdir, checkpointer.CHECKPOINT_DIR, str(step))
  if not os.path.isdir(src):
    raise AssertionError(f'no checkpoint {src}: {os.listdir(os.path.dirname(src))}')
  shutil.copytree(src, os.path.join(dst_workdir, checkpointer.CHECKPOINT_DIR, str(step)))


class MultiProcessTest(absltest.TestCase):
  """2 processes x 2 CPU devices (launch/local.sh) against 1 process x 4 devices."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.one_by_four = os.path.join(cls.root, 'one_by_four')
    cls.two_by_two = os.path.join(cls.root, 'two_by_two')
    _train_here(cls.one_by_four)
    cls.two_by_two_log = _launch(2, 2, cls.two_by_two)
    cls.losses = _losses(cls.one_by_four)
    cls.params = checkpoint.load(os.path.join(cls.one_by_four, rundir.PARAMS_FILE))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def assert_matches_one_by_four(self, workdir: str, steps: range) -> None:
    losses = _losses(workdir)
    self.assertEqual(sorted(losses), list(steps))
    np.testing.assert_allclose([losses[s] for s in steps],
                               [self.losses[s] for s in steps], rtol=1e-5)
    params = checkpoint.load(os.path.join(workdir, rundir.PARAMS_FILE))
    self.assertEqual(jax.tree.structure(params), jax.tree.structure(self.params))
    for path, a in jax.tree_util.tree_leaves_with_path(params):
      b = _leaf(self.params, path)
      if jax.tree_util.keystr(path).endswith("['key']['bias']"):
        # Softmax ignores a shift shared by all keys, so the key bias gets only round-off
        # gradients, which Adam's normalisation turns into updates of random sign: it
        # stays tiny but does not reproduce across reduction orders.
        self.assertLess(np.abs(a).max(), 1e-3)
        continue
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6,
                                 err_msg=jax.tree_util.keystr(path))

  def test_two_processes_reproduce_one_process(self):
    self.assertEqual(sorted(self.losses), list(range(1, 7)))
    self.assert_matches_one_by_four(self.two_by_two, range(1, 7))

  def test_only_process_0_logs_progress(self):
    lines = self.two_by_two_log.splitlines()
    self.assertTrue(any(l.startswith('[p0]') and 'step 6/6' in l for l in lines),
                    self.two_by_two_log[-2000:])
    # Process 1 keeps only the runtime's connection lines (jax, Gloo).
    self.assertEqual([l for l in lines if l.startswith('[p1]') and
                      ('loop.py' in l or 'main.py' in l)], [])

  def test_resume_two_process_checkpoint_on_one_process(self):
    # The other direction (1x4 written, 2x2 resumed) takes the same orbax path; it is left
    # out to keep the suite fast.
    workdir = os.path.join(self.root, 'resumed_on_one')
    _copy_checkpoint(self.two_by_two, 3, workdir)
    _train_here(workdir)
    self.assert_matches_one_by_four(workdir, range(4, 7))


if __name__ == '__main__':
  absltest.main()
