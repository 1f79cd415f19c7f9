"""The commands' flags, in a module light enough for --help to answer before TensorFlow loads.

The entry modules of the commands whose work needs TensorFlow (vit_jax/fewshot.py, ...)
call exit_on_help with these definitions before they import the command itself.
"""
from typing import Callable

from absl import flags

from vit_jax import errors
from vit_jax.train import objectives

# vit_jax.serving.FORMATS, which loads TensorFlow on import (test_newcomer checks they agree).
EXPORT_FORMATS = ('stablehlo', 'saved_model', 'onnx')


def exit_on_help(argv: list[str], define_flags: Callable[[], None]) -> None:
  """Prints a command's help and exits 0 when argv asks for it (vit_jax.errors.exit_on_help)."""
  errors.exit_on_help(argv, define_flags)


def check_early(prog: str, argv: list[str], define_flags: Callable[[], None],
                check: Callable[[flags.FlagValues], None]) -> None:
  """Checks flags before TensorFlow loads: one line, exit 2 on a mistake (errors.check_early)."""
  errors.check_early(prog, argv, define_flags, check)


def define_checkpoint_flags() -> None:
  """--model and --checkpoint, shared by the predict/visualize/fewshot commands."""
  flags.DEFINE_string('model', None, 'Model preset, e.g. ViT-B_16; default: from '
                      'config.json beside the checkpoint (a vit_jax workdir).')
  flags.DEFINE_string('checkpoint', None, 'Checkpoint: .npz (local or gs://), '
                      'timm .safetensors/.pth, a transformers directory, a vit_jax '
                      'work directory (its params.npz) or hf-hub:ORG/NAME[@REVISION].',
                      required=True)
  flags.DEFINE_integer('num_heads', None, 'Attention heads of a timm state dict '
                       'whose size has no preset (a timm file does not record them).')


def define_fewshot_flags() -> None:
  """The flags of `python -m vit_jax.fewshot`."""
  define_checkpoint_flags()
  flags.DEFINE_list('datasets', ['mnist5k'], "TFDS names, or 'name|train|test'.")
  flags.DEFINE_list('shots', ['1', '5', '10', '25'], 'Examples per class.')
  flags.DEFINE_integer('seeds', 3, 'Random draws of the shots per dataset.')
  flags.DEFINE_integer('resolution', None, "Input resolution; default: the "
                       "checkpoint's.")
  flags.DEFINE_integer('batch', 0, 'Batch size; 0: 8 per device.')
  flags.DEFINE_string('data_dir', None, "TFDS data dir; default: the run's, for a vit_jax "
                      'work directory.')
  flags.DEFINE_list('probes', ['fewshot'], 'Probes to run: fewshot, knn, linear_probe.')
  # Defaults of vit_jax.evaluators.knn / linear_probe, spelled here so --help loads no
  # TensorFlow (tests/test_knn.py checks they agree).
  flags.DEFINE_integer('knn_k', 20, 'Neighbours of the k-NN probe.')
  flags.DEFINE_float('knn_temperature', 0.07,
                     'Temperature of the k-NN vote weights exp(similarity / T).')
  flags.DEFINE_list('weight_decays', ['1e-05', '0.0001', '0.001', '0.01', '0.1'],
                    'Weight decays the linear probe chooses from (on held-out '
                    'training examples).')
  # The streaming protocols' own defaults live in vit_jax.evaluators.linear_protocols;
  # 0, empty or unset keeps them.
  flags.DEFINE_string('linear_protocol', 'lbfgs', 'Linear probe protocol: lbfgs (full-'
                      'batch L-BFGS on in-memory features), dino or mae (the papers\' '
                      'streaming linear evaluation on augmented batches).')
  flags.DEFINE_integer('linear_batch', 0, 'Batch of the dino/mae probe; 0: the '
                       "protocol's (1024, 16384).")
  flags.DEFINE_float('linear_epochs', 0, "Epochs of the dino/mae probe; 0: the "
                     "protocol's (100, 90).")
  flags.DEFINE_float('linear_warmup_epochs', -1, "Warm-up epochs of the dino/mae probe; "
                     "-1: the protocol's (0, 10).")
  flags.DEFINE_list('linear_lrs', [], 'Base learning rates of the dino/mae probe (lr = '
                    "base * batch / 256), one head each; empty: the protocol's.")
  flags.DEFINE_integer('linear_n_last_blocks', 0, 'Class tokens of the last N blocks '
                       "concatenated (dino/mae); 0: the protocol's (4, 1).")
  flags.DEFINE_bool('linear_avgpool', None, 'Append the mean of the last block\'s patch '
                    "tokens (dino/mae); unset: the protocol's (False).")
  flags.DEFINE_float('linear_min_area', 0, 'Smallest crop area (fraction of the image) '
                     "of the dino/mae training crops; 0: the protocol's (0.08).")
  flags.DEFINE_bool('linear_augment', None, 'Train the dino/mae probe on augmented crops '
                    "(random-resized crop + flip); unset: the protocol's (True).")
  flags.DEFINE_integer('random_init', None, "Probe the checkpoint's architecture "
                       'freshly initialised with this seed instead of its weights: '
                       'the baseline a pre-training run should beat.')


def define_analyze_flags() -> None:
  """The flags of `python -m vit_jax.analyze`."""
  flags.DEFINE_multi_string('checkpoint', None, 'A checkpoint (as for vit_jax.predict: '
                            '.npz, timm, transformers, a vit_jax work directory, '
                            'hf-hub:ORG/NAME); give it twice to compare two.', required=True)
  flags.DEFINE_multi_string('model', None, 'Model preset per checkpoint (one for all, '
                            'or one each); default: from the work directory.')
  flags.DEFINE_multi_string('label', None, 'Legend name per checkpoint; default: the '
                            'work directory or file name.')
  flags.DEFINE_integer('num_heads', None, 'Attention heads of a timm state dict whose '
                       'size has no preset.')
  flags.DEFINE_string('dataset', None, "Dataset, or 'name|train_split|test_split'; "
                      "default: the first checkpoint's run's.")
  flags.DEFINE_string('data_dir', None, 'TFDS data dir.')
  flags.DEFINE_string('out', None, 'Directory for the figures and analysis.json.',
                      required=True)
  flags.DEFINE_integer('images', 64, 'Test images for the attention and Fourier '
                       'analyses.')
  flags.DEFINE_enum('pooling', 'auto', ['auto', 'token', 'patches'], 'Layer features: '
                    'auto (class token if the model has one), token, or patches '
                    '(mean of the patch tokens).')
  flags.DEFINE_list('probes', ['knn', 'linear'], 'Per-layer probes: knn, '
                    'linear (empty: none).')
  flags.DEFINE_integer('batch', 64, 'Batch size.')
  flags.DEFINE_integer('random_init', None, "Also analyse the first checkpoint's "
                       'architecture freshly initialised with this seed, as one more '
                       'curve: the control the pre-trained models are read against.')


def define_export_flags() -> None:
  """The flags of `python -m vit_jax.export`."""
  define_checkpoint_flags()
  flags.DEFINE_enum('format', None, list(EXPORT_FORMATS), 'Serving format (with --output).')
  flags.DEFINE_string('output', None, 'File (stablehlo, onnx) or directory '
                      '(saved_model) to write.')
  flags.DEFINE_string('hub_dir', None, 'Write a transformers-loadable Hub repository folder '
                      'here: config.json, model.safetensors and a README.md model card made '
                      "from the work directory's config.json and metrics.jsonl.")
  flags.DEFINE_string('push_to_hub', None, 'ORG/NAME: upload that repository folder to the '
                      'Hugging Face Hub (log in first: hf auth login, or HF_TOKEN).')
  flags.DEFINE_bool('hub_private', False, 'Create the --push_to_hub repository private.')
  flags.DEFINE_integer('resolution', None, "Input resolution; default: the "
                       "checkpoint's.")


def define_evaluate_flags() -> None:
  """The flags of `python -m vit_jax.evaluate`."""
  define_checkpoint_flags()
  flags.DEFINE_string('dataset', None, 'Dataset as in config.dataset (mnist5k, cifar10, '
                      "folder:ROOT, tfds:NAME, ...); default: the run's, for a "
                      'vit_jax work directory.')
  flags.DEFINE_string('split', None, "TFDS split expression (test, 'train[98%:]'); "
                      "default: the run's eval_split, else the dataset's evaluation split.")
  flags.DEFINE_string('data_dir', None, "TFDS data dir; default: the run's.")
  flags.DEFINE_integer('resolution', None, "Input resolution; default: the "
                       "checkpoint's.")
  flags.DEFINE_integer('batch', 0, 'Batch size; 0: 32 per device.')
  flags.DEFINE_enum('loss', None, list(objectives.LOSSES),
                    "Loss to report; default: the run's, else softmax_xent.")
  flags.DEFINE_string('label_key', None, "Label feature to score against (e.g. "
                      "'original_label' of imagenet2012_real); default: the dataset's.")
  flags.DEFINE_string('real_labels', None, "ReaL labels (the published real.json: one "
                      'list of label ids per validation image, in file order): report '
                      'the ReaL accuracy over the images with labels (as timm '
                      "validate.py's --real-labels).")
