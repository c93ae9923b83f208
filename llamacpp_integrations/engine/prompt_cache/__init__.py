"""Prompts' KV states on disk, so a long prefix is read once even across restarts:
``disk_store`` keeps the files (naming, checks, size cap), ``save_restore`` saves a sequence's
cells after its prompt is read and restores them into a new request's sequence."""
