"""The contract every registered model family and every ViT variant keeps.

One parameterised test per case (tiny models: width 32, 16-px images): init and
forward, the .npz round trip (save, load, load_pretrained), the position embedding
resized around all prefix tokens, analytic FLOPs equal to the matmul FLOPs of the
traced forward pass, the figures (attention rollout, posemb similarity) skipping the
prefix tokens, the architecture read back off the tree, and FSDP specs for every
parameter. A new family or option shows up here by being registered.
"""
import dataclasses
import math
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax import checkpoint
from vit_jax import configs
from vit_jax import models
from vit_jax.inference import figures
from vit_jax.models import families
from vit_jax.models import flops
from vit_jax.models import from_config
from vit_jax.models import vit
from vit_jax.parallel import sharding
from vit_jax.train import objectives

_TINY_VIT = dict(hidden_size=32, num_heads=2, mlp_dim=32, num_layers=1,
                 patches={'size': (4, 4)}, dropout_rate=0.0)

# Every ViT option of vit/options.py, in a few combinations (timm's kinds).
VIT_VARIANTS = {
    'published': {},
    'dinov2_reg': dict(num_registers=2, no_embed_class=True, layer_scale=1e-5,
                       activation='gelu'),
    'deit_distilled': dict(distilled=True, activation='gelu'),
    'siglip_map': dict(classifier='map'),
    'eva_swiglu': dict(activation='swiglu', mlp_norm=True, qk_norm=True,
                       qkv_bias=False),
    'clip': dict(pre_norm=True, layer_norm_epsilon=1e-5, activation='quick_gelu'),
    'mae_gap_fc_norm': dict(classifier='gap', class_token=True, fc_norm=True),
    'reg_gap': dict(classifier='gap', num_registers=1, no_embed_class=True),
}

# A tiny model of each registered family: (preset, overrides).
FAMILY_CASES = {
    'vit': ('testing', _TINY_VIT),
    'mixer': ('Mixer-B_16', dict(hidden_dim=32, num_blocks=1, tokens_mlp_dim=16,
                                 channels_mlp_dim=32, patches={'size': (4, 4)})),
}


def _cases():
  cases = [(f'vit_{name}', 'testing', {**_TINY_VIT, **opts})
           for name, opts in VIT_VARIANTS.items()]
  cases += [(f'family_{name}', preset, overrides)
            for name, (preset, overrides) in FAMILY_CASES.items() if name != 'vit']
  return cases


def _dot_flops(eqn) -> float:
  """2 x multiply-adds of a dot_general or convolution equation."""
  out = eqn.outvars[0].aval.shape
  if eqn.primitive.name == 'dot_general':
    (lhs_contract, _), _ = eqn.params['dimension_numbers']
    lhs = eqn.invars[0].aval.shape
    return 2.0 * math.prod(out) * math.prod(lhs[d] for d in lhs_contract)
  kernel = eqn.invars[1].aval.shape  # HWIO (I per group), as the patch embeddings use
  return 2.0 * math.prod(out) * math.prod(kernel[:-1])


def _traced_matmul_flops(jaxpr) -> float:
  """Matmul and convolution FLOPs of a jaxpr, sub-jaxprs included."""
  total = 0.0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in ('dot_general', 'conv_general_dilated'):
      total += _dot_flops(eqn)
    for param in eqn.params.values():
      subs = param if isinstance(param, (tuple, list)) else (param,)
      for sub in subs:
        inner = getattr(sub, 'jaxpr', sub)
        if hasattr(inner, 'eqns'):
          total += _traced_matmul_flops(inner)
  return total


def perturbed(params, seed: int = 0):
  """Every parameter moved off its init (zero heads and unit norms hide mistakes)."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(
      lambda x: np.asarray(x) + rng.normal(0, 0.1, x.shape).astype(np.float32), params)


class ModelContractTest(parameterized.TestCase):

  @parameterized.named_parameters(*_cases())
  def test_contract(self, preset, overrides):
    model = models.get_model(preset, num_classes=3, **overrides)
    family = models.family_of(model)
    images = np.random.default_rng(1).uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
    params = perturbed(model.init(jax.random.PRNGKey(0), images[:1])['params'])

    # Forward: the one compile, reused for the round trip.
    forward = jax.jit(lambda p, x: model.apply({'params': p}, x))
    logits = np.asarray(forward(params, images))
    self.assertEqual(logits.shape, (2, 3))
    self.assertTrue(np.all(np.isfinite(logits)))

    # .npz round trip, then load_pretrained into the same model: same logits.
    path = os.path.join(tempfile.mkdtemp(), 'params.npz')
    checkpoint.save(params, path)
    loaded = checkpoint.load(path)
    self.assertEqual(jax.tree.structure(loaded), jax.tree.structure(params))
    config = families.fields(model)  # what the trainer passes
    fitted = checkpoint.load_pretrained(pretrained_path=path, init_params=params,
                                        model_config=config)
    fitted['head'] = params['head']  # load_pretrained starts heads fresh
    if 'head_dist' in params:
      fitted['head_dist'] = params['head_dist']
    np.testing.assert_allclose(np.asarray(forward(fitted, images)), logits,
                               rtol=1e-5, atol=1e-5)

    # The architecture read off the tree is the model's.
    for key, value in family.fields_from_params(params).items():
      want = getattr(model, key)
      if key == 'layer_scale':
        self.assertEqual(bool(value), bool(want), key)
      elif key == 'classifier' or value or want:
        self.assertEqual(value, want, key)

    # Analytic FLOPs = the matmul FLOPs of the traced forward pass (per image).
    traced = _traced_matmul_flops(jax.make_jaxpr(
        lambda p, x: model.apply({'params': p}, x))(params, images[:1]).jaxpr)
    analytic = flops.model_flops_per_image(model, 16, train=False)
    self.assertAlmostEqual(analytic / traced, 1.0, places=9)

    # FSDP: every parameter big enough is split on its largest divisible dimension.
    mesh = jax.sharding.AbstractMesh((1, 2), ('data', 'fsdp'))
    rules = ml_collections.ConfigDict({'sharding': 'fsdp', 'fsdp_min_size': 64})
    specs = sharding.tree_partition_specs(params, mesh, rules)
    for (path_, leaf), spec in zip(jax.tree_util.tree_leaves_with_path(params),
                                   jax.tree.leaves(specs, is_leaf=lambda s: isinstance(
                                       s, jax.sharding.PartitionSpec))):
      splittable = leaf.size >= 64 and any(d % 2 == 0 for d in leaf.shape)
      self.assertEqual('fsdp' in tuple(spec), splittable, sharding.path_str(path_))

    if family.posemb_path is None:
      return
    self._check_posemb_and_figures(model, family, params, path, config, images)

  def _check_posemb_and_figures(self, model, family, params, path, config, images):
    prefix = family.prefix_tokens(model)
    lead = family.posemb_prefix_tokens(model)
    posemb = np.asarray(families.get_path(params, family.posemb_path))
    self.assertEqual(posemb.shape[1], lead + 16)

    # Fine-tuning at 32 px: the 4x4 grid becomes 8x8 around every prefix token.
    bigger = model.clone(num_classes=5)
    init = bigger.init(jax.random.PRNGKey(1), np.zeros((1, 32, 32, 3), np.float32))
    fitted = checkpoint.load_pretrained(pretrained_path=path,
                                        init_params=init['params'], model_config=config)
    resized = np.asarray(families.get_path(fitted, family.posemb_path))
    self.assertEqual(resized.shape, (1, lead + 64, posemb.shape[-1]))
    np.testing.assert_allclose(resized[:, :lead], posemb[:, :lead])
    np.testing.assert_allclose(
        resized[:, lead:], checkpoint.interpolate_posemb(posemb[:, lead:], (8, 8), 0),
        rtol=1e-6)

    # Figures: attention over prefix + patch tokens; maps and similarities on the grid.
    weights = figures.attention_weights(model, params, images)
    self.assertEqual(weights.shape[-1], prefix + 16)
    grid = figures.patch_grid(model, params)
    maps = figures.attention_rollout(weights, prefix, grid,
                                     class_token=family.class_token(model))
    self.assertEqual(maps.shape, (2, 4, 4))
    self.assertAlmostEqual(float(maps.max()), 1.0, places=5)
    sim = figures.posemb_similarity(posemb, lead, grid)
    self.assertEqual(sim.shape, (4, 4, 4, 4))
    np.testing.assert_allclose(np.einsum('ijij->ij', sim), 1.0, rtol=1e-5)

  def test_every_family_has_a_case(self):
    own = {name for name, family in families.FAMILIES.items()
           if family.module.__module__.startswith('vit_jax.')}
    self.assertEqual(sorted(own), sorted(FAMILY_CASES))


class ViTOptionErrorsTest(absltest.TestCase):

  def test_unknown_values_name_the_option_and_the_choices(self):
    for key, value, words in (
        ('activation', 'relu', ['activation', 'gelu_tanh', 'swiglu']),
        ('classifier', 'mean', ['classifier', 'token', 'map']),
        ('num_registers', -1, ['num_registers']),
        ('layer_norm_epsilon', 0.0, ['layer_norm_epsilon'])):
      with self.assertRaises(ValueError) as e:
        models.get_model('testing', **{key: value})
      message = str(e.exception)
      self.assertNotIn('\n', message)
      for word in words:
        self.assertIn(word, message)

  def test_combinations_timm_refuses(self):
    for kwargs in (dict(class_token=False),  # token pooling without a class token
                   dict(distilled=True, classifier='gap')):
      with self.assertRaisesRegex(ValueError, 'class'):
        models.get_model('testing', **kwargs)

  def test_prefix_tokens_are_counted(self):
    model = models.get_model('testing', distilled=True, num_registers=4)
    self.assertEqual(vit.num_prefix_tokens(model), 6)
    self.assertEqual(models.family_of(model).prefix_tokens(model), 6)
    self.assertEqual(vit.posemb_prefix_tokens(model.clone(no_embed_class=True)), 0)


def _random_tree(model, resolution: int, seed: int = 0):
  """Random numpy parameters of `model`'s shapes at `resolution` (no compile)."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                          jax.ShapeDtypeStruct((1, resolution, resolution, 3),
                                               jnp.float32))['params']
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda s: rng.normal(0, 1, s.shape).astype(np.float32), shapes)


class VariantCheckpointTest(parameterized.TestCase):

  @parameterized.parameters(('ViT-S_14-dinov2', 1), ('ViT-S_14-dinov2-reg4', 0))
  def test_dinov2_518px_grid_fine_tunes_at_224(self, name, lead):
    """DINOv2's 37x37 grid at 518 px becomes 16x16 at 224 px, prefix rows kept."""
    model = models.get_model(name, num_classes=0, hidden_size=32, num_heads=2,
                             mlp_dim=32, num_layers=1)
    pretrained = _random_tree(model, 518)
    posemb = pretrained['Transformer']['posembed_input']['pos_embedding']
    self.assertEqual(posemb.shape[1], lead + 37 * 37)
    path = os.path.join(tempfile.mkdtemp(), 'dinov2.npz')
    checkpoint.save(pretrained, path)
    new = model.clone(num_classes=10)
    fitted = checkpoint.load_pretrained(pretrained_path=path,
                                        init_params=_random_tree(new, 224, seed=1),
                                        model_config=families.fields(new))
    resized = fitted['Transformer']['posembed_input']['pos_embedding']
    self.assertEqual(resized.shape, (1, lead + 16 * 16, 32))
    np.testing.assert_allclose(resized[:, :lead], posemb[:, :lead])
    np.testing.assert_allclose(
        resized[:, lead:], checkpoint.interpolate_posemb(posemb[:, lead:], (16, 16), 0))
    if 'registers' in pretrained:
      np.testing.assert_allclose(fitted['registers'], pretrained['registers'])

  def test_registers_added_to_a_class_token_checkpoint_start_fresh(self):
    plain = models.get_model('testing', num_classes=0, **_TINY_VIT)
    path = os.path.join(tempfile.mkdtemp(), 'plain.npz')
    pretrained = _random_tree(plain, 16)
    checkpoint.save(pretrained, path)
    new = plain.clone(num_registers=3, num_classes=4)
    init = _random_tree(new, 32, seed=1)
    fitted = checkpoint.load_pretrained(pretrained_path=path, init_params=init,
                                        model_config=families.fields(new))
    old_pe = pretrained['Transformer']['posembed_input']['pos_embedding']
    new_pe = fitted['Transformer']['posembed_input']['pos_embedding']
    np.testing.assert_allclose(new_pe[:, :1], old_pe[:, :1])  # the class token's
    np.testing.assert_allclose(new_pe[:, 1:4], init['Transformer']['posembed_input'][
        'pos_embedding'][:, 1:4])                                # the registers' (fresh)
    np.testing.assert_allclose(fitted['registers'], init['registers'])
    np.testing.assert_allclose(fitted['cls'], pretrained['cls'])


class VariantBackboneTest(parameterized.TestCase):

  @parameterized.parameters('mae', 'masked_patch')
  def test_self_supervised_objectives_train_a_variant_vit(self, objective_name):
    """Registers, layer scale, no_embed_class and SwiGLU under MAE / masked patches."""
    model = models.get_model('testing', num_classes=10, patches={'size': (7, 7)},
                             hidden_size=16, mlp_dim=32, num_layers=1, num_heads=2,
                             dropout_rate=0.0, num_registers=2, no_embed_class=True,
                             layer_scale=1e-5, activation='swiglu')
    config = configs.get_base_config()
    config.objective = objective_name
    if objective_name == 'mae':
      config.objectives.mae.update({'decoder_width': 16, 'decoder_depth': 1,
                                    'decoder_heads': 2, 'decoder_mlp_dim': 32})
    objective = objectives.make(config, model)
    params = objective.init(jax.random.PRNGKey(0), (1, 28, 28, 3))
    batch = {'image': jax.random.uniform(jax.random.PRNGKey(1), (4, 28, 28, 3),
                                         minval=-1, maxval=1)}

    @jax.jit
    def step(params):
      loss_fn = lambda p: objective.loss(p, batch, jax.random.PRNGKey(2))[0]  # noqa: E731
      loss, grads = jax.value_and_grad(loss_fn)(params)
      return loss, jax.tree.map(lambda p, g: p - 0.05 * g, params, grads)

    first, params = step(params)
    for _ in range(5):
      loss, params = step(params)
    self.assertLess(float(loss), float(first))


# ----------------------------------------------------------------------------
# The extension cost of a ViT option, shown: a toy "scaled residual" (the residual
# stream is multiplied by `residual_scale` before each branch is added) lives in
# these few lines, as it would in vit/: a model field, a BlockConfig field, the block's
# residual hook. Config, get_model, checkpoints, FLOPs and figures need nothing.


@dataclasses.dataclass(frozen=True)
class ScaledBlockConfig(vit.BlockConfig):
  residual_scale: float = 1.0


class ScaledResidualBlock(vit.Encoder1DBlock):

  def residual(self, x, branch):
    return self.config.residual_scale * x + branch


class ScaledResidualViT(vit.VisionTransformer):
  residual_scale: float = 1.0
  block = ScaledResidualBlock

  def block_config(self):
    return ScaledBlockConfig(**vars(super().block_config()),
                             residual_scale=self.residual_scale)


class ScaledResidualFamily(vit.ViTFamily):
  name = 'vit_scaled_residual'
  module = ScaledResidualViT
  options = {**vit.FAMILY.options, 'residual_scale': 1.0}


class ExtensionCostTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    family = ScaledResidualFamily()
    preset = models.get_model_config('testing')
    preset.family = family.name
    preset.model_name = 'testing-scaled-residual'
    families.register(family, {preset.model_name: preset.lock()})
    self.addCleanup(families.FAMILIES.pop, family.name)
    self.addCleanup(families.MODEL_CONFIGS.pop, preset.model_name)

  def test_a_toy_option_reaches_every_part(self):
    config = ml_collections.ConfigDict({'model_name': 'testing-scaled-residual',
                                        'model': {'residual_scale': 0.5}})
    model = from_config.build(config, num_classes=3)  # config.model.residual_scale
    self.assertEqual(model.residual_scale, 0.5)
    plain = models.get_model('testing', num_classes=3)
    images = np.random.default_rng(0).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)
    params = perturbed(plain.init(jax.random.PRNGKey(0), images)['params'])
    # No new parameters: the published tree, and the published logits at scale 1.
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), images)
    self.assertEqual(jax.tree.structure(shapes), jax.tree.structure({'params': params}))
    run = lambda m: np.asarray(m.apply({'params': params}, images))  # noqa: E731
    np.testing.assert_allclose(run(model.clone(residual_scale=1.0)), run(plain),
                               rtol=1e-6)
    self.assertGreater(np.abs(run(model) - run(plain)).max(), 1e-3)
    # The rest asks the family: checkpoints, FLOPs, figures.
    path = os.path.join(tempfile.mkdtemp(), 'params.npz')
    checkpoint.save(params, path)
    fitted = checkpoint.load_pretrained(pretrained_path=path, init_params=params,
                                        model_config=families.fields(model))
    np.testing.assert_allclose(run(model), np.asarray(
        model.apply({'params': fitted}, images)), rtol=1e-6)
    self.assertEqual(flops.model_flops_per_image(model, 16, train=False),
                     flops.model_flops_per_image(plain, 16, train=False))
    self.assertIs(models.family_of(model).module, ScaledResidualViT)
    self.assertEqual(figures.attention_weights(model, params, images).shape[-1], 2)


if __name__ == '__main__':
  absltest.main()
