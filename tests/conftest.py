"""Shared pytest fixtures and the GPU skip logic."""
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    # GPU tests are skipped where CUDA is absent (CI), never silently passed.
    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if "gpu" in item.keywords and ngpu == 0:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "multigpu" in item.keywords and ngpu < 2:
            item.add_marker(pytest.mark.skip(reason="needs 2+ CUDA GPUs"))
