"""`python -m vit_jax.main`: training (vit_jax.cli.main)."""
from vit_jax.cli import main

if __name__ == '__main__':
  main.run()
