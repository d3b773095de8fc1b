"""Observers outside the training process: GPU identity, the nvidia-smi/NVML sidecar, the environment."""
