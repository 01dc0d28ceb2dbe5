"""Property-based fuzzing of every host-input parser (host files are untrusted input): generated host trees, real sources."""
