r"""Top-5 predictions of a checkpoint on image files.

  python -m vit_jax.predict --checkpoint=CHECKPOINT [flags] IMAGE [IMAGE ...]

  python -m vit_jax.predict --model=ViT-B_16 --checkpoint=ViT-B_16.npz cat.jpg dog.png
  python -m vit_jax.predict --checkpoint=hf-hub:google/vit-base-patch16-224 cat.jpg

A checkpoint named hf-hub:ORG/NAME[@REVISION] (as every command takes it) is read from
huggingface_hub's cache, downloaded first where online (HF_HUB_OFFLINE=1: the cache only).

The model's resolution is read from the checkpoint (its position embeddings, or the
Mixer's token-mixing width); --resolution=N runs a ViT at another one by
interpolating the position embeddings. Images of any size are resized to it
(bilinear, no crop: the original vit_jax evaluation) and scaled to [-1, 1].
Class names: --labels=imagenet1k|imagenet21k (shipped in vit_jax/labels/) or
a dataset name as in config.dataset (cifar10, mnist5k, tfds:NAME, ...); by
default a transformers checkpoint's id2label, else the dataset of the config.json
beside the checkpoint (a vit_jax work directory), else imagenet1k for 1,000
outputs, imagenet21k for 21,843, else indices.
"""
from vit_jax.cli import predict

if __name__ == '__main__':
  predict.run()
