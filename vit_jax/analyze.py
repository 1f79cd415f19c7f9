"""`python -m vit_jax.analyze`: Park et al.'s layer analyses of checkpoints (vit_jax.cli.analyze)."""
from vit_jax.cli import analyze

if __name__ == '__main__':
  analyze.run()
