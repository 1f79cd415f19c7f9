r"""What self-supervised ViTs learn (Park et al., ICLR 2023) for one or two checkpoints.

  python -m vit_jax.analyze --checkpoint=/tmp/ssl_dino --checkpoint=/tmp/ssl_mae \
      --dataset=mnist5k --out=/tmp/analysis

Writes into --out labelled PNG figures, one curve per checkpoint, and their numbers:
  attention_distance.png  mean attention distance (pixels) per layer and head
  nmi.png                 normalised mutual information between queries and keys
  fourier.png             Δ log amplitude of each layer's feature maps vs frequency,
                          and at the highest frequency against depth
  layer_accuracy.png      k-NN and linear-probe top-1 of every layer's features
  analysis.json           every number above, per checkpoint
Analyses read patch tokens only (class/register tokens dropped); layer features are
the class token (or the patch tokens' mean: --pooling=patches). --dataset accepts
'name|train_split|test_split' (e.g. 'mnist5k|train[:1000]|test') to probe fewer
examples; default: the dataset of the first checkpoint's work directory.
--random_init=SEED adds the control, the first checkpoint's architecture freshly
initialised with SEED, as one more curve ('random init (seed SEED)').
"""
import sys

from vit_jax.cli import common

if __name__ == '__main__':
  common.exit_on_help(sys.argv, common.define_analyze_flags)
  # Flag mistakes that need no TensorFlow are one line before it loads.
  from vit_jax.cli import early  # pylint: disable=g-import-not-at-top
  common.check_early('vit_jax.analyze', sys.argv, common.define_analyze_flags,
                     early.check_analyze)
  # Only now: the command's modules load TensorFlow, which --help does not need.
  from vit_jax.cli import analyze  # pylint: disable=g-import-not-at-top
  analyze.run()
