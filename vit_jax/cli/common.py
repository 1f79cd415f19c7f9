"""What the checkpoint commands share: the --model/--checkpoint flags."""
from absl import flags


def define_checkpoint_flags() -> None:
  """--model and --checkpoint, shared by the predict/visualize/fewshot commands."""
  flags.DEFINE_string('model', None, 'Model preset, e.g. ViT-B_16; default: from '
                      'config.json beside the checkpoint (a vit_jax workdir).')
  flags.DEFINE_string('checkpoint', None, 'Checkpoint: .npz (local or gs://), '
                      'timm .safetensors/.pth, a transformers directory or a vit_jax '
                      'work directory (its params.npz).',
                      required=True)
  flags.DEFINE_integer('num_heads', None, 'Attention heads of a timm state dict '
                       'whose size has no preset (a timm file does not record them).')
