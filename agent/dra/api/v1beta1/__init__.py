"""Generated: see ../README.md."""
