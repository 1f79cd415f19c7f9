"""Each extension point, shown by doing it: a toy one registered here runs the trainer.

A model family, an evaluator, an optax optimizer the package never names, an
objective and a preprocessing op are each added from this file alone; the trainer, the
input pipeline, the checkpoint format, FLOP counting, `predict` and `visualize` pick them
up through their registries.
"""
import dataclasses
import os
from typing import Any, Optional

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import tensorflow as tf

from tests import test_train
from vit_jax import checkpoint
from vit_jax import evaluators
from vit_jax import models
from vit_jax import rundir
from vit_jax.inference import figures
from vit_jax.inference import load
from vit_jax.data import pipeline
from vit_jax.data import pp_registry
from vit_jax.models import families
from vit_jax.models import flops
from vit_jax.models import formats
from vit_jax.parallel import sharding
from vit_jax.train import loop
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import validate
from vit_jax.train import writers


class PatchMLP(nn.Module):
  """Patches -> Dense -> GELU -> learned weighted mean over tokens -> head."""
  patches: Any
  toy_width: int
  num_classes: Optional[int]
  dtype: Any = jnp.float32
  model_name: Optional[str] = None

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool = False) -> jax.Array:
    del train
    p = self.patches['size'][0]
    n, h, w, c = x.shape
    x = x.reshape(n, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
    x = x.reshape(n, (h // p) * (w // p), p * p * c).astype(self.dtype)
    x = nn.gelu(nn.Dense(self.toy_width, dtype=self.dtype, name='embed')(x))
    pool = self.param('pool', nn.initializers.zeros, (x.shape[1],))
    x = jnp.einsum('ntd,t->nd', x, jax.nn.softmax(pool).astype(x.dtype))
    if self.num_classes:
      x = nn.Dense(self.num_classes, dtype=self.dtype, name='head',
                   kernel_init=nn.initializers.zeros)(x)
    return x.astype(jnp.float32)


def _toy_flops(c, res, num_classes):
  p = tuple(c['patches']['size'])[0]
  tokens = (res // p)**2
  return 2.0 * tokens * p * p * 3 * c['toy_width'] + 2.0 * c['toy_width'] * num_classes


class PatchMLPFamily(families.Family):
  """The toy family: its module, FLOPs, width and token count; the rest is the default."""
  name = 'patch_mlp'
  module = PatchMLP
  signature = ('toy_width',)

  def forward_flops(self, fields, res, num_classes):
    return _toy_flops(fields, res, num_classes)

  def width(self, fields):
    return fields['toy_width']

  def patch_tokens(self, model, params):
    return None if 'pool' not in params else int(params['pool'].shape[0])

  def owns(self, params):  # what the checkpoint formats ask
    return 'pool' in params

  def architecture(self, params, source):
    pixels, width = params['embed']['kernel'].shape
    head = params.get('head')
    return {'patches': {'size': (int((pixels // 3)**0.5),) * 2}, 'toy_width': int(width),
            'num_classes': 0 if head is None else int(head['kernel'].shape[1])}


TOY_FAMILY = PatchMLPFamily()


def _register_toy_family(test: absltest.TestCase) -> None:
  preset = ml_collections.ConfigDict({'model_name': 'PatchMLP-7',
                                      'patches': {'size': (7, 7)}, 'toy_width': 24})
  models.register_family(TOY_FAMILY, {'PatchMLP-7': preset.lock()})

  def unregister():
    families.FAMILIES.pop(TOY_FAMILY.name)
    families.MODEL_CONFIGS.pop('PatchMLP-7')

  test.addCleanup(unregister)


class ParamNorm(evaluators.Evaluator):
  """A toy evaluator: the global norm of the parameters."""

  def run(self, params: Any) -> dict[str, Any]:
    scale = self.options.get('scale', 1.0)
    return {f'{self.name}/norm': scale * float(optax.tree.norm(params))}


@dataclasses.dataclass(frozen=True)
class SquaredError(objectives.Objective):
  """A toy objective: squared error between softmax and targets, plus a metric.

  Only `loss` and `example_loss`: the base class's defaults do the rest (init, the
  parameter layout, no state, the export, FLOPs).
  """
  model: nn.Module
  weight: float = 1.0

  @property
  def example_loss(self):
    return lambda logits, labels: self.weight * jnp.sum(
        jnp.square(jax.nn.softmax(logits) - labels), axis=-1)

  def loss(self, params, batch, rng):
    logits = self.model.apply({'params': params}, batch['image'], train=True,
                              rngs={'dropout': rng})
    loss = jnp.mean(self.example_loss(logits, batch['label']))
    return loss, {'toy_weight': jnp.float32(self.weight)}


def _metrics(workdir: str, key: str) -> list:
  return [r[key] for r in writers.read_metrics(workdir) if key in r]


def mirror(axis: int = 0):
  """mirror(axis): the image reversed along axis 0 (upside down) or 1 (left-right)."""
  if axis not in (0, 1):
    raise ValueError(f'axis={axis!r} must be 0 or 1')
  return lambda image: tf.reverse(image, [axis])


class ExtensionTest(absltest.TestCase):

  def test_model_family(self):
    _register_toy_family(self)
    workdir = self.create_tempdir().full_path
    config = test_train.tiny_config(model_name='PatchMLP-7', checkpoint_every=0)
    for key in ('patches', 'hidden_size', 'mlp_dim', 'dropout_rate'):
      del config.model[key]  # the tiny ViT's overrides; the toy preset has its own
    result = loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    self.assertBetween(result['accuracy_test'], 0.0, 1.0)
    # The published-format export and the FLOP count come from the family.
    path = os.path.join(workdir, rundir.PARAMS_FILE)
    self.assertEqual(set(checkpoint.load(path)), {'embed', 'pool', 'head'})
    self.assertEqual(flops.model_flops_per_image('PatchMLP-7', 28, train=False,
                                                 num_classes=10),
                     2.0 * 16 * 49 * 3 * 24 + 2.0 * 24 * 10)
    self.assertGreater(_metrics(workdir, 'mfu')[-1], 0.0)
    # predict and visualize build the model from the checkpoint alone.
    loaded = load.load_model(None, path)
    self.assertEqual((loaded.name, loaded.num_classes, loaded.resolution),
                     ('PatchMLP-7', 10, 28))
    self.assertEqual(figures.write_figures(
        loaded, [], self.create_tempdir().full_path), [])
    with self.assertRaisesRegex(ValueError, 'no position embeddings to interpolate'):
      load.load_model('PatchMLP-7', path, resolution=35)
    # convert reads the tree through the family (its preset found) and writes containers,
    # not the ViT family's conversions.
    copy = os.path.join(self.create_tempdir().full_path, 'copy.npz')
    read, written = formats.convert(path, copy)
    self.assertEqual((read.model_name, read.overrides['num_classes'], written),
                     ('PatchMLP-7', 10, 'npz'))
    with self.assertRaisesRegex(ValueError, 'patch_mlp family has no timm conversion'):
      formats.convert(path, os.path.join(self.create_tempdir().full_path, 'x.safetensors'))
    # A ViT-only option set for the toy model is an error, not silently dropped.
    config.model.attention = 'xla'
    with self.assertRaisesRegex(ValueError, r"config.model.attention='xla' does not "
                                'apply to PatchMLP-7'):
      loop.train_and_evaluate(config, self.create_tempdir().full_path, devices=jax.devices()[:1])

  def test_evaluator(self):
    evaluators.register('param_norm', ParamNorm)
    self.addCleanup(evaluators.base.EVALUATORS.pop, 'param_norm')
    workdir = self.create_tempdir().full_path
    config = test_train.tiny_config(checkpoint_every=0)
    config.evals.weights = {'type': 'param_norm', 'every': 3, 'scale': 2.0}
    config.evals.test.every = 4
    loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    records = writers.read_metrics(workdir)
    self.assertEqual([r['step'] for r in records if 'weights/norm' in r], [3, 6, 8])
    self.assertEqual([r['step'] for r in records if 'accuracy_test' in r], [4, 8])
    params = checkpoint.load(os.path.join(workdir, rundir.PARAMS_FILE))
    self.assertAlmostEqual(_metrics(workdir, 'weights/norm')[-1],
                           2.0 * float(optax.tree.norm(params)), places=3)
    config.evals.weights.type = 'param_nrom'
    with self.assertRaisesRegex(ValueError, r"config.evals.weights.type='param_nrom' "
                                'is unknown'):
      loop.train_and_evaluate(config, self.create_tempdir().full_path, devices=jax.devices()[:1])

  def test_optax_optimizer_by_name(self):
    workdir = self.create_tempdir().full_path
    config = test_train.tiny_config(optimizer='adabelief', checkpoint_every=0)
    config.optimizers.adabelief = {'b1': 0.8, 'b2': 0.99}
    loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    losses = _metrics(workdir, 'train_loss')
    self.assertLen(losses, 4)
    self.assertTrue(np.all(np.isfinite(losses)))
    # The state is optax.adabelief's, behind the clipping; its options arrived.
    tx = optimizers.make(config, schedules.make(config))
    params = checkpoint.load(os.path.join(workdir, rundir.PARAMS_FILE))
    states = jax.tree.leaves(tx.init(params), is_leaf=lambda x: isinstance(
        x, optax.ScaleByBeliefState))
    self.assertTrue(any(isinstance(x, optax.ScaleByBeliefState) for x in states))

  def test_objective(self):
    objectives.register('squared_error', SquaredError)
    self.addCleanup(objectives.OBJECTIVES.pop, 'squared_error')
    workdir = self.create_tempdir().full_path
    config = test_train.tiny_config(objective='squared_error', checkpoint_every=0)
    # Its config section is its factory's options at their defaults.
    self.assertEqual(config.objectives.squared_error.to_dict(), {'weight': 1.0})
    config.objectives.squared_error.weight = 3.0
    result = loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    self.assertEqual(_metrics(workdir, 'toy_weight'), [3.0] * 4)
    # Evaluation reports the objective's own per-example loss: at most 2 * weight.
    self.assertBetween(result['loss_test'], 0.0, 6.0)
    # The base class's export: the model's parameters, nothing beside them.
    exported = checkpoint.load(os.path.join(workdir, rundir.PARAMS_FILE))
    self.assertContainsSubset({'embedding', 'Transformer', 'head'}, exported)
    self.assertFalse(os.path.exists(os.path.join(workdir, 'squared_error_params.npz')))
    config.objectives.squared_error = {'wieght': 3.0}
    with self.assertRaisesRegex(ValueError, r'objectives.squared_error.wieght is not '
                                'an option'):
      loop.train_and_evaluate(config, self.create_tempdir().full_path, devices=jax.devices()[:1])

  def test_preprocessing_op(self):
    pp_registry.register('toy_mirror')(mirror)
    self.addCleanup(pp_registry.OPS.pop, 'toy_mirror')
    config = test_train.tiny_config()
    plain = next(pipeline.train_dataset(config, [0]).as_numpy_iterator())['image']
    config.pp.train = 'finetune|toy_mirror'
    validate.validate(config, sharding.make_mesh(config.mesh))  # the config check knows it
    mirrored = next(pipeline.train_dataset(config, [0]).as_numpy_iterator())['image']
    np.testing.assert_array_equal(mirrored, plain[:, ::-1])
    config.pp.train = 'finetune|toy_mirror(2)'
    with self.assertRaisesRegex(ValueError, r"config.pp.train='finetune\|toy_mirror\(2\)': "
                                "op 'toy_mirror': axis=2 must be 0 or 1"):
      loop.train_and_evaluate(config, self.create_tempdir().full_path, devices=jax.devices()[:1])


if __name__ == '__main__':
  absltest.main()
