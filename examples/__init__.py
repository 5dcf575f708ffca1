"""Example plans and a producer script, shipped as ``planloop.examples`` package data."""
