"""Process placement decided before torch is imported (see `cpu`)."""
