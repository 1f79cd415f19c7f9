"""Tests for the trace summary behind the benchmark's --profile_dir."""
import gzip
import json
import os

from absl.testing import absltest

from vit_jax.perf import benchmark
from vit_jax.perf import profiling

# Optimised-HLO text in the shape XLA:GPU prints it (cuBLAS and cuDNN custom
# calls, a Triton gemm fusion, loop/input fusions, an async all-reduce).
_GPU_HLO = """HloModule jit_step, entry_computation_layout={()->()}

%fused_gemm (p0: bf16[64,32], p1: bf16[32,16]) -> bf16[64,16] {
  %p0 = bf16[64,32]{1,0} parameter(0)
  %p1 = bf16[32,16]{1,0} parameter(1)
  ROOT %dot.1 = bf16[64,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_gelu (p0: bf16[64,16]) -> bf16[64,16] {
  %p0 = bf16[64,16]{1,0} parameter(0)
  ROOT %tanh.2 = bf16[64,16]{1,0} tanh(%p0)
}

%fused_norm (p0: f32[64,16]) -> f32[64] {
  %p0 = f32[64,16]{1,0} parameter(0)
  %c = f32[] constant(0)
  ROOT %reduce.3 = f32[64]{0} reduce(%p0, %c), dimensions={1}, to_apply=%add
}

ENTRY %main.9 (a: bf16[64,32], b: bf16[32,16]) -> (bf16[64,16], f32[64]) {
  %a = bf16[64,32]{1,0} parameter(0)
  %b = bf16[32,16]{1,0} parameter(1)
  %gemm_fusion.4 = bf16[64,16]{1,0} fusion(%a, %b), kind=kCustom, calls=%fused_gemm
  %cublas-gemm.5 = (bf16[64,16]{1,0}, s8[4]{0}) custom-call(%a, %b), custom_call_target="__cublas$gemm"
  %cudnn-fmha.6 = (bf16[4,8,2,8]{3,2,1,0}, u8[0]{0}) custom-call(%a, %b), custom_call_target="__cudnn$fmhaSoftmax"
  %loop_tanh_fusion.7 = bf16[64,16]{1,0} fusion(%gemm_fusion.4), kind=kLoop, calls=%fused_gelu
  %input_reduce_fusion.8 = f32[64]{0} fusion(%gemm_fusion.4), kind=kInput, calls=%fused_norm
  %all-reduce-start.9 = f32[64]{0} all-reduce-start(%input_reduce_fusion.8), to_apply=%add
  %copy.10 = bf16[32,64]{0,1} copy(%a)
  ROOT %tuple.11 = (bf16[64,16]{1,0}, f32[64]{0}) tuple(%loop_tanh_fusion.7, %all-reduce-start.9)
}
"""


class OpKindsTest(absltest.TestCase):

  def test_gpu_style_module(self):
    kinds = profiling.op_kinds(_GPU_HLO)
    self.assertEqual(kinds['gemm_fusion.4'], 'matmul')
    self.assertEqual(kinds['cublas-gemm.5'], 'matmul')
    self.assertEqual(kinds['cudnn-fmha.6'], 'attention')
    self.assertEqual(kinds['loop_tanh_fusion.7'], 'elementwise')
    self.assertEqual(kinds['input_reduce_fusion.8'], 'reduction')
    self.assertEqual(kinds['all-reduce-start.9'], 'collective')
    self.assertEqual(kinds['copy.10'], 'copy')
    self.assertEqual(kinds['dot.1'], 'matmul')  # inside its computation

  def test_kernel_names_alone(self):
    self.assertEqual(profiling.kind_of_kernel(
        'sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64'),
                     'matmul')
    self.assertEqual(profiling.kind_of_kernel('cudnn_generated_fort_native_'
                                              'sdpa_sm90_flash_fprop'),
                     'attention')
    self.assertEqual(profiling.kind_of_kernel('loop_convert_fusion_3'),
                     'elementwise')
    self.assertEqual(profiling.kind_of_kernel('ncclDevKernel_AllReduce_Sum'),
                     'collective')

  def test_device_trace_uses_the_op_line(self):
    meta = lambda kind, pid, tid, name: {  # noqa: E731
        'ph': 'M', 'name': kind, 'pid': pid, 'tid': tid,
        'args': {'name': name}}
    span = lambda tid, ts, dur, name, op=None: {  # noqa: E731
        'ph': 'X', 'pid': 2, 'tid': tid, 'ts': ts, 'dur': dur, 'name': name,
        'args': {'hlo_op': op or name, 'hlo_module': 'jit_step(1)'}}
    events = [
        meta('process_name', 1, 0, '/host:CPU'),
        meta('process_name', 2, 0, '/device:GPU:0'),
        meta('thread_name', 2, 7, 'Stream #7(Compute)'),
        meta('thread_name', 2, 8, 'XLA Ops'),
        meta('thread_name', 2, 9, 'XLA Modules'),
        {'ph': 'X', 'pid': 1, 'tid': 1, 'ts': 0, 'dur': 999, 'name': 'host'},
        span(9, 0, 100, 'jit_step(1)'),
        span(7, 0, 30, 'sm90_xmma_gemm_bf16', 'cublas-gemm.5'),
        span(8, 0, 30, 'cublas-gemm.5'),
        span(8, 40, 20, 'loop_tanh_fusion.7'),
        span(8, 70, 10, 'cudnn-fmha.6'),
    ]
    path = os.path.join(self.create_tempdir().full_path, 'h.trace.json.gz')
    with gzip.open(path, 'wt') as f:
      json.dump({'traceEvents': events}, f)
    summary = profiling.summarize(path, steps=2, hlo_text=_GPU_HLO)
    self.assertEqual(summary['source'], 'device')
    self.assertAlmostEqual(summary['total_ms'], 0.030)
    self.assertEqual(summary['by_kind'], {'matmul': 0.015,
                                          'elementwise': 0.010,
                                          'attention': 0.005})
    self.assertEqual(summary['ops'][0], {'op': 'cublas-gemm.5',
                                         'kind': 'matmul', 'ms': 0.015,
                                         'calls': 0.5, 'shape': '(bf16[64,16], s8[4])'})

  def test_kernels_that_overlap_on_one_stream_all_count(self):
    # As an H100 trace had them (jax 0.11): no 'XLA Ops' line, one stream whose
    # kernels start a little before the previous one ends. Only a span holding another
    # from start to end (a while loop's body) is left out.
    span = lambda ts, dur, op: {  # noqa: E731
        'ph': 'X', 'pid': 1, 'tid': 14, 'ts': ts, 'dur': dur, 'name': op.replace('.', '_'),
        'args': {'hlo_op': op, 'hlo_module': 'jit_step'}}
    events = [
        {'ph': 'M', 'pid': 1, 'name': 'process_name', 'args': {'name': '/device:GPU:0'}},
        {'ph': 'M', 'pid': 1, 'tid': 14, 'name': 'thread_name',
         'args': {'name': 'Stream #14(Memset,Compute,MemcpyD2D)'}},
        span(0.0, 30.5, 'cublas-gemm.5'),
        span(30.0, 20.5, 'loop_tanh_fusion.7'),
        span(50.0, 10.0, 'cudnn-fmha.6'),
        span(70.0, 40.0, 'while.1'),   # encloses the next span
        span(75.0, 20.0, 'input_reduce_fusion.8'),
    ]
    path = os.path.join(self.create_tempdir().full_path, 's.trace.json.gz')
    with gzip.open(path, 'wt') as f:
      json.dump({'traceEvents': events}, f)
    summary = profiling.summarize(path, steps=1, hlo_text=_GPU_HLO)
    self.assertEqual({o['op'] for o in summary['ops']},
                     {'cublas-gemm.5', 'loop_tanh_fusion.7', 'cudnn-fmha.6',
                      'input_reduce_fusion.8'})
    self.assertAlmostEqual(summary['total_ms'], 0.081)

  def test_copies_of_a_fusion_are_grouped_with_their_result_type(self):
    hlo = _GPU_HLO.replace(
        '  %copy.10', '  %loop_tanh_fusion.12 = bf16[64,16]{1,0} fusion(%gemm_fusion.4), '
        'kind=kLoop, calls=%fused_gelu\n  %loop_tanh_fusion.13 = bf16[8,16]{1,0} '
        'fusion(%gemm_fusion.4), kind=kLoop, calls=%fused_gelu\n  %copy.10')
    self.assertEqual(profiling.op_shapes(hlo)['input_reduce_fusion.8'], 'f32[64]')
    span = lambda ts, dur, op: {  # noqa: E731
        'ph': 'X', 'pid': 1, 'tid': 3, 'ts': ts, 'dur': dur, 'name': op,
        'args': {'hlo_op': op, 'hlo_module': 'jit_step'}}
    events = [
        {'ph': 'M', 'pid': 1, 'name': 'process_name', 'args': {'name': '/device:GPU:0'}},
        span(0, 10, 'loop_tanh_fusion.7'), span(20, 30, 'loop_tanh_fusion.12'),
        span(60, 5, 'loop_tanh_fusion.13'), span(70, 20, 'cublas-gemm.5')]
    path = os.path.join(self.create_tempdir().full_path, 'f.trace.json.gz')
    with gzip.open(path, 'wt') as f:
      json.dump({'traceEvents': events}, f)
    summary = profiling.summarize(path, steps=1, hlo_text=hlo)
    self.assertEqual(summary['groups'], [
        {'op': 'loop_tanh_fusion', 'shape': 'bf16[64,16]', 'kind': 'elementwise',
         'ms': 0.04, 'ops': 2},
        {'op': 'cublas-gemm', 'shape': '(bf16[64,16], s8[4])', 'kind': 'matmul',
         'ms': 0.02, 'ops': 1},
        {'op': 'loop_tanh_fusion', 'shape': 'bf16[8,16]', 'kind': 'elementwise',
         'ms': 0.005, 'ops': 1}])
    text = profiling.format_summary(summary)
    self.assertIn('top 3 op groups', text)
    self.assertIn('loop_tanh_fusion  bf16[64,16]', text)

  def test_cuda_graphs_are_their_own_kind_with_a_hint(self):
    # XLA:GPU's command buffers: the trace has one span per graph launch, and the HLO
    # names it after the copies or fusions inside, so neither may name its kind.
    hlo = _GPU_HLO.replace('%copy.10 = bf16[32,64]{0,1} copy(%a)',
                           '%command_buffer_89 = bf16[32,64]{0,1} copy(%a)')
    events = [
        {'ph': 'M', 'pid': 8, 'name': 'process_name',
         'args': {'name': '/device:GPU:0'}},
        {'ph': 'M', 'pid': 8, 'tid': 1, 'name': 'thread_name',
         'args': {'name': 'XLA Ops'}},
        {'ph': 'X', 'pid': 8, 'tid': 1, 'ts': 0, 'dur': 90, 'name': 'command_buffer_89',
         'args': {'hlo_op': 'command_buffer_89', 'hlo_module': 'jit_step'}},
        {'ph': 'X', 'pid': 8, 'tid': 1, 'ts': 95, 'dur': 10, 'name': 'cublas-gemm.5',
         'args': {'hlo_op': 'cublas-gemm.5', 'hlo_module': 'jit_step'}},
    ]
    path = os.path.join(self.create_tempdir().full_path, 'g.trace.json.gz')
    with gzip.open(path, 'wt') as f:
      json.dump({'traceEvents': events}, f)
    summary = profiling.summarize(path, steps=1, hlo_text=hlo)
    self.assertEqual(summary['by_kind'], {'graph': 0.09, 'matmul': 0.01})
    text = profiling.format_summary(summary)
    self.assertIn('--xla_gpu_enable_command_buffer=', text)
    self.assertEqual(profiling.kind_of_kernel('command_buffer_3'), 'graph')
    self.assertNotIn('xla_gpu_enable_command_buffer', profiling.format_summary(
        {**summary, 'by_kind': {'matmul': 0.01}}))

  def test_missing_trace_is_one_line(self):
    empty = self.create_tempdir().full_path
    with self.assertRaisesRegex(FileNotFoundError, 'no \\*.trace.json.gz'):
      profiling.find_trace(empty)


class BenchmarkProfileTest(absltest.TestCase):

  def test_profiled_run_sums_op_time_by_kind(self):
    trace_dir = self.create_tempdir().full_path
    res = benchmark.run(benchmark.parse_args([
        '--model=testing', '--batch=8', '--resolution=32', '--steps=2',
        '--repeats=1', '--warmup=1', f'--profile_dir={trace_dir}',
        '--profile_steps=2']))
    self.assertTrue(os.path.exists(profiling.find_trace(trace_dir)))
    prof = res['profile']
    self.assertEqual(prof['source'], 'host')  # CPU: XLA ops on host threads
    self.assertGreater(prof['total_ms'], 0.0)
    self.assertIn('matmul', prof['by_kind'])
    self.assertAlmostEqual(sum(prof['by_kind'].values()), prof['total_ms'],
                           places=6)
    times = [op['ms'] for op in prof['ops']]
    self.assertEqual(times, sorted(times, reverse=True))
    self.assertTrue(set(prof['by_kind']) <= set(profiling.KINDS))
    report = benchmark.format_report(res)
    self.assertIn('profile (host op time per step', report)
    self.assertIn('top 15 ops:', report)
    self.assertIn('op groups', report)
    with open(os.path.join(trace_dir, profiling.HLO_FILE)) as f:  # to summarise it again
      again = profiling.summarize(profiling.find_trace(trace_dir), 2, hlo_text=f.read())
    self.assertEqual(again['by_kind'], prof['by_kind'])


if __name__ == '__main__':
  absltest.main()
