"""The base experiment config: every knob the trainer reads, with its default.

Components are chosen by name: `model_name` (vit_jax.models.MODEL_CONFIGS), `dataset`
(vit_jax.data.sources), `objective` with its options in `objectives.<name>`
(vit_jax.train.objectives), `optimizer` with `optimizers.<name>`
(vit_jax.train.optimizers), and the evaluators of `evals.<name>` by their `type`
(vit_jax.evaluators). Experiment files in configs/ start from get_base_config().
"""
import ml_collections

from vit_jax import models
from vit_jax.train import objectives


def get_base_config() -> ml_collections.ConfigDict:
  """Returns the full config schema; experiment configs override fields of it."""
  c = ml_collections.ConfigDict()
  c.seed = 0

  # Model: a preset from vit_jax.models.MODEL_CONFIGS plus overrides of its fields and
  # the options of the model families (vit_jax/models/vit/options.py: each with its
  # default, allowed values and timm name; docs/architecture.md lists them). None (unset)
  # keeps the preset's value; num_classes unset is the dataset's class count.
  c.model_name = 'ViT-B_16'
  c.model = ml_collections.ConfigDict(models.config_section())
  # Start from a checkpoint in the published .npz layout ('' = from scratch):
  # pretrained_path, or else pretrained_dir/<model_name>.npz (the original's
  # semantics, e.g. gs://vit_models/imagenet21k).
  c.pretrained_path = ''
  c.pretrained_dir = ''

  # Data.
  c.dataset = 'cifar10'
  c.data_dir = ml_collections.config_dict.placeholder(str)    # TFDS data dir
  c.manual_dir = ml_collections.config_dict.placeholder(str)  # TFDS manual download dir
  # TFDS split expressions, slicing included ('train[:98%]', 'train[98%:]+validation').
  c.train_split = ''   # '' = the dataset's default
  c.eval_split = ''
  c.pp = ml_collections.ConfigDict({
      # pp strings: ops by name joined by '|' (vit_jax.data.pp_registry), e.g.
      # 'pretrain|randaug(2, 9, 0.5)'; the recipes below are named compositions of ops.
      'train': 'finetune',        # 'pretrain' | 'finetune' | 'finetune_inception' | ops
      'eval': 'central_crop',     # 'central_crop' | 'resize' | deterministic ops
      'crop': 384,                # training/eval resolution
      'resize': 448,              # resize before crop (finetune, central_crop)
      'flip': True,
      'pad': 0,                   # finetune: zero pixels added on every side before the crop (shifts)
      'min_area': 0.05,           # inception crop area range
      'mixup': 0.0,               # mixup alpha; 0 = off
      'cutmix': 0.0,              # CutMix alpha; 0 = off
      'cutmix_switch_prob': 0.5,  # with both on: CutMix's share of the draws (timm)
      'repeats': 1,               # repeated augmentation (DeiT: 3): copies of each image in a row
      'label_smoothing': 0.0,
      'multi_hot': False,         # multi-hot targets (sigmoid losses, ImageNet-21k)
      'num_channels': 3,          # images always reach the model with 3 channels
      'keep_aspect': False,       # resize the shorter side to pp.resize instead of squashing
      # Multi-crop views (DINO), vit_jax.data.multicrop: with global_pp set, each example
      # is 'image' [views, crop, crop, C] (one pp string per global view, pp.train unused)
      # and 'local' [local_crops, local_crop, local_crop, C].
      'multicrop': {
          'global_pp': (),          # () = off; e.g. ('dino_global1', 'dino_global2')
          'local_pp': 'dino_local',
          'local_crops': 0,
          'local_crop': 96,         # pixels, at most pp.crop
          'global_area': (0.4, 1.0),   # crop area ranges of the dino_* compositions
          'local_area': (0.05, 0.4),
      },
  })
  c.shuffle_buffer = 50_000
  c.prefetch = 2                  # batches prefetched to the devices
  c.cache = False                 # keep this process's training records in memory (small data)
  c.cache_decoded_mb = 1024       # with cache: kept decoded if that takes at most this many MB
  # Virtual shards of the training split: the global batch of a step is the same on any
  # number of processes dividing data_shards (must divide batch). Changing it changes the
  # data order, so keep it fixed for a run and its resumptions.
  c.data_shards = 8

  # Batch and schedule (durations in steps).
  c.batch = 512
  c.batch_eval = 512
  c.accum_steps = 1
  c.total_steps = 10_000
  c.warmup_steps = 500
  c.base_lr = 0.03
  # Where decay ends; -1: the original vit_jax's rule, 1e-5 after linear decay, 0 after cosine.
  c.end_lr = 0.0
  c.decay_type = 'cosine'         # 'cosine' | 'linear' | 'constant'

  # Objective: what is learned. 'supervised' = the model's logits against the labels;
  # 'masked_patch' (the ViT paper's self-supervision) and 'mae' (masked autoencoder) read
  # no labels; 'dino' needs pp.multicrop. Only the chosen objective's section is read.
  # Each section is its factory's options and defaults (vit_jax.train.objectives, where
  # they are explained), one per registered objective.
  c.objective = 'supervised'
  c.objectives = ml_collections.ConfigDict(
      {name: objectives.defaults(name) for name in objectives.OBJECTIVES})

  # Optimizer: 'sgd' (momentum), 'adam' (AdamW), or any optax optimizer taking a
  # learning rate ('lion', 'lamb', ...); its keyword arguments are optimizers.<name>.
  c.optimizer = 'sgd'
  c.optimizers = ml_collections.ConfigDict({
      'sgd': {'momentum': 0.9, 'nesterov': False, 'accumulator_dtype': 'float32'},
      'adam': {'b1': 0.9, 'b2': 0.999, 'eps': 1e-8, 'mu_dtype': 'float32'},
  })
  c.weight_decay = 0.0            # decoupled, multiplied by the learning rate; kernels only
  c.weight_decay_end = -1.0       # >= 0: cosine from weight_decay to this (DINO); -1: constant
  # Layer-wise learning-rate decay in (0, 1]: embeddings x decay^(L+1), block i x
  # decay^(L-i), head x 1 (MAE/BEiT fine-tuning); 1 = off.
  c.layer_decay = 1.0
  c.grad_clip_norm = 1.0          # 0 = off
  c.grad_clip_mode = 'global'     # 'global' norm | 'per_tensor' (each tensor's norm, DINO)
  # Weight EMA (timm's --model-ema): ema = d * ema + (1 - d) * params after every step;
  # 0 = off, timm's default 0.9998. Exported as ema_params.npz; with ema_eval the
  # evaluators also score it (metrics with the suffix _ema).
  c.ema_decay = 0.0
  c.ema_eval = True

  # Devices: mesh axis sizes (-1 = all remaining devices) and sharding rules.
  c.mesh = ml_collections.ConfigDict({'data': -1, 'fsdp': 1})
  c.sharding = 'replicate'        # 'replicate' | 'fsdp'
  c.fsdp_min_size = 2**16         # under 'fsdp', arrays with fewer elements stay replicated

  # Logging and checkpoints (in steps; 0 = never, except at the end).
  c.log_every = 50
  c.checkpoint_every = 1000
  c.keep_checkpoints = 3
  # Check each checkpoint's CRC32 manifest before restoring it (a damaged one is moved
  # aside and the previous one used). Costs a read of the checkpoint; off for huge runs.
  c.checkpoint_verify = True
  # Resume even though fields that change the math (vit_jax.train.resume.FIELDS) differ
  # from the workdir's config.json; the change is logged in config_history.jsonl.
  c.allow_config_change = False
  # Evaluators by name (vit_jax.evaluators): `type` (default: the name) and `every`
  # (> 0: every that many steps and at the end; 0: at the end only; < 0: never).
  c.evals = ml_collections.ConfigDict({
      # accuracy_test / loss_test / examples_test on `split` ('' = config.eval_split).
      # A classification eval may name its own data, each '' = the run's: `dataset`,
      # `split`, `pp` (an eval chain), `label_key`, and `real_labels` (ReaL's real.json:
      # label sets, scored as accuracy over the labelled images, examples_ and
      # unlabelled_<name>); e.g. evals.v2 = {'type': 'classification', 'dataset':
      # 'imagenet_v2', 'split': 'test'} (vit_jax/evaluators/classification.py).
      'test': {'type': 'classification', 'every': 1000, 'split': '', 'dataset': '',
               'pp': '', 'label_key': '', 'real_labels': ''},
      # accuracy_minival / loss_minival / examples_minival on a held-out slice of the
      # training data (e.g. 'train[98%:]' beside train_split='train[:98%]'); the
      # fine-tuning recipes turn it on where the original held one out.
      'minival': {'type': 'classification', 'every': -1, 'split': '', 'dataset': '',
                  'pp': '', 'label_key': '', 'real_labels': ''},
      # fewshot/<dataset>_<k>shot: linear probes on frozen features.
      'fewshot': {'type': 'fewshot', 'every': -1,
                  'datasets': ('mnist5k',),  # tuples can be overridden from the CLI
                  'shots': (1, 5, 10, 25),
                  'resolution': 0,           # 0 = the training crop
                  'seeds': 3},
      # knn/<dataset>_top1: DINO's weighted k-NN (k 20, T 0.07) on frozen features, the
      # training split as memory bank and the test split as queries.
      'knn': {'type': 'knn', 'every': -1, 'datasets': ('mnist5k',), 'k': 20,
              'temperature': 0.07, 'resolution': 0},
      # linear/<dataset>_top1: protocol 'lbfgs': softmax regression on the frozen features
      # of the whole training split, weight decay chosen on a held-out 10% of it;
      # 'dino' | 'mae': the papers' streaming linear evaluation (augmented batches, a head
      # per base lr; vit_jax.evaluators.linear_protocols), whose knobs follow: None keeps
      # the protocol's value (dino: batch 1024, 100 epochs; mae: batch 16384, 90 epochs).
      'linear': {'type': 'linear_probe', 'every': -1, 'datasets': ('mnist5k',),
                 'weight_decays': (1e-5, 1e-4, 1e-3, 1e-2, 1e-1), 'steps': 200,
                 'resolution': 0, 'protocol': 'lbfgs', 'seed': 0,
                 **{k: ml_collections.config_dict.placeholder(t) for k, t in (
                     ('batch', int), ('epochs', float), ('warmup_epochs', float),
                     ('schedule', str), ('base_lrs', tuple), ('optimizer', str),
                     ('momentum', float), ('weight_decay', float),
                     ('trust_coefficient', float), ('n_last_blocks', int),
                     ('avgpool', bool), ('batchnorm', bool), ('head_init', str),
                     ('head_std', float), ('min_area', float), ('flip', bool),
                     ('augment', bool), ('eval_resize_ratio', float),
                     ('shuffle_buffer', int))}},
      # Attention rollout and posemb similarity of `count` eval images, to TensorBoard.
      'images': {'type': 'images', 'every': -1, 'count': 4},
  })
  # MFU denominator per device in TFLOP/s; 0 = the benchmark's --peak=auto rule
  # (vit_jax.parallel.peaks.resolve_peak): a matmul measured at start on GPU/CPU, the
  # datasheet on TPU. So the trainer's mfu compares with the benchmark's.
  c.peak_tflops = 0.0
  return c
