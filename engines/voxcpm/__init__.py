"""VoxCPM 0.5B, 1.5 and 2, native: exact to voxcpm 2.0.3 (Apache-2.0 code and weights)."""
