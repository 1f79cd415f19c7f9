"""The VTAB-1k protocol as data: tasks, the runs a protocol needs, their configs and choices.

Two protocols (config.vtab.protocol, or vtab's --protocol):
  paper  each task trained once with the config's setting (the ViT paper's appendix B.1.1:
         lr 0.01, 2,500 steps for every task) on its 1,000 examples (train800 + val200),
         scored on its test split.
  sweep  BiT's protocol, by which the paper chose that setting: each (lr, steps) of
         config.vtab.lrs x config.vtab.steps fine-tuned on train800 and scored on val200;
         the best setting retrained on the 1,000 and scored on the test split.

Every run has its own work directory, WORKDIR/<task>/<run name>, so the trainer resumes an
interrupted run there and a finished one is not trained again. Light: no JAX or TensorFlow,
so the command checks its flags with it before they load.
"""
import dataclasses
import difflib
import math
import os
from typing import Any, Sequence

import ml_collections

from vit_jax.data import catalog

PROTOCOLS = ('paper', 'sweep')
DEFAULT_CONFIG = 'vtab'  # configs/vtab.py: the paper's setting for ViT-B/16
GROUPS = ('natural', 'specialized', 'structured')  # 'all'; catalog.VTAB_GROUPS adds 'demo'
RESULT_FILE = 'vtab_run.json'  # in a run's directory once it is trained and scored
TRAIN800 = 'train800'
TRAIN1000 = 'train1000'
# The metric each kind of run is scored by: val200 is evaluated as `minival`.
VAL_METRIC = 'accuracy_minival'
TEST_METRIC = 'accuracy_test'


def section() -> ml_collections.ConfigDict:
  """The config's `vtab` section (configs/vtab.py) with its defaults."""
  return ml_collections.ConfigDict({
      'protocol': 'paper',      # 'paper' | 'sweep' (the module docstring)
      'tasks': 'all',           # 'all' | natural | specialized | structured | demo | names
      # The sweep. The ViT paper (B.1.1) chose its setting "by running a small sweep over
      # two learning rates and two schedules" on the 800/200 split without naming them:
      # its Table 4 setting (0.01, 2,500 steps) beside a tenth of that rate and BiT's
      # HyperRule schedule for fewer than 20k examples (500 steps).
      'lrs': (0.001, 0.01),
      'steps': (500, 2500),
      # Warm-up of a run: min(config.warmup_steps, steps // 5), apply_finetune's rule
      # (500 steps for 2,500, 100 for 500).
      'warmup_fraction': 0.2,
      # A scored run's orbax checkpoints are deleted (its params.npz stays): a VTAB sweep
      # of a ViT-B keeps 95 runs, each checkpoint ~1 GB of train state.
      'keep_checkpoints': False,
      'poll_seconds': 30,       # how often a worker looks again for runs others hold
  })


@dataclasses.dataclass(frozen=True)
class Setting:
  """A fine-tuning setting of the sweep: learning rate and schedule length."""
  lr: float
  steps: int

  @property
  def name(self) -> str:
    return f'lr{self.lr:g}_steps{self.steps}'


@dataclasses.dataclass(frozen=True)
class Run:
  """One fine-tuning run: a task, a setting, and its data (train800 or train1000)."""
  task: str
  setting: Setting
  train: str  # TRAIN800 (a sweep run, scored on val200) or TRAIN1000 (scored on test)

  @property
  def name(self) -> str:
    return f'{self.train}_{self.setting.name}'

  @property
  def final(self) -> bool:
    return self.train == TRAIN1000

  def directory(self, workdir: str) -> str:
    return os.path.join(workdir, self.task, self.name)


def group_of(task: str) -> str:
  """The group ('natural', ..., 'demo') of a task name."""
  return next(g for g, tasks in catalog.VTAB_GROUPS.items() if task in tasks)


def select_tasks(spec: str) -> list[str]:
  """Task names from 'all', a group or comma-separated names; a one-line ValueError otherwise."""
  names = [s.strip() for s in str(spec).split(',') if s.strip()]
  if not names:
    raise ValueError(f'--tasks={spec!r} names no task; use all, a group '
                     f'({", ".join(catalog.VTAB_GROUPS)}) or task names.')
  out = []
  for name in names:
    if name == 'all':
      found = [t for g in GROUPS for t in catalog.VTAB_GROUPS[g]]
    elif name in catalog.VTAB_GROUPS:
      found = list(catalog.VTAB_GROUPS[name])
    elif name in catalog.VTAB_DATASETS:
      found = [name]
    else:
      known = ['all', *catalog.VTAB_GROUPS, *catalog.VTAB_DATASETS]
      close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
      hint = f' Did you mean {", ".join(map(repr, close))}?' if close else ''
      raise ValueError(f'--tasks: unknown VTAB task or group {name!r}.{hint} Groups: '
                       f'all, {", ".join(catalog.VTAB_GROUPS)}; tasks: '
                       f'{", ".join(catalog.VTAB_DATASETS)}.')
    out.extend(t for t in found if t not in out)
  return out


def sweep_settings(vtab: ml_collections.ConfigDict) -> list[Setting]:
  """The (lr, steps) grid of config.vtab, checked: lr > 0, steps >= 1, neither empty."""
  lrs, steps = tuple(vtab.lrs), tuple(vtab.steps)
  if not lrs or not steps:
    raise ValueError(f'config.vtab.{"lrs" if not lrs else "steps"} is empty; the sweep '
                     'needs at least one value, e.g. --config.vtab.lrs=0.001,0.01.')
  for lr in lrs:
    if (not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr)
        or lr <= 0):
      raise ValueError(f'config.vtab.lrs has {lr!r}; learning rates must be finite '
                       'numbers > 0.')
  for n in steps:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
      raise ValueError(f'config.vtab.steps has {n!r}; schedules are whole numbers of '
                       'steps >= 1.')
  if len(set(lrs)) < len(lrs) or len(set(steps)) < len(steps):
    raise ValueError(f'config.vtab.lrs={lrs} / steps={steps} repeat a value; list each '
                     'once.')
  return [Setting(float(lr), int(n)) for lr in lrs for n in steps]


def check_section(vtab: ml_collections.ConfigDict) -> None:
  """One-line errors for a bad protocol, task selection or sweep value in config.vtab."""
  if vtab.protocol not in PROTOCOLS:
    raise ValueError(f'protocol {vtab.protocol!r} does not exist; use '
                     f'{" or ".join(PROTOCOLS)}.')
  select_tasks(vtab.tasks)
  sweep_settings(vtab)
  if not 0 < vtab.warmup_fraction < 1:
    raise ValueError(f'config.vtab.warmup_fraction={vtab.warmup_fraction} must be in '
                     '(0, 1).')
  if not vtab.poll_seconds > 0:
    raise ValueError(f'config.vtab.poll_seconds={vtab.poll_seconds} must be > 0.')


def paper_setting(config: ml_collections.ConfigDict) -> Setting:
  """The fixed setting of the paper protocol: the config's base_lr and total_steps."""
  return Setting(float(config.base_lr), int(config.total_steps))


def sweep_runs(tasks: Sequence[str], config: ml_collections.ConfigDict) -> list[Run]:
  """The train800 runs of the sweep protocol, task by task (none for 'paper')."""
  if config.vtab.protocol != 'sweep':
    return []
  return [Run(t, s, TRAIN800) for t in tasks for s in sweep_settings(config.vtab)]


def choose(scores: dict[Setting, float]) -> Setting:
  """The best setting by val200 accuracy; ties go to the shorter schedule, then the lower lr.

  Of equally good settings the cheaper and the gentler one generalises no worse on
  200 examples, and the rule makes the choice independent of the sweep's order.
  """
  return max(scores, key=lambda s: (scores[s], -s.steps, -s.lr))


def final_run(task: str, config: ml_collections.ConfigDict,
              scores: dict[Setting, float] | None) -> Run:
  """The task's train1000 run: the paper's setting, or the sweep's choice from `scores`."""
  if config.vtab.protocol == 'paper':
    return Run(task, paper_setting(config), TRAIN1000)
  return Run(task, choose(scores), TRAIN1000)


def run_config(config: ml_collections.ConfigDict, run: Run,
               checkpoint: str) -> ml_collections.ConfigDict:
  """The trainer's config of one run: the task's data, the setting, the checkpoint, the scoring."""
  out = config.copy_and_resolve_references()
  with out.unlocked():
    del out['vtab']  # the protocol's keys are not the run's: a new --tasks must not resume anew
  dataset = catalog.VTAB_DATASETS[run.task]
  train800, val200 = catalog.DATASETS[dataset].train_split.split('+')
  out.dataset = dataset
  out.pretrained_path = checkpoint
  out.pretrained_dir = ''
  out.base_lr = run.setting.lr
  out.total_steps = run.setting.steps
  out.warmup_steps = min(config.warmup_steps,
                         int(run.setting.steps * config.vtab.warmup_fraction))
  if run.final:  # all 1,000 examples; the test split once at the end
    out.train_split = f'{train800}+{val200}'
    out.evals.test.every, out.evals.test.split = 0, ''
    out.evals.minival.every = -1
  else:  # train800; val200 (as minival) once at the end, the test split never
    out.train_split = train800
    out.evals.test.every = -1
    out.evals.minival.every, out.evals.minival.split = 0, val200
  out.lock()
  return out


def score_of(run: Run, metrics: dict[str, Any]) -> float:
  """A finished run's score from its final metrics: val200 or test accuracy."""
  key = TEST_METRIC if run.final else VAL_METRIC
  if key not in metrics:
    raise ValueError(f'run {run.task}/{run.name} finished without {key}; delete its '
                     'directory to train it again.')
  return float(metrics[key])
