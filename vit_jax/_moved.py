"""One-line pointers for modules that moved when the package took its stage layout (0.2)."""
import importlib.abc
import sys

MOVED = {
    'vit_jax.checkpointing': 'vit_jax.train.checkpointer',
    'vit_jax.metrics': 'vit_jax.train.writers',
    'vit_jax.optim': 'vit_jax.train.optimizers (schedules: vit_jax.train.schedules)',
    'vit_jax.train_step': 'vit_jax.train.step',
    'vit_jax.sharding': 'vit_jax.parallel.sharding',
    'vit_jax.distributed': 'vit_jax.parallel.distributed',
    'vit_jax.input_pipeline': 'vit_jax.data.pipeline',
    'vit_jax.preprocess': 'vit_jax.data.preprocess',
    'vit_jax.datasets': 'vit_jax.data.sources (the table: vit_jax.data.catalog)',
    'vit_jax.benchmark': 'vit_jax.perf.benchmark (python -m vit_jax.perf.benchmark)',
    'vit_jax.data_benchmark': 'vit_jax.perf.data_benchmark',
    'vit_jax.memory': 'vit_jax.perf.memory (python -m vit_jax.perf.memory)',
    'vit_jax.flops': 'vit_jax.models.flops (device peaks: vit_jax.parallel.peaks)',
    'vit_jax.profiling': 'vit_jax.perf.profiling',
    'vit_jax.bench_timm': "the repository's tools/bench_timm.py",
    'vit_jax.data.mnist5k': 'vit_jax.data.builders.mnist5k',
    'vit_jax.data.digits': 'vit_jax.data.builders.digits',
    'vit_jax.data.synthetic': 'vit_jax.data.builders.synthetic',
    'vit_jax.data.image_folder': 'vit_jax.data.builders.image_folder',
    'vit_jax.data.encode': 'vit_jax.data.builders.encode',
}


class MovedFinder(importlib.abc.MetaPathFinder):
  """Answers an import of a moved module with an ImportError naming its new place."""

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname in MOVED:
      raise ImportError(f'{fullname} moved to {MOVED[fullname]}', name=fullname)
    return None


def install() -> None:
  """Puts the finder first on sys.meta_path (once)."""
  if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, MovedFinder())
