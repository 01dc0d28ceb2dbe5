"""Property-based fuzzing of every host-input parser (issue 7): generated host trees, real sources."""
