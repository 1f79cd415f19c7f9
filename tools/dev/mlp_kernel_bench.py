r"""Times the ViT MLP's forward + backward, XLA against the fused Pallas kernels, one line each.

  python tools/dev/mlp_kernel_bench.py                      # ViT-B: [256 * 200, 768] x [768, 3072]
  python tools/dev/mlp_kernel_bench.py --blocks=128,256,64,8,3 --blocks=128,128,64,8,4

The step is the MLP's vjp with a fixed output gradient (what a train step runs per block):
the forward, and dx, dW1, db1, dW2, db2. Each variant prints its median time over --iters
calls and its rate in TFLOP/s of the six matmuls (12 * tokens * width * hidden flops); the
first Pallas variant's output and gradients are checked against XLA's once (bf16: the
largest difference relative to the largest value). `--blocks` is
m,n,k,num_warps,num_stages of mlp_kernel.Blocks; off GPU the kernels are interpreted (use
tiny sizes there, e.g. --tokens=256 --width=64 --hidden=256 --iters=2).
"""
import argparse
import statistics
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.models import mlp_kernel
from vit_jax.models.vit import layers

# Tiles tried by default: Triton's usual Hopper bf16 GEMM shapes.
DEFAULT_SWEEP = ('128,256,64,8,3', '128,128,64,8,4', '256,128,64,8,3')


def xla_mlp(x, w1, b1, w2, b2):
  """The XLA MLP, as MlpBlock computes it."""
  return layers.activate(x @ w1 + b1, 'gelu_tanh') @ w2 + b2


def step(f: Callable) -> Callable:
  """(operands, dy) -> (y, the five gradients): the MLP's forward and backward."""
  def run(operands, dy):
    y, vjp = jax.vjp(f, *operands)
    return y, vjp(dy)
  return jax.jit(run)


def time_it(fn: Callable, operands: tuple, dy: jax.Array, iters: int) -> float:
  """Median seconds of one call, after a compiling and a warm-up call."""
  jax.block_until_ready(fn(operands, dy))
  jax.block_until_ready(fn(operands, dy))
  times = []
  for _ in range(iters):
    t = time.perf_counter()
    jax.block_until_ready(fn(operands, dy))
    times.append(time.perf_counter() - t)
  return statistics.median(times)


def largest_difference(got, want) -> float:
  """max |got - want| / max |want| over every output, in f32."""
  worst = 0.0
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    worst = max(worst, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
  return worst


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  p.add_argument('--tokens', type=int, default=256 * 200, help='batch x tokens')
  p.add_argument('--width', type=int, default=768)
  p.add_argument('--hidden', type=int, default=3072)
  p.add_argument('--dtype', default='bfloat16')
  p.add_argument('--iters', type=int, default=20)
  p.add_argument('--blocks', action='append', help='m,n,k,num_warps,num_stages (repeat)')
  args = p.parse_args(argv)
  dtype = jnp.dtype(args.dtype)
  rng = np.random.default_rng(0)
  shapes = [((args.tokens, args.width), 1.0), ((args.width, args.hidden), 0.03),
            ((args.hidden,), 0.1), ((args.hidden, args.width), 0.03), ((args.width,), 0.1)]
  operands = tuple(jnp.asarray(s * rng.standard_normal(shape), dtype) for shape, s in shapes)
  dy = jnp.asarray(rng.standard_normal((args.tokens, args.width)), dtype)
  flops = 12.0 * args.tokens * args.width * args.hidden
  print(f'# {jax.devices()[0].device_kind}, jax {jax.__version__}, {args.dtype}, '
        f'[{args.tokens}, {args.width}] x [{args.width}, {args.hidden}], '
        f'median of {args.iters}', flush=True)
  xla = step(xla_mlp)
  seconds = time_it(xla, operands, dy, args.iters)
  print(f'xla                     {seconds * 1e3:8.3f} ms  {flops / seconds / 1e12:6.1f} TFLOP/s',
        flush=True)
  reference = None
  for text in args.blocks or DEFAULT_SWEEP:
    blocks = mlp_kernel.parse_blocks(text)
    fused = step(lambda *a, b=blocks: mlp_kernel.mlp(*a, 'gelu_tanh', b))
    try:
      seconds = time_it(fused, operands, dy, args.iters)
    except Exception as e:  # a tile Triton cannot fit (shared memory): report, go on
      print(f'pallas {text:16s} failed: {str(e).splitlines()[0][:150]}', flush=True)
      continue
    line = f'pallas {text:16s} {seconds * 1e3:8.3f} ms  {flops / seconds / 1e12:6.1f} TFLOP/s'
    if reference is None:
      reference = xla(operands, dy)
      line += f'  max rel diff vs xla {largest_difference(fused(operands, dy), reference):.2e}'
    print(line, flush=True)


if __name__ == '__main__':
  main()
