"""`python -m vit_jax.vtab`: the VTAB-1k protocols end to end on the demo tasks (embedded digits).

The demo tasks have the real tasks' split layout (train800 + val200 = the train split, a test
split); the runs fine-tune the session's tiny trained ViT (tests/tiny_trained.py) for a few
steps on one device.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
import jax
import numpy as np

from tests import commands
from tests import tfds_testdata
from tests import tiny_trained
from vit_jax import configs
from vit_jax.cli import vtab_report
from vit_jax.cli import vtab_runs
from vit_jax.cli import vtab_worker as vtab_cli
from vit_jax.configs import experiments

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOOD_LR, BAD_LR, STEPS = 0.05, 1.0, 20


def demo_config(data_dir: str, protocol: str, tasks: str = 'demo_mnist5k'):
  """configs/vtab.py:demo on the tiny trained ViT: 20 steps, sweep lr 1 (too high) / 0.05."""
  c = configs.load(experiments.resolve('vtab:demo'))
  c.model_name = tiny_trained.MODEL_NAME
  c.model.update(hidden_size=64, mlp_dim=128, num_layers=2, num_heads=4, classifier='')
  c.data_dir = data_dir
  c.total_steps, c.warmup_steps, c.base_lr = STEPS, 4, GOOD_LR
  c.vtab.update(protocol=protocol, tasks=tasks, lrs=(BAD_LR, GOOD_LR), steps=(STEPS,))
  return c


def _config_json(directory: str) -> dict:
  with open(os.path.join(directory, 'config.json')) as f:
    return json.load(f)


def _vtab(*args: str) -> tuple[int, str]:
  """(exit status, stderr) of `python -m vit_jax.vtab ARGS`."""
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  proc = commands.run([sys.executable, '-m', 'vit_jax.vtab', *args], env=env, timeout=600,
                      cwd=REPO)
  return proc.returncode, proc.stderr.strip()


class VtabTest(absltest.TestCase):
  """One work directory: a sweep killed after its first run, resumed; then the paper protocol."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.checkpoint, cls.data_dir, _ = tiny_trained.trained()
    cls.devices = jax.devices()[:1]
    cls.workdir = tempfile.mkdtemp(prefix='vit_jax_vtab_')
    cls.addClassCleanup(shutil.rmtree, cls.workdir, ignore_errors=True)
    cls.config = demo_config(cls.data_dir, 'sweep')
    cls.bad, cls.good = (vtab_runs.Run('demo_mnist5k', vtab_runs.Setting(lr, STEPS),
                                       'train800') for lr in (BAD_LR, GOOD_LR))
    # A sweep killed after its first run: that run is there, the rest is not.
    vtab_cli.Worker(cls.config, ['demo_mnist5k'], cls.checkpoint, cls.workdir,
                    devices=cls.devices)._try(cls.bad)
    cls.killed_results = os.listdir(cls.workdir)
    cls.bad_mtime = os.path.getmtime(os.path.join(cls.bad.directory(cls.workdir),
                                                  'metrics.jsonl'))
    cls.report = cls._execute(cls.config)
    with open(os.path.join(cls.workdir, vtab_report.JSON_FILE)) as f:
      cls.written = json.load(f)

  @classmethod
  def _execute(cls, config, worker=0, num_workers=1):
    return vtab_cli.execute(config, cls.checkpoint, cls.workdir, worker, num_workers,
                            cls.devices)

  def test_sweep_picks_the_best_lr_by_val200_and_retrains_on_1000(self):
    task = self.report['tasks']['demo_mnist5k']
    val = task['val200']
    self.assertEqual(set(val), {self.bad.setting.name, self.good.setting.name})
    # lr 1 wrecks the pre-trained features in 20 steps; 0.05 fine-tunes them.
    self.assertLess(val[self.bad.setting.name], 0.3)
    self.assertGreater(val[self.good.setting.name], 0.5)
    self.assertEqual(task['setting'], {'lr': GOOD_LR, 'steps': STEPS})
    # The sweep runs trained on train800 and scored val200; the final one on the 1,000.
    swept = _config_json(self.good.directory(self.workdir))
    self.assertEqual(swept['train_split'], 'train[:800]')
    self.assertEqual(swept['evals']['minival']['split'], 'train[800:1000]')
    self.assertEqual(swept['evals']['test']['every'], -1)  # no peeking at the test split
    final = _config_json(os.path.join(self.workdir, task['run']))
    self.assertEqual(task['run'], 'demo_mnist5k/train1000_lr0.05_steps20')
    self.assertEqual(final['train_split'], 'train[:800]+train[800:1000]')
    self.assertEqual((final['base_lr'], final['total_steps']), (GOOD_LR, STEPS))
    self.assertEqual(final['pretrained_path'], self.checkpoint)
    self.assertEqual(task['test_examples'], 1000)
    self.assertEqual(self.report['mean'], task['test_accuracy'])
    self.assertEqual(self.written, self.report)
    # Scored runs keep params.npz, not their train-state checkpoints.
    self.assertFalse(os.path.exists(os.path.join(self.good.directory(self.workdir),
                                                 'checkpoints')))

  def test_a_killed_sweep_resumes_without_training_finished_runs(self):
    self.assertEqual(self.killed_results, ['demo_mnist5k'])  # no results file yet
    self.assertEqual(os.path.getmtime(os.path.join(self.bad.directory(self.workdir),
                                                   'metrics.jsonl')), self.bad_mtime)
    # Results lost (killed before they were written): the same call trains nothing.
    runs = os.path.join(self.workdir, 'demo_mnist5k')
    before = {n: os.path.getmtime(os.path.join(runs, n, 'metrics.jsonl'))
              for n in os.listdir(runs) if not n.startswith('.')}
    os.remove(os.path.join(self.workdir, vtab_report.JSON_FILE))
    again = self._execute(self.config)
    self.assertEqual(again['tasks'], self.report['tasks'])
    self.assertEqual({n: os.path.getmtime(os.path.join(runs, n, 'metrics.jsonl'))
                      for n in before}, before)
    with open(os.path.join(self.workdir, vtab_report.CHART_FILE), 'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')

  def test_two_workers_split_the_tasks_and_the_last_writes_the_table(self):
    # The paper's setting here is the sweep's choice: its train1000 run is already there.
    config = demo_config(self.data_dir, 'paper', 'demo_digits,demo_mnist5k')
    digits = vtab_runs.final_run('demo_digits', config, None)
    with open(os.path.join(self.workdir, vtab_report.JSON_FILE)) as f:
      sweep_results = f.read()
    # Worker 1's task (demo_mnist5k) is done; demo_digits is worker 0's.
    self.assertIsNone(self._execute(config, worker=1, num_workers=2))
    self.assertFalse(os.path.exists(digits.directory(self.workdir)))
    with open(os.path.join(self.workdir, vtab_report.JSON_FILE)) as f:
      self.assertEqual(f.read(), sweep_results)  # not replaced by a partial one

    report = self._execute(config, worker=0, num_workers=2)
    self.assertTrue(os.path.exists(digits.directory(self.workdir)))
    accuracies = [report['tasks'][t]['test_accuracy'] for t in ('demo_digits', 'demo_mnist5k')]
    self.assertEqual(accuracies[1], self.report['tasks']['demo_mnist5k']['test_accuracy'])
    self.assertEqual(report['tasks']['demo_digits']['test_examples'], 360)
    self.assertAlmostEqual(report['groups']['demo'], np.mean(accuracies))
    self.assertAlmostEqual(report['mean'], np.mean(accuracies))
    self.assertNotIn('val200', report['tasks']['demo_digits'])
    with open(os.path.join(self.workdir, vtab_report.TABLE_FILE)) as f:
      table = f.read()
    self.assertIn(f"| all | mean of 2 | | | {report['mean']:.4f} |", table)
    self.assertIn(f"| demo | demo_digits | {GOOD_LR:g} | {STEPS} | {accuracies[0]:.4f} |",
                  table)



class ProtocolTest(absltest.TestCase):
  """What needs no training: task selection, the tie rule, locks, --help, one-line errors."""

  def test_a_run_another_worker_holds_is_skipped(self):
    workdir = tfds_testdata.tempdir(self)
    config = demo_config(tfds_testdata.data_dir(), 'paper')
    run = vtab_runs.final_run('demo_mnist5k', config, None)
    with vtab_cli.claim(run, workdir) as held:
      self.assertTrue(held)
      worker = vtab_cli.Worker(config, ['demo_mnist5k'], '/nowhere.npz', workdir)
      self.assertEqual(worker._try(run), 'busy')
    self.assertFalse(os.path.exists(run.directory(workdir)))

  def test_a_diverging_sweep_setting_scores_0_and_the_sweep_goes_on(self):
    params, data_dir, _ = tiny_trained.trained()
    workdir = tfds_testdata.tempdir(self)
    config = demo_config(data_dir, 'sweep')
    run = vtab_runs.Run('demo_digits', vtab_runs.Setting(1e30, 2), vtab_runs.TRAIN800)
    record = vtab_cli.train(run, config, params, workdir, jax.devices()[:1])
    self.assertEqual((record['score'], record['metrics']), (0.0, {'diverged': 1.0}))
    self.assertEqual(vtab_cli.read_result(run, workdir), record)

  def test_sweep_ties_go_to_the_shorter_then_gentler_setting(self):
    s = vtab_runs.Setting
    scores = {s(0.01, 2500): 0.9, s(0.001, 500): 0.9, s(0.01, 500): 0.9,
              s(0.001, 2500): 0.8}
    self.assertEqual(vtab_runs.choose(scores), s(0.001, 500))
    self.assertEqual(vtab_runs.choose({**scores, s(0.01, 2500): 0.91}), s(0.01, 2500))

  def test_groups_cover_the_19_tasks(self):
    groups = {g: vtab_runs.select_tasks(g) for g in vtab_runs.GROUPS}
    self.assertEqual([len(g) for g in groups.values()], [7, 4, 8])
    self.assertEqual(vtab_runs.select_tasks('all'), sum(groups.values(), []))
    self.assertEqual(vtab_runs.select_tasks('dtd,natural')[:2], ['dtd', 'caltech101'])

  def test_help_lists_the_flags_before_tensorflow_loads(self):
    probe = ("import runpy, sys\nsys.argv = ['vit_jax.vtab', '--help']\ntry:\n"
             "  runpy.run_module('vit_jax.vtab', run_name='__main__', alter_sys=True)\n"
             "except SystemExit as e:\n"
             "  print('exit', e.code, 'tensorflow' in sys.modules, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO), cwd='/', timeout=300,
                          check=False)
    self.assertIn('exit 0 False', proc.stderr)
    for flag in ('checkpoint', 'tasks', 'protocol', 'worker', 'num_workers', 'report_only',
                 'config', 'workdir'):
      self.assertRegex(proc.stdout, rf'--(\[no\])?{flag}\b')
    self.assertIn('--protocol=sweep', proc.stdout)

  def test_mistakes_are_one_line_before_training_and_keep_old_results(self):
    params, data_dir, _ = tiny_trained.trained()
    workdir = tfds_testdata.tempdir(self)
    old = os.path.join(workdir, vtab_report.JSON_FILE)
    with open(old, 'w') as f:
      f.write('{"old": 1}\n')
    base = [f'--workdir={workdir}', '--config=vtab:demo', f'--checkpoint={params}',
            f'--config.data_dir={data_dir}']
    for args, message in [
        (['--tasks=demo_mnist5', '--config.vtab.lrs=0.01'],
         "unknown VTAB task or group 'demo_mnist5'. Did you mean 'demo_mnist5k'"),
        (['--tasks=naturel'], "Did you mean 'natural'"),
        (['--config.vtab.lrs=0.01,-0.1'], 'config.vtab.lrs has -0.1'),
        (['--config.vtab.steps=500,0'], 'config.vtab.steps has 0'),
        (['--config.vtab.lrs=()'], 'config.vtab.lrs is empty'),
        ([f'--checkpoint={workdir}/missing.npz'], 'missing.npz does not exist'),
        (['--report_only', '--tasks=demo'], '2 task(s) not finished'),
        # The quickstart's model (width 96) is not the tiny checkpoint's (width 64).
        (['--tasks=demo_digits'], 'the model a ViT 96w x 6L, 7px patches (width 64 vs 96'),
    ]:
      code, err = _vtab(*base, *args)
      self.assertEqual(code, 2, err)
      self.assertLen(err.splitlines(), 1, err)
      self.assertIn(message, err)
    with open(old) as f:
      self.assertEqual(f.read(), '{"old": 1}\n')
    self.assertEqual(sorted(os.listdir(workdir)), [vtab_report.JSON_FILE])


if __name__ == '__main__':
  absltest.main()
