"""Timing: the bound clock, CPU and CUDA timers (used inside measuring children), interleaving."""
