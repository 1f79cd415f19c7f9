r"""Training curves of a work directory as a PNG (vit_jax.inference.curves).

  python -m vit_jax.plot WORKDIR|METRICS_JSONL [--out=PNG]

  python -m vit_jax.plot /tmp/vit_quickstart [--out=curves.png]
  python -m vit_jax.plot /tmp/vit_quickstart/metrics.jsonl
"""
from vit_jax.cli import plot

if __name__ == '__main__':
  plot.run()
