"""Tests of docs/evidence/projection-h100-h200/: the issue-U report."""
