"""Shared plumbing every layer uses: errors and their one-line messages, parameters declared once, schemas,
findings, validation, files (atomic writes, the cache root), object storage, progress and the terminal."""
