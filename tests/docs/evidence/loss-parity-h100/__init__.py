"""Tests of docs/evidence/loss-parity-h100/: the issue-45 GPU runner's preparation."""
