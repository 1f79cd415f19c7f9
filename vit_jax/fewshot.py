r"""Probes of a checkpoint's frozen features: few-shot, k-NN and a linear probe.

  python -m vit_jax.fewshot --model=ViT-B_16 --checkpoint=params.npz \
      --datasets=mnist5k,digits --shots=1,5,10,25 --seeds=3
  python -m vit_jax.fewshot --checkpoint=/tmp/ssl_mae --probes=fewshot,knn,linear_probe
  python -m vit_jax.fewshot --checkpoint=/tmp/ssl_dino --probes=linear_probe \
      --linear_protocol=dino --linear_epochs=10 --linear_batch=256

--probes picks the evaluators (vit_jax.evaluators: fewshot, knn, linear_probe); each
prints its metrics (fewshot/<dataset>_<k>shot, knn/<dataset>_top1,
linear/<dataset>_top1). --linear_protocol picks the linear probe: lbfgs (in memory),
dino or mae (the papers' streaming protocols, each base lr's head beside the best:
linear/<dataset>_top1_lr<lr>). --random_init=SEED probes the same architecture from random
weights (a baseline).
"""
import sys

from vit_jax.cli import common

if __name__ == '__main__':
  common.exit_on_help(sys.argv, common.define_fewshot_flags)
  # Flag mistakes that need no TensorFlow are one line before it loads.
  from vit_jax.cli import early  # pylint: disable=g-import-not-at-top
  common.check_early('vit_jax.fewshot', sys.argv, common.define_fewshot_flags,
                     early.check_fewshot)
  # Only now: the command's modules load TensorFlow, which --help does not need.
  from vit_jax.cli import fewshot  # pylint: disable=g-import-not-at-top
  fewshot.run()
