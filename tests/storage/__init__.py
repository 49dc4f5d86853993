"""Tests of the generic segmented log (`storage/`)."""
