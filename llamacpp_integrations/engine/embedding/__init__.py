"""The worker's embedding side: queued jobs, texts packed into decodes, and the share of the
worker's time embeddings get beside running chats. Pure bookkeeping: the embedding context
itself is ``engine.native.embedder``."""
