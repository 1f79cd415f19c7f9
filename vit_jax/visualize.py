r"""The ViT paper's figures of a checkpoint as PNG files (vit_jax.inference.figures).

  python -m vit_jax.visualize --checkpoint=CHECKPOINT --out=DIR [flags] IMAGE [IMAGE ...]

  python -m vit_jax.visualize --model=ViT-B_16 --checkpoint=params.npz --out=/tmp/viz \
      cat.jpg dog.png
"""
from vit_jax.cli import visualize

if __name__ == '__main__':
  visualize.run()
