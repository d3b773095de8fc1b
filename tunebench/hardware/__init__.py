"""What the hardware is: the one GPU table (gpus.py, gpus.yaml) every layer resolves a GPU name in."""
