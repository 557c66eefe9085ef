"""Measuring the devices present: what their collectives take, fitted to
the link model (`calibrate`, `irshard calibrate`), and what they compute per
second (`computerates`), saved as a profile the step-time model reads.

May import every package below it, up to `irshard.running`.
"""
