"""The Objective base class's defaults and the objectives' options declared once."""
import dataclasses

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax import models
from vit_jax.configs import base
from vit_jax.models import flops
from vit_jax.train import objectives


@dataclasses.dataclass(frozen=True)
class MeanLogit(objectives.Objective):
  """A toy objective that only says what a batch costs."""
  model: nn.Module
  scale: float = 2.0

  def loss(self, params, batch, rng):
    logits = self.model.apply({'params': params}, batch['image'], train=False)
    return self.scale * jnp.mean(logits), {'scale': jnp.float32(self.scale)}


def _model() -> nn.Module:
  return models.get_model('testing', num_classes=3, patches={'size': (4, 4)},
                          hidden_size=8, mlp_dim=16)


class DefaultsTest(absltest.TestCase):
  """What an objective that overrides only `loss` gets from the base class."""

  def setUp(self):
    super().setUp()
    self.objective = MeanLogit(_model())
    self.params = self.objective.init(jax.random.PRNGKey(0), (1, 8, 8, 3))
    self.batch = {'image': jnp.ones((2, 8, 8, 3))}

  def test_parameters_are_the_models_in_their_published_layout(self):
    expected = _model().init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 3)))['params']
    jax.tree.map(np.testing.assert_array_equal, self.params, expected)
    self.assertIs(self.objective.model_params(self.params), self.params)
    self.assertEqual(self.objective.with_model_params(self.params, {'x': 1}), {'x': 1})

  def test_no_state_no_export_beside_the_model(self):
    self.assertIsNone(self.objective.init_state(self.params))
    self.assertIsNone(objectives.auxiliary_params(self.objective, self.params, {}))
    self.assertIs(objectives.result_params(self.objective, self.params, {}), self.params)
    self.assertIsNone(self.objective.example_loss)
    self.objective.check_views(8, None)  # takes any single-image batches
    loss, (metrics, stats) = self.objective.stateful_loss(
        self.params, None, self.batch, jax.random.PRNGKey(1), jnp.int32(0))
    self.assertEqual(float(loss), float(self.objective.loss(
        self.params, self.batch, jax.random.PRNGKey(1))[0]))
    self.assertEqual((float(metrics['scale']), stats), (2.0, {}))
    self.assertEqual(self.objective.update_state('s', self.params, {}, 1), 's')

  def test_flops_are_the_models(self):
    self.assertEqual(objectives.train_flops_per_image(self.objective, 8),
                     flops.model_flops_per_image(_model(), 8, train=True))

  def test_loss_is_required(self):
    with self.assertRaisesRegex(NotImplementedError, 'Bare does not define loss'):
      type('Bare', (objectives.Objective,), {})().loss({}, {}, None)


class OptionsTest(absltest.TestCase):
  """Each objective's options are its factory's keywords; the config derives from them."""

  def test_config_sections_are_the_factory_defaults(self):
    sections = base.get_base_config().objectives
    self.assertEqual(sorted(sections), sorted(objectives.OBJECTIVES))
    for name in objectives.OBJECTIVES:
      self.assertEqual(sections[name].to_dict(), objectives.defaults(name), name)
    # Spot values of the papers' settings, and types the config keeps (float vs int).
    self.assertEqual(sections.mae.decoder_width, 512)
    self.assertIsInstance(sections.dino.teacher_temp, float)
    self.assertIsInstance(sections.dino.warmup_teacher_temp_steps, int)
    self.assertNotIn('total_steps', sections.dino)  # given from config.total_steps

  def test_a_registered_objective_gets_its_section(self):
    objectives.register('mean_logit', MeanLogit)
    self.addCleanup(objectives.OBJECTIVES.pop, 'mean_logit')
    config = base.get_base_config()
    self.assertEqual(config.objectives.mean_logit.to_dict(), {'scale': 2.0})
    config.objective = 'mean_logit'
    config.objectives.mean_logit.scale = 0.5
    objective = objectives.make(config, _model())
    self.assertEqual(objective, MeanLogit(_model(), 0.5))

  def test_unused_options_are_those_off_their_defaults(self):
    config = base.get_base_config()
    self.assertEqual(objectives.unused_options(config), [])
    config.objectives.mae.decoder_width = 64
    config.objectives.dino.out_dim = 65536  # the default: not reported
    config.objectives.supervised.loss = 'sigmoid_xent'  # the trained objective's
    self.assertEqual(objectives.unused_options(config), [('mae', 'decoder_width', 64)])

  def test_a_factory_must_return_an_objective(self):
    objectives.register('not_one', lambda model: model)
    self.addCleanup(objectives.OBJECTIVES.pop, 'not_one')
    config = ml_collections.ConfigDict({'objective': 'not_one', 'total_steps': 1})
    with self.assertRaisesRegex(TypeError, "objective 'not_one'.*not a subclass"):
      objectives.make(config, _model())


if __name__ == '__main__':
  absltest.main()
