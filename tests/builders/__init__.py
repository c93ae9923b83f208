"""Builders of test inputs made on the fly (no network, no downloads): tiny random-weight models,
projectors, adapters and drafts written with the gguf package, GGUF headers, a fake model hub."""
