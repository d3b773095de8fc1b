"""Tests of tunebench/telemetry/."""
