"""How much the input pipeline costs the training loop: the trainer's step fed vs on one batch.

  python tools/loop_rate.py --config=quickstart --steps=40 --windows=3

Builds the trainer's jitted step and training pipeline for a config (as vit_jax.main does,
freed host memory kept on a CPU-only machine) and alternates, in one process, windows of
`--steps` steps fed by the pipeline with windows that reuse one fixed batch, then times the
pipeline alone. Prints img/s for each window and the medians. On 2 cores the gap between the
two is the CPU time the pipeline takes from the step.
"""
import statistics
import sys
import time

from absl import app
from absl import flags
import jax

from vit_jax import configs
from vit_jax.configs import experiments
from vit_jax.data import pipeline
from vit_jax.parallel import host_memory
from vit_jax.parallel import sharding
from vit_jax.train import loop
from vit_jax.train import validate

_CONFIG = flags.DEFINE_string('config', 'quickstart', 'A shipped config name or a config file.')
_STEPS = flags.DEFINE_integer('steps', 40, 'Steps per window.')
_WINDOWS = flags.DEFINE_integer('windows', 3, 'Windows of each kind, alternated.')


def main(unused_argv) -> None:
  """Times the windows and prints them."""
  config = configs.load(experiments.resolve(_CONFIG.value))
  mesh = sharding.make_mesh(config.mesh, None)
  built = validate.validate(config, mesh)
  init = loop.state_init(config, built.objective, built.tx)
  rng = jax.random.PRNGKey(config.seed)
  shardings = sharding.tree_shardings(jax.eval_shape(init, rng), mesh, config)
  state = jax.jit(init, out_shardings=shardings)(rng)
  step = loop.jitted_step(config, built.objective, built.tx, built.schedule, mesh, shardings)
  batches = pipeline.make_train_iterator(config, mesh)
  fixed = next(batches)
  state, metrics = step(state, fixed)  # compiles
  jax.block_until_ready(metrics)

  def window(fed: bool) -> float:
    nonlocal state
    start = time.perf_counter()
    for _ in range(_STEPS.value):
      state, out = step(state, next(batches) if fed else fixed)
    jax.block_until_ready(out)
    return _STEPS.value * config.batch / (time.perf_counter() - start)

  fed, alone = [], []
  for i in range(_WINDOWS.value):
    fed.append(window(True))
    alone.append(window(False))
    print(f'window {i + 1}: fed by the pipeline {fed[-1]:.0f} img/s, '
          f'one fixed batch {alone[-1]:.0f} img/s', flush=True)
  start = time.perf_counter()
  for _ in range(_STEPS.value):
    jax.block_until_ready(next(batches))
  pipe = _STEPS.value * config.batch / (time.perf_counter() - start)
  print(f'median: fed {statistics.median(fed):.0f} img/s, fixed batch '
        f'{statistics.median(alone):.0f} img/s '
        f'({statistics.median(fed) / statistics.median(alone):.3f}x); '
        f'pipeline alone {pipe:.0f} img/s')


if __name__ == '__main__':
  host_memory.retain_on_cpu()  # before JAX starts its CPU backend
  app.run(main, argv=sys.argv)
