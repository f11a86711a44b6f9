"""The hook-kept `_memory_library/`: where one is, and importing a Cline memory bank into it."""
