"""I/O-free logic shared by the sync and async sides and by every backend."""
