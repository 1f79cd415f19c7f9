r"""VTAB-1k: fine-tunes a checkpoint on its 19 tasks and writes the table (the ViT paper's way).

  python -m vit_jax.vtab --checkpoint=ViT-B_16.npz --workdir=/tmp/vtab_b16
  python -m vit_jax.vtab --checkpoint=ViT-B_16.npz --workdir=/tmp/vtab_b16 \
      --tasks=natural --protocol=sweep
  python -m vit_jax.vtab --config=vtab:demo --checkpoint=/tmp/vit_quickstart/params.npz \
      --workdir=/tmp/vtab_demo --tasks=demo --protocol=sweep

--protocol=paper (default) trains each task once with the config's setting (configs/vtab.py:
the paper's appendix B.1.1: SGD momentum 0.9, batch 512, 2,500 steps, lr 0.01, cosine decay,
384 px) on its 1,000 examples (train800 + val200) and scores its test split.
--protocol=sweep is BiT's protocol, by which the paper chose that setting: each
config.vtab.lrs x config.vtab.steps fine-tuned on train800 and scored on val200, the best
(ties: the shorter schedule, then the lower lr) retrained on the 1,000 and scored on test.
--tasks: all (the 19), natural, specialized, structured, demo (two small tasks on the
embedded digits, in the same split layout) or task names, comma-separated.

Each run trains in WORKDIR/<task>/<run>/ with vit_jax.main's trainer and checkpoints, so the
same command again skips finished runs and resumes an interrupted one. When every task is
done, WORKDIR/vtab.json (per task: group, setting, val200 scores of the sweep, test accuracy;
group means; the mean over tasks; checkpoint, protocol, config overrides), vtab.md (the
table, also printed) and vtab.png (the bar chart) are written, atomically; until then no
results file is written or replaced. Workers sharing --workdir (--worker=I
--num_workers=N; launch/vtab_workers.sh starts one per GPU) split the runs; the last one
writes the results (or --report_only does). Every --config.KEY=VALUE of vit_jax.main
applies to every run; config.vtab.* holds the protocol's keys (configs/vtab.py).
"""
import sys

from vit_jax.cli import train_flags
from vit_jax.cli import vtab_flags

if __name__ == '__main__':
  vtab_flags.define_flags()
  train_flags.exit_on_help(sys.argv)
  rest = train_flags.parse_flags(vtab_flags.with_default_config(sys.argv))  # one line on a mistake
  train_flags.exit_on_print_config()
  train_flags.retain_host_memory()  # before JAX starts its CPU threads
  vtab_flags.check_early()
  # Only now: the trainer's modules load TensorFlow, which the above do not need.
  from vit_jax.cli import vtab  # pylint: disable=g-import-not-at-top
  vtab.run(rest)
