"""The VTAB-1k worker: trains its share of the protocol's runs and writes the results.

A worker trains runs (vit_jax.cli.vtab_runs) with the trainer, one work directory each,
claiming a run with a lock file so that workers sharing a work directory never train the
same run; the one that finds every task finished writes the results
(vit_jax.cli.vtab_report). No flags are defined here: the command is vit_jax.cli.vtab.
"""
import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
from typing import Any, Iterator, Optional, Sequence

from absl import logging
import jax
import ml_collections
import numpy as np

from vit_jax import checkpoint as checkpoint_lib
from vit_jax import fileio
from vit_jax import rundir
from vit_jax.cli import vtab_report
from vit_jax.cli import vtab_runs
from vit_jax.models import families
from vit_jax.parallel import sharding
from vit_jax.train import loop
from vit_jax.train import resume
from vit_jax.train import validate

Run = vtab_runs.Run

def read_result(run: Run, workdir: str) -> Optional[dict[str, Any]]:
  """The run's recorded result (vtab_run.json), or None while it is not trained and scored."""
  path = os.path.join(run.directory(workdir), vtab_runs.RESULT_FILE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


@contextlib.contextmanager
def claim(run: Run, workdir: str) -> Iterator[bool]:
  """Holds the run's lock file while the body runs; yields False if another process holds it.

  An flock on WORKDIR/<task>/.<run>.lock: the system drops it when its process dies, so a
  killed worker's run is free again (shared file systems need working flock, as NFSv4's).
  """
  folder = os.path.join(workdir, run.task)
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, f'.{run.name}.lock'), 'a+') as f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      yield False
      return
    try:
      yield True
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def train(run: Run, config: ml_collections.ConfigDict, checkpoint: str, workdir: str,
          devices: Optional[list] = None) -> dict[str, Any]:
  """Trains (or resumes) one run, records its score in vtab_run.json and returns the record."""
  directory = run.directory(workdir)
  logging.info('VTAB %s: training %s (%s) in %s.', run.task, run.name,
               'scored on test' if run.final else 'scored on val200', directory)
  cfg = vtab_runs.run_config(config, run, checkpoint)
  try:
    final = loop.train_and_evaluate(cfg, directory, devices)
    score = vtab_runs.score_of(run, final)
  except loop.NonFiniteError as e:
    if run.final:
      raise
    # A sweep setting that diverges loses the sweep; the others still run.
    logging.warning('VTAB %s: %s diverged, scored 0: %s', run.task, run.name, e)
    final, score = {'diverged': 1.0}, 0.0
  record = {'task': run.task, 'run': run.name, 'train': run.train,
            'train_split': cfg.train_split, 'lr': run.setting.lr,
            'steps': run.setting.steps, 'checkpoint': checkpoint, 'score': score,
            'metrics': {k: float(v) for k, v in final.items()
                        if isinstance(v, (int, float, np.number))}}
  if jax.process_index() == 0:
    fileio.atomic_write(os.path.join(directory, vtab_runs.RESULT_FILE),
                        (json.dumps(record, indent=2) + '\n').encode())
  if not config.vtab.keep_checkpoints:  # the score is recorded; params.npz stays
    shutil.rmtree(os.path.join(directory, rundir.CHECKPOINT_DIR), ignore_errors=True)
  logging.info('VTAB %s: %s scored %.4f.', run.task, run.name, record['score'])
  return record


def sweep_scores(task: str, config: ml_collections.ConfigDict,
                 workdir: str) -> Optional[dict[vtab_runs.Setting, float]]:
  """The task's val200 scores per setting, or None while a sweep run is unfinished."""
  scores = {}
  for run in vtab_runs.sweep_runs([task], config):
    result = read_result(run, workdir)
    if result is None:
      return None
    scores[run.setting] = result['score']
  return scores


def final_of(task: str, config: ml_collections.ConfigDict, workdir: str) -> Optional[Run]:
  """The task's train1000 run once it is known (paper: always; sweep: after the sweep)."""
  if config.vtab.protocol == 'paper':
    return vtab_runs.final_run(task, config, None)
  scores = sweep_scores(task, config, workdir)
  return None if scores is None else vtab_runs.final_run(task, config, scores)


class Worker:
  """Worker `index` of `count`: sweep run j is worker j % count's, task i's final run i % count's.

  A worker also trains the sweep runs its final runs need that no process holds (a slow or
  dead worker's), and waits for those another process is training.
  """

  def __init__(self, config: ml_collections.ConfigDict, tasks: Sequence[str],
               checkpoint: str, workdir: str, index: int = 0, count: int = 1,
               devices: Optional[list] = None):
    self.config, self.tasks, self.checkpoint, self.workdir = config, tasks, checkpoint, workdir
    self.index, self.count, self.devices = index, count, devices
    runs = vtab_runs.sweep_runs(tasks, config)
    self.own_sweep = {r for j, r in enumerate(runs) if j % count == index}
    self.own_tasks = [t for i, t in enumerate(tasks) if i % count == index]
    self.trained: list[Run] = []

  def _try(self, run: Run) -> str:
    """'done' (already), 'trained' (now) or 'busy' (another process holds it)."""
    if read_result(run, self.workdir) is not None:
      return 'done'
    with claim(run, self.workdir) as claimed:
      if not claimed:
        return 'busy'
      if read_result(run, self.workdir) is not None:  # finished while we looked
        return 'done'
      train(run, self.config, self.checkpoint, self.workdir, self.devices)
      self.trained.append(run)
      return 'trained'

  def _pass(self) -> list[Run]:
    """One pass over the tasks; returns the runs this worker still waits for."""
    waiting = []
    for task in self.tasks:
      own_final = task in self.own_tasks
      for run in vtab_runs.sweep_runs([task], self.config):
        # Its own sweep runs, and those its final run needs that no one else has taken.
        if run in self.own_sweep or own_final:
          if self._try(run) == 'busy' and own_final:
            waiting.append(run)
      if own_final:
        final = final_of(task, self.config, self.workdir)
        if final is not None and self._try(final) == 'busy':
          waiting.append(final)
    return waiting

  def work(self) -> list[Run]:
    """Trains this worker's runs, waiting for the ones others hold; returns those it trained."""
    while True:
      before = len(self.trained)
      waiting = self._pass()
      if not waiting:
        return self.trained
      if len(self.trained) == before:
        logging.info('Worker %d: waiting for %d run(s) other workers hold: %s.',
                     self.index, len(waiting),
                     ', '.join(f'{r.task}/{r.name}' for r in waiting[:4]))
        time.sleep(self.config.vtab.poll_seconds)


def collect(tasks: Sequence[str], config: ml_collections.ConfigDict,
            workdir: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
  """(results of the finished tasks in order, names of the unfinished ones)."""
  results, missing = {}, []
  for task in tasks:
    final = final_of(task, config, workdir)
    result = final and read_result(final, workdir)
    if not result:
      missing.append(task)
      continue
    entry = {'setting': {'lr': final.setting.lr, 'steps': final.setting.steps}}
    if config.vtab.protocol == 'sweep':
      entry['val200'] = {s.name: v for s, v in
                         sweep_scores(task, config, workdir).items()}
    entry['test_accuracy'] = result['score']
    entry['test_examples'] = int(result['metrics'].get('examples_test', 0))
    entry['run'] = os.path.join(task, final.name)
    entry['checkpoint'] = result['checkpoint']
    results[task] = entry
  return results, missing


def report(tasks: Sequence[str], config: ml_collections.ConfigDict, workdir: str,
           meta: dict[str, Any]) -> dict[str, Any]:
  """Writes vtab.json/.md/.png when every task is finished (a ValueError naming the rest else)."""
  results, missing = collect(tasks, config, workdir)
  if missing:
    raise ValueError(vtab_report.missing_message(missing, workdir))
  checkpoints = sorted({r.pop('checkpoint') for r in results.values()})
  out = vtab_report.summarise(results, {**meta, 'checkpoint': ', '.join(checkpoints)})
  for path in vtab_report.write(workdir, out):
    logging.info('Wrote %s.', path)
  return out


def check_runs(tasks: Sequence[str], config: ml_collections.ConfigDict, checkpoint: str,
               workdir: str, mesh: Any) -> None:
  """Before any training: each task's runs check out, the checkpoint fits, old runs match."""
  settings = vtab_runs.sweep_settings(config.vtab)
  fitted = False
  for task in tasks:
    finals = [vtab_runs.Run(task, s, vtab_runs.TRAIN1000) for s in settings]
    if config.vtab.protocol == 'paper':
      finals = [vtab_runs.final_run(task, config, None)]
    runs = vtab_runs.sweep_runs([task], config) + finals
    for run in runs[:1] + runs[-1:]:  # a train800 and a train1000 config of the task
      built = validate.validate(vtab_runs.run_config(config, run, checkpoint), mesh)
      if not fitted:
        _check_fit(vtab_runs.run_config(config, run, checkpoint), built)
        fitted = True
    for run in runs:
      _check_existing(run, vtab_runs.run_config(config, run, checkpoint), workdir)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
  """Only errors are logged inside (dataset preparation, load_pretrained's notes)."""
  level = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)
  try:
    yield
  finally:
    logging.set_verbosity(level)


def _check_fit(cfg: ml_collections.ConfigDict, built: validate.Built) -> None:
  """Loads the checkpoint into the model's tree as the trainer will (shapes, names, model)."""
  abstract = jax.eval_shape(loop.state_init(cfg, built.objective, built.tx),
                            jax.random.PRNGKey(0))
  zeros = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype),
                       built.objective.model_params(abstract.params))
  checkpoint_lib.load_pretrained(pretrained_path=cfg.pretrained_path, init_params=zeros,
                                 model_config=families.fields(built.objective.model))


def _check_existing(run: Run, cfg: ml_collections.ConfigDict, workdir: str) -> None:
  """A run directory from an earlier call must be of the same checkpoint and config."""
  directory = run.directory(workdir)
  saved = os.path.join(directory, rundir.CONFIG_FILE)
  if not os.path.exists(saved):
    return
  with open(saved) as f:
    old = json.load(f).get('pretrained_path', '')
  if old != cfg.pretrained_path and not fileio.same_file(old, cfg.pretrained_path):
    raise ValueError(f'{directory} was fine-tuned from {old}, not {cfg.pretrained_path}; '
                     'use a new --workdir for another checkpoint.')
  resume.check(cfg, directory)


def describe(config: ml_collections.ConfigDict, tasks: Sequence[str]) -> dict[str, Any]:
  """What vtab.json records beside the results: protocol, model, config and its overrides."""
  return {
      'protocol': config.vtab.protocol,
      'model_name': config.model_name,
      'selection': config.vtab.tasks,
      'task_names': list(tasks),
      'sweep': ({'lrs': list(config.vtab.lrs), 'steps': list(config.vtab.steps)}
                if config.vtab.protocol == 'sweep' else None),
      'config': next((a.split('=', 1)[1] for a in sys.argv if a.startswith('--config=')),
                     vtab_runs.DEFAULT_CONFIG),
      'config_overrides': [a for a in sys.argv if a.startswith('--config.')],
      'resolution': config.pp.crop,
      'batch': config.batch,
  }


def execute(config: ml_collections.ConfigDict, checkpoint: str, workdir: str,
            worker: int = 0, num_workers: int = 1, devices: Optional[list] = None,
            meta: Optional[dict[str, Any]] = None) -> Optional[dict[str, Any]]:
  """Checks every run, trains this worker's share; the results if every task is finished, else None.

  `devices` restricts each run's mesh to some of the local devices (tests, notebooks).
  """
  vtab_runs.check_section(config.vtab)
  tasks = vtab_runs.select_tasks(config.vtab.tasks)
  with _quiet():  # a mistake found here is one line; the checks' own logs would bury it
    check_runs(tasks, config, checkpoint, workdir, sharding.make_mesh(config.mesh, devices))
  Worker(config, tasks, checkpoint, workdir, worker, num_workers, devices).work()
  _, missing = collect(tasks, config, workdir)
  if missing:
    return None
  return report(tasks, config, workdir, meta or describe(config, tasks))
