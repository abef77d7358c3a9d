"""Measuring back ends other than the runner's torch children: MLX (``mlx_runner``), for the held-out retest."""
