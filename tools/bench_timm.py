"""timm's same-size ViT timed as the peer that `python -m vit_jax.perf.benchmark --compare=timm` reports against.

The benchmark starts it in its own process (torch may live in another Python: see
--timm_python there) and passes the model as timm VisionTransformer keyword arguments
(vit_jax.perf.timm_peer.timm_kwargs), so any config's model has its peer:
  python tools/bench_timm.py --timm_kwargs='{"img_size": 28, "patch_size": 7, ...}' --batch=128

On a CUDA GPU (the issue's peer measurement): bf16 autocast with float32 parameters,
fused scaled-dot-product attention (timm's default), the whole step under torch.compile
(default mode), fused AdamW / SGD-momentum, TF32 matmuls allowed; prints one JSON line
and exits. On CPU: eager PyTorch, float32, `--threads` intra-op threads (the cores JAX
uses), AdamW / SGD-momentum with torch's default implementation; with --serve it prints
{"serving": true, ...} once warm and then times one window of N steps for each line N
read on stdin (one JSON line {"sec": seconds per step} each), until end of input, so the
benchmark alternates its windows with these on the same cores. A training step clips the
gradient global norm like ours when `--clip` > 0.
"""
import argparse
import functools
import json
import statistics
import sys
import time
from typing import Any, Callable, Optional, Sequence


def missing(device: str) -> Optional[str]:
  """Why timm cannot run here (no torch/timm, or no CUDA when asked for), or None."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import timm  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    return (f'{e.name} is not installed in {sys.executable} (--timm_python names a '
            'Python that has torch and timm)')
  if device == 'cuda' and not torch.cuda.is_available():
    return 'torch sees no CUDA GPU'
  return None


def build(kwargs: dict[str, Any]) -> Any:
  """timm's VisionTransformer from timm_kwargs (norm_eps becomes its norm_layer)."""
  import torch  # pylint: disable=g-import-not-at-top
  from timm.models import vision_transformer  # pylint: disable=g-import-not-at-top
  kw = dict(kwargs)
  eps = kw.pop('norm_eps', 1e-6)
  kw['norm_layer'] = functools.partial(torch.nn.LayerNorm, eps=eps)
  return vision_transformer.VisionTransformer(**kw)


def torch_peak(n: int = 8192, iters: int = 20) -> float:
  """bf16 n^3 matmul rate through PyTorch on the GPU (the issue's peak measurement)."""
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


def make_step(net: Any, batch: int, mode: str, optimizer: str, clip: float,
              device: str, compile_: bool) -> Callable[[], Any]:
  """One training step (or forward pass) of `net` on a fixed random batch."""
  import torch  # pylint: disable=g-import-not-at-top
  cuda = device == 'cuda'
  res, classes = net.patch_embed.img_size[0], net.num_classes
  gen = torch.Generator(device=device).manual_seed(0)
  x = torch.rand(batch, 3, res, res, device=device, generator=gen) * 2 - 1
  y = torch.randint(0, max(classes, 1), (batch,), device=device, generator=gen)
  # bf16 autocast on the GPU (the fast path); float32 on CPU, as our CPU default.
  autocast = (functools.partial(torch.autocast, 'cuda', dtype=torch.bfloat16) if cuda
              else functools.partial(torch.autocast, 'cpu', enabled=False))
  if mode == 'train':
    extra = {'fused': True} if cuda else {}
    if optimizer == 'adam':
      opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.1, **extra)
    else:
      opt = torch.optim.SGD(net.parameters(), lr=0.03, momentum=0.9, **extra)

    def step():
      with autocast():
        loss = torch.nn.functional.cross_entropy(net(x), y)
      loss.backward()
      if clip:
        torch.nn.utils.clip_grad_norm_(net.parameters(), clip, foreach=True)
      opt.step()
      opt.zero_grad(set_to_none=True)
      return loss
    return torch.compile(step) if compile_ else step
  net.eval()
  forward = torch.compile(net) if compile_ else net

  def infer():
    with torch.inference_mode(), autocast():
      return forward(x)
  return infer


def bench(kwargs: dict[str, Any], batch: int, mode: str, steps: int, warmup: int,
          repeats: int, optimizer: str, clip: float, device: str, threads: int,
          compile_: bool, serve: bool) -> dict:
  """Times timm's model; returns img_s, step_ms, compile_s and versions (or serves windows)."""
  import timm  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  cuda = device == 'cuda'
  if cuda:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
  elif threads:
    torch.set_num_threads(threads)
  torch.manual_seed(0)
  net = build(kwargs).to(device)
  fn = make_step(net, batch, mode, optimizer, clip, device, compile_)
  sync = torch.cuda.synchronize if cuda else (lambda: None)
  sync()
  t = time.perf_counter()
  fn()
  sync()
  compile_s = time.perf_counter() - t
  for _ in range(warmup):
    fn()
  sync()

  def window(n: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) per step of n steps."""
    t, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
      out = fn()
    if not cuda:
      float(out.detach().sum())  # eager CPU: every op has run; this only reads it
    sync()
    return (time.perf_counter() - t) / n, (time.process_time() - cpu) / n

  info = {'torch': torch.__version__, 'timm': timm.__version__, 'device': device,
          'threads': torch.get_num_threads(), 'compiled': compile_,
          'dtype': 'bfloat16 autocast' if cuda else 'float32', 'compile_s': compile_s,
          'params': sum(p.numel() for p in net.parameters()),
          'timm_model': 'VisionTransformer(' + ', '.join(
              f'{k}={v}' for k, v in kwargs.items()) + ')'}
  if serve and not cuda:
    print(json.dumps({'serving': True, **info}), flush=True)
    for line in sys.stdin:
      sec, cpu = window(int(line))
      print(json.dumps({'sec': sec, 'cpu_sec': cpu}), flush=True)
    return {}
  sec = statistics.median(window(steps)[0] for _ in range(repeats))
  out = {'img_s': batch / sec, 'step_ms': sec * 1e3, **info}
  if cuda:
    out['torch_peak_tflops'] = torch_peak() / 1e12
    out['peak_mem_gib'] = torch.cuda.max_memory_allocated() / 2**30
  return out


def main(argv: Optional[Sequence[str]] = None) -> None:
  """Parses flags, runs the timm benchmark and prints its JSON line(s)."""
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--timm_kwargs', required=True,
                 help='JSON VisionTransformer keyword arguments (vit_jax.perf.timm_peer).')
  p.add_argument('--batch', type=int, default=256)
  p.add_argument('--mode', choices=('train', 'infer'), default='train')
  p.add_argument('--steps', type=int, default=20)
  p.add_argument('--warmup', type=int, default=3)
  p.add_argument('--repeats', type=int, default=3)
  p.add_argument('--optimizer', choices=('adam', 'sgd'), default='adam')
  p.add_argument('--clip', type=float, default=1.0)
  p.add_argument('--device', choices=('auto', 'cpu', 'cuda'), default='auto',
                 help='auto: CUDA when torch sees a GPU, else CPU.')
  p.add_argument('--threads', type=int, default=0, help='CPU intra-op threads (0: torch default).')
  p.add_argument('--serve', action='store_true',
                 help='CPU: time one window per stdin line N (N steps) until end of input.')
  p.add_argument('--no_compile', action='store_true',
                 help='GPU: eager instead of torch.compile (CPU is always eager).')
  a = p.parse_args(argv)
  device = a.device
  if device == 'auto':
    try:
      import torch  # pylint: disable=g-import-not-at-top
      device = 'cuda' if torch.cuda.is_available() else 'cpu'
    except ImportError:
      device = 'cpu'
  why = missing(device)
  if why:
    print(json.dumps({'skipped': why}))
    return
  try:
    out = bench(json.loads(a.timm_kwargs), a.batch, a.mode, a.steps, a.warmup,
                a.repeats, a.optimizer, a.clip, device, a.threads,
                compile_=device == 'cuda' and not a.no_compile, serve=a.serve)
  except (ValueError, TypeError) as e:
    print(json.dumps({'error': f'{type(e).__name__}: {e}'}))
    sys.exit(2)
  if out:
    print(json.dumps(out))


if __name__ == '__main__':
  main()
