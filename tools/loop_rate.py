"""How much the input pipeline costs the training loop: the trainer's step fed vs on one batch.

  python tools/loop_rate.py --config=quickstart --steps=40 --windows=3
  python tools/loop_rate.py --config=quickstart --windows=0 --pp_train='decode'   # pipeline only

Builds the trainer's jitted step and training pipeline for a config (as vit_jax.main does,
freed host memory kept on a CPU-only machine) and alternates, in one process, windows of
`--steps` steps fed by the pipeline with windows that reuse one fixed batch, then times the
pipeline alone: its img/s and its process CPU time per training example. Prints img/s for
each window and the medians. On 2 cores the gap between the two is the CPU time the pipeline
takes from the step. `--windows=0` times the pipeline only; `--pp_train` replaces the config's
training ops (to cost a shorter chain).
"""
import statistics
import sys
import time
from typing import Iterator

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
_WINDOWS = flags.DEFINE_integer('windows', 3, 'Windows of each kind, alternated; 0: none.')
_PP_TRAIN = flags.DEFINE_string('pp_train', None, 'Replaces config.pp.train.')
_PIPELINE_BATCHES = flags.DEFINE_integer(
    'pipeline_batches', 100, 'Batches the pipeline alone is timed over, after 10 untimed.')


def pipeline_cost(batches: Iterator, num_batches: int, batch: int) -> tuple[float, float]:
  """(img/s, process CPU microseconds per example) of `num_batches` of the iterator alone."""
  for _ in range(min(10, num_batches)):
    jax.block_until_ready(next(batches))
  cpu, wall = time.process_time(), time.perf_counter()
  for _ in range(num_batches):
    jax.block_until_ready(next(batches))
  cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
  return num_batches * batch / wall, 1e6 * cpu / (num_batches * batch)


def main(unused_argv) -> None:
  """Times the windows (when asked for) and the pipeline alone, and prints them."""
  config = configs.load(experiments.resolve(_CONFIG.value))
  if _PP_TRAIN.value is not None:
    config.pp.train = _PP_TRAIN.value
  mesh = sharding.make_mesh(config.mesh, None)
  batches = pipeline.make_train_iterator(config, mesh)
  if _WINDOWS.value > 0:
    _time_windows(config, mesh, batches)
  img_s, cpu_us = pipeline_cost(batches, _PIPELINE_BATCHES.value, config.batch)
  print(f'pipeline alone {img_s:.0f} img/s, {cpu_us:.1f} us of process CPU per example '
        f'(pp.train={config.pp.train!r})')


def _time_windows(config, mesh, batches: Iterator) -> None:
  """Alternates windows fed by `batches` with windows on one fixed batch; prints medians."""
  built = validate.validate(config, mesh)
  init = loop.state_init(config, built.objective, built.tx)
  rng = jax.random.PRNGKey(config.seed)
  shardings = sharding.tree_shardings(jax.eval_shape(init, rng), mesh, config)
  state = jax.jit(init, out_shardings=shardings)(rng)
  step = loop.jitted_step(config, built.objective, built.tx, built.schedule, mesh, shardings)
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
  print(f'median: fed {statistics.median(fed):.0f} img/s, fixed batch '
        f'{statistics.median(alone):.0f} img/s '
        f'({statistics.median(fed) / statistics.median(alone):.3f}x)')


if __name__ == '__main__':
  host_memory.retain_on_cpu()  # before JAX starts its CPU backend
  app.run(main, argv=sys.argv)
