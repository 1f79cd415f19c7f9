"""VTAB-1k fine-tuning (python -m vit_jax.vtab): the ViT paper's setting for all 19 tasks.

  python -m vit_jax.vtab --config=configs/vtab.py:b16 --checkpoint=ViT-B_16.npz --workdir=DIR
  python -m vit_jax.vtab --config=configs/vtab.py:demo --checkpoint=QUICKSTART/params.npz \
      --workdir=DIR --tasks=demo --protocol=sweep

Argument: a model preset or short name (default b16), or `demo`. The setting is the paper's
(appendix B.1.1, Table 4): SGD momentum 0.9, batch 512, 2,500 steps, base lr 0.01, 500
warm-up steps (the original's configs/common.py), cosine decay, gradient clipping at global
norm 1, no weight decay, 384 px for every task. config.vtab holds the protocol's keys (the
sweep's learning rates and schedules: vit_jax/cli/vtab_runs.py). `demo` fine-tunes the
quickstart's model (configs/quickstart.py) on the demo tasks at 28 px: batch 64, lr 0.01,
300 steps, sweep lr 0.001/0.01 x 100/300 steps (on 2 shared CPU cores: the paper protocol's
2 runs in 2.4 min, the sweep's 10 in 12.6 min).
"""
from vit_jax.cli import vtab_runs
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 'b16'):
  """Returns the VTAB-1k config for a model preset ('b16', 'ViT-L_16', ...) or 'demo'."""
  c = base.get_base_config()
  demo = arg == 'demo'
  c.model_name = 'ViT-Ti_16' if demo else recipes.model_name(arg)
  # The paper's fine-tuning; the dataset is each task's (set by the runner).
  recipes.apply_finetune(c, 'vtab/caltech101')
  c.vtab = vtab_runs.section()
  if demo:
    recipes.apply_quickstart_model(c)
    c.model.classifier = 'gap'  # as configs/quickstart.py trains it
    c.vtab.tasks = 'demo'
    c.pp.train = 'finetune'  # pad 2 and crop: shifts, no flips, as the quickstart
    c.pp.pad = 2
    c.pp.crop = c.pp.resize = 28
    c.pp.flip = False
    c.pp.eval = 'resize'
    c.cache = True
    c.batch = 64
    c.batch_eval = 250
    c.total_steps = 300
    c.warmup_steps = 60
    c.log_every = 100
    c.checkpoint_every = 100
    c.vtab.steps = (100, 300)
  return c
