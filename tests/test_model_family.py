"""A model family owns itself: options declared once, norms by name, tree knowledge inside.

The toy norm below is the cost of a new ViT norm: one registry line (here made from the
test's config file), after which the real trainer trains it, saves params.npz, and the real
loader rebuilds and runs it.
"""
import dataclasses
import os
import pickle
import sys
import tempfile
import textwrap

from absl.testing import absltest
import flax.linen as nn
import jax
import numpy as np

from tests import commands
from vit_jax import checkpoint
from vit_jax import configs
from vit_jax import fileio
from vit_jax import models
from vit_jax.inference import load
from vit_jax.models import families
from vit_jax.models import formats
from vit_jax.models import from_config
from vit_jax.models.formats import npz
from vit_jax.models import vit
from vit_jax.models.vit import layers
from vit_jax.models.vit import options

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A config file that adds a norm to the registry and trains a tiny ViT with it.
_TOY_NORM_CONFIG = textwrap.dedent("""\
    import os, sys
    sys.path.insert(0, {repo!r})
    import flax.linen as nn
    from tests import tiny_train_config
    from vit_jax.models.vit import layers

    layers.NORMS['toy_rms'] = nn.RMSNorm  # the whole cost of a new norm


    def get_config():
      c = tiny_train_config.tiny_config(total_steps=4, checkpoint_every=4, log_every=2)
      c.model.norm = 'toy_rms'
      return c
    """)




def _read_toy(path):
  with open(path, 'rb') as f:
    return npz.unflatten(pickle.load(f), path)


# A toy checkpoint format: a pickled {'a/b/c': array} dict in a .toyckpt file. This one
# registration is all it takes for read, read_params (fine-tuning), write and convert.
formats.register(formats.Format(
    'toy_pickle', suffixes=('.toyckpt',),
    read=lambda path, model, num_heads, options: (_read_toy(path), model, dict(options)),
    read_params=lambda path, num_heads: _read_toy(path),
    write=lambda params, path, options: fileio.atomic_write(
        path, pickle.dumps({k: np.asarray(v) for k, v in npz.flatten(params).items()}))))


class OptionsTest(absltest.TestCase):

  def test_each_option_is_declared_once_and_the_rest_derives(self):
    section = configs.get_base_config().model
    fields = {f.name: f for f in dataclasses.fields(vit.VisionTransformer)}
    block = {f.name: f for f in dataclasses.fields(vit.BlockConfig)}
    for option in options.OPTIONS:
      self.assertIn(option.name, section)  # the config.model section
      self.assertEqual(section[option.name], option.config, option.name)
      self.assertIn(f'`{option.name}`', options.table())  # the docs table
      if option.name in fields and option.name not in ('num_classes', 'dtype'):
        self.assertEqual(fields[option.name].default, option.default, option.name)
      if option.block:  # what every block reads, with the same default
        self.assertEqual(block[option.name].default, option.default, option.name)
    self.assertEqual(set(vit.FAMILY.options), {o.name for o in options.OPTIONS})

  def test_the_docs_table_is_the_generated_one(self):
    with open(os.path.join(REPO, 'docs', 'architecture.md'), encoding='utf-8') as f:
      self.assertIn(options.table(), f.read())

  def test_an_unknown_norm_is_one_line_naming_the_choices(self):
    with self.assertRaises(ValueError) as e:
      models.get_model('testing', norm='batch_norm')
    self.assertEqual(str(e.exception).count('\n'), 0)
    for word in ('norm', 'batch_norm', 'layer_norm'):
      self.assertIn(word, str(e.exception))

  def test_unset_is_one_marker(self):
    section = configs.get_base_config().model
    markers = {v for k, v in section.items() if options.BY_NAME[k].config is None}
    self.assertEqual(markers, {None})
    self.assertEqual(from_config.model_kwargs('testing', section, num_classes=7),
                     {k: v for k, v in section.items() if v is not None} | {'num_classes': 7})

  def test_the_markers_of_older_runs_still_mean_unset(self):
    old = {'num_classes': -1, 'representation_size': -1, 'dropout_rate': -1.0,
           'classifier': '', 'layer_scale': -1.0, 'activation': '', 'qk_norm': None,
           'dtype': 'auto'}  # a config.json written before UNSET
    self.assertEqual(from_config.model_kwargs('testing', old, num_classes=7),
                     {'num_classes': 7, 'dtype': 'auto'})


class ToyNormTest(absltest.TestCase):

  def test_a_registered_norm_trains_saves_and_loads(self):
    tmp = tempfile.mkdtemp()
    config = os.path.join(tmp, 'toy_norm.py')
    with open(config, 'w', encoding='utf-8') as f:
      f.write(_TOY_NORM_CONFIG.format(repo=REPO))
    workdir = os.path.join(tmp, 'run')
    proc = commands.run([sys.executable, '-m', 'vit_jax.main', f'--config={config}',
                         f'--workdir={workdir}'], timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])

    layers.NORMS['toy_rms'] = nn.RMSNorm  # what the config file did, in this process
    self.addCleanup(layers.NORMS.pop, 'toy_rms')
    loaded = load.load_model(None, workdir)
    self.assertEqual(loaded.model.norm, 'toy_rms')
    block = loaded.params['Transformer']['encoderblock_0']
    self.assertEqual(set(block['LayerNorm_0']), {'scale'})  # RMSNorm: no bias
    images = np.zeros((2, 28, 28, 3), np.float32)
    logits = loaded.model.apply({'params': loaded.params}, images)
    self.assertEqual(logits.shape, (2, 10))
    self.assertTrue(np.isfinite(np.asarray(logits)).all())
    # The same module with LayerNorm has another tree: the norm reached every block.
    plain = loaded.model.clone(norm='layer_norm')
    tree = jax.eval_shape(plain.init, jax.random.PRNGKey(0), images)['params']
    self.assertIn('bias', tree['Transformer']['encoderblock_0']['LayerNorm_0'])


class ToyFormatTest(absltest.TestCase):

  def test_a_registered_format_reads_writes_and_converts(self):
    model = models.get_model('testing', num_classes=3, num_registers=1)
    images = np.random.default_rng(0).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)
    params = model.init(jax.random.PRNGKey(0), images)['params']
    tmp = self.create_tempdir().full_path
    source = os.path.join(tmp, 'params.npz')
    checkpoint.save(params, source)
    toy = os.path.join(tmp, 'params.toyckpt')
    read, written = formats.convert(source, toy)
    self.assertEqual(written, 'toy_pickle')
    self.assertEqual(formats.detect_format(toy), 'toy_pickle')
    back = formats.read(toy)  # the architecture comes from the tree, as for npz
    self.assertEqual((back.model_name, back.overrides['num_registers']), ('testing', 1))
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back.params)):
      np.testing.assert_array_equal(a, b)
    fitted = checkpoint.load_pretrained(pretrained_path=toy, init_params=params,
                                        model_config=families.fields(model))
    np.testing.assert_array_equal(fitted['registers'], params['registers'])
    self.assertEqual(read.model_name, 'testing')

  def test_a_family_writes_only_the_conversions_it_speaks(self):
    mixer = models.get_model('Mixer-B_16', num_classes=2, num_blocks=1, hidden_dim=8,
                             tokens_mlp_dim=8, channels_mlp_dim=8)
    params = mixer.init(jax.random.PRNGKey(0), np.zeros((1, 32, 32, 3), np.float32))
    tmp = self.create_tempdir().full_path
    with self.assertRaisesRegex(ValueError, 'mixer family has no timm conversion'):
      formats.write(params['params'], os.path.join(tmp, 'm.safetensors'))
    self.assertEqual(os.listdir(tmp), [])
    formats.write(params['params'], os.path.join(tmp, 'm.toyckpt'))  # a container: any tree
    self.assertEqual(formats.read(os.path.join(tmp, 'm.toyckpt')).model_name, 'Mixer-B_16')


class FamilyClassTest(absltest.TestCase):

  def test_families_are_classes_with_methods(self):
    for name, family in families.FAMILIES.items():
      self.assertIsInstance(family, families.Family, name)
      preset = next(cfg for cfg in families.MODEL_CONFIGS.values()
                    if cfg.get(families.FAMILY_KEY) == name)
      self.assertGreater(family.forward_flops(preset.to_dict(), 224, 1000), 0)
      self.assertGreater(family.width(preset.to_dict()), 0)

  def test_vit_prefix_tokens_are_one_count(self):
    model = models.get_model('testing', num_registers=3, distilled=True)
    self.assertEqual(vit.FAMILY.prefix_tokens(model), 5)
    self.assertEqual(vit.FAMILY.posemb_prefix_tokens(model.clone(no_embed_class=True)), 0)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                            np.zeros((1, 16, 16, 3), np.float32))['params']
    self.assertEqual(vit.prefix_tokens_of_params(params), 5)


if __name__ == '__main__':
  absltest.main()
