"""Tests of scanner/autoinject/."""
