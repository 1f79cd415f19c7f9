"""Datasets by name: what the trainer needs to know about each, and how to get its TFDS builder.

`config.dataset` names one of:
  cifar10, cifar100, imagenet2012, imagenet21k, oxford_iiit_pet, oxford_flowers102, tf_flowers,
  mnist5k, digits                   embedded real digits, no download (vit_jax.data)
  synthetic[/<config>]              generated images (vit_jax.data.synthetic)
  vtab/<task>                       a VTAB-1k task: trains on its train800val200 split
  folder:<ROOT>                     your images in ROOT/{train,test}/<CLASS>/*.{jpg,jpeg,png}
                                    (evaluates on test/, else validation/ or val/)
  tfds:<name>[:<version>]           any other TFDS image classification dataset with
                                    'image' and 'label' features (splits default to train/test)

Manual downloads: imagenet2012 needs ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar in
`config.manual_dir` (default <data_dir>/downloads/manual); imagenet21k needs its synsets
extracted as <manual_dir>/imagenet21k/<wnid>/*.JPEG (see vit_jax/data/image_folder.py).

Sizes, class counts and label names come from the prepared TFDS dataset when it is there;
before preparation a table of known values answers for the default splits, so the info of
e.g. cifar10 is known without a download. Embedded datasets and folders are always prepared
on first use (seconds), since that needs no network.
"""
import contextlib
import dataclasses
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
  train_split: str
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
    'mnist5k': DatasetSpec('mnist5k', 'train', 'test', 10, 4000, 1000, local=True),
    'digits': DatasetSpec('digits', 'train', 'test', 10, 1437, 360, local=True),
    **{f'vtab/{task}': spec for task, spec in _VTAB.items()},
}
_PREFIXES = ('synthetic[/<config>]', 'folder:<ROOT>', 'tfds:<name>')


def known_names() -> list[str]:
  """Returns every accepted dataset name (prefix forms spelled with <...>)."""
  return sorted(DATASETS) + list(_PREFIXES)


def _tfds():
  # Imported here: this module is also read on machines that never build a pipeline.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  import vit_jax.data  # pylint: disable=g-import-not-at-top,unused-import  # registers builders
  return tfds


def resolve(name: str) -> DatasetSpec:
  """Returns the DatasetSpec of a dataset name; unknown names raise a ValueError."""
  if name in DATASETS:
    return DATASETS[name]
  if name == 'synthetic' or name.startswith('synthetic/'):
    _tfds()
    from vit_jax.data import synthetic  # pylint: disable=g-import-not-at-top
    cfg = synthetic.config_from_name(name.partition('/')[2] or 'small')
    return DatasetSpec('synthetic', 'train', 'test', cfg.num_classes, cfg.num_train,
                       cfg.num_test, builder_config=cfg, local=True)
  if name.startswith('folder:'):
    _tfds()
    from vit_jax.data import image_folder  # pylint: disable=g-import-not-at-top
    cfg = image_folder.config_for_root(name[len('folder:'):])
    eval_split = next((s for s in ('test', 'validation', 'val') if s in cfg.files), '')
    return DatasetSpec('image_folder', 'train', eval_split, len(cfg.class_names),
                       label_names=cfg.class_names, builder_config=cfg, local=True)
  if name.startswith('tfds:'):
    return DatasetSpec(name[len('tfds:'):], 'train', 'test', -1)
  raise ValueError(f'Unknown dataset {name!r}; known: {", ".join(known_names())}')


def make_builder(spec: DatasetSpec, data_dir: str | None):
  """Returns the TFDS builder of a spec (not prepared)."""
  tfds = _tfds()
  kwargs = {'data_dir': data_dir}
  if spec.builder_config is not None:
    kwargs['config'] = spec.builder_config
  try:
    return tfds.builder(spec.tfds_name, **kwargs)
  except tfds.core.registered.DatasetNotFoundError as e:
    raise ValueError(f'TFDS has no dataset {spec.tfds_name!r} '
                     f'(known here: {", ".join(known_names())})') from e


def is_prepared(builder) -> bool:
  """Whether the builder's TFRecords and dataset_info.json exist in its data dir."""
  return bool(builder.info.splits) and builder.data_path.exists()


@contextlib.contextmanager
def _lock(data_dir_root: str, name: str):
  """Serialises preparation among processes sharing a local data dir."""
  if '://' in data_dir_root:
    yield  # Remote file systems have no flock; prepare such data dirs ahead of time.
    return
  import fcntl  # pylint: disable=g-import-not-at-top
  os.makedirs(data_dir_root, exist_ok=True)
  path = os.path.join(data_dir_root, f'.{name.replace("/", "_")}.lock')
  with open(path, 'w') as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def _check_manual_files(spec: DatasetSpec, manual_dir: str) -> None:
  missing = [f for f in spec.manual_files if not os.path.exists(os.path.join(manual_dir, f))]
  if missing:
    raise FileNotFoundError(
        f'{spec.tfds_name} needs manually downloaded {", ".join(missing)} in {manual_dir}; '
        'download them there (or set config.manual_dir to where they are)')


def prepare(spec: DatasetSpec, data_dir: str | None, manual_dir: str | None = None):
  """Prepares the dataset into data_dir if it is not there yet; returns a fresh builder."""
  tfds = _tfds()
  builder = make_builder(spec, data_dir)
  if is_prepared(builder):
    return builder
  root = str(builder.data_dir_root)
  manual_dir = manual_dir or os.path.join(root, 'downloads', 'manual')
  _check_manual_files(spec, manual_dir)
  with _lock(root, f'{builder.name}_{builder.builder_config.name if builder.builder_config else ""}'):
    builder = make_builder(spec, data_dir)  # Another process may have prepared it meanwhile.
    if not is_prepared(builder):
      try:
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
      except Exception as e:  # pylint: disable=broad-except
        # TFDS surfaces download, checksum and manual-dir problems as many error types;
        # each becomes one line naming the dataset and the data dir.
        if isinstance(e, FileNotFoundError) and spec.local:
          raise
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RuntimeError(
            f'Could not prepare {spec.tfds_name} into {root}: {first_line}. '
            f'Prepare it where the network reaches its source (tfds build '
            f'{spec.tfds_name} --data_dir={root}) or point config.data_dir at a prepared '
            'copy') from e
  return make_builder(spec, data_dir)


def split_size(builder, split: str) -> int:
  """Returns the number of examples of a split expression such as 'train[:800]+test'."""
  try:
    return builder.info.splits[split].num_examples
  except (KeyError, ValueError, AssertionError) as e:
    raise ValueError(
        f'Bad split {split!r} for {builder.name}: {e}; available splits: '
        f'{", ".join(builder.info.splits.keys())}') from None


def _label_names(builder, spec: DatasetSpec, num_classes: int) -> list[str]:
  if spec.label_names:
    return list(spec.label_names)
  features = builder.info.features
  if not spec.label_fn and spec.label_key in features and hasattr(
      features[spec.label_key], 'names'):
    names = list(features[spec.label_key].names or [])
    if len(names) == num_classes:
      return names
  return [str(i) for i in range(num_classes)]


def _num_classes(builder, spec: DatasetSpec) -> int:
  if spec.num_classes > 0 and (spec.label_fn or not is_prepared(builder)):
    return spec.num_classes
  features = builder.info.features
  num = getattr(features[spec.label_key] if spec.label_key in features else None,
                'num_classes', None)
  if num:
    return int(num)
  if spec.num_classes > 0:
    return spec.num_classes
  raise ValueError(f'{spec.tfds_name}: feature {spec.label_key!r} is not a class label; '
                   'vit_jax trains on image classification datasets')


def get_dataset_info(config) -> DatasetInfo:
  """Returns sizes, class count, label names and resolved splits of config.dataset."""
  spec = resolve(config.dataset)
  data_dir = config.get('data_dir')
  builder = make_builder(spec, data_dir)
  known = (not config.train_split or config.train_split == spec.train_split) and (
      not config.eval_split or config.eval_split == spec.eval_split) and (
          spec.num_train is not None and spec.num_eval is not None)
  if spec.local or (not is_prepared(builder) and not known):
    builder = prepare(spec, data_dir, config.get('manual_dir'))
  return info_from_builder(config, spec, builder)


def info_from_builder(config, spec: DatasetSpec, builder) -> DatasetInfo:
  """Returns the DatasetInfo of config's splits, from a builder (prepared or not)."""
  train_split = config.train_split or spec.train_split
  eval_split = config.eval_split or spec.eval_split
  if is_prepared(builder):
    num_train = split_size(builder, train_split)
    num_eval = split_size(builder, eval_split) if eval_split else 0
  else:
    num_train, num_eval = spec.num_train, spec.num_eval
  num_classes = _num_classes(builder, spec)
  skipped = 0
  if is_prepared(builder) and builder.info.metadata:
    skipped = len(builder.info.metadata.get('skipped_files', []))
  return DatasetInfo(
      name=config.dataset, num_classes=num_classes, train_split=train_split,
      eval_split=eval_split, num_train=num_train, num_eval=num_eval,
      label_names=_label_names(builder, spec, num_classes), skipped_files=skipped)
