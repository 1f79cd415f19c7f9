"""Where a step's device time goes: a jax.profiler trace summed by XLA op and kind.

The benchmark's --profile_dir writes a trace (open it in TensorBoard's profile
plugin or Perfetto) and prints `summarize`'s table: time per step by kind of
op (matmul, attention, conv, elementwise, reduction, copy, collective, graph, other)
and the costliest ops. Kinds come from the compiled module's HLO text, so a
fusion that holds a dot counts as matmul whatever its kernel is called.
"""
import collections
import glob
import gzip
import json
import os
import re
from typing import Any, Optional

KINDS = ('matmul', 'attention', 'conv', 'elementwise', 'reduction', 'copy',
         'collective', 'graph', 'other')
# XLA:GPU launches runs of kernels as one CUDA graph (a command buffer); the trace times
# the graph, not the kernels inside it.
_GRAPH = 'command_buffer'
GRAPH_HINT = ('graph: kernels XLA:GPU ran as CUDA graphs (command buffers), timed as a '
              'whole; for the time of each kernel rerun with '
              'XLA_FLAGS=--xla_gpu_enable_command_buffer=')
# The benchmark writes the compiled step's HLO text beside its trace under this name.
HLO_FILE = 'step_hlo.txt'
_COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all',
                'collective-permute', 'collective-broadcast')
# Lines a device's trace holds besides its kernel streams and 'XLA Ops'.
_DERIVED_LINES = ('XLA Modules', 'Steps', 'Framework', 'Source', 'TraceMe',
                  'Launch Stats', 'SparseCore')
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$')
_COMPUTATION = re.compile(r'^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s*(?:\(.*\)\s*->.*)?\{\s*$')
_OPCODE = re.compile(r'(?:^|[\s)}\]])([a-z][a-z0-9\-]*)\(')


def _parse_hlo(hlo_text: str) -> tuple[dict, dict]:
  """(instruction -> (opcode, fusion kind, custom-call target, callee, result type),
  computation -> opcodes)."""
  instructions, computations = {}, collections.defaultdict(set)
  current = None
  for line in hlo_text.splitlines():
    inst = _INSTRUCTION.match(line)
    if inst is None:
      comp = _COMPUTATION.match(line)
      if comp:
        current = comp.group(1)
      continue
    name, rest = inst.groups()
    opcode = _OPCODE.search(rest)
    if opcode is None:
      continue
    op = opcode.group(1)
    kind = re.search(r'\bkind=(k\w+)', rest)
    target = re.search(r'custom_call_target="([^"]+)"', rest)
    callee = re.search(r'\bcalls=%?([\w.\-]+)', rest)
    # The result type without layouts, e.g. '(f32[256,200], bf16[256,200,768])'.
    shape = re.sub(r'\{[^{}]*\}', '', rest[:opcode.start(1)]).strip()
    instructions[name] = (op, kind and kind.group(1),
                          target and target.group(1),
                          callee and callee.group(1), shape)
    if current:
      computations[current].add(op)
  return instructions, computations


def _kind_of_target(target: str) -> str:
  t = target.lower()
  if any(s in t for s in ('fmha', 'flash', 'attention', 'sdpa')):
    return 'attention'
  if any(s in t for s in ('gemm', 'matmul', 'cublas')):
    return 'matmul'
  if 'conv' in t:
    return 'conv'
  return 'other'


def _kind_of_instruction(info: tuple, computations: dict) -> str:
  op, kind, target, callee, _ = info
  if op == 'custom-call':
    return _kind_of_target(target or '')
  if op == 'dot':
    return 'matmul'
  if op == 'convolution':
    return 'conv'
  if any(op.startswith(c) for c in _COLLECTIVES):
    return 'collective'
  if op in ('copy', 'copy-start', 'copy-done', 'transpose'):
    return 'copy'
  if op == 'fusion':
    inner = computations.get(callee, set())
    if 'dot' in inner:
      return 'matmul'
    if 'convolution' in inner:
      return 'conv'
    if inner & {'custom-call'}:
      return 'other'
    return 'reduction' if kind == 'kInput' else 'elementwise'
  if op in ('reduce', 'reduce-window'):
    return 'reduction'
  return 'other'


def kind_of_kernel(name: str) -> str:
  """A kind guessed from a kernel's name alone (ops the HLO text does not name)."""
  n = name.lower()
  if _GRAPH in n:
    return 'graph'
  if any(s in n for s in ('fmha', 'flash', 'attention', 'sdpa')):
    return 'attention'
  if any(s in n for s in ('gemm', 'xmma', 'cutlass', 'cublas', 'matmul')):
    return 'matmul'
  if 'conv' in n and 'convert' not in n:
    return 'conv'
  if any(s in n for s in ('nccl', 'all_reduce', 'all-reduce', 'allgather')):
    return 'collective'
  if 'reduce' in n:
    return 'reduction'
  if 'copy' in n or 'transpose' in n:
    return 'copy'
  if 'fusion' in n or 'elementwise' in n or 'loop' in n:
    return 'elementwise'
  return 'other'


def _kinds(instructions: dict, computations: dict) -> dict:
  # A command buffer is named for what it is; its opcode names only what it wraps.
  return {name: 'graph' if name.startswith(_GRAPH) else
          _kind_of_instruction(info, computations)
          for name, info in instructions.items()}


def _shapes(instructions: dict) -> dict:
  return {name: info[-1] for name, info in instructions.items()}


def op_shapes(hlo_text: str) -> dict:
  """Maps every instruction name of an HLO module's text to its result type."""
  return _shapes(_parse_hlo(hlo_text)[0])


def op_kinds(hlo_text: str) -> dict:
  """Maps every instruction name of an HLO module's text to one of KINDS."""
  return _kinds(*_parse_hlo(hlo_text))


def find_trace(trace_dir: str) -> str:
  """The newest Perfetto trace (*.trace.json.gz) jax.profiler wrote under trace_dir."""
  files = glob.glob(os.path.join(trace_dir, '**', '*.trace.json.gz'),
                    recursive=True)
  if not files:
    raise FileNotFoundError(
        f'{trace_dir}: no *.trace.json.gz inside; trace with '
        'jax.profiler.trace(dir, create_perfetto_trace=True).')
  return max(files, key=os.path.getmtime)


def _leaf_events(events: list) -> list:
  """Drops events that enclose another one on their thread (while/call bodies).

  Only an event that holds the other from start to end encloses it: kernels on one
  GPU stream may overlap their neighbours a little (Hopper starts the next kernel
  while the last finishes), and neither holds the other.
  """
  by_thread = collections.defaultdict(list)
  for e in events:
    by_thread[(e['pid'], e['tid'])].append(e)
  leaves = []
  for evs in by_thread.values():
    evs.sort(key=lambda e: (e['ts'], -e.get('dur', 0)))
    stack, parents = [], set()  # stack: (event, end) of events that may enclose
    for e in evs:
      end = e['ts'] + e.get('dur', 0)
      while stack and stack[-1][1] < end:  # ended before e, or only overlaps it
        stack.pop()
      if stack:
        parents.add(id(stack[-1][0]))
      stack.append((e, end))
    leaves.extend(e for e in evs if id(e) not in parents)
  return leaves


def summarize(trace_path: str, steps: int = 1, hlo_text: str = '',
              module: str = '') -> dict:
  """Device time per step by kind and by op, from one trace.

  Uses the GPU/TPU device lanes when the trace has them, else the host's XLA
  op events (CPU). `module` keeps only events of HLO modules whose name
  contains it (default: the module `hlo_text` holds, e.g. 'jit_step');
  `hlo_text` (compiled.as_text()) names each op's kind.
  """
  with gzip.open(trace_path, 'rt') as f:
    data = json.load(f)
  events = data['traceEvents'] if isinstance(data, dict) else data
  process = {e['pid']: e['args']['name'] for e in events
             if e.get('ph') == 'M' and e.get('name') == 'process_name'}
  device = {p for p, n in process.items() if '/device:' in n}
  thread = {(e['pid'], e['tid']): e['args']['name'] for e in events
            if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
  spans = [e for e in events if e.get('ph') == 'X' and 'dur' in e]
  if device:
    spans = [e for e in spans if e['pid'] in device]
    # Device lanes: prefer the profiler's per-op line ('XLA Ops') when it
    # exists, else the kernel streams; never its other derived lines.
    line = lambda e: thread.get((e['pid'], e['tid']), '')  # noqa: E731
    if any(line(e) == 'XLA Ops' for e in spans):
      spans = [e for e in spans if line(e) == 'XLA Ops']
    else:
      spans = [e for e in spans if not any(
          d in line(e) for d in _DERIVED_LINES)]
  else:
    spans = [e for e in spans if 'hlo_op' in e.get('args', {})]
  if not module and hlo_text:
    name = re.match(r'\s*HloModule\s+([\w.\-]+)', hlo_text)
    module = name.group(1) if name else ''
  if module:
    spans = [e for e in spans
             if module in e.get('args', {}).get('hlo_module', module)]
  instructions, computations = _parse_hlo(hlo_text)  # one pass: an H100 step's is 4 MB
  kinds, shapes = _kinds(instructions, computations), _shapes(instructions)
  ops = collections.defaultdict(lambda: [0.0, 0, ''])
  for e in _leaf_events(spans):
    op = e.get('args', {}).get('hlo_op') or e['name']
    entry = ops[op]
    entry[0] += e['dur']
    entry[1] += 1
    entry[2] = kinds.get(op) or kind_of_kernel(f"{op} {e['name']}")
  total = sum(v[0] for v in ops.values())
  by_kind = collections.Counter()
  for dur, _, kind in ops.values():
    by_kind[kind] += dur
  ms = lambda us: us / 1e3 / steps  # noqa: E731
  # The same fusion repeats in every block (loop_add_fusion.3, .4, ...): one group per
  # name stem and result type says what a kind's time is spent on.
  groups = collections.defaultdict(lambda: [0.0, 0, ''])
  for name, (dur, _, kind) in ops.items():
    group = groups[(re.sub(r'[._]\d+$', '', name), shapes.get(name, ''))]
    group[0] += dur
    group[1] += 1
    group[2] = kind
  return {
      'source': 'device' if device else 'host',
      'total_ms': ms(total),
      'by_kind': {k: ms(v) for k, v in by_kind.most_common()},
      'ops': [{'op': name, 'kind': kind, 'ms': ms(dur), 'calls': n / steps,
               'shape': shapes.get(name, '')}
              for name, (dur, n, kind) in
              sorted(ops.items(), key=lambda kv: -kv[1][0])],
      'groups': [{'op': stem, 'shape': shape, 'kind': kind, 'ms': ms(dur), 'ops': n}
                 for (stem, shape), (dur, n, kind) in
                 sorted(groups.items(), key=lambda kv: -kv[1][0])],
  }


def format_summary(summary: dict, top: int = 15,
                   step_ms: Optional[float] = None) -> str:
  """The table the benchmark prints after a profiled run."""
  total = summary['total_ms']
  lines = [f'profile ({summary["source"]} op time per step: {total:.3f} ms'
           + (f' of a {step_ms:.3f} ms step' if step_ms else '') + ')']
  for kind, value in summary['by_kind'].items():
    lines.append(f'  {kind:12s} {value:9.3f} ms  {100 * value / max(total, 1e-12):5.1f}%')
  if 'graph' in summary['by_kind']:
    lines.append(f'  ({GRAPH_HINT})')
  groups = summary.get('groups', [])
  lines.append(f'  top {min(top, len(groups))} op groups (one fusion or call and result type, '
               'summed over its copies, e.g. one per block):')
  for g in groups[:top]:
    lines.append(f'  {g["ms"]:9.3f} ms  {g["ops"]:4d} ops  {g["kind"]:11s} '
                 f'{g["op"][:40]}  {g["shape"][:80]}')
  lines.append(f'  top {min(top, len(summary["ops"]))} ops:')
  for op in summary['ops'][:top]:
    lines.append(f'  {op["ms"]:9.3f} ms  x{op["calls"]:<5g} {op["kind"]:11s} '
                 f'{op["op"][:90]}')
  return '\n'.join(lines)


def as_jsonable(summary: dict, top: int = 50) -> dict[str, Any]:
  """The summary with its op and group lists cut to `top` entries (for --json)."""
  return {**summary, 'ops': summary['ops'][:top],
          'groups': summary.get('groups', [])[:top]}
