"""The tiny trainer-test config, also as a config file for subprocess runs of vit_jax.main.

It imports only the config and test-data helpers, so a command that fails on its flags
fails before TensorFlow loads, as it does with a user's config.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests import tfds_testdata  # pylint: disable=g-import-not-at-top,wrong-import-position
from vit_jax import configs  # pylint: disable=g-import-not-at-top,wrong-import-position


def tiny_config(**overrides):
  """A ViT of width 16 on 28x28 digits: a few seconds per run on CPU."""
  c = configs.get_base_config()
  c.model_name = 'testing'
  c.model.patches = {'size': (7, 7)}
  c.model.hidden_size = 16
  c.model.mlp_dim = 32
  c.model.dropout_rate = 0.1
  c.dataset = 'mnist5k'
  c.data_dir = tfds_testdata.data_dir()  # prepared once per session, not in ~/tensorflow_datasets
  c.eval_split = 'test[:200]'  # evaluation is not what these tests are about
  c.pp.train = 'finetune'
  c.pp.resize = 32
  c.pp.crop = 28
  c.pp.flip = False
  c.shuffle_buffer = 1000
  c.batch = 16
  c.batch_eval = 200
  c.optimizer = 'adam'
  c.base_lr = 1e-3
  c.warmup_steps = 2
  c.total_steps = 8
  c.log_every = 2
  c.evals.test.every = 0
  c.checkpoint_every = 4
  # A given peak: no matmuls timed at start (~1-2 s a run); TrainTest's reference run
  # measures it, as a user's run does.
  c.peak_tflops = 1.0
  c.update(overrides)
  return c


def get_config():
  return tiny_config()
