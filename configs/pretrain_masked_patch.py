"""Self-supervised pre-training by masked patch prediction (the ViT paper's section 4.6).

  python -m vit_jax.main --config=configs/pretrain_masked_patch.py:b16,imagenet2012 \
      --workdir=DIR

Argument: MODEL,DATASET (a ViT preset or short name, any dataset vit_jax.data.sources
knows, folder:ROOT included: labels are not read). The paper's recipe (its B.1.2): 50% of
the patch embeddings corrupted (80% a learnable [mask] embedding, 10% another patch's,
10% unchanged), each corrupted patch's 3-bit mean colour (512 classes) predicted from its
own output token; Adam lr 2e-4, 10k warm-up steps, cosine decay, batch 4096, 1M steps.
Other targets: --config.objectives.masked_patch.target=downsized (4x4, 3-bit colours) or
pixels (L2 on the normalised patch). Few-shot probes on DATASET's labels every 10k steps;
params.npz is the ViT in the published layout, so configs/vit.py fine-tunes it
(--config.pretrained_path=DIR/params.npz).
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 'b16,imagenet2012'):
  """Returns the masked-patch-prediction config for 'MODEL,DATASET'."""
  (model, *rest), _ = recipes.split_arg(arg, options=())
  c = base.get_base_config()
  c.model_name = recipes.model_name(model)
  recipes.apply_masked_patch_pretrain(c, rest[0] if rest else 'imagenet2012')
  return c
