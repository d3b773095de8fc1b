"""Issue Y, item 7: one 4-GPU experiment over two Ray nodes of 2 GPUs each, on one 4-GPU host. Two raylets (Ray's
own multi-node test cluster, ray.cluster_utils.Cluster), each started with its own pair of GPUs visible, so Ray
sees two nodes of 2 GPUs and tunebench's Ray executor must span them: a STRICT_SPREAD placement group, one task
per node, `accelerate launch --num_machines 2`, rendezvous and NCCL between the two. What it does not show: a
network between hosts (both nodes share the host's NVLink and loopback).

    python docs/evidence/gpu-counts-h100/ray_two_nodes.py RESULTS_DIR [--scenario gc-1b-ray]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--scenario", default="gc-1b-ray")
    parser.add_argument("--timeout", type=int, default=200)
    args = parser.parse_args()
    from ray.cluster_utils import Cluster

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 0,
                                                             "include_dashboard": False})
    try:
        for gpus in ("0,1", "2,3"):  # each raylet inherits the GPUs it may hand out
            os.environ["CUDA_VISIBLE_DEVICES"] = gpus
            cluster.add_node(num_cpus=8, num_gpus=2)
        os.environ.pop("CUDA_VISIBLE_DEVICES")
        cluster.wait_for_nodes()
        command = [sys.executable, "benchmark.py", "--executor", "ray", "--ray_address", cluster.address,
                   "--device", "cuda", "--scenarios_config_path",
                   "docs/evidence/gpu-counts-h100/scenarios-gpu-counts.yaml",
                   "--run_only_scenarios", args.scenario, "--num_gpus_matrix", "4", "--results_output_path",
                   args.results, "--timeout", str(args.timeout)]
        print(" ".join(command), flush=True)
        return subprocess.run(command, cwd=REPO, timeout=args.timeout + 60).returncode
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
