"""timm's same-size ViT timed on the GPU, the reference `python -m vit_jax.perf.benchmark --compare=timm` reports against.

Run as its own process (the benchmark starts it before JAX claims the GPU):
  python tools/bench_timm.py --model=ViT-B_16 --batch=256 --resolution=224 --mode=train
Prints one JSON line: {"img_s": ..., "step_ms": ..., "compile_s": ..., ...}.

How timm is run (the issue's peer measurement): PyTorch, bf16 autocast with
float32 parameters, fused scaled-dot-product attention (timm's default), the
whole step under torch.compile (default mode), the fused AdamW / SGD-momentum
optimizer, TF32 matmuls allowed; a training step also clips the gradient
global norm like ours when `--clip` > 0.
"""
import argparse
import json
import statistics
import sys
import time
from typing import Optional, Sequence

# Our preset name -> timm model name (architectures match; the resolution is
# passed as img_size).
TIMM_NAMES = {
    'ViT-Ti_16': 'vit_tiny_patch16_224',
    'ViT-S_16': 'vit_small_patch16_224',
    'ViT-S_32': 'vit_small_patch32_224',
    'ViT-B_8': 'vit_base_patch8_224',
    'ViT-B_16': 'vit_base_patch16_224',
    'ViT-B_32': 'vit_base_patch32_224',
    'ViT-L_16': 'vit_large_patch16_224',
    'ViT-L_32': 'vit_large_patch32_224',
    'ViT-H_14': 'vit_huge_patch14_224',
}


def timm_name(model: str) -> str:
  """timm's name for our preset `model`, or a one-line error."""
  if model not in TIMM_NAMES:
    raise ValueError(f'--compare=timm has no timm counterpart for {model!r}; '
                     f'use one of {", ".join(TIMM_NAMES)}.')
  return TIMM_NAMES[model]


def missing() -> Optional[str]:
  """Why timm cannot run here (no torch/timm or no CUDA), or None."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import timm  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    return f'{e.name} is not installed'
  if not torch.cuda.is_available():
    return 'torch sees no CUDA GPU'
  return None


def torch_peak(n: int = 8192, iters: int = 20) -> float:
  """bf16 n^3 matmul rate through PyTorch (the issue's peak measurement)."""
  import torch  # pylint: disable=g-import-not-at-top
  a = torch.randn(n, n, device='cuda', dtype=torch.bfloat16)
  b = torch.randn(n, n, device='cuda', dtype=torch.bfloat16)
  for _ in range(3):
    a @ b
  torch.cuda.synchronize()
  t = time.perf_counter()
  for _ in range(iters):
    a @ b
  torch.cuda.synchronize()
  return 2 * n**3 * iters / (time.perf_counter() - t)


def bench(model: str, batch: int, resolution: int, mode: str, steps: int,
          warmup: int, repeats: int, optimizer: str, clip: float,
          num_classes: int, compile_: bool = True) -> dict:
  """Times timm's model; returns img_s, step_ms, compile_s and versions."""
  import timm  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  torch.backends.cuda.matmul.allow_tf32 = True
  torch.backends.cudnn.allow_tf32 = True
  net = timm.create_model(timm_name(model), img_size=resolution,
                          num_classes=num_classes).cuda()
  gen = torch.Generator(device='cuda').manual_seed(0)
  x = torch.rand(batch, 3, resolution, resolution, device='cuda',
                 generator=gen) * 2 - 1
  y = torch.randint(0, num_classes, (batch,), device='cuda', generator=gen)
  if mode == 'train':
    if optimizer == 'adam':
      opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.1,
                              fused=True)
    else:
      opt = torch.optim.SGD(net.parameters(), lr=0.03, momentum=0.9,
                            fused=True)

    def step():
      with torch.autocast('cuda', dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(net(x), y)
      loss.backward()
      if clip:
        torch.nn.utils.clip_grad_norm_(net.parameters(), clip, foreach=True)
      opt.step()
      opt.zero_grad(set_to_none=True)
      return loss
    fn = torch.compile(step) if compile_ else step
  else:
    net.eval()
    forward = torch.compile(net) if compile_ else net

    def fn():
      with torch.inference_mode(), torch.autocast('cuda', dtype=torch.bfloat16):
        return forward(x)

  torch.cuda.synchronize()
  t = time.perf_counter()
  fn()
  torch.cuda.synchronize()
  compile_s = time.perf_counter() - t
  for _ in range(warmup):
    fn()
  torch.cuda.synchronize()
  windows = []
  for _ in range(repeats):
    t = time.perf_counter()
    for _ in range(steps):
      fn()
    torch.cuda.synchronize()
    windows.append((time.perf_counter() - t) / steps)
  sec = statistics.median(windows)
  return {'img_s': batch / sec, 'torch_peak_tflops': torch_peak() / 1e12, 'step_ms': sec * 1e3, 'compile_s': compile_s,
          'timm_model': timm_name(model), 'torch': torch.__version__,
          'timm': timm.__version__,
          'peak_mem_gib': torch.cuda.max_memory_allocated() / 2**30}


def main(argv: Optional[Sequence[str]] = None) -> None:
  """Parses flags, runs the timm benchmark and prints its JSON line."""
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--model', default='ViT-B_16')
  p.add_argument('--batch', type=int, default=256)
  p.add_argument('--resolution', type=int, default=224)
  p.add_argument('--mode', choices=('train', 'infer'), default='train')
  p.add_argument('--steps', type=int, default=20)
  p.add_argument('--warmup', type=int, default=3)
  p.add_argument('--repeats', type=int, default=3)
  p.add_argument('--optimizer', choices=('adam', 'sgd'), default='adam')
  p.add_argument('--clip', type=float, default=1.0)
  p.add_argument('--num_classes', type=int, default=1000)
  p.add_argument('--no_compile', action='store_true')
  a = p.parse_args(argv)
  why = missing()
  if why:
    print(json.dumps({'skipped': why}))
    return
  try:
    out = bench(a.model, a.batch, a.resolution, a.mode, a.steps, a.warmup,
                a.repeats, a.optimizer, a.clip, a.num_classes,
                compile_=not a.no_compile)
  except ValueError as e:
    print(json.dumps({'error': str(e)}))
    sys.exit(2)
  print(json.dumps(out))


if __name__ == '__main__':
  main()
