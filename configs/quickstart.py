"""Quickstart: a small ViT trained from scratch on the embedded mnist5k digits (CPU).

  python -m vit_jax.main --config=configs/quickstart.py --workdir=/tmp/quickstart

Reached 0.962 accuracy on the 1,000 test digits on 2 CPU cores (README, Quickstart: time and load).
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config():
  """Returns the quickstart config."""
  c = base.get_base_config()
  recipes.apply_quickstart_model(c)
  recipes.apply_quickstart_data(c)

  c.batch = 128
  c.batch_eval = 200
  c.optimizer = 'adam'
  c.base_lr = 2e-3
  c.end_lr = 1e-5
  c.weight_decay = 1e-4
  c.warmup_steps = 100
  c.total_steps = 930
  c.decay_type = 'cosine'
  c.grad_clip_norm = 1.0

  c.log_every = 50
  c.evals.test.every = 100  # a point of the accuracy curve every 100 steps
  c.checkpoint_every = 250
  return c
