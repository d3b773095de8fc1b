"""Tests of scanner/."""
