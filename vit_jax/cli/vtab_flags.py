"""The VTAB-1k command's flags and the checks that need no TensorFlow or devices.

vit_jax/vtab.py parses the command line with these (and vit_jax.main's --config, --workdir,
--debug, --print_config) before the trainer loads, so --help and a mistake in the flags,
the config, the task names, the sweep or the checkpoint path answer in seconds.
"""
import os
import sys

from absl import flags
import ml_collections

from vit_jax import errors
from vit_jax import fileio
from vit_jax.cli import train_flags
from vit_jax.cli import vtab_runs
from vit_jax.models.formats import hub
from vit_jax.train import precheck

PROG = 'vit_jax.vtab'
DEFAULT_CONFIG = vtab_runs.DEFAULT_CONFIG


def define_flags() -> None:
  """The flags of `python -m vit_jax.vtab` beside the training command's."""
  flags.DEFINE_string('checkpoint', None, 'Pre-trained parameters to fine-tune: an .npz in '
                      'the published layout (a params.npz of vit_jax), a timm state dict '
                      'or a transformers directory; sets config.pretrained_path.')
  flags.DEFINE_string('tasks', None, 'all (the 19 tasks), a group (natural, specialized, '
                      'structured, demo) or task names, comma-separated; default: '
                      'config.vtab.tasks.')
  flags.DEFINE_enum('protocol', None, list(vtab_runs.PROTOCOLS), 'paper: the config\'s '
                    'setting on the 1,000 examples; sweep: config.vtab.lrs x steps on '
                    'train800, scored on val200, the best retrained on the 1,000; default: '
                    'config.vtab.protocol.')
  flags.DEFINE_integer('worker', 0, 'This worker\'s index (0..num_workers-1) among the '
                       'processes sharing --workdir.')
  flags.DEFINE_integer('num_workers', 1, 'Independent processes sharing --workdir, each '
                       'training its share of the runs (launch/vtab_workers.sh starts them).')
  flags.DEFINE_bool('report_only', False, 'Write vtab.json, vtab.md and vtab.png from the '
                    'finished runs in --workdir without training.')


def with_default_config(argv: list[str]) -> list[str]:
  """argv with --config=vtab added where it names no config."""
  if any(a == '--config' or a.startswith('--config=') for a in argv[1:]):
    return argv
  return [argv[0], f'--config={DEFAULT_CONFIG}', *argv[1:]]


def apply_flags(config: ml_collections.ConfigDict, fv: flags.FlagValues) -> None:
  """Puts --tasks/--protocol/--checkpoint into the config (flags win over config keys)."""
  if 'vtab' not in config:
    raise ValueError('the config has no vtab section; start from configs/vtab.py '
                     '(--config=vtab) or add vit_jax.cli.vtab_runs.section() as c.vtab.')
  if fv.tasks is not None:
    config.vtab.tasks = fv.tasks
  if fv.protocol is not None:
    config.vtab.protocol = fv.protocol
  train_flags.expand_home(config)


def checkpoint_path(value: str) -> str:
  """--checkpoint as the runs record it: local paths absolute, `~` expanded."""
  value = os.path.expanduser(value)
  return value if fileio.is_remote(value) or hub.is_hub_name(value) else os.path.abspath(value)


def check(config: ml_collections.ConfigDict, fv: flags.FlagValues) -> None:
  """The mistakes found before anything loads: workers, protocol, tasks, sweep, checkpoint."""
  if not fv.workdir:
    raise ValueError('--workdir is required: the directory of the runs and the results.')
  fileio.check_output_dir(os.path.expanduser(fv.workdir), '--workdir')
  if fv.num_workers < 1 or not 0 <= fv.worker < fv.num_workers:
    raise ValueError(f'--worker={fv.worker} --num_workers={fv.num_workers}: need '
                     'num_workers >= 1 and 0 <= worker < num_workers.')
  apply_flags(config, fv)
  vtab_runs.check_section(config.vtab)
  if fv.report_only:
    return
  if not fv.checkpoint:
    raise ValueError('--checkpoint is required: the pre-trained parameters to fine-tune '
                     '(e.g. ViT-B_16.npz from gs://vit_models/imagenet21k).')
  task = vtab_runs.select_tasks(config.vtab.tasks)[0]
  run = vtab_runs.final_run(task, config, {s: 0.0 for s in
                                           vtab_runs.sweep_settings(config.vtab)})
  # The trainer's own checks on a run's config: numbers, optimizer, schedule, checkpoint.
  precheck.check(vtab_runs.run_config(config, run, checkpoint_path(fv.checkpoint)))


def check_early() -> None:
  """Runs `check` on the parsed flags: a mistake is one line and exit status 2."""
  try:
    check(train_flags.CONFIG.value, flags.FLAGS)
  except (ValueError, OSError) as e:
    if train_flags.DEBUG.value:
      raise
    print(f'{PROG}: error: {e}', file=sys.stderr)
    sys.exit(errors.USER_ERROR)
