"""Tests of tunebench/results/columns/."""
