"""Tests of tunebench/experiment/."""
