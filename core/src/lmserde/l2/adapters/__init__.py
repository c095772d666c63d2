"""The built-in L2 adapters: memory, fs (with its file names and temp-file sweep), fault."""
