"""Standard-library-only foundations: settings, runtime options, CPU placement and errors.

Nothing in this package imports torch, so the host can read settings and place CPU threads before
torch is loaded.
"""
