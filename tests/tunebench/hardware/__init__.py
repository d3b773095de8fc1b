"""Tests of tunebench/hardware/."""
