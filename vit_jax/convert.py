r"""Converts checkpoints between the published .npz layout, timm and Hugging Face transformers.

  python -m vit_jax.convert --from=vit-hf/ --to=ViT-B_16.npz
  python -m vit_jax.convert --from=ViT-B_16.npz --to=vit_b16.safetensors
  python -m vit_jax.convert --from=vit_b16.safetensors --to=vit-hf/ --model=ViT-B_16

Formats are read off the paths: `.npz` (ours), `.safetensors` / `.pth` / `.bin`
(timm state dict; transformers weights when their keys are transformers'), a
directory with `config.json` (transformers ViTModel / ViTForImageClassification);
--to_format=npz|timm|hf where the output path does not say. timm state dicts do
not record the number of heads: name the model (--model=ViT-B_16 or
--model=vit_base_patch16_224) or pass --num_heads.
"""
from vit_jax.cli import convert

if __name__ == '__main__':
  convert.run()
