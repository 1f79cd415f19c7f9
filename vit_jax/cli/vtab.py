"""`python -m vit_jax.vtab`; its usage (--help) is vit_jax/vtab.py's docstring."""
import os
import sys
from typing import Sequence

from absl import app
from absl import flags
from absl import logging

from vit_jax import errors
from vit_jax.cli import main as main_cli
from vit_jax.cli import train_flags
from vit_jax.cli import vtab_flags
from vit_jax.cli import vtab_report
from vit_jax.cli import vtab_runs
from vit_jax.cli import vtab_worker
from vit_jax.train import loop
from vit_jax.train import preemption

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> None:
  """Trains this worker's runs; the worker that finds every task finished writes the results."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  config = train_flags.CONFIG.value
  vtab_flags.check(config, FLAGS)  # again: tests and notebooks call main without the entry
  workdir = os.path.expanduser(train_flags.WORKDIR.value)
  # vit_jax.main's filter: the libraries' INFO chatter (orbax, TFDS) stays out of the log.
  quiet = main_cli._QuietLibraries(workdir)  # pylint: disable=protected-access
  logging.get_absl_handler().addFilter(quiet)
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.INFO)  # each run's progress, as vit_jax.main shows it
  tasks = vtab_runs.select_tasks(config.vtab.tasks)
  meta = vtab_worker.describe(config, tasks)
  if FLAGS.report_only:
    out = vtab_worker.report(tasks, config, workdir, meta)
    print(vtab_report.table(out), end='')
    return
  try:
    out = vtab_worker.execute(config, vtab_flags.checkpoint_path(FLAGS.checkpoint), workdir,
                  FLAGS.worker, FLAGS.num_workers, meta=meta)
  except preemption.Preempted as e:
    print(f'{vtab_flags.PROG}: {e.kind} at step {e.step} of {e.directory}; run the same '
          'command again to resume there.', file=sys.stderr)
    sys.exit(e.exit_code)
  if out is None:  # runs of other workers are still going: the last one writes the results
    print(f'{vtab_flags.PROG}: worker {FLAGS.worker} is done; tasks wait for other '
          'workers, the last of which writes the results (or run again with '
          '--report_only).', file=sys.stderr)
    return
  print(vtab_report.table(out), end='')


def run(rest: list[str]) -> None:
  """Runs the command with the flags vit_jax/vtab.py parsed (rest: what they left of argv)."""
  errors.list_flags_in_help()
  errors.skip_final_gc()

  def guarded(argv):
    try:
      main(argv)
    except (ValueError, OSError, loop.NonFiniteError) as e:
      if train_flags.DEBUG.value:
        raise
      print(f'{vtab_flags.PROG}: error: {e}', file=sys.stderr)
      sys.exit(errors.USER_ERROR)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before a run's first step
      print(f'{vtab_flags.PROG}: aborted (Ctrl-C); run the same command again to resume.',
            file=sys.stderr)
      sys.exit(preemption.INTERRUPTED_EXIT_CODE)

  app.run(guarded, flags_parser=lambda _: rest)
