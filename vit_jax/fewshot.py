"""`python -m vit_jax.fewshot`: few-shot accuracy (vit_jax.cli.fewshot)."""
from vit_jax.cli import fewshot

if __name__ == '__main__':
  fewshot.run()
