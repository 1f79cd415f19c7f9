"""Training: the loop (loop.train_and_evaluate), the pure step, objectives, optimizers,
schedules, train-state checkpoints, timing, preemption, metric writers and the config check.

The package imports nothing by itself, so the benchmark can use the step without the
input pipeline (and TensorFlow).
"""
