"""Tests of tunebench/projection/."""
