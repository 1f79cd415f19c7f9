"""`python -m vit_jax.evaluate`: a checkpoint's accuracy on a split (vit_jax.cli.evaluate)."""
from vit_jax.cli import evaluate

if __name__ == '__main__':
  evaluate.run()
