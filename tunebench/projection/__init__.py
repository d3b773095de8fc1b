"""Projection: throughput, phases, cost and memory of measured experiments on another GPU kind or on N GPUs.

    project.py      project_rows: measured rows → the `proj_*` columns on a GPU of the table (handed in resolved)
    memory.py       the memory verdict there: each experiment's spec.json re-planned for the target and N ranks
    kernel_model.py, host_replay.py, step_model.py, ranks.py: the kernels' roofline, the launch-queue replay,
                    the additive phase model, N GPUs' collectives

The caller reads the results folder and resolves the GPU in the one GPU table (tunebench.hardware.gpus,
tunebench.api.projecting); nothing here reads one.
"""
