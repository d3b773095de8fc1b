"""Tests of scripts/gpu/."""
