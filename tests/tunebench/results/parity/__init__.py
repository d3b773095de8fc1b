"""Tests of tunebench/results/parity/."""
