r"""Accuracy, loss and example count of a checkpoint on a dataset split (as timm's validate.py).

  python -m vit_jax.evaluate --checkpoint=/tmp/vit_quickstart/params.npz
  python -m vit_jax.evaluate --checkpoint=ViT-B_16.npz --model=ViT-B_16 \
      --dataset=cifar10 --split=test --resolution=384
  python -m vit_jax.evaluate --checkpoint=vit.safetensors --num_heads=2 \
      --dataset=folder:/data/pets --split=validation
  python -m vit_jax.evaluate --checkpoint=ViT-B_16.npz --model=ViT-B_16 \
      --dataset=imagenet2012 --split=validation --real_labels=real.json

The checkpoint is anything `predict` reads (.npz, timm state dict, transformers
directory). The params.npz of a vit_jax work directory is evaluated as its run
evaluated it: the dataset, evaluation split, preprocessing and loss of the
config.json beside it (each flag overrides its part). Otherwise images are
resized to the model's resolution (the original vit_jax evaluation) and the loss
is softmax cross-entropy. Every example of the split is counted once.

ImageNet ReaL: --real_labels=real.json (github.com/google-research/reassessed-imagenet)
scores top-1 against each image's ReaL label set (images named ILSVRC2012_val_N are matched
by name, other splits by position); --dataset=imagenet2012_real reads the same sets from
TFDS. It prints the ReaL accuracy over the images with labels, how many were scored and
how many have no label (left out). --label_key scores another label feature.
"""
import sys

from vit_jax.cli import common

if __name__ == '__main__':
  common.exit_on_help(sys.argv, common.define_evaluate_flags)
  # Flag mistakes that need no TensorFlow are one line before it loads.
  from vit_jax.cli import early  # pylint: disable=g-import-not-at-top
  common.check_early('vit_jax.evaluate', sys.argv, common.define_evaluate_flags,
                     early.check_evaluate)
  # Only now: the command's modules load TensorFlow, which --help does not need.
  from vit_jax.cli import evaluate  # pylint: disable=g-import-not-at-top
  evaluate.run()
