"""Tests of docs/evidence/matrix-wall-h200/: the floor arithmetic of the third part."""
