"""`python -m vit_jax.plot WORKDIR`: training curves (vit_jax.cli.plot)."""
from vit_jax.cli import plot

if __name__ == '__main__':
  plot.run()
