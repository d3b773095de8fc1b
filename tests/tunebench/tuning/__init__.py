"""Tests of tunebench/tuning/."""
