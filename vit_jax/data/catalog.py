"""The datasets vit_jax knows by name: splits, sizes, classes and label names, without TFDS.

`DATASETS` is the table behind `config.dataset` for the named datasets (the prefix forms
`synthetic/...`, `folder:...` and `tfds:...` are resolved by vit_jax.data.sources, which
builds and prepares the TFDS builders). Recipes read sizes from here, e.g. the epochs ->
steps arithmetic of the pre-training recipes.
"""
import dataclasses
import difflib
import os
from typing import Any

# Label names TFDS only knows once the data is prepared, in label-id order.
_CIFAR10_NAMES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse',
                  'ship', 'truck')
_CIFAR100_NAMES = tuple("""
apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus
butterfly camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab
crocodile cup dinosaur dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard
lamp lawn_mower leopard lion lizard lobster man maple_tree motorcycle mountain mouse mushroom
oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine
possum rabbit raccoon ray road rocket rose sea seal shark shrew skunk skyscraper snail snake
spider squirrel streetcar sunflower sweet_pepper table tank telephone television tiger tractor
train trout tulip turtle wardrobe whale willow_tree wolf woman worm""".split())


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """How to read one named dataset; sizes are of the default splits, None when unknown."""
  tfds_name: str
  train_split: str            # '' = for evaluation only
  eval_split: str
  num_classes: int
  num_train: int | None = None
  num_eval: int | None = None
  label_key: str = 'label'
  label_fn: str = ''          # a preprocess.LABEL_FNS name deriving the label from features
  image_key: str = 'image'
  image_scale: int = 1        # multiplies decoded pixels (dsprites stores 0/1)
  manual_files: tuple[str, ...] = ()
  label_names: tuple[str, ...] = ()
  builder_config: Any = None  # a tfds.core.BuilderConfig for parametrised builders
  local: bool = False         # prepared from local files: always prepare on first use


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """What the trainer needs to know about the configured dataset and splits."""
  name: str
  num_classes: int
  train_split: str
  eval_split: str
  num_train: int
  num_eval: int
  label_names: list[str]
  skipped_files: int = 0      # unreadable images left out of an image folder


def _vtab(tfds_name, train, test, num_classes, num_test, **kw) -> DatasetSpec:
  return DatasetSpec(tfds_name, train, test, num_classes, 1000, num_test, **kw)


_VTAB = {
    # Natural.
    'caltech101': _vtab('caltech101', 'train[:800]+train[2754:2954]', 'test', 102, 6084),
    'cifar100': _vtab('cifar100', 'train[:800]+train[45000:45200]', 'test', 100, 10000,
                      label_names=_CIFAR100_NAMES),
    'dtd': _vtab('dtd', 'train[:800]+validation[:200]', 'test', 47, 1880),
    'oxford_flowers102': _vtab('oxford_flowers102', 'train[:800]+validation[:200]',
                               'test', 102, 6149),
    'oxford_iiit_pet': _vtab('oxford_iiit_pet', 'train[:800]+train[2944:3144]', 'test',
                             37, 3669),
    'svhn': _vtab('svhn_cropped', 'train[:800]+train[65931:66131]', 'test', 10, 26032),
    'sun397': _vtab('sun397/tfds', 'train[:800]+validation[:200]', 'test', 397, 21750),
    # Specialized.
    'patch_camelyon': _vtab('patch_camelyon', 'train[:800]+validation[:200]', 'test', 2,
                            32768),
    'eurosat': _vtab('eurosat/rgb', 'train[:800]+train[16200:16400]', 'train[21600:]',
                     10, 5400),
    'resisc45': _vtab('resisc45', 'train[:800]+train[18900:19100]', 'train[25200:]', 45,
                      6300),
    'diabetic_retinopathy': _vtab(
        'diabetic_retinopathy_detection/btgraham-300', 'train[:800]+validation[:200]',
        'test', 5, 42670),
    # Structured.
    'clevr_count': _vtab('clevr', 'train[:800]+train[63000:63200]', 'validation', 8,
                         15000, label_fn='clevr_count'),
    'clevr_distance': _vtab('clevr', 'train[:800]+train[63000:63200]', 'validation', 6,
                            15000, label_fn='clevr_distance'),
    'dmlab': _vtab('dmlab:2.0.1', 'train[:800]+validation[:200]', 'test', 6, 22735),
    'kitti_distance': _vtab('kitti:3.1.0', 'train[:800]+validation[:200]', 'test', 4, 711,
                            label_fn='kitti_distance'),
    'dsprites_location': _vtab('dsprites', 'train[:800]+train[589824:590024]',
                               'train[663552:]', 16, 73728,
                               label_fn='dsprites_location', image_scale=255),
    'dsprites_orientation': _vtab('dsprites', 'train[:800]+train[589824:590024]',
                                  'train[663552:]', 16, 73728,
                                  label_fn='dsprites_orientation', image_scale=255),
    'smallnorb_azimuth': _vtab('smallnorb', 'train[:800]+test[:200]', 'test[50%:]', 18,
                               12150, label_key='label_azimuth'),
    'smallnorb_elevation': _vtab('smallnorb', 'train[:800]+test[:200]', 'test[50%:]', 9,
                                 12150, label_key='label_elevation'),
}
# VTAB-1k's three groups (the ViT paper's Table 9 order), and 'demo': small tasks in the same
# split layout (train800 + val200 = the train split, a test split) on the embedded digits,
# for trying the runner (python -m vit_jax.vtab) on a CPU; kept out of 'all'.
VTAB_GROUPS = {
    'natural': ('caltech101', 'cifar100', 'dtd', 'oxford_flowers102', 'oxford_iiit_pet',
                'svhn', 'sun397'),
    'specialized': ('patch_camelyon', 'eurosat', 'resisc45', 'diabetic_retinopathy'),
    'structured': ('clevr_count', 'clevr_distance', 'dmlab', 'kitti_distance',
                   'dsprites_location', 'dsprites_orientation', 'smallnorb_azimuth',
                   'smallnorb_elevation'),
    'demo': ('demo_mnist5k', 'demo_digits'),
}
_VTAB_DEMO = {
    'mnist5k': _vtab('mnist5k', 'train[:800]+train[800:1000]', 'test', 10, 1000,
                     local=True),
    'digits': _vtab('digits', 'train[:800]+train[800:1000]', 'test', 10, 360, local=True),
}
# Task -> its dataset name: vtab/<task>, and vtab_demo/<name> for the demo tasks.
VTAB_DATASETS = {**{task: f'vtab/{task}' for task in _VTAB},
                 **{f'demo_{name}': f'vtab_demo/{name}' for name in _VTAB_DEMO}}

DATASETS = {
    'cifar10': DatasetSpec('cifar10', 'train', 'test', 10, 50000, 10000,
                           label_names=_CIFAR10_NAMES),
    'cifar100': DatasetSpec('cifar100', 'train', 'test', 100, 50000, 10000,
                            label_names=_CIFAR100_NAMES),
    'imagenet2012': DatasetSpec(
        'imagenet2012', 'train', 'validation', 1000, 1281167, 50000,
        manual_files=('ILSVRC2012_img_train.tar', 'ILSVRC2012_img_val.tar')),
    # Sizes of the fall11 release (14,197,122 images, 21,843 synsets).
    'imagenet21k': DatasetSpec('imagenet21k', 'full[51200:]', 'full[:25600]', 21843,
                               14197122 - 51200, 25600, manual_files=('imagenet21k',)),
    'oxford_iiit_pet': DatasetSpec('oxford_iiit_pet', 'train', 'test', 37, 3680, 3669),
    'oxford_flowers102': DatasetSpec('oxford_flowers102', 'train+validation', 'test', 102,
                                     2040, 6149),
    # tf_flowers has one split of 3,670 images; the last 370 are held out for evaluation.
    'tf_flowers': DatasetSpec('tf_flowers', 'train[:3300]', 'train[3300:]', 5, 3300, 370),
    # Evaluation only (no training split): scored beside imagenet2012 by config.evals.
    # ImageNet ReaL: the 50,000 validation images with ReaL's label sets ('real_label', a
    # Sequence of ClassLabel, some empty; 'original_label' holds the original label).
    'imagenet2012_real': DatasetSpec(
        'imagenet2012_real', '', 'validation', 1000, 0, 50000, label_key='real_label',
        manual_files=('ILSVRC2012_img_val.tar',)),
    # ImageNet-v2 (matched-frequency): 10,000 new test images of the 1,000 classes.
    'imagenet_v2': DatasetSpec('imagenet_v2', '', 'test', 1000, 0, 10000),
    'mnist5k': DatasetSpec('mnist5k', 'train', 'test', 10, 4000, 1000, local=True),
    'digits': DatasetSpec('digits', 'train', 'test', 10, 1437, 360, local=True),
    **{f'vtab/{task}': spec for task, spec in _VTAB.items()},
    **{f'vtab_demo/{name}': spec for name, spec in _VTAB_DEMO.items()},
}
# The prefix forms of dataset names: the prefix, and how known_names spells the form.
_PREFIXES = {'synthetic/': 'synthetic[/<config>]', 'folder:': 'folder:<ROOT>',
             'tfds:': 'tfds:<name>'}


def known_names() -> list[str]:
  """Returns every accepted dataset name (prefix forms spelled with <...>)."""
  return sorted(DATASETS) + list(_PREFIXES.values())


def check_name(name: str) -> None:
  """A ValueError with the close matches unless `name` is a named dataset or a prefix form."""
  if name in DATASETS or name == 'synthetic' or name.startswith(tuple(_PREFIXES)):
    return
  close = difflib.get_close_matches(name, list(DATASETS), n=3, cutoff=0.6)
  hint = f' Did you mean {", ".join(map(repr, close))}?' if close else ''
  raise ValueError(f'Unknown dataset {name!r}.{hint} Known: {", ".join(known_names())}')


def check_manual_files(spec: DatasetSpec, name: str, manual_dir: str, where: str = '') -> None:
  """One line naming the manually downloaded files of `spec` that `manual_dir` lacks."""
  missing = [f for f in spec.manual_files if not os.path.exists(os.path.join(manual_dir, f))]
  if missing:
    raise FileNotFoundError(
        f'{name} needs the manually downloaded {", ".join(missing)} in {manual_dir}{where}; '
        'download them there, or set --config.manual_dir to where they are.')
