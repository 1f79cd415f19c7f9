"""Options set while the switch they need is off get one warning line each, per section."""
from absl.testing import absltest
from absl.testing import parameterized

from tests import tfds_testdata
from vit_jax import option_rules
from vit_jax.configs import effects


def _config(**changes):
  """The tiny test config with dotted keys changed, e.g. {'pp.mixup': 0.8}."""
  return tfds_testdata.config(**changes)


class OptionsWithoutEffectTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # The issue's case: DINO's views with no local crops, local options set.
      ('multicrop_local', {'pp.multicrop.global_pp': ('dino_global1', 'dino_global2'),
                           'pp.multicrop.local_crops': 0, 'pp.multicrop.local_crop': 14,
                           'pp.multicrop.local_area': (0.1, 0.3)},
       ["config.pp.multicrop.local_crop=14 has no effect with pp.multicrop.local_crops=0; "
        "set pp.multicrop.local_crops above 0 to use it.",
        "config.pp.multicrop.local_area=(0.1, 0.3) has no effect with "
        "pp.multicrop.local_crops=0; set pp.multicrop.local_crops above 0 to use it."]),
      ('multicrop_off', {'pp.multicrop.local_crops': 6},
       ["config.pp.multicrop.local_crops=6 has no effect with pp.multicrop.global_pp=(); set "
        "pp.multicrop.global_pp (e.g. ('dino_global1', 'dino_global2')) to use it."]),
      ('cutmix_switch', {'pp.mixup': 0.8, 'pp.cutmix_switch_prob': 0.3},
       ['config.pp.cutmix_switch_prob=0.3 has no effect with pp.mixup=0.8, pp.cutmix=0.0; '
        'set both pp.mixup and pp.cutmix above 0 to use it.']),
      ('ema', {'ema_eval': False},
       ["config.ema_eval=False has no effect with ema_decay=0.0; set ema_decay (timm's "
        "0.9998) to use it."]),
      # k is set; temperature, left as it is, is not named.
      ('evaluator_type', {'evals.knn.every': 0, 'evals.knn.type': 'fewshot',
                          'evals.knn.k': 10},
       ["config.evals.knn.k=10 has no effect: evaluators of type 'fewshot' read only "
        'datasets, shots, seeds, resolution, l2_regs, val_per_class.']),
      ('linear_protocol', {'evals.linear.every': 0, 'evals.linear.batch': 64},
       ["config.evals.linear.batch=64 has no effect with protocol='lbfgs'; set protocol to "
        "'dino' or 'mae' to use it."]),
      ('linear_lbfgs_options', {'evals.linear.every': 0, 'evals.linear.protocol': 'dino',
                                'evals.linear.steps': 50},
       ["config.evals.linear.steps=50 has no effect with protocol='dino'; set protocol to "
        "'lbfgs' to use it."]),
  )
  def test_each_section_names_the_option_and_its_switch(self, changes, want):
    self.assertEqual(effects.options_without_effect(_config(**changes)), want)

  @parameterized.named_parameters(
      ('multicrop_on', {'pp.multicrop.global_pp': ('dino_global1', 'dino_global2'),
                        'pp.multicrop.local_crops': 2, 'pp.multicrop.local_crop': 14}),
      ('both_mixes', {'pp.mixup': 0.8, 'pp.cutmix': 1.0, 'pp.cutmix_switch_prob': 0.3}),
      ('ema_on', {'ema_decay': 0.99, 'ema_eval': False}),
      ('disabled_evaluator', {'evals.knn.type': 'fewshot'}),  # every=-1: never runs
      ('defaults', {}),
  )
  def test_options_in_use_are_not_named(self, changes):
    self.assertEqual(effects.options_without_effect(_config(**changes)), [])

  def test_a_list_from_the_command_line_equals_the_default_tuple(self):
    rule = option_rules.Rule(('a',), lambda a: not a, ('b',), 'set a')
    self.assertEqual(option_rules.unused({'a': 0, 'b': [1, 2]}, {'b': (1, 2)}, [rule]), [])
    self.assertLen(option_rules.unused({'a': 0, 'b': [1, 3]}, {'b': (1, 2)}, [rule]), 1)


if __name__ == '__main__':
  absltest.main()
