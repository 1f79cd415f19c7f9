"""A tiny ViT trained on mnist5k by the real trainer, once per test session.

The few-shot, predict, visualize, evaluate and run-lifecycle tests share it: training (200
steps; 10-shot accuracy 0.64) costs ~25 s on 2 idle CPU cores, so the first process to need
it trains it into the session directory (under a lock: xdist workers wait for it, not train
it again). The checkpoint-integrity and disk-fault tests share the 8-step run of
tests/tiny_train_config.py the same way.
"""
import fcntl
import functools
import json
import os
import tempfile
from typing import Callable

import jax
import numpy as np

from tests import tfds_testdata
from tests import tiny_train_config
from vit_jax import checkpoint
from vit_jax import configs
from vit_jax import models
from vit_jax import rundir
from vit_jax.models import from_config
from vit_jax.train import loop

MODEL_NAME = 'testing'


def config(data_dir: str, **overrides):
  """A 2-layer ViT of width 64 on 28x28 digits (7x7 patches: a 4x4 grid)."""
  c = configs.get_base_config()
  c.model_name = MODEL_NAME
  c.model.patches = {'size': (7, 7)}
  c.model.hidden_size = 64
  c.model.mlp_dim = 128
  c.model.num_layers = 2
  c.model.num_heads = 4
  c.model.dropout_rate = 0.0
  c.dataset = 'mnist5k'
  c.data_dir = data_dir
  c.pp.train = 'finetune'
  c.pp.eval = 'resize'
  c.pp.resize = 30
  c.pp.crop = 28
  c.pp.flip = False
  c.cache = True
  c.shuffle_buffer = 4000
  c.batch = 64
  c.batch_eval = 200
  c.optimizer = 'adam'
  c.base_lr = 2e-3
  c.weight_decay = 1e-4
  c.warmup_steps = 20
  c.total_steps = 200
  c.log_every = 50
  c.evals.test.every = 0
  c.checkpoint_every = 0
  c.update(overrides)
  return c


def _once(name: str, train: Callable[[str], object]) -> str:
  """The session directory `name`, where the first process to ask runs `train(root)`."""
  root = os.path.join(os.path.dirname(tfds_testdata.data_dir()), name)
  done = os.path.join(root, '.done')
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, '.lock'), 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.exists(done):
      train(root)
      open(done, 'w').close()
  return root


def _train_tiny(root: str) -> None:
  result = loop.train_and_evaluate(config(tfds_testdata.data_dir()), os.path.join(root, 'work'),
                                   devices=jax.devices()[:1])
  with open(os.path.join(root, 'final.json'), 'w') as f:
    json.dump({k: float(v) for k, v in result.items()}, f)


@functools.lru_cache(maxsize=None)
def trained() -> tuple[str, str, dict]:
  """(params.npz path, TFDS data dir, final metrics) of the trained tiny model."""
  root = _once('tiny', _train_tiny)
  with open(os.path.join(root, 'final.json')) as f:
    result = json.load(f)
  return os.path.join(root, 'work', rundir.PARAMS_FILE), tfds_testdata.data_dir(), result


@functools.lru_cache(maxsize=None)
def eight_steps() -> str:
  """Work directory of tests/tiny_train_config.py's run: 8 steps, checkpoints 4 and 8.

  Read it, or copy it before changing it: other tests use it as it is.
  """
  root = _once('eight_steps', lambda root: loop.train_and_evaluate(
      tiny_train_config.tiny_config(), os.path.join(root, 'work'), devices=jax.devices()[:1]))
  return os.path.join(root, 'work')


@functools.lru_cache(maxsize=None)
def untrained(seed: int = 0) -> tuple[str, str]:
  """(work directory, TFDS data dir) of the same tiny ViT, randomly initialised.

  The directory holds what a finished run leaves for the checkpoint commands
  (params.npz beside config.json), without the 30 s of training.
  """
  data_dir = tfds_testdata.data_dir()
  root = tempfile.mkdtemp(prefix='untrained_', dir=os.path.dirname(data_dir))
  workdir = os.path.join(root, 'work')
  c = config(data_dir)
  model = models.get_model(c.model_name, **from_config.model_kwargs(
      c.model_name, c.model, num_classes=10))
  params = model.init(jax.random.PRNGKey(seed), np.zeros((1, 28, 28, 3), np.float32))
  os.makedirs(workdir)
  checkpoint.save(jax.device_get(params['params']),
                  os.path.join(workdir, rundir.PARAMS_FILE))
  with open(os.path.join(workdir, loop.CONFIG_FILE), 'w') as f:
    f.write(c.to_json_best_effort(indent=2))
  return workdir, data_dir
