"""Tests for the model zoo: every preset, its shapes, parameter counts and options."""
import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import checkpoint
from vit_jax import models
from vit_jax.models import formats
from vit_jax.models import vit

# Parameter counts of the published 1000-class models at 224px (as listed by
# timm and the papers), an independent check on the trees.
PUBLISHED_COUNTS = {
    'ViT-Ti_16': 5_717_416,
    'ViT-S_16': 22_050_664,
    'ViT-B_16': 86_567_656,
    'ViT-B_32': 88_224_232,
    'ViT-L_16': 304_326_632,
    'ViT-H_14': 632_045_800,
    'Mixer-B_16': 59_880_472,
    'Mixer-L_16': 208_196_168,
    # Today's ViTs, 1000 classes at 224 px: timm 1.0.31's counts of the model named
    # beside each preset in vit_jax/models/presets.py (create_model(..., img_size=224)).
    'ViT-S_14-dinov2': 22_013_800,
    'ViT-B_14-dinov2': 86_493_928,
    'ViT-L_14-dinov2': 304_252_904,
    'ViT-g_14-dinov2': 1_136_306_664,
    'ViT-S_14-dinov2-reg4': 22_014_952,
    'ViT-B_14-dinov2-reg4': 86_496_232,
    'ViT-L_14-dinov2-reg4': 304_255_976,
    'ViT-g_14-dinov2-reg4': 1_136_311_272,
    'ViT-B_16-clip': 86_568_424,
    'ViT-B_16-clip-quickgelu': 86_568_424,
    'ViT-B_16-siglip': 93_653_224,
    'DeiT3-S_16': 22_059_496,
    'DeiT3-B_16': 86_585_320,
    'DeiT-S_16-distilled': 22_436_432,
    'DeiT-B_16-distilled': 87_338_192,
    'ViT-B_16-reg4-gap': 86_569_192,
}
# Preset keys of the ViT variants (vit.py); presets with none are the 2020 ViT.
_VARIANT_KEYS = ('class_token', 'num_registers', 'distilled', 'no_embed_class',
                 'layer_scale', 'qk_norm', 'pre_norm', 'activation', 'mlp_norm',
                 'qkv_bias', 'layer_norm_epsilon', 'fc_norm')


def _count(tree) -> int:
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(tree)))


def _abstract_init(model, resolution: int, batch: int = 2):
  """(variables, logits) as shapes; one trace of the model (init runs the forward pass)."""
  images = jax.ShapeDtypeStruct((batch, resolution, resolution, 3), jnp.float32)
  logits, variables = jax.eval_shape(model.init_with_output, jax.random.PRNGKey(0), images)
  return variables, logits


@functools.lru_cache(maxsize=None)
def _preset_at_224(name: str):
  """(variables, logits) shapes of a preset with 1,000 classes, traced once per test file."""
  return _abstract_init(models.get_model(name, num_classes=1000), 224)


def _vit_count(name: str, num_classes: int, resolution: int) -> int:
  """Parameter count of a plain ViT preset computed from its config."""
  c = models.MODEL_CONFIGS[name]
  d, m, layers = c.hidden_size, c.transformer.mlp_dim, c.transformer.num_layers
  p = c.patches.size[0]
  tokens = (resolution // p)**2 + (c.classifier == 'token')
  block = 4 * d + 4 * (d * d + d) + (d * m + m) + (m * d + d)
  return (p * p * 3 * d + d + (c.classifier == 'token') * d + tokens * d +
          layers * block + 2 * d + d * num_classes + num_classes)


class PresetTest(parameterized.TestCase):

  def test_all_original_names_present(self):
    expected = {
        'testing', 'testing-unpooled', 'ViT-Ti_16', 'ViT-S_16', 'ViT-S_32',
        'ViT-B_8', 'ViT-B_16', 'ViT-B_32', 'ViT-L_16', 'ViT-L_32', 'ViT-H_14',
        'ViT-S_16-gap-norep', 'ViT-S_32-gap-norep', 'ViT-B_16-gap-norep',
        'ViT-B_32-gap-norep', 'R+ViT-Ti_16', 'R26+ViT-S_32', 'R26+ViT-B_32',
        'R50+ViT-B_16', 'R50+ViT-L_32', 'Mixer-B_16', 'Mixer-B_32',
        'Mixer-L_16'
    }
    self.assertLessEqual(expected, set(models.MODEL_CONFIGS))

  @parameterized.parameters(*sorted(models.MODEL_CONFIGS))
  def test_preset_shapes(self, name):
    variables, logits = _preset_at_224(name)
    if 'unpooled' in name:
      self.assertEqual(logits.shape, (2, 14 * 14, 1000))
    else:
      self.assertEqual(logits.shape, (2, 1000))
    self.assertEqual(logits.dtype, jnp.float32)
    params = variables['params']
    self.assertEqual(params['head']['kernel'].shape[-1], 1000)
    cfg = models.MODEL_CONFIGS[name]
    plain = not any(k in cfg for k in _VARIANT_KEYS) and cfg.get('classifier') != 'map'
    if models.family_of(cfg).name == 'vit' and 'resnet' not in cfg and plain:
      self.assertEqual(_count(params), _vit_count(name, 1000, 224))

  @parameterized.parameters(*sorted(PUBLISHED_COUNTS.items()))
  def test_published_parameter_counts(self, name, count):
    variables, _ = _preset_at_224(name)
    self.assertEqual(_count(variables['params']), count)

  def test_hybrid_tree(self):
    variables, _ = _abstract_init(
        models.get_model('R50+ViT-B_16', num_classes=10), 224)
    p = variables['params']
    self.assertEqual(p['conv_root']['kernel'].shape, (7, 7, 3, 64))
    self.assertEqual(p['gn_root']['scale'].shape, (64,))
    self.assertEqual(sorted(p['block3']), [f'unit{i}' for i in range(1, 10)])
    self.assertIn('conv_proj', p['block1']['unit1'])
    self.assertNotIn('conv_proj', p['block1']['unit2'])
    self.assertEqual(p['block3']['unit1']['conv3']['kernel'].shape,
                     (1, 1, 256, 1024))
    # 224 / 16 = 14: the ResNet gives the /16 feature map the 1x1 patches embed.
    self.assertEqual(p['Transformer']['posembed_input']['pos_embedding'].shape,
                     (1, 197, 768))

  def test_vit_block_names(self):
    variables, _ = _abstract_init(models.get_model('ViT-Ti_16'), 32)
    block = variables['params']['Transformer']['encoderblock_0']
    self.assertEqual(
        sorted(block),
        ['LayerNorm_0', 'LayerNorm_1', 'MlpBlock_0',
         'MultiHeadDotProductAttention_0'])
    attn = block['MultiHeadDotProductAttention_0']
    self.assertEqual(attn['query']['kernel'].shape, (192, 3, 64))
    self.assertEqual(attn['out']['kernel'].shape, (3, 64, 192))

  def test_mixer_tree(self):
    variables, _ = _abstract_init(models.get_model('Mixer-B_16'), 224)
    block = variables['params']['MixerBlock_0']
    self.assertEqual(block['token_mixing']['Dense_0']['kernel'].shape,
                     (196, 384))
    self.assertEqual(block['channel_mixing']['Dense_0']['kernel'].shape,
                     (768, 3072))


class ForwardTest(parameterized.TestCase):

  @parameterized.parameters('testing', 'testing-unpooled', 'R+ViT-Ti_16',
                            'ViT-Ti_16-gap')
  def test_small_forward(self, name):
    overrides = {}
    if name == 'ViT-Ti_16-gap':
      name, overrides = 'ViT-Ti_16', {'classifier': 'gap', 'num_layers': 2,
                                      'representation_size': 16}
    if name == 'R+ViT-Ti_16':
      overrides = {'num_layers': 1}
    model = models.get_model(name, num_classes=5, **overrides)
    x = jax.random.uniform(jax.random.PRNGKey(1), (2, 64, 64, 3), minval=-1)
    variables = jax.jit(model.init)(jax.random.PRNGKey(0), x)
    out = jax.jit(model.apply)(variables, x)
    self.assertTrue(np.all(np.isfinite(out)))
    # Zero-initialised head: logits start at the bias (0).
    np.testing.assert_allclose(out, 0.0)
    if overrides.get('representation_size'):
      self.assertEqual(variables['params']['pre_logits']['kernel'].shape,
                       (192, 16))

  def _random_params(self, model, x):
    variables = jax.jit(model.init)(jax.random.PRNGKey(0), x)
    leaves, treedef = jax.tree.flatten(variables)
    keys = jax.random.split(jax.random.PRNGKey(3), len(leaves))
    leaves = [l + 0.05 * jax.random.normal(k, l.shape) for l, k in
              zip(leaves, keys)]
    return jax.tree.unflatten(treedef, leaves)

  def test_head_bias_init(self):
    model = models.get_model('testing', num_classes=3, head_bias_init=-10.0)
    x = jnp.zeros((1, 32, 32, 3))
    out = jax.jit(model.apply)(jax.jit(model.init)(jax.random.PRNGKey(0), x), x)
    np.testing.assert_allclose(out, -10.0)

  def test_bfloat16_close_to_float32(self):
    kw = dict(num_classes=10, num_layers=2)
    x = jax.random.uniform(jax.random.PRNGKey(1), (2, 64, 64, 3), minval=-1)
    f32 = models.get_model('ViT-Ti_16', **kw)
    bf16 = models.get_model('ViT-Ti_16', dtype='bfloat16', **kw)
    variables = self._random_params(f32, x)
    out32 = jax.jit(f32.apply)(variables, x)
    out16 = jax.jit(bf16.apply)(variables, x)
    self.assertEqual(out16.dtype, jnp.float32)
    rel = np.linalg.norm(out16 - out32) / np.linalg.norm(out32)
    self.assertLess(rel, 0.05)
    # The parameter tree is unchanged by the compute dtype.
    self.assertEqual(
        jax.tree.structure(jax.eval_shape(bf16.init, jax.random.PRNGKey(0), x)),
        jax.tree.structure(variables))

  def test_attention_implementations_agree(self):
    x = jax.random.uniform(jax.random.PRNGKey(1), (2, 64, 64, 3), minval=-1)
    dtype = 'bfloat16' if jax.default_backend() == 'gpu' else 'float32'
    base = models.get_model('ViT-Ti_16', num_layers=2, dtype=dtype)
    variables = self._random_params(base, x)
    impls = ['xla', 'auto'] + (['cudnn'] if jax.default_backend() == 'gpu'
                               else [])
    outs = {}
    for impl in impls:
      model = models.get_model('ViT-Ti_16', num_layers=2, dtype=dtype,
                               attention=impl)
      self.assertEqual(
          jax.tree.structure(jax.eval_shape(model.init, jax.random.PRNGKey(0), x)),
          jax.tree.structure(variables))
      outs[impl] = jax.jit(model.apply)(variables, x)
    for impl in impls[1:]:
      np.testing.assert_allclose(outs[impl], outs['xla'], rtol=2e-2,
                                 atol=2e-2)

  def test_attention_weights_are_recorded(self):
    model = models.get_model('ViT-Ti_16', num_layers=2)
    x = jnp.zeros((1, 32, 32, 3))
    variables = model.init(jax.random.PRNGKey(0), x)
    _, state = model.apply(variables, x, mutable=['intermediates'])
    w = state['intermediates']['Transformer']['encoderblock_1'][
        'MultiHeadDotProductAttention_0']['attention_weights'][0]
    self.assertEqual(w.shape, (1, 3, 5, 5))
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)

  def test_remat_same_values_and_grads(self):
    x = jax.random.uniform(jax.random.PRNGKey(1), (2, 32, 32, 3), minval=-1)
    plain = models.get_model('ViT-Ti_16', num_layers=2, num_classes=4)
    remat = models.get_model('ViT-Ti_16', num_layers=2, num_classes=4,
                             remat=True)
    variables = self._random_params(plain, x)
    self.assertEqual(
        jax.tree.structure(jax.eval_shape(remat.init, jax.random.PRNGKey(0), x)),
        jax.tree.structure(variables))
    loss = lambda m: lambda v: jnp.sum(m.apply(v, x)**2)  # noqa: E731
    g1 = jax.jit(jax.grad(loss(plain)))(variables)
    g2 = jax.jit(jax.grad(loss(remat)))(variables)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

  def test_stochastic_depth_and_dropout_only_in_training(self):
    x = jax.random.uniform(jax.random.PRNGKey(1), (4, 32, 32, 3), minval=-1)
    model = models.get_model('ViT-Ti_16', num_layers=3, num_classes=0,
                             stochastic_depth=0.5)
    variables = self._random_params(model, x)
    apply = jax.jit(model.apply, static_argnames='train')
    ev1 = apply(variables, x)
    ev2 = apply(variables, x)
    np.testing.assert_array_equal(ev1, ev2)
    tr = apply(variables, x, train=True,
               rngs={'dropout': jax.random.PRNGKey(5)})
    self.assertGreater(float(jnp.abs(tr - ev1).max()), 1e-3)


class ErrorTest(absltest.TestCase):

  def test_unknown_name_suggests(self):
    with self.assertRaisesRegex(ValueError, "Unknown model 'ViT-B16'.*ViT-B_16"):
      models.get_model('ViT-B16')

  def test_unknown_override(self):
    with self.assertRaisesRegex(ValueError, "Unknown override 'hiden_size'"):
      models.get_model('ViT-B_16', hiden_size=3)

  def test_unknown_dtype(self):
    with self.assertRaisesRegex(ValueError, "Unknown dtype 'fp8'"):
      models.get_model('testing', dtype='fp8')

  def test_auto_dtype_is_bf16_on_accelerators_fp32_on_cpu(self):
    self.assertEqual(models.resolve_dtype('auto', 'gpu'), jnp.bfloat16)
    self.assertEqual(models.resolve_dtype('auto', 'tpu'), jnp.bfloat16)
    self.assertEqual(models.resolve_dtype('auto', 'cpu'), jnp.float32)
    self.assertEqual(models.get_model('testing', dtype='auto').dtype,
                     jnp.float32)  # the tests run on CPU
    self.assertEqual(models.get_model('Mixer-B_16', dtype='bfloat16').dtype,
                     jnp.bfloat16)

  def test_indivisible_image(self):
    model = models.get_model('testing')
    with self.assertRaisesRegex(ValueError, 'not divisible by the patch size'):
      model.init(jax.random.PRNGKey(0), jnp.zeros((1, 30, 30, 3)))

  def test_unknown_attention(self):
    model = models.get_model('testing', attention='flash')
    with self.assertRaisesRegex(ValueError, "attention implementation 'flash'"):
      model.init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)))



class FcNormTest(absltest.TestCase):
  """config.model.fc_norm: the LayerNorm after pooling (timm fc_norm, MAE fine-tuning)."""

  def setUp(self):
    super().setUp()
    self.model = models.get_model('testing', num_classes=3, patches={'size': (4, 4)},
                                  classifier='gap', fc_norm=True)
    rng = np.random.default_rng(0)
    self.params = jax.tree.map(  # perturbed: zero heads and unit norms hide mistakes
        lambda x: x + rng.normal(0, 0.5, x.shape).astype(np.float32),
        self.model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16, 16, 3)))['params'])
    self.images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)

  def _logits(self, model, params):
    return np.asarray(model.apply({'params': params}, self.images))

  def test_tree_and_forward(self):
    self.assertIn('fc_norm', self.params)
    self.assertNotIn('encoder_norm', self.params['Transformer'])
    tokens = vit.encoder(self.model).apply({'params': self.params['Transformer']},
                                           vit.patch_embedding(self.model).apply(
                                               {'params': self.params['embedding']},
                                               self.images).reshape(2, 16, 10),
                                           train=False)
    pooled = tokens.mean(axis=1)
    mean, var = pooled.mean(-1, keepdims=True), pooled.var(-1, keepdims=True)
    normed = ((pooled - mean) / np.sqrt(var + 1e-6) * self.params['fc_norm']['scale'] +
              self.params['fc_norm']['bias'])
    want = normed @ self.params['head']['kernel'] + self.params['head']['bias']
    np.testing.assert_allclose(self._logits(self.model, self.params), want, rtol=1e-5,
                               atol=1e-5)
    with self.assertRaisesRegex(ValueError, 'fc_norm normalises the pooled token'):
      self.model.clone(classifier='unpooled').init(jax.random.PRNGKey(0),
                                                   jnp.zeros((1, 16, 16, 3)))

  def test_formats_read_it_off_the_tree(self):
    directory = self.create_tempdir().full_path
    want = self._logits(self.model, self.params)
    for name in ('m.npz', 'm.safetensors'):
      path = f'{directory}/{name}'
      formats.write(self.params, path)
      # A timm state dict does not record the activation (timm's default is exact GELU).
      ckpt = formats.read(path, num_heads=2, options={'activation': 'gelu_tanh'})
      self.assertTrue(ckpt.get_model().fc_norm, name)
      np.testing.assert_allclose(self._logits(ckpt.get_model(), ckpt.params), want,
                                 rtol=1e-5, atol=1e-6)
    with self.assertRaisesRegex(ValueError, 'normalises after pooling .*write the timm'):
      formats.write(self.params, f'{directory}/hf', to_format='hf')

  def test_an_mae_encoder_fine_tunes_with_a_fresh_fc_norm(self):
    encoder = models.get_model('testing', num_classes=0, patches={'size': (4, 4)},
                               classifier='gap')
    path = self.create_tempfile('mae.npz').full_path
    checkpoint.save(encoder.init(jax.random.PRNGKey(1),
                                 jnp.zeros((1, 16, 16, 3)))['params'], path)
    config = models.get_model_config('testing')
    config.update({'patches': {'size': (4, 4)}, 'classifier': 'gap', 'fc_norm': True})
    restored = checkpoint.load_pretrained(pretrained_path=path,
                                          init_params=self.params, model_config=config)
    np.testing.assert_array_equal(restored['fc_norm']['scale'],
                                  self.params['fc_norm']['scale'])  # kept from init
    self.assertNotIn('encoder_norm', restored['Transformer'])

if __name__ == '__main__':
  absltest.main()
