r"""Converts checkpoints between the published .npz layout, timm and Hugging Face transformers.

  python -m vit_jax.convert --from=vit-hf/ --to=ViT-B_16.npz
  python -m vit_jax.convert --from=ViT-B_16.npz --to=vit_b16.safetensors
  python -m vit_jax.convert --from=vit_b16.safetensors --to=vit-hf/ --model=ViT-B_16

Formats are read off the paths: `.npz` (ours), `.safetensors` / `.pth` / `.bin`
(timm state dict; transformers weights when their keys are transformers'), a
directory with `config.json` (transformers ViT, ViTMAE, DeiT, DINOv2 (with
registers), CLIP and SigLIP vision models); --to_format=npz|timm|hf where the
output path does not say. timm state dicts do not record the number of heads,
the activation or the LayerNorm epsilon: name the model (--model=ViT-B_16,
--model=vit_small_patch14_dinov2, --model=vit_base_patch16_siglip_224) or pass
--num_heads (and --activation / --layer_norm_epsilon where they are not timm's
defaults, exact GELU and 1e-6).
"""
from vit_jax.cli import convert

if __name__ == '__main__':
  convert.run()
