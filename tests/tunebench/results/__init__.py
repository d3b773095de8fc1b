"""Tests of tunebench/results/."""
