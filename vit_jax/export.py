r"""Exports a checkpoint for serving (StableHLO, TensorFlow SavedModel, ONNX) or to the Hub.

  python -m vit_jax.export --checkpoint=ViT-B_16.npz --model=ViT-B_16 \
      --format=stablehlo --output=vit_b16.stablehlo
  python -m vit_jax.export --checkpoint=vit-hf/ --format=saved_model --output=vit_sm
  python -m vit_jax.export --checkpoint=/tmp/run/params.npz --format=onnx --output=vit.onnx
  python -m vit_jax.export --checkpoint=/tmp/run --push_to_hub=ORG/NAME

The checkpoint is anything `predict` reads (.npz, timm state dict with --model,
transformers directory, hf-hub:ORG/NAME[@REVISION]). The SavedModel applies the evaluation
preprocessing: a vit_jax workdir's config.json beside the checkpoint gives its pp.eval
recipe, otherwise images are resized to the resolution (predict's).
--hub_dir=DIR writes a transformers-loadable repository (config.json, model.safetensors and
a README.md model card from the run's config.json and metrics.jsonl); --push_to_hub=ORG/NAME
uploads it with huggingface_hub (log in first: hf auth login, or HF_TOKEN).
"""
import sys

from vit_jax.cli import common

if __name__ == '__main__':
  common.exit_on_help(sys.argv, common.define_export_flags)
  # Flag mistakes that need no TensorFlow are one line before it loads.
  from vit_jax.cli import early  # pylint: disable=g-import-not-at-top
  common.check_early('vit_jax.export', sys.argv, common.define_export_flags,
                     early.check_export)
  # Only now: the command's modules load TensorFlow, which --help does not need.
  from vit_jax.cli import export  # pylint: disable=g-import-not-at-top
  export.run()
