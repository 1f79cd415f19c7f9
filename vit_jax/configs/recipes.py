"""The paper's two recipes and the names shared by the experiment configs."""
import ml_collections

from vit_jax import models
from vit_jax.data import catalog

# Short names accepted on the command line (vit.py:b16,cifar10) -> presets.
MODEL_SHORT_NAMES = {
    'ti16': 'ViT-Ti_16', 's16': 'ViT-S_16', 's32': 'ViT-S_32', 'b8': 'ViT-B_8',
    'b16': 'ViT-B_16', 'b32': 'ViT-B_32', 'l16': 'ViT-L_16', 'l32': 'ViT-L_32',
    'h14': 'ViT-H_14', 'r_ti16': 'R+ViT-Ti_16', 'r26_s32': 'R26+ViT-S_32',
    'r26_b32': 'R26+ViT-B_32', 'r50_b16': 'R50+ViT-B_16',
    'r50_l32': 'R50+ViT-L_32', 'mixer_b16': 'Mixer-B_16',
    'mixer_b32': 'Mixer-B_32', 'mixer_l16': 'Mixer-L_16',
}

# Fine-tuning steps per dataset (the paper's Table 4 schedule lengths).
FINETUNE_STEPS = {
    'cifar10': 10_000, 'cifar100': 10_000, 'imagenet2012': 20_000,
    'oxford_iiit_pet': 500, 'oxford_flowers102': 500,
}


def model_name(arg: str) -> str:
  """A preset name from a short name (b16) or the preset name itself."""
  name = MODEL_SHORT_NAMES.get(arg.lower(), arg)
  models.get_model_config(name)  # one-line error for unknown names
  return name


def apply_finetune(c: ml_collections.ConfigDict, dataset: str) -> None:
  """SGD momentum .9, batch 512, 500 warm-up steps, cosine, clip 1, no decay, 384px."""
  c.dataset = dataset
  c.optimizer = 'sgd'
  c.optimizers.sgd.momentum = 0.9
  c.batch = 512
  c.batch_eval = 512
  c.base_lr = 0.03
  c.end_lr = 0.0
  c.warmup_steps = 500
  c.decay_type = 'cosine'
  c.grad_clip_norm = 1.0
  c.weight_decay = 0.0
  c.total_steps = FINETUNE_STEPS.get(dataset, 10_000)
  if c.total_steps <= c.warmup_steps:
    c.warmup_steps = c.total_steps // 10
  c.objectives.supervised.loss = 'softmax_xent'
  c.pp.train = 'finetune'
  c.pp.crop = 384
  c.pp.resize = 448
  c.pp.eval = 'resize'  # the original resized eval images to the crop size
  c.evals.test.every = 1000
  c.checkpoint_every = 1000


def apply_pretrain(c: ml_collections.ConfigDict, dataset: str,
                   model: str) -> None:
  """Adam .9/.999, batch 4096, 10k warm-up, linear decay to 1e-5, wd .1, dropout .1."""
  c.dataset = dataset
  c.optimizer = 'adam'
  c.optimizers.adam.b1, c.optimizers.adam.b2 = 0.9, 0.999
  c.batch = 4096
  c.batch_eval = 4096
  # ViT-B and smaller: 1e-3; L and H use the paper's lower rates.
  c.base_lr = 4e-4 if any(s in model for s in ('-L_', '-H_')) else 1e-3
  c.end_lr = 1e-5
  c.warmup_steps = 10_000
  c.decay_type = 'linear'
  c.weight_decay = 0.1
  c.grad_clip_norm = 1.0
  c.model.dropout_rate = 0.1
  c.model.representation_size = _width(model)
  c.pp.train = 'pretrain'
  c.pp.crop = 224
  c.pp.resize = 256
  c.pp.eval = 'central_crop'
  epochs = {'imagenet2012': 300, 'imagenet21k': 90}.get(dataset)
  c.total_steps = (epochs * catalog.DATASETS[dataset].num_train // c.batch if epochs
                   else 100_000)
  if dataset == 'imagenet21k':
    # Multi-label data: sigmoid loss, heads start at a low prior.
    c.objectives.supervised.loss = 'sigmoid_xent'
    c.pp.multi_hot = True
    c.model.head_bias_init = -10.0
  c.evals.test.every = 5000
  c.checkpoint_every = 2000


def _width(model: str) -> int:
  cfg = models.get_model_config(model)
  return models.family_of(cfg).width(cfg)
