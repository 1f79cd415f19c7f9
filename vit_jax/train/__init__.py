"""Training: the loop (loop.train_and_evaluate), the pure step, objectives, optimizers,
schedules, train-state checkpoints, timing, preemption, metric writers and the config check.

The package imports nothing by itself, so the benchmark can use the step without the
input pipeline (and TensorFlow).
"""

_MOVED = {
    'train_and_evaluate': 'vit_jax.train.loop.train_and_evaluate',
    'PARAMS_FILE': 'vit_jax.train.loop.PARAMS_FILE',
    'CONFIG_FILE': 'vit_jax.train.loop.CONFIG_FILE',
    'NonFiniteError': 'vit_jax.train.loop.NonFiniteError',
    'Preempted': 'vit_jax.train.preemption.Preempted',
    'PREEMPTED_EXIT_CODE': 'vit_jax.train.preemption.PREEMPTED_EXIT_CODE',
    'StepTimer': 'vit_jax.train.timing.StepTimer',
    'model_overrides': 'vit_jax.models.from_config.model_kwargs',
    'build_model': 'vit_jax.models.from_config.build',
    'pretrained_file': 'vit_jax.train.validate.pretrained_file',
    'check_config': 'vit_jax.train.validate.validate',
    'evaluate': "the 'classification' evaluator (vit_jax.evaluators.classification)",
}


def __getattr__(name: str):
  """A one-line pointer for names that vit_jax.train (a module before 0.2) had."""
  if name in _MOVED:
    raise AttributeError(f'vit_jax.train.{name} moved to {_MOVED[name]}')
  raise AttributeError(f'module vit_jax.train has no attribute {name!r}')
